/* The event bus (events.h, include/ebb/events.h).
 *
 * Subscriptions are a linked list guarded by one mutex, which is never held
 * while a callback runs. A publisher walks the list under the mutex, takes a
 * hold on the node it is about to call (inflight), and calls it unlocked;
 * a node is unlinked and freed only when no publisher holds it, so the walk
 * can always go on from the node it holds. Unsubscribing waits for the
 * other threads' holds to go; a callback that unsubscribes itself marks its
 * node dead and its own last hold frees it. */
#include "base/events.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/clock.h"
#include "ebb/error.h"

struct ebb_subscription {
  ebb_subscription *next, *prev;
  ebb_event_fn fn;
  void *ctx;
  unsigned inflight; /* publishers calling fn now */
  int dead;          /* unsubscribed: no new calls */
  int orphan;        /* unsubscribed from its own callback: the last holder frees it */
};

static pthread_mutex_t bus_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bus_idle = PTHREAD_COND_INITIALIZER;
static ebb_subscription *bus_head, *bus_tail;
static uint64_t bus_seq;
/* The callbacks this thread is inside, innermost first: one frame on the
 * stack of each base_event_publish that is calling one (any depth). */
typedef struct in_call {
  const ebb_subscription *s;
  const struct in_call *up;
} in_call;
static _Thread_local const in_call *tl_in;

/* Every kind of fact, by number; /metrics counts the kinds named here. */
static const char *const kind_names[] = {
    [EBB_EVENT_RELEASED] = "released", [EBB_EVENT_LEAK] = "leak",
    [EBB_EVENT_JOB] = "job",           [EBB_EVENT_PIPELINE] = "pipeline",
    [EBB_EVENT_SESSION] = "session",   [EBB_EVENT_DEVICE_LOST] = "device_lost",
    [EBB_EVENT_GRANT] = "grant",       [EBB_EVENT_OOM] = "oom",
    [EBB_EVENT_MARK] = "mark",         [EBB_EVENT_PARKED] = "parked",
};

const char *ebb_event_kind_name(ebb_event_kind kind) {
  return kind > 0 && (size_t)kind < sizeof kind_names / sizeof *kind_names ? kind_names[kind] : "?";
}

int ebb_events_subscribe(ebb_event_fn fn, void *ctx, ebb_subscription **out) {
  if (!fn || !out)
    return ebb_seterr(EBB_EINVAL, "events: subscribe needs a function and a place for the "
                                  "subscription");
  ebb_subscription *s = calloc(1, sizeof *s);
  if (!s)
    return ebb_seterr(EBB_ENOMEM, "events: out of host memory for a subscription");
  s->fn = fn;
  s->ctx = ctx;
  /* before the first call can start: a callback may read it through ctx */
  *out = s;
  pthread_mutex_lock(&bus_mu);
  s->prev = bus_tail;
  if (bus_tail)
    bus_tail->next = s;
  else
    bus_head = s;
  bus_tail = s;
  pthread_mutex_unlock(&bus_mu);
  return 0;
}

static void unlink_locked(ebb_subscription *s) {
  if (s->prev)
    s->prev->next = s->next;
  else
    bus_head = s->next;
  if (s->next)
    s->next->prev = s->prev;
  else
    bus_tail = s->prev;
}

/* The holds this thread has on s (it may be inside s's callback, even
 * several times over when its callbacks publish). */
static unsigned own_holds(const ebb_subscription *s) {
  unsigned n = 0;
  for (const in_call *f = tl_in; f; f = f->up)
    n += f->s == s;
  return n;
}

void ebb_events_unsubscribe(ebb_subscription *s) {
  if (!s)
    return;
  unsigned mine = own_holds(s);
  pthread_mutex_lock(&bus_mu);
  s->dead = 1;
  /* other threads' calls of fn finish first, from inside too: the caller
   * may free ctx once this returns */
  while (s->inflight > mine)
    pthread_cond_wait(&bus_idle, &bus_mu);
  if (mine) { /* from inside its own callback: this thread's last hold frees it */
    s->orphan = 1;
    pthread_mutex_unlock(&bus_mu);
    return;
  }
  unlink_locked(s);
  pthread_mutex_unlock(&bus_mu);
  free(s);
}

/* The next live node from s (s itself when live), held; NULL at the end.
 * Under bus_mu. */
static ebb_subscription *hold_from(ebb_subscription *s) {
  while (s && s->dead)
    s = s->next;
  if (s)
    s->inflight++;
  return s;
}

/* Drops the hold on s and answers the node after it, held. Under bus_mu. */
static ebb_subscription *release_and_next(ebb_subscription *s) {
  ebb_subscription *next = hold_from(s->next);
  --s->inflight;
  if (s->dead) {
    if (s->orphan && s->inflight == 0) {
      unlink_locked(s);
      free(s);
    } else {
      pthread_cond_broadcast(&bus_idle); /* an unsubscribe waits for the count to drop */
    }
  }
  return next;
}

void base_event_publish(ebb_event *ev) {
  if (!ev)
    return;
  ev->size = sizeof *ev;
  if (ev->t == 0)
    ev->t = base_wall_s();
  pthread_mutex_lock(&bus_mu);
  ev->seq = ++bus_seq;
  pthread_mutex_unlock(&bus_mu);
  base_event_log(ev);
  pthread_mutex_lock(&bus_mu);
  ebb_subscription *s = hold_from(bus_head);
  while (s) {
    pthread_mutex_unlock(&bus_mu);
    in_call frame = {s, tl_in};
    tl_in = &frame;
    s->fn(s->ctx, ev);
    tl_in = frame.up;
    pthread_mutex_lock(&bus_mu);
    s = release_and_next(s);
  }
  pthread_mutex_unlock(&bus_mu);
}

void base_event_publish_grant(const char *state, int pid, const char *what, const char *device,
                              uint64_t asked, uint64_t given, double ms, const char *reason) {
  ebb_event ev = {.kind = EBB_EVENT_GRANT,
                  .state = state,
                  .pid = pid,
                  .owner = what,
                  .device = device,
                  .bytes_asked = asked,
                  .bytes = given,
                  .ms = ms,
                  .message = reason};
  base_event_publish(&ev);
}

void base_event_publish_ask(const char *device, uint64_t need, uint64_t free_after, size_t npeers,
                            int satisfied) {
  ebb_event ev = {.kind = EBB_EVENT_GRANT,
                  .state = "asked",
                  .pid = (int)getpid(),
                  .device = device,
                  .bytes_asked = need,
                  .driver_free_after = free_after,
                  .peers = npeers,
                  .message = satisfied ? "satisfied" : "not satisfied"};
  base_event_publish(&ev);
}
