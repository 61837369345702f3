/* Sleep and wake (issue 12): a loaded pipeline's stages parked in host
 * memory and woken at the same addresses, and the sleep budget
 * (--sleep-host-budget): past it the oldest sleeper is unloaded instead. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/events.h"
#include "base/log.h"

#include "pipeline/host.h"
#include "pipeline/manager_int.h"

/* --- sleep and wake (issue 12) ---------------------------------------------- */
typedef struct sleep_args {
  pl_manager *m;
  mpipe *pp;
  int wake;
  mem_sleep_stats st;
} sleep_args;

static int sleep_on_dev(void *arg) {
  sleep_args *a = arg;
  const char *name = a->pp->def->name;
  a->st = (mem_sleep_stats){.size = sizeof a->st};
  return a->wake ? pl_runner_wake_pipeline(a->m->runner, name, &a->st)
                 : pl_runner_sleep_pipeline(a->m->runner, name, &a->st);
}

/* Over the host budget for backups: the oldest sleepers are unloaded
 * instead (switch_lock held). */
static void enforce_budget(pl_manager *m) {
  for (;;) {
    pthread_mutex_lock(&m->lock);
    uint64_t budget = m->sleep_budget;
    mpipe *oldest = NULL;
    for (size_t i = 0; i < m->npipes; i++)
      if (m->pipes[i].loaded && m->pipes[i].asleep &&
          (!oldest || m->pipes[i].slept_at < oldest->slept_at))
        oldest = &m->pipes[i];
    pthread_mutex_unlock(&m->lock);
    uint64_t held = mem_allocator_backup_bytes(m->alloc);
    if (!budget || held <= budget || !oldest)
      return;
    base_log(EBB_LOG_INFO, "server",
             "sleep: backups hold %llu MiB of host memory, over the budget of %llu MiB: "
             "unloading pipeline '%s' (the oldest asleep)",
             MIB(held), MIB(budget), oldest->def->name);
    pl__mgr_unload_in_switch(m, oldest, NULL);
  }
}

/* switch_lock held. try: do nothing (return 1) while a job holds the
 * device (pl__mgr_on_device_unless_job). */
int pl__mgr_sleep_in_switch(pl_manager *m, mpipe *pp, int try, mem_sleep_stats *out) {
  const char *name = pp->def->name;
  sleep_args a = {m, pp, 0, {.size = sizeof a.st}};
  int rc = try ? pl__mgr_on_device_unless_job(m, sleep_on_dev, &a)
               : pl__mgr_on_device(m, sleep_on_dev, &a);
  if (rc == 1)
    return 1;
  if (!rc || pl_runner_pipeline_asleep(m->runner, name)) {
    pthread_mutex_lock(&m->lock);
    pp->asleep = 1;
    pp->slept_at = base_now();
    if (!pp->loaded) /* kept by a job's policy: it counts as loaded while asleep */
      pp->loaded = 1;
    pthread_mutex_unlock(&m->lock);
    pl__mgr_add_released(m, a.st.device_bytes);
    pl__mgr_publish(m, name, "asleep", 0, 0);
  }
  if (!rc)
    enforce_budget(m);
  pl__mgr_note_backup(m);
  if (out)
    *out = a.st;
  return rc;
}

int pl_manager_sleep(pl_manager *m, const char *name, mem_sleep_stats *out) {
  mpipe *pp = pl__mgr_find(m, name);
  if (!pp)
    return pl__mgr_unknown(m, name);
  pthread_mutex_lock(&m->switch_lock);
  int rc = pl__mgr_sleep_in_switch(m, pp, 0, out);
  pthread_mutex_unlock(&m->switch_lock);
  return rc;
}

int pl_manager_wake(pl_manager *m, const char *name, mem_sleep_stats *out) {
  mpipe *pp = pl__mgr_find(m, name);
  if (!pp)
    return pl__mgr_unknown(m, name);
  pthread_mutex_lock(&m->switch_lock);
  const char *why;
  uint64_t need = pl__mgr_asleep(m, pp) ? pl__mgr_predicted_need(m, pp, &why) : 0;
  int asked = need ? pl__mgr_ask_peers(m, name, "wakes into", need) : 0;
  sleep_args a = {m, pp, 1, {.size = sizeof a.st}};
  int rc = pl__mgr_on_device(m, sleep_on_dev, &a);
  pl__mgr_ask_finished(m, asked);
  pthread_mutex_lock(&m->lock);
  if (!rc) {
    pp->asleep = 0;
    m->wakes++;
    m->wake_seconds += a.st.seconds;
  }
  pthread_mutex_unlock(&m->lock);
  pl__mgr_note_backup(m);
  pthread_mutex_unlock(&m->switch_lock);
  if (!rc)
    pl__mgr_publish(m, name, "awake", 0, 0);
  if (out)
    *out = a.st;
  return rc;
}

void pl_manager_set_sleep_budget(pl_manager *m, uint64_t bytes) {
  pthread_mutex_lock(&m->lock);
  m->sleep_budget = bytes;
  pthread_mutex_unlock(&m->lock);
}

void pl_manager_sleep_figures(pl_manager *m, pl_manager_sleep_info *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->npipes; i++)
    out->sleeping += m->pipes[i].loaded && m->pipes[i].asleep;
  out->wakes = m->wakes;
  out->wake_seconds = m->wake_seconds;
  out->budget_bytes = m->sleep_budget;
  out->backup_bytes = m->backup_bytes;
  pthread_mutex_unlock(&m->lock);
}
