/* A job's work before it is queued (issue 31, "Deadlines that hold"): each
 * stage's own estimate (the stage ABI's optional `work`) for its merged
 * options on the input's length, summed, and the length of the input as far
 * as it can be read cheaply. The server refuses a job whose estimate exceeds
 * its limit (docs/api.md, "Security"). */
#ifndef EBB_PIPELINE_WORK_H
#define EBB_PIPELINE_WORK_H

#include <jansson.h>

#include "pipeline/config.h"
#include "pipeline/registry.h"

typedef struct pl_job_work {
  double input_s;      /* the length it was estimated for */
  uint32_t input_rate; /* and the file's sample rate (0: unknown) */
  double cpu_s;        /* the sum over the stages that give an estimate */
  double wait_s;       /* the sum of their bounded waits (not in cpu_s) */
  size_t unknown;      /* stages that give none (old plugins, isolated workers) */
  /* the costliest stage: its instance name, its options that drive the cost
   * ("hop 1, frame 65536") and its share */
  char top_stage[64];
  char top_drivers[128];
  double top_cpu_s;
} pl_job_work;

/* Sums the stages of def (options already merged with the job's) for input_s
 * seconds of input. A stage the registry does not hold, or one that gives no
 * estimate, counts in out->unknown; a stage's error is returned (it names
 * the stage). */
int pl_work(const pl_registry *reg, const pl_def *def, double input_s, uint32_t input_rate,
            pl_job_work *out);

/* The length in seconds of the audio file path, from its header only
 * (libsndfile: frames / rate; *rate its sample rate, else 0); *how = "header". A file whose header cannot
 * be read that way (MP3 libsndfile does not open, or not audio) is sized
 * from its length in bytes at 128 kbit/s (16,000 bytes a second, a common
 * compressed rate: a long estimate for 16-bit PCM is not needed, as PCM has
 * a header); *how = "size". 0, or EBB_EIO naming the path. */
int pl_input_seconds(const char *path, double *seconds, uint32_t *rate, const char **how);

/* "1400 s", "8 s", "0.25 s", "2.1 h": a figure of seconds for a message. */
const char *pl_work_figure(double s, char *buf, size_t n);

#endif
