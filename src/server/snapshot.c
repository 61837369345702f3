/* The read side's snapshot (internal.h, "snapshot.c"). Taking one calls the
 * manager and the allocator, which may wait while a stage holds the device;
 * only this thread waits then, never a connection thread for more than
 * 30 ms. */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "server/internal.h"

struct srv_snap {
  srv_server *s;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  json_t *cur;
  uint64_t want, done;
  uint64_t changes;  /* srv_snapshot_dirty calls */
  uint64_t clean_at; /* the changes value the current snapshot has seen */
  double taken_at;   /* when it was taken (monotonic seconds) */
  int busy;          /* a snapshot is being taken */
  double busy_since; /* since when (monotonic seconds) */
  int stop, started;
  pthread_t th;
};

/* Every device: its manager's memory, its queue state ("state", "job",
 * "error"), the pipelines loaded there. */
static json_t *devices(srv_server *s, uint64_t *released) {
  json_t *arr = json_array();
  pthread_mutex_lock(&s->queue_lock);
  json_t *qs = s->queue ? srv_queue_devices_json(s->queue) : json_array();
  pthread_mutex_unlock(&s->queue_lock);
  *released = 0;
  for (size_t i = 0; i < s->ndev; i++) {
    json_t *mem = pl_manager_memory_json(s->ms[i]);
    json_t *q = json_array_get(qs, i);
    json_object_set_new(mem, "label", json_string(dev_device_label(pl_manager_device(s->ms[i]))));
    /* no queue (it is gone while the server stops): idle, a new reference */
    json_object_set_new(mem, "state",
                        q ? json_incref(json_object_get(q, "state")) : json_string("idle"));
    json_object_set(mem, "job", q ? json_object_get(q, "job") : json_null());
    json_object_set(mem, "error", q ? json_object_get(q, "error") : json_null());
    *released += pl_manager_released_total(s->ms[i]);
    json_array_append_new(arr, mem);
  }
  json_decref(qs);
  return arr;
}

/* A pipeline is loaded when it is on any device; "devices" says where. */
static json_t *pipelines(srv_server *s) {
  json_t *p = pl_manager_pipelines_json(s->m);
  size_t i;
  json_t *o;
  json_array_foreach(p, i, o) {
    const char *name = json_string_value(json_object_get(o, "name"));
    json_t *where = json_array();
    for (size_t d = 0; d < s->ndev; d++)
      if (name && pl_manager_is_loaded(s->ms[d], name))
        json_array_append_new(where, json_string(dev_device_label(pl_manager_device(s->ms[d]))));
    if (json_array_size(where))
      json_object_set_new(o, "loaded", json_true());
    json_object_set_new(o, "devices", where);
  }
  return p;
}

static json_t *take(srv_server *s) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t released = 0;
  json_t *devs = devices(s, &released);
  json_t *mem = json_deep_copy(json_array_get(devs, 0));
  json_object_set(mem, "devices", devs);
  int sessions = 0;
  for (size_t i = 0; i < s->ndev; i++)
    sessions += pl_sessions_leases(pl_manager_sessions(s->ms[i]), NULL);
  return json_pack("{s:o,s:o,s:o,s:i,s:I,s:f}", "memory", mem, "devices", devs, "pipelines",
                   pipelines(s), "sessions", sessions, "released_total", (json_int_t)released,
                   "taken", ts.tv_sec + ts.tv_nsec / 1e9);
}

static void deadline(struct timespec *ts, long ms) {
  clock_gettime(CLOCK_REALTIME, ts);
  ts->tv_sec += ms / 1000;
  ts->tv_nsec += (ms % 1000) * 1000000L;
  if (ts->tv_nsec >= 1000000000L) {
    ts->tv_sec++;
    ts->tv_nsec -= 1000000000L;
  }
}

static void *taker(void *arg) {
  struct srv_snap *sn = arg;
  pthread_mutex_lock(&sn->lock);
  while (!sn->stop) {
    struct timespec ts;
    deadline(&ts, 1000);
    while (!sn->stop && sn->done >= sn->want)
      if (pthread_cond_timedwait(&sn->cond, &sn->lock, &ts) == ETIMEDOUT)
        sn->want++; /* a fresh one every second anyway */
    if (sn->stop)
      break;
    uint64_t w = sn->want, c0 = sn->changes;
    sn->busy = 1;
    sn->busy_since = base_now();
    pthread_mutex_unlock(&sn->lock);
    json_t *j = take(sn->s);
    pthread_mutex_lock(&sn->lock);
    sn->busy = 0;
    if (j) {
      json_decref(sn->cur);
      sn->cur = j;
      sn->clean_at = c0;
      sn->taken_at = base_now();
    }
    sn->done = w;
    pthread_cond_broadcast(&sn->cond);
  }
  pthread_mutex_unlock(&sn->lock);
  return NULL;
}

int srv_snapshot_start(srv_server *s) {
  struct srv_snap *sn = calloc(1, sizeof *sn);
  if (!sn)
    return ebb_seterr(EBB_ENOMEM, "server: out of host memory");
  sn->s = s;
  pthread_mutex_init(&sn->lock, NULL);
  pthread_cond_init(&sn->cond, NULL);
  sn->cur = take(s);
  s->snap = sn;
  if (pthread_create(&sn->th, NULL, taker, sn) != 0)
    return ebb_seterr(EBB_ENOMEM, "server: cannot start the snapshot thread");
  sn->started = 1;
  return 0;
}

void srv_snapshot_stop(srv_server *s) {
  struct srv_snap *sn = s->snap;
  if (!sn)
    return;
  pthread_mutex_lock(&sn->lock);
  sn->stop = 1;
  pthread_cond_broadcast(&sn->cond);
  pthread_mutex_unlock(&sn->lock);
  if (sn->started)
    pthread_join(sn->th, NULL);
  json_decref(sn->cur);
  pthread_cond_destroy(&sn->cond);
  pthread_mutex_destroy(&sn->lock);
  free(sn);
  s->snap = NULL;
}

enum { FRESH_MS = 30 };

static json_t *fresh(srv_server *s, long wait_ms) {
  struct srv_snap *sn = s->snap;
  struct timespec ts;
  deadline(&ts, wait_ms);
  pthread_mutex_lock(&sn->lock);
  /* nothing changed since a snapshot taken within 100 ms: that one will do */
  if (wait_ms <= FRESH_MS && sn->cur && sn->clean_at == sn->changes &&
      base_now() - sn->taken_at < 0.1) {
    json_t *j = json_incref(sn->cur);
    pthread_mutex_unlock(&sn->lock);
    return j;
  }
  uint64_t w = ++sn->want;
  pthread_cond_broadcast(&sn->cond);
  /* a snapshot stuck for 20 ms waits on the device: the last one will do */
  int stuck = sn->busy && base_now() - sn->busy_since > 0.02;
  while (!stuck && sn->done < w)
    if (pthread_cond_timedwait(&sn->cond, &sn->lock, &ts) == ETIMEDOUT)
      break;
  json_t *j = json_incref(sn->cur);
  pthread_mutex_unlock(&sn->lock);
  return j ? j : json_object();
}

json_t *srv_snapshot(srv_server *s) { return fresh(s, FRESH_MS); }

void srv_snapshot_dirty(srv_server *s) {
  struct srv_snap *sn = s->snap;
  if (!sn)
    return;
  pthread_mutex_lock(&sn->lock);
  sn->changes++;
  pthread_mutex_unlock(&sn->lock);
}

void srv_snapshot_changed(srv_server *s) {
  srv_snapshot_dirty(s);
  json_decref(fresh(s, 1000));
}
