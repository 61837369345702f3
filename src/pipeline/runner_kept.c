/* The pipelines the runner keeps for the manager (manager.c): a whole
 * pipeline loaded under policy never, unloaded, its bytes, and put asleep
 * or woken (issue 12). The jobs that run on them are runner.c's. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fs.h"
#include "base/log.h"
#include "pipeline/instance.h"
#include "pipeline/runner_int.h"

/* Loads stage d of p and keeps it under policy never (no-op when an instance
 * with the same definition is loaded). A failure is left in res. */
static void load_kept(pl_runner *r, const pl_def *p, const pl_stage_def *d, const char *outdir,
                      pl_job_result *res) {
  const ebb_stage *st;
  json_t *merged = NULL;
  int rc = pl__run_check_stage(r->reg, p, d, &st, &merged);
  char *opts = rc ? NULL : json_dumps(merged, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(merged);
  if (rc || !opts) {
    if (rc)
      pl__run_fail(res, rc, d->name, "%s", ebb_errmsg());
    else
      pl__run_fail(res, EBB_ENOMEM, d->name, "stage '%s': out of host memory", d->name);
    return;
  }
  slot *s = pl__run_slot_for(r, p, d, st, opts, outdir, res);
  free(opts);
  if (!s)
    return;
  if (pl_instance_state_of(s->inst) == EBB_INSTANCE_PARKED &&
      (rc = pl_instance_wake(s->inst, NULL)) != 0) {
    pl__run_fail(res, rc, d->name, "%s", ebb_errmsg());
    return;
  }
  pl__run_claim(s, (pl_policy){EBB_POLICY_NEVER, 0}, 0);
  if (pl_instance_is_loaded(s->inst))
    return;
  if ((rc = pl_instance_load(s->inst)) != 0)
    pl__run_fail(res, rc, d->name, "stage '%s' (%s) failed to load: %s", d->name, d->stage,
                 pl_instance_error(s->inst));
}

int pl_runner_load_pipeline(pl_runner *r, const pl_def *p, const char *outdir, pl_job_result *res) {
  memset(res, 0, sizeof *res);
  if (!r || !p || !outdir)
    return pl__run_fail(res, EBB_EINVAL, NULL, "runner: no pipeline or output directory to load");
  int rc = pl_check(r->reg, p);
  if (rc)
    return pl__run_fail(res, rc, NULL, "%s", ebb_errmsg());
  if (base_mkdirs(outdir, 0755, "mkdir") != 0)
    return pl__run_fail(res, EBB_EINPUT, NULL, "output directory %s: %s", outdir, strerror(errno));
  for (size_t i = 0; i < p->nstages && !res->code; i++)
    load_kept(r, p, &p->stages[i], outdir, res);
  return res->code;
}

int pl_runner_unload_pipeline(pl_runner *r, const char *pipeline, int with_context,
                              uint64_t *released) {
  uint64_t total = 0;
  int err = 0;
  /* the pool is newest first: release from the tail so stages go in load order */
  for (;;) {
    slot *last = NULL;
    for (slot *s = r->pool; s; s = s->next)
      if (!strcmp(pl_instance_pipeline(s->inst), pipeline))
        last = s;
    if (!last)
      break;
    last->quiet = 0; /* leaks are reported whatever the policy was */
    pl_instance_report rep = {.size = sizeof rep};
    total += pl__run_release_slot(r, last, 0, NULL, &rep);
    if (rep.unload_error && !err)
      err = ebb_seterr(rep.unload_error, "pipeline '%s': a stage failed to unload: %s", pipeline,
                       rep.unload_message);
  }
  if (with_context && !r->pool) {
    char scope[160];
    snprintf(scope, sizeof scope, "pipeline %s", pipeline);
    total += pl__run_vacate(r, scope);
  }
  if (released)
    *released = total;
  return err;
}

int pl_runner_pipeline_bytes(pl_runner *r, const char *pipeline, uint64_t *current,
                             uint64_t *peak) {
  uint64_t cur = 0, pk = 0;
  int n = 0;
  for (slot *s = r->pool; s; s = s->next) {
    if (strcmp(pl_instance_pipeline(s->inst), pipeline))
      continue;
    mem_owner_stats os = {.size = sizeof os};
    if (mem_owner_get_stats(pl_instance_owner(s->inst), &os) == 0) {
      cur += os.tree_bytes;
      pk += os.bytes.peak;
    }
    n += pl_instance_is_loaded(s->inst);
  }
  if (current)
    *current = cur;
  if (peak)
    *peak = pk;
  return n;
}

/* --- sleep and wake a pipeline (issue 12) ---------------------------------- */
static int count_states(pl_runner *r, const char *pipeline, int *asleep) {
  int n = 0;
  *asleep = 0;
  for (slot *s = r->pool; s; s = s->next)
    if (!strcmp(pl_instance_pipeline(s->inst), pipeline)) {
      n++;
      *asleep += pl_instance_state_of(s->inst) == EBB_INSTANCE_PARKED;
    }
  return n;
}

static void add_stats(mem_sleep_stats *t, const mem_sleep_stats *st) {
  t->device_bytes += st->device_bytes;
  t->backup_bytes += st->backup_bytes;
  t->dropped_bytes += st->dropped_bytes;
  t->segments += st->segments;
}

int pl_runner_sleep_pipeline(pl_runner *r, const char *pipeline, mem_sleep_stats *out) {
  mem_sleep_stats t = {.size = sizeof t};
  double t0 = base_now();
  int asleep, n = count_states(r, pipeline, &asleep), err = 0;
  if (!n)
    return ebb_seterr(EBB_ENOTFOUND, "pipeline '%s' is not loaded; nothing to put to sleep",
                      pipeline);
  if (asleep == n)
    return ebb_seterr(EBB_ESTATE, "pipeline '%s' is asleep already; wake it first", pipeline);
  for (slot *s = r->pool; s; s = s->next) {
    pl_instance_state st0 = pl_instance_state_of(s->inst);
    if (strcmp(pl_instance_pipeline(s->inst), pipeline) ||
        (st0 != EBB_INSTANCE_LOADED && st0 != EBB_INSTANCE_IDLE))
      continue;
    mem_sleep_stats st = {.size = sizeof st};
    int rc = pl_instance_sleep(s->inst, &st);
    if (rc && !err)
      err = rc;
    add_stats(&t, &st);
  }
  char scope[160];
  snprintf(scope, sizeof scope, "pipeline %s", pipeline);
  t.device_bytes += pl__run_vacate_asleep(r, scope);
  t.seconds = base_now() - t0;
  if (out)
    *out = t;
  return err;
}

int pl_runner_wake_pipeline(pl_runner *r, const char *pipeline, mem_sleep_stats *out) {
  mem_sleep_stats t = {.size = sizeof t};
  double t0 = base_now();
  int asleep, n = count_states(r, pipeline, &asleep), rc = 0;
  if (!n)
    return ebb_seterr(EBB_ENOTFOUND, "pipeline '%s' is not loaded; load it instead", pipeline);
  if (!asleep)
    return ebb_seterr(EBB_ESTATE, "pipeline '%s' is not asleep; nothing to wake", pipeline);
  for (slot *s = r->pool; s && !rc; s = s->next) {
    if (strcmp(pl_instance_pipeline(s->inst), pipeline) ||
        pl_instance_state_of(s->inst) != EBB_INSTANCE_PARKED)
      continue;
    mem_sleep_stats st = {.size = sizeof st};
    if ((rc = pl_instance_wake(s->inst, &st)) == 0)
      add_stats(&t, &st);
  }
  if (rc) { /* all or nothing: the stages woken by this call sleep again */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ebb_errmsg());
    for (slot *s = r->pool; s; s = s->next)
      if (!strcmp(pl_instance_pipeline(s->inst), pipeline) &&
          pl_instance_state_of(s->inst) == EBB_INSTANCE_LOADED)
        pl__run_sleep_slot(s);
    char scope[160];
    snprintf(scope, sizeof scope, "pipeline %s", pipeline);
    pl__run_vacate_asleep(r, scope);
    t = (mem_sleep_stats){.size = sizeof t};
    ebb_seterr(rc,
               "pipeline '%s': wake failed, it stays asleep (retry the wake, or unload "
               "it): %s",
               pipeline, msg);
  }
  t.seconds = base_now() - t0;
  if (out)
    *out = t;
  return rc;
}

int pl_runner_pipeline_asleep(pl_runner *r, const char *pipeline) {
  int asleep, n = count_states(r, pipeline, &asleep);
  return n > 0 && asleep == n;
}
