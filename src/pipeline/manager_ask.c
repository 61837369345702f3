/* What a pipeline will take from the device before it is loaded or woken
 * (its last measured peak, else what its stages declare, else
 * "expected_mib"), and asking the other processes on the device for it
 * (the broker's hooks, issue 35) before a load, a wake or a run. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/events.h"
#include "base/log.h"

#include "pipeline/host.h"
#include "pipeline/manager_int.h"

/* The device context a load would create: 0 while one is active. */
#define ASSUMED_CONTEXT (300ull << 20) /* the allocator's own default (allocator.c) */
static uint64_t context_need(pl_manager *m) {
  if (dev_ctx_active(m->dev))
    return 0;
  uint64_t ctx = pl_manager_context_estimate(m);
  return ctx ? ctx : ASSUMED_CONTEXT;
}

/* What loading (or waking) pp will take (placement's order, placement.h):
 * its last measured peak, else what its stages declare, else
 * "expected_mib"; each with the context a first load creates (a need
 * measured while a context existed does not count it). 0: unknown. *why
 * says which. */
uint64_t pl__mgr_predicted_need(pl_manager *m, mpipe *pp, const char **why) {
  pthread_mutex_lock(&m->lock);
  uint64_t need = pp->measured ? pp->need : 0;
  int with_ctx = pp->need_ctx;
  pthread_mutex_unlock(&m->lock);
  *why = "its last measured peak";
  if (need)
    return need + (with_ctx ? 0 : context_need(m));
  uint64_t declared = 0;
  int complete = 0;
  pl_manager_pipeline_need(m, pp->def->name, &declared, &complete);
  if (declared && complete) {
    *why = "declared by its stages";
    return declared + context_need(m);
  }
  *why = "its \"expected_mib\"";
  return pp->def->expected_bytes ? pp->def->expected_bytes + context_need(m) : 0;
}

/* Over the driver's free memory: the other processes on the device are
 * asked (the broker) before waiting or failing (`what`: "needs", "wakes
 * into"). 1 when they were asked (then ask_finished once the memory is
 * taken, or the attempt failed). */
int pl__mgr_ask_peers(pl_manager *m, const char *name, const char *what, uint64_t need) {
  int known;
  uint64_t free_now = pl__mgr_driver_free(m, &known);
  if (!m->ask_peers || !known)
    return 0;
  char scope[160];
  snprintf(scope, sizeof scope, "pipeline %s", name);
  if (free_now < need)
    base_log(EBB_LOG_INFO, scope,
             "%s about %llu MiB, %llu MiB free: asking the other "
             "processes on %s",
             what, MIB(need), MIB(free_now), dev_device_label(m->dev));
  /* asked even when the driver shows enough: the bytes may be another
   * asker's claim (docs/broker.md, "Claims"), and this load claims its own */
  pthread_mutex_lock(&m->lock);
  int room = m->room_asked;
  m->room_asked = 0;
  pthread_mutex_unlock(&m->lock);
  if (room && m->ask_done) /* the placement's ask: this one stands for it */
    m->ask_done(m->ask_arg, m->dev);
  m->ask_peers(m->ask_arg, m->dev, need);
  return 1;
}

void pl__mgr_ask_finished(pl_manager *m, int asked) {
  if (asked && m->ask_done)
    m->ask_done(m->ask_arg, m->dev);
}

int pl_manager_ask_room(pl_manager *m, const char *name) {
  mpipe *pp = pl__mgr_find(m, name);
  const char *why;
  uint64_t need = pp ? pl__mgr_predicted_need(m, pp, &why) : 0;
  int known;
  uint64_t free_now = pl__mgr_driver_free(m, &known);
  if (!need || !known || free_now >= need)
    return 0;
  int asked = pl__mgr_ask_peers(m, name, "needs", need);
  pthread_mutex_lock(&m->lock);
  m->room_asked = asked;
  pthread_mutex_unlock(&m->lock);
  return asked;
}

void pl_manager_ask_done(pl_manager *m) {
  pthread_mutex_lock(&m->lock);
  int room = m->room_asked;
  m->room_asked = 0;
  pthread_mutex_unlock(&m->lock);
  pl__mgr_ask_finished(m, room);
}

int pl_manager_pipeline_need(pl_manager *m, const char *pipeline, uint64_t *device_bytes,
                             int *complete) {
  mpipe *pp = m ? pl__mgr_find(m, pipeline) : NULL;
  if (!pp)
    return m ? pl__mgr_unknown(m, pipeline) : ebb_seterr(EBB_EINVAL, "no manager");
  uint64_t sum = 0;
  int all = 1;
  for (size_t i = 0; i < pp->def->nstages; i++) {
    pl_stage_need n = {.size = sizeof n};
    if (pl_runner_stage_need(m->runner, pp->def, pp->def->stages[i].name, &n) == 0)
      sum += n.device_bytes;
    else
      all = 0;
  }
  if (device_bytes)
    *device_bytes = sum;
  if (complete)
    *complete = all;
  return 0;
}
