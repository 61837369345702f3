/* Residency (residency.h): which pipelines a job loaded on one device, when
 * a job of each last ended there, and whether its policy put it to sleep. */
#include "pipeline/residency.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/log.h"
#include "pipeline/sessions.h"

struct pl_residency {
  pl_manager *m;
  double keep_default_s;
  int on; /* created with a keep time (not < 0) */
  pthread_mutex_t lock;
  struct {
    char name[128];
    double last;
    int asleep;
  } res[16];
  size_t nres;
};

int pl_residency_create(pl_manager *m, double keep_default_s, pl_residency **out) {
  pl_residency *r = calloc(1, sizeof *r);
  if (!r)
    return ebb_seterr(EBB_ENOMEM, "residency: out of host memory");
  r->m = m;
  r->on = keep_default_s >= 0;
  r->keep_default_s = keep_default_s > 0 ? keep_default_s : 300;
  pthread_mutex_init(&r->lock, NULL);
  *out = r;
  return 0;
}

void pl_residency_destroy(pl_residency *r) {
  if (!r)
    return;
  pthread_mutex_destroy(&r->lock);
  free(r);
}

int pl_residency_keeps(const pl_residency *r) { return r && r->on; }

static int res_find(const pl_residency *r, const char *name) {
  for (size_t i = 0; i < r->nres; i++)
    if (!strcmp(r->res[i].name, name))
      return (int)i;
  return -1;
}

static void res_drop(pl_residency *r, const char *name) {
  int i = res_find(r, name);
  if (i >= 0)
    r->res[i] = r->res[--r->nres];
}

void pl_residency_note(pl_residency *r, const char *name, int loaded_by_job) {
  pl_policy pol;
  if (!r->on || pl_manager_policy_of(r->m, name, &pol) || pol.kind == EBB_POLICY_NEVER)
    return;
  pthread_mutex_lock(&r->lock);
  int i = res_find(r, name);
  if (i < 0 && loaded_by_job && r->nres < sizeof r->res / sizeof r->res[0] &&
      strlen(name) < sizeof r->res[0].name) {
    i = (int)r->nres++;
    snprintf(r->res[i].name, sizeof r->res[i].name, "%s", name);
  }
  if (i >= 0) {
    r->res[i].last = base_now();
    r->res[i].asleep = 0;
  }
  pthread_mutex_unlock(&r->lock);
}

int pl_residency_due(pl_residency *r, int (*queued)(void *arg, const char *name), void *arg,
                     pl_resident_due *due) {
  double now = base_now();
  int found = 0;
  pthread_mutex_lock(&r->lock);
  for (size_t i = 0; i < r->nres && !found; i++) {
    pl_policy pol;
    if (r->res[i].asleep || pl_manager_policy_of(r->m, r->res[i].name, &pol))
      continue;
    double idle = now - r->res[i].last;
    if (pl_policy_leave(&pol, idle, r->keep_default_s) == EBB_LEAVE_STAY ||
        queued(arg, r->res[i].name))
      continue;
    *due = (pl_resident_due){.policy = pol, .idle_s = idle};
    snprintf(due->name, sizeof due->name, "%s", r->res[i].name);
    found = 1;
  }
  pthread_mutex_unlock(&r->lock);
  return found;
}

/* Sleeps due->name; 0 when it slept. */
static int leave_asleep(pl_residency *r, const pl_resident_due *due, const char *label) {
  mem_sleep_stats st = {.size = sizeof st};
  int rc = pl_manager_sleep(r->m, due->name, &st);
  if (rc == 0)
    base_log(EBB_LOG_INFO, "server",
             "pipeline %s on %s: idle %.0f s with no job of it "
             "queued: asleep, %llu MiB released",
             due->name, label, due->idle_s, (unsigned long long)(st.device_bytes >> 20));
  return rc;
}

static void leave_unloaded(pl_residency *r, const pl_resident_due *due, const char *label,
                           int sleep_rc) {
  uint64_t rel = 0;
  if (sleep_rc)
    base_log(EBB_LOG_WARN, "server", "pipeline %s on %s: sleep failed (%s); unloading it",
             due->name, label, ebb_errmsg());
  int rc = pl_manager_unload(r->m, due->name, &rel);
  base_log(rc ? EBB_LOG_WARN : EBB_LOG_INFO, "server",
           "pipeline %s on %s: idle %.0f s with "
           "no job of it queued: unloaded, %llu MiB released%s%s",
           due->name, label, due->idle_s, (unsigned long long)(rel >> 20), rc ? "; " : "",
           rc ? ebb_errmsg() : "");
}

void pl_residency_leave(pl_residency *r, const pl_resident_due *due) {
  const char *name = due->name;
  const char *label = dev_device_label(pl_manager_device(r->m));
  int gone = 1, slept = 0, rc = 0;
  if (!pl_manager_is_loaded(r->m, name)) {
    /* unloaded meanwhile (evicted by placement, POST .../unload) */
  } else if (pl_sessions_leases(pl_manager_sessions(r->m), name) > 0) {
    gone = 0; /* its sessions keep it; looked at again after another keep time */
  } else if (pl_policy_leave(&due->policy, due->idle_s, r->keep_default_s) == EBB_LEAVE_SLEEP) {
    rc = leave_asleep(r, due, label);
    slept = rc == 0;
    gone = !slept;
  }
  if (gone && !slept && pl_manager_is_loaded(r->m, name))
    leave_unloaded(r, due, label, rc);
  pthread_mutex_lock(&r->lock);
  int i = res_find(r, name);
  if (i >= 0 && slept)
    r->res[i].asleep = 1;
  else if (i >= 0 && !gone)
    r->res[i].last = base_now();
  else
    res_drop(r, name);
  pthread_mutex_unlock(&r->lock);
}
