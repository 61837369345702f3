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

struct ebb_residency {
  ebb_manager *m;
  double keep_default_s;
  pthread_mutex_t lock;
  struct {
    char name[128];
    double last;
    int asleep;
  } res[16];
  size_t nres;
};

int ebb_residency_create(ebb_manager *m, double keep_default_s, ebb_residency **out) {
  ebb_residency *r = calloc(1, sizeof *r);
  if (!r)
    return ebb_seterr(EBB_ENOMEM, "residency: out of host memory");
  r->m = m;
  r->keep_default_s = keep_default_s > 0 ? keep_default_s : 300;
  pthread_mutex_init(&r->lock, NULL);
  *out = r;
  return 0;
}

void ebb_residency_destroy(ebb_residency *r) {
  if (!r)
    return;
  pthread_mutex_destroy(&r->lock);
  free(r);
}

static int res_find(const ebb_residency *r, const char *name) {
  for (size_t i = 0; i < r->nres; i++)
    if (!strcmp(r->res[i].name, name))
      return (int)i;
  return -1;
}

static void res_drop(ebb_residency *r, const char *name) {
  int i = res_find(r, name);
  if (i >= 0)
    r->res[i] = r->res[--r->nres];
}

void ebb_residency_note(ebb_residency *r, const char *name, int loaded_by_job) {
  ebb_policy pol;
  if (ebb_manager_policy_of(r->m, name, &pol) || pol.kind == EBB_POLICY_NEVER)
    return;
  pthread_mutex_lock(&r->lock);
  int i = res_find(r, name);
  if (i < 0 && loaded_by_job && r->nres < sizeof r->res / sizeof r->res[0] &&
      strlen(name) < sizeof r->res[0].name) {
    i = (int)r->nres++;
    snprintf(r->res[i].name, sizeof r->res[i].name, "%s", name);
  }
  if (i >= 0) {
    r->res[i].last = ebb_now();
    r->res[i].asleep = 0;
  }
  pthread_mutex_unlock(&r->lock);
}

int ebb_residency_due(ebb_residency *r, int (*queued)(void *arg, const char *name), void *arg,
                      ebb_resident_due *due) {
  double now = ebb_now();
  int found = 0;
  pthread_mutex_lock(&r->lock);
  for (size_t i = 0; i < r->nres && !found; i++) {
    ebb_policy pol;
    if (r->res[i].asleep || ebb_manager_policy_of(r->m, r->res[i].name, &pol))
      continue;
    double idle = now - r->res[i].last;
    if (ebb_policy_leave(&pol, idle, r->keep_default_s) == EBB_LEAVE_STAY ||
        queued(arg, r->res[i].name))
      continue;
    *due = (ebb_resident_due){.policy = pol, .idle_s = idle};
    snprintf(due->name, sizeof due->name, "%s", r->res[i].name);
    found = 1;
  }
  pthread_mutex_unlock(&r->lock);
  return found;
}

/* Sleeps due->name; 0 when it slept. */
static int leave_asleep(ebb_residency *r, const ebb_resident_due *due, const char *label) {
  ebb_sleep_stats st = {.size = sizeof st};
  int rc = ebb_manager_sleep(r->m, due->name, &st);
  if (rc == 0)
    ebb_log(EBB_LOG_INFO, "server",
            "pipeline %s on %s: idle %.0f s with no job of it "
            "queued: asleep, %llu MiB released",
            due->name, label, due->idle_s, (unsigned long long)(st.device_bytes >> 20));
  return rc;
}

static void leave_unloaded(ebb_residency *r, const ebb_resident_due *due, const char *label,
                           int sleep_rc) {
  uint64_t rel = 0;
  if (sleep_rc)
    ebb_log(EBB_LOG_WARN, "server", "pipeline %s on %s: sleep failed (%s); unloading it", due->name,
            label, ebb_errmsg());
  int rc = ebb_manager_unload(r->m, due->name, &rel);
  ebb_log(rc ? EBB_LOG_WARN : EBB_LOG_INFO, "server",
          "pipeline %s on %s: idle %.0f s with "
          "no job of it queued: unloaded, %llu MiB released%s%s",
          due->name, label, due->idle_s, (unsigned long long)(rel >> 20), rc ? "; " : "",
          rc ? ebb_errmsg() : "");
}

void ebb_residency_leave(ebb_residency *r, const ebb_resident_due *due) {
  const char *name = due->name;
  const char *label = ebb_device_label(ebb_manager_device(r->m));
  int gone = 1, slept = 0, rc = 0;
  if (!ebb_manager_is_loaded(r->m, name)) {
    /* unloaded meanwhile (evicted by placement, POST .../unload) */
  } else if (ebb_sessions_leases(ebb_manager_sessions(r->m), name) > 0) {
    gone = 0; /* its sessions keep it; looked at again after another keep time */
  } else if (ebb_policy_leave(&due->policy, due->idle_s, r->keep_default_s) == EBB_LEAVE_SLEEP) {
    rc = leave_asleep(r, due, label);
    slept = rc == 0;
    gone = !slept;
  }
  if (gone && !slept && ebb_manager_is_loaded(r->m, name))
    leave_unloaded(r, due, label, rc);
  pthread_mutex_lock(&r->lock);
  int i = res_find(r, name);
  if (i >= 0 && slept)
    r->res[i].asleep = 1;
  else if (i >= 0 && !gone)
    r->res[i].last = ebb_now();
  else
    res_drop(r, name);
  pthread_mutex_unlock(&r->lock);
}
