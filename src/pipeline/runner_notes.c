/* What the runner notes per stage entry (runner.h, "Declared needs"): the
 * last measured device and host peaks and the stage's own estimate, behind
 * a leaf mutex, and pl_runner_stage_need, which answers them (else the
 * stage's declared estimate) from any thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/registry.h"
#include "pipeline/runner_int.h"

void pl__run_note_peak(pl_runner *r, const char *pipeline, const char *name, uint64_t peak,
                       uint64_t host_peak, uint64_t estimate) {
  pthread_mutex_lock(&r->notes_mu);
  stage_note *n = NULL;
  for (size_t i = 0; i < r->nnotes && !n; i++)
    if (!strcmp(r->notes[i].pipeline, pipeline) && !strcmp(r->notes[i].name, name))
      n = &r->notes[i];
  if (!n) {
    stage_note *v = realloc(r->notes, (r->nnotes + 1) * sizeof *v);
    if (v) {
      r->notes = v;
      n = &v[r->nnotes++];
      memset(n, 0, sizeof *n);
      snprintf(n->pipeline, sizeof n->pipeline, "%s", pipeline);
      snprintf(n->name, sizeof n->name, "%s", name);
    }
  }
  if (n) {
    n->peak = peak;
    n->host_peak = host_peak;
    n->estimate = estimate;
  }
  pthread_mutex_unlock(&r->notes_mu);
}


int pl_runner_stage_need(pl_runner *r, const pl_def *p, const char *stage, pl_stage_need *out) {
  if (!r || !p || !stage || !out || out->size < sizeof(uint32_t))
    return ebb_seterr(EBB_EINVAL, "pl_runner_stage_need: runner, pipeline, stage and out->size "
                                  "are required");
  const pl_stage_def *d = NULL;
  for (size_t i = 0; i < p->nstages && !d; i++)
    if (!strcmp(p->stages[i].name, stage))
      d = &p->stages[i];
  if (!d)
    return ebb_seterr(EBB_ENOTFOUND, "pipeline '%s' has no stage '%s'", p->name, stage);
  pl_stage_need n = {.size = sizeof n};
  int found = 0;
  pthread_mutex_lock(&r->notes_mu);
  for (size_t i = 0; i < r->nnotes && !found; i++)
    if (!strcmp(r->notes[i].pipeline, p->name) && !strcmp(r->notes[i].name, stage)) {
      n.device_bytes = r->notes[i].peak;
      n.host_bytes = r->notes[i].host_peak;
      n.estimate_device_bytes = r->notes[i].estimate;
      n.measured = found = 1;
    }
  pthread_mutex_unlock(&r->notes_mu);
  if (!found) {
    const ebb_stage *st = pl_registry_find(r->reg, d->stage, NULL);
    json_t *merged = NULL;
    int rc = st ? pl_stage_validate_options(st, d->options, NULL, &merged)
                : ebb_seterr(EBB_ENOTFOUND, "unknown stage '%s'", d->stage);
    char *o = rc ? NULL : json_dumps(merged, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(merged);
    ebb_estimate e = {.size = sizeof e};
    if (!rc)
      rc = o ? pl_stage_estimate(st, o, NULL, &e) : ebb_seterr(EBB_ENOMEM, "out of host memory");
    free(o);
    if (rc)
      return rc;
    n.device_bytes = n.estimate_device_bytes = e.device_bytes;
    n.host_bytes = e.host_bytes;
  }
  uint32_t keep = out->size < sizeof n ? out->size : (uint32_t)sizeof n;
  memcpy(out, &n, keep);
  out->size = keep;
  return 0;
}
