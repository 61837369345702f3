/* A job's work before it is queued (work.h): each stage's estimate summed
 * and the input's length read cheaply. */
#include "pipeline/work.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ebb/error.h"
#include "stages/audio/decode.h"

/* 128 kbit/s: what a file whose header libsndfile cannot read is sized at */
#define WORK_BYTES_PER_S 16000.0

static int stage_work(const pl_registry *reg, const pl_stage_def *sd, double input_s,
                      uint32_t input_rate, ebb_work *w) {
  const ebb_stage *st = pl_registry_find(reg, sd->stage, NULL);
  if (!st || sd->isolate)
    return EBB_EUNSUPPORTED; /* a worker's stage is not ours to ask */
  json_t *merged = NULL;
  int rc = pl_stage_validate_options(st, sd->options, sd->name, &merged);
  char *text = rc ? NULL : json_dumps(merged, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(merged);
  if (rc)
    return rc;
  if (!text)
    return ebb_seterr(EBB_ENOMEM, "out of host memory");
  memset(w, 0, sizeof *w);
  w->size = sizeof *w;
  rc = pl_stage_work(st, text, input_s, input_rate, w);
  free(text);
  return rc;
}

int pl_work(const pl_registry *reg, const pl_def *def, double input_s, uint32_t input_rate,
            pl_job_work *out) {
  memset(out, 0, sizeof *out);
  out->input_s = input_s;
  out->input_rate = input_rate;
  for (size_t i = 0; i < def->nstages; i++) {
    ebb_work w;
    int rc = stage_work(reg, &def->stages[i], input_s, input_rate, &w);
    if (rc == EBB_EUNSUPPORTED) {
      out->unknown++;
      continue;
    }
    if (rc)
      return rc;
    out->cpu_s += w.cpu_s;
    out->wait_s += w.wait_s;
    if (w.cpu_s > out->top_cpu_s || !out->top_stage[0]) {
      out->top_cpu_s = w.cpu_s;
      snprintf(out->top_stage, sizeof out->top_stage, "%s", def->stages[i].name);
      snprintf(out->top_drivers, sizeof out->top_drivers, "%s", w.drivers);
    }
  }
  ebb_clearerr();
  return 0;
}

int pl_input_seconds(const char *path, double *seconds, uint32_t *rate, const char **how) {
  *rate = 0;
  if (stg_audio_probe_seconds(path, seconds, rate) == 0) {
    *how = "header";
    return 0;
  }
  struct stat sb;
  if (stat(path, &sb) != 0)
    return ebb_seterr(EBB_EIO, "%s: cannot size the input", path);
  *seconds = (double)sb.st_size / WORK_BYTES_PER_S;
  *how = "size";
  ebb_clearerr();
  return 0;
}

const char *pl_work_figure(double s, char *buf, size_t n) {
  if (s >= 7200.0)
    snprintf(buf, n, "%.1f h", s / 3600.0);
  else if (s >= 10.0)
    snprintf(buf, n, "%.0f s", s);
  else
    snprintf(buf, n, "%.2g s", s);
  return buf;
}
