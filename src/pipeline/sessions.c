/* The session table (sessions.h): counted leases on loaded pipelines and
 * the state of each session. */
#include "pipeline/sessions.h"

#include "base/events.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

typedef struct sess {
  struct sess *next;
  pl_session_info info;
} sess;

struct pl_sessions {
  pthread_mutex_t lock;
  pthread_cond_t drained;
  sess *list;
  uint64_t next_id;
};

int pl_sessions_create(pl_sessions **out) {
  pl_sessions *s = calloc(1, sizeof *s);
  if (!s)
    return ebb_seterr(EBB_ENOMEM, "sessions: out of host memory");
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->drained, NULL);
  /* ids differ across server restarts: a client holding an old id gets 404 */
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  s->next_id = ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)(ts.tv_nsec >> 10);
  *out = s;
  return 0;
}

void pl_sessions_destroy(pl_sessions *s) {
  if (!s)
    return;
  for (sess *x = s->list, *n; x; x = n) {
    n = x->next;
    free(x);
  }
  pthread_cond_destroy(&s->drained);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* A session's state changed (opened, an item began or ended, stopped,
 * closed): the fact, once (include/ebb/events.h). No lock held. */
static void publish_session(const char *id, const char *pipeline, const char *state) {
  ebb_event ev = {.kind = EBB_EVENT_SESSION, .id = id, .pipeline = pipeline, .state = state};
  base_event_publish(&ev);
}

static sess *find(pl_sessions *s, const char *id) {
  for (sess *x = s->list; x; x = x->next)
    if (!strcmp(x->info.id, id))
      return x;
  return NULL;
}

int pl_sessions_open(pl_sessions *s, const char *pipeline, char *id) {
  sess *x = calloc(1, sizeof *x);
  if (!x)
    return ebb_seterr(EBB_ENOMEM, "sessions: out of host memory");
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  x->info.created = ts.tv_sec + ts.tv_nsec / 1e9;
  snprintf(x->info.pipeline, sizeof x->info.pipeline, "%s", pipeline);
  /* an id grants access to the session: 128 random bits, "s" + 32 hex */
  unsigned char rnd[16];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) {
    free(x);
    return ebb_seterr(EBB_EIO, "sessions: no random bytes for an id");
  }
  x->info.id[0] = 's';
  for (size_t i = 0; i < sizeof rnd; i++)
    snprintf(x->info.id + 1 + 2 * i, 3, "%02x", rnd[i]);
  pthread_mutex_lock(&s->lock);
  s->next_id++;
  x->next = s->list;
  s->list = x;
  snprintf(id, 40, "%s", x->info.id);
  pthread_mutex_unlock(&s->lock);
  publish_session(id, pipeline, "open");
  return 0;
}

int pl_sessions_close(pl_sessions *s, const char *id) {
  pthread_mutex_lock(&s->lock);
  sess *x = find(s, id);
  if (!x) {
    pthread_mutex_unlock(&s->lock);
    return ebb_seterr(EBB_ENOTFOUND, "no session '%s'", id);
  }
  x->info.state = EBB_SESSION_STOPPED;
  snprintf(x->info.stop_reason, sizeof x->info.stop_reason, "closed");
  while (x->info.inflight)
    pthread_cond_wait(&s->drained, &s->lock);
  for (sess **p = &s->list; *p; p = &(*p)->next)
    if (*p == x) {
      *p = x->next;
      break;
    }
  pthread_mutex_unlock(&s->lock);
  publish_session(x->info.id, x->info.pipeline, "closed");
  free(x);
  return 0;
}

int pl_sessions_item_begin(pl_sessions *s, const char *id, char *pipeline) {
  int rc = 0;
  pthread_mutex_lock(&s->lock);
  sess *x = find(s, id);
  if (!x)
    rc = ebb_seterr(EBB_ENOTFOUND, "no session '%s'", id);
  else if (x->info.state != EBB_SESSION_OPEN)
    rc = ebb_seterr(EBB_EBUSY, "session '%s' is stopped: %s", id, x->info.stop_reason);
  else if (x->info.inflight)
    rc = ebb_seterr(EBB_EBUSY, "session '%s' is already running an item (one at a time)", id);
  else {
    x->info.inflight = 1;
    snprintf(pipeline, 128, "%s", x->info.pipeline);
  }
  pthread_mutex_unlock(&s->lock);
  if (!rc)
    publish_session(id, pipeline, "open");
  return rc;
}

void pl_sessions_item_end(pl_sessions *s, const char *id, int failed) {
  char pipeline[128] = "", state[8] = "";
  pthread_mutex_lock(&s->lock);
  sess *x = find(s, id);
  if (x) {
    snprintf(pipeline, sizeof pipeline, "%s", x->info.pipeline);
    snprintf(state, sizeof state, "%s", x->info.state == EBB_SESSION_OPEN ? "open" : "stopped");
    x->info.inflight = 0;
    if (failed)
      x->info.items_failed++;
    else
      x->info.items_done++;
  }
  pthread_cond_broadcast(&s->drained);
  pthread_mutex_unlock(&s->lock);
  if (state[0])
    publish_session(id, pipeline, state);
}

static int busy_on(pl_sessions *s, const char *pipeline) {
  for (sess *x = s->list; x; x = x->next)
    if (x->info.inflight && (!pipeline || !strcmp(x->info.pipeline, pipeline)))
      return 1;
  return 0;
}

int pl_sessions_stop_pipeline(pl_sessions *s, const char *pipeline, const char *reason,
                              int *stopped) {
  int n = 0;
  pthread_mutex_lock(&s->lock);
  for (sess *x = s->list; x; x = x->next)
    if (x->info.state == EBB_SESSION_OPEN && (!pipeline || !strcmp(x->info.pipeline, pipeline))) {
      x->info.state = EBB_SESSION_STOPPED;
      snprintf(x->info.stop_reason, sizeof x->info.stop_reason, "%s", reason);
      n++;
    }
  while (busy_on(s, pipeline))
    pthread_cond_wait(&s->drained, &s->lock);
  pthread_mutex_unlock(&s->lock);
  if (n) /* one fact for the lot: the sessions of pipeline (NULL: all) stopped */
    publish_session(NULL, pipeline, "stopped");
  if (stopped)
    *stopped = n;
  return 0;
}

void pl_sessions_stop_all(pl_sessions *s, const char *reason) {
  pl_sessions_stop_pipeline(s, NULL, reason, NULL);
}

int pl_sessions_leases(pl_sessions *s, const char *pipeline) {
  int n = 0;
  pthread_mutex_lock(&s->lock);
  for (sess *x = s->list; x; x = x->next)
    n += x->info.state == EBB_SESSION_OPEN && (!pipeline || !strcmp(x->info.pipeline, pipeline));
  pthread_mutex_unlock(&s->lock);
  return n;
}

int pl_sessions_info(pl_sessions *s, const char *id, pl_session_info *out) {
  int rc = 0;
  pthread_mutex_lock(&s->lock);
  sess *x = find(s, id);
  if (x)
    *out = x->info;
  else
    rc = ebb_seterr(EBB_ENOTFOUND, "no session '%s'", id);
  pthread_mutex_unlock(&s->lock);
  return rc;
}
