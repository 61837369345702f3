/* Placement: which device a job (or a load) of a pipeline goes to, on a
 * server's devices (ebb serve --devices; one device is n = 1, not a case of
 * its own). A pure function over
 * a picture of the devices taken by the caller (src/server/queue.c), so the
 * rules can be read and tested in one place:
 *
 *   1. an idle device where the pipeline is loaded: awake before asleep, and
 *      asleep (a wake in place, issue 12) before any load elsewhere;
 *   2. an idle device where its predicted need fits in the driver's free
 *      memory (memory other processes hold counts as taken, and so does the
 *      room the sleeping pipelines there need to wake), best fit first
 *      (the least free memory left over); a need not yet known fits only an
 *      empty device (the one with the most free memory);
 *   3. only when the pipeline is loaded on no device it may use (or the job
 *      has waited past --max-wait): evict the idle pipelines of the one idle
 *      device where that makes room with the least work lost (the fewest
 *      bytes of loaded pipelines dropped);
 *   4. otherwise wait: a load predicted not to fit is never started.
 *
 * Failed devices and devices a pipeline is not pinned to ("devices" in its
 * config) take no part. */
#ifndef EBB_PIPELINE_PLACEMENT_H
#define EBB_PIPELINE_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "pipeline/config.h"
#include "pipeline/manager.h"

typedef struct pl_place_dev {
  int ordinal;           /* CUDA device number; -1 for the CPU device */
  int idle;              /* runs no job, load or item now */
  int failed;            /* taken out of placement */
  int loaded;            /* the job's pipeline is loaded here */
  int free_known;        /* free_bytes is the driver's (or NVML's) figure */
  uint64_t free_bytes;   /* driver free memory now */
  uint64_t other_bytes;  /* predicted bytes of the other pipelines loaded here */
  int others;            /* how many other pipelines are loaded here */
  int asleep;            /* the job's pipeline is loaded here, asleep */
  uint64_t asleep_bytes; /* predicted bytes of the other pipelines asleep here (in
                           free_bytes now; theirs again when they wake) */
} pl_place_dev;

typedef struct pl_place_job {
  uint64_t need;     /* predicted need (pl_place_need); 0: unknown */
  uint32_t pin_cuda; /* as in pl_def */
  int pin_cpu;
  int overdue; /* waited past --max-wait: may evict anywhere */
} pl_place_job;

typedef enum {
  EBB_PLACE_WAIT = 0,   /* nothing now */
  EBB_PLACE_LOADED = 1, /* rule 1 */
  EBB_PLACE_FITS = 2,   /* rule 2: load next to what is there */
  EBB_PLACE_EVICT = 3,  /* rule 3: unload the idle pipelines there, then load */
  EBB_PLACE_NEVER = 4,  /* no device may run it (its pins, failed devices) */
} pl_place_how;

/* The device index for the job (-1 with WAIT or NEVER) and how, in *how. */
int pl_place(const pl_place_dev *devs, size_t n, const pl_place_job *job, pl_place_how *how);
/* 1 when device d may run the job at all (not failed, pins allow). */
int pl_place_eligible(const pl_place_dev *d, const pl_place_job *job);
/* 1 when device d could take the job once idle (eligible, and the need fits
 * its free memory plus what evicting would free, or the need is unknown). */
int pl_place_could_fit(const pl_place_dev *d, const pl_place_job *job);

/* The predicted need of a pipeline: the last measured peak (measured, the
 * largest over the devices; 0 if never measured), else estimate (the
 * stages' own, pl_place_estimate_hook; 0: none), else "expected_mib" from
 * the config; 0 when nothing is known. */
uint64_t pl_place_need(const pl_def *def, uint64_t measured, uint64_t estimate);
/* The stages' estimate of def's need on m's device: the sum over its stages
 * of pl_runner_stage_need (each stage's last measured peak there, else
 * its declared estimate: the stage ABI's estimate()) plus a device context;
 * 0 when a stage declares nothing and never ran (the sum would be short). */
uint64_t pl_place_estimate_hook(pl_manager *m, const pl_def *def);

#endif
