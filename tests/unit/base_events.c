/* The event bus (src/base/events.c, include/ebb/events.h): every
 * subscription sees every event once, in subscription order, with the
 * publisher's fields; a subscription that unsubscribes itself inside its
 * callback is called no more and freed (ASan: no leak, no use after free);
 * one unsubscribed from another callback is skipped in the same delivery;
 * unsubscribe from another thread returns only when no call of it is
 * running; many threads publishing while others subscribe and unsubscribe
 * lose no event of a subscription that stays, and the seq numbers are
 * unique. Run under ASan/UBSan in build-asan too. */
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/events.h"
#include "ebb/error.h"
#include "base/log.h"
#include "test.h"

typedef struct rec {
  int calls;
  ebb_event_kind kind;
  uint64_t bytes, seq, asked;
  size_t peers;
  char owner[32], state[16];
  int order; /* the global order it was called in */
} rec;

static int order_counter;

static void record(void *ctx, const ebb_event *ev) {
  rec *r = ctx;
  r->calls++;
  r->kind = ev->kind;
  r->bytes = ev->bytes;
  r->seq = ev->seq;
  snprintf(r->owner, sizeof r->owner, "%s", ev->owner ? ev->owner : "");
  snprintf(r->state, sizeof r->state, "%s", ev->state ? ev->state : "");
  r->asked = ev->bytes_asked;
  r->peers = ev->peers;
  r->order = ++order_counter;
}

/* A release of owner "x" with no log line (QUIET): the test's output stays clean. */
static void publish_one(uint64_t bytes) {
  ebb_event ev = {.kind = EBB_EVENT_RELEASED,
                  .flags = EBB_EVENT_QUIET,
                  .owner = "x",
                  .what = "GPU memory",
                  .bytes = bytes};
  base_event_publish(&ev);
}

static void test_subscribe_and_order(void) {
  CHECK(ebb_events_subscribe(NULL, NULL, NULL) == EBB_EINVAL);
  rec a = {0}, b = {0};
  ebb_subscription *sa = NULL, *sb = NULL;
  CHECK_EQ_INT(ebb_events_subscribe(record, &a, &sa), 0);
  CHECK_EQ_INT(ebb_events_subscribe(record, &b, &sb), 0);
  publish_one(42);
  CHECK_EQ_INT(a.calls, 1);
  CHECK_EQ_INT(b.calls, 1);
  CHECK_EQ_U64(a.bytes, 42);
  CHECK_EQ_STR(a.owner, "x");
  CHECK(a.kind == EBB_EVENT_RELEASED);
  CHECK(a.order < b.order); /* subscription order */
  CHECK_EQ_U64(a.seq, b.seq);
  uint64_t first = a.seq;
  publish_one(7);
  CHECK_EQ_U64(a.seq, first + 1);
  ebb_events_unsubscribe(sa);
  publish_one(8);
  CHECK_EQ_INT(a.calls, 2); /* gone */
  CHECK_EQ_INT(b.calls, 3);
  ebb_events_unsubscribe(sb);
  ebb_events_unsubscribe(NULL);
  /* the broker's grant and ask, as server/broker_peer.c publishes them */
  rec g = {0};
  ebb_subscription *sg = NULL;
  CHECK_EQ_INT(ebb_events_subscribe(record, &g, &sg), 0);
  base_event_publish_grant("received", 4121, "ebb serve", "cuda:0", 8u << 20, 6u << 20, 13.5,
                           "idle");
  CHECK(g.kind == EBB_EVENT_GRANT);
  CHECK_EQ_U64(g.bytes, 6u << 20);
  CHECK_EQ_STR(g.owner, "ebb serve");
  CHECK_EQ_STR(g.state, "received");
  base_event_publish_ask("cuda:0", 8u << 20, 9u << 20, 2, 1);
  CHECK(g.kind == EBB_EVENT_GRANT);
  CHECK_EQ_STR(g.state, "asked");
  CHECK_EQ_U64(g.asked, 8u << 20);
  CHECK_EQ_U64((uint64_t)g.peers, 2);
  ebb_events_unsubscribe(sg);
  CHECK_EQ_STR(ebb_event_kind_name(EBB_EVENT_LEAK), "leak");
  CHECK_EQ_STR(ebb_event_kind_name(EBB_EVENT_GRANT), "grant");
  CHECK_EQ_STR(ebb_event_kind_name((ebb_event_kind)0), "?");
}

/* --- unsubscribing inside a delivery -------------------------------------------------- */
typedef struct self_unsub {
  ebb_subscription *me, *victim;
  int calls;
} self_unsub;

static void unsub_self(void *ctx, const ebb_event *ev) {
  (void)ev;
  self_unsub *s = ctx;
  s->calls++;
  ebb_events_unsubscribe(s->me); /* freed by the bus once this returns */
}

static void unsub_other(void *ctx, const ebb_event *ev) {
  (void)ev;
  self_unsub *s = ctx;
  s->calls++;
  if (s->victim) {
    ebb_events_unsubscribe(s->victim);
    s->victim = NULL;
  }
}

static void test_unsubscribe_during_publish(void) {
  self_unsub s = {0}, killer = {0};
  rec before = {0}, victim = {0}, after = {0};
  ebb_subscription *sb = NULL, *sv = NULL, *sa = NULL, *sk = NULL;
  CHECK_EQ_INT(ebb_events_subscribe(record, &before, &sb), 0);
  CHECK_EQ_INT(ebb_events_subscribe(unsub_self, &s, &s.me), 0);
  CHECK_EQ_INT(ebb_events_subscribe(unsub_other, &killer, &sk), 0);
  CHECK_EQ_INT(ebb_events_subscribe(record, &victim, &sv), 0);
  CHECK_EQ_INT(ebb_events_subscribe(record, &after, &sa), 0);
  killer.victim = sv;
  publish_one(1);
  CHECK_EQ_INT(s.calls, 1);
  CHECK_EQ_INT(killer.calls, 1);
  CHECK_EQ_INT(victim.calls, 0); /* unsubscribed before its turn came */
  CHECK_EQ_INT(after.calls, 1);  /* the walk went on past both */
  CHECK_EQ_INT(before.calls, 1);
  publish_one(2);
  CHECK_EQ_INT(s.calls, 1); /* called no more */
  CHECK_EQ_INT(after.calls, 2);
  ebb_events_unsubscribe(sb);
  ebb_events_unsubscribe(sk);
  ebb_events_unsubscribe(sa);
}

/* --- unsubscribe from another thread waits for a running call ------------------------- */
typedef struct slow {
  atomic_int in, done;
} slow;

static void slow_cb(void *ctx, const ebb_event *ev) {
  (void)ev;
  slow *s = ctx;
  atomic_store(&s->in, 1);
  usleep(100 * 1000);
  atomic_store(&s->done, 1);
}

static void *publish_thread(void *arg) {
  (void)arg;
  publish_one(3);
  return NULL;
}

static void test_unsubscribe_waits(void) {
  slow s = {0};
  ebb_subscription *sub = NULL;
  CHECK_EQ_INT(ebb_events_subscribe(slow_cb, &s, &sub), 0);
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, publish_thread, NULL) == 0);
  for (int i = 0; i < 2000 && !atomic_load(&s.in); i++)
    usleep(1000);
  REQUIRE(atomic_load(&s.in));
  ebb_events_unsubscribe(sub);
  CHECK_MSG(atomic_load(&s.done), "unsubscribe returned while the callback still ran");
  pthread_join(th, NULL);
}

/* --- unsubscribe from inside its callback waits for other threads' calls ----------------- */
typedef struct twin {
  ebb_subscription *me;
  atomic_int slow_in, slow_done, unsub_saw_done;
} twin;

static _Thread_local int tl_slow;

/* On the slow thread it lingers; on the other it unsubscribes itself while
 * the slow call still runs, and notes whether that call had ended when the
 * unsubscribe returned (the header's contract: it must have). */
static void twin_cb(void *ctx, const ebb_event *ev) {
  (void)ev;
  twin *t = ctx;
  if (tl_slow) {
    atomic_store(&t->slow_in, 1);
    usleep(150 * 1000);
    atomic_store(&t->slow_done, 1);
    return;
  }
  ebb_events_unsubscribe(t->me);
  atomic_store(&t->unsub_saw_done, atomic_load(&t->slow_done) ? 1 : -1);
}

static void *slow_publisher(void *arg) {
  (void)arg;
  tl_slow = 1;
  publish_one(0);
  return NULL;
}

static void test_unsubscribe_inside_waits_others(void) {
  twin t = {0};
  CHECK_EQ_INT(ebb_events_subscribe(twin_cb, &t, &t.me), 0);
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, slow_publisher, NULL) == 0);
  for (int i = 0; i < 2000 && !atomic_load(&t.slow_in); i++)
    usleep(1000);
  REQUIRE(atomic_load(&t.slow_in));
  publish_one(0); /* this thread's call unsubscribes */
  CHECK_MSG(atomic_load(&t.unsub_saw_done) == 1,
            "an unsubscribe from inside the callback returned while another thread's call "
            "still ran");
  pthread_join(th, NULL);
}

/* --- unsubscribe from deep inside nested publishes ----------------------------------------- */
#define NEST 12
typedef struct nest {
  ebb_subscription *me;
  int depth, calls;
  atomic_int done;
} nest;

/* Publishes from inside itself NEST deep; the innermost call unsubscribes
 * its own subscription, which this thread then holds NEST times over. */
static void nest_cb(void *ctx, const ebb_event *ev) {
  (void)ev;
  nest *n = ctx;
  n->calls++;
  if (++n->depth < NEST)
    publish_one(0);
  else
    ebb_events_unsubscribe(n->me); /* must not wait for this thread's own calls */
  n->depth--;
}

static void *nest_thread(void *arg) {
  nest *n = arg;
  publish_one(0);
  publish_one(0); /* unsubscribed: no call */
  atomic_store(&n->done, 1);
  return NULL;
}

static void test_unsubscribe_deep_inside(void) {
  static nest n; /* static: the thread may outlive a failed check */
  CHECK_EQ_INT(ebb_events_subscribe(nest_cb, &n, &n.me), 0);
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, nest_thread, &n) == 0);
  for (int i = 0; i < 500 && !atomic_load(&n.done); i++)
    usleep(10 * 1000);
  if (!atomic_load(&n.done)) {
    CHECK_MSG(0, "an unsubscribe %d publishes deep inside its own callback never returned", NEST);
    return; /* the thread is stuck; the process ends with the failure */
  }
  pthread_join(th, NULL);
  CHECK_EQ_INT(n.calls, NEST);
}

/* --- many threads ---------------------------------------------------------------------- */
#define PUBLISHERS 4
#define PER_THREAD 5000
#define CHURNERS 2

typedef struct counter {
  atomic_ullong calls, bytes;
} counter;

static void count_cb(void *ctx, const ebb_event *ev) {
  counter *c = ctx;
  atomic_fetch_add(&c->calls, 1);
  atomic_fetch_add(&c->bytes, ev->bytes);
}

static atomic_int churn_stop;
static atomic_ullong max_seq;

static void seq_cb(void *ctx, const ebb_event *ev) {
  (void)ctx;
  unsigned long long m = atomic_load(&max_seq);
  while (ev->seq > m && !atomic_compare_exchange_weak(&max_seq, &m, ev->seq)) {
  }
}

static void *publisher(void *arg) {
  (void)arg;
  for (int i = 0; i < PER_THREAD; i++)
    publish_one(1);
  return NULL;
}

/* A subscription that unsubscribes itself at its first event, unless the
 * thread that made it has claimed the unsubscribe first (one of the two
 * does it, never both: unsubscribing twice is a double free). */
typedef struct racer {
  ebb_subscription *me;
  atomic_int claimed, done;
} racer;

static void racer_cb(void *ctx, const ebb_event *ev) {
  (void)ev;
  racer *r = ctx;
  int zero = 0;
  if (!atomic_compare_exchange_strong(&r->claimed, &zero, 1))
    return; /* the claimer's unsubscribe waits for this call to return */
  /* from inside: returns once no other thread's call of it runs (the bus
   * frees the node); only then may the churner free r */
  ebb_events_unsubscribe(r->me);
  atomic_store(&r->done, 1); /* the last touch of r */
}

/* subscribes and unsubscribes over and over, half of them from inside */
static void *churner(void *arg) {
  (void)arg;
  int n = 0;
  while (!atomic_load(&churn_stop)) {
    counter c = {0};
    ebb_subscription *s = NULL;
    if (ebb_events_subscribe(count_cb, &c, &s) == 0)
      ebb_events_unsubscribe(s);
    racer *r = calloc(1, sizeof *r);
    if (r && ebb_events_subscribe(racer_cb, r, &r->me) == 0) {
      usleep(200);
      int zero = 0;
      if (atomic_compare_exchange_strong(&r->claimed, &zero, 1))
        ebb_events_unsubscribe(r->me); /* returns once no call of it runs */
      else
        for (int i = 0; i < 100000 && !atomic_load(&r->done); i++)
          usleep(10);
    }
    free(r);
    n++;
  }
  return (void *)(intptr_t)n;
}

static void test_many_threads(void) {
  counter stays = {0};
  ebb_subscription *s = NULL, *sq = NULL;
  CHECK_EQ_INT(ebb_events_subscribe(count_cb, &stays, &s), 0);
  CHECK_EQ_INT(ebb_events_subscribe(seq_cb, NULL, &sq), 0);
  uint64_t seq0 = 0;
  {
    rec r = {0};
    ebb_subscription *t = NULL;
    CHECK_EQ_INT(ebb_events_subscribe(record, &r, &t), 0);
    publish_one(0);
    seq0 = r.seq;
    ebb_events_unsubscribe(t);
  }
  pthread_t pub[PUBLISHERS], ch[CHURNERS];
  for (int i = 0; i < CHURNERS; i++)
    REQUIRE(pthread_create(&ch[i], NULL, churner, NULL) == 0);
  for (int i = 0; i < PUBLISHERS; i++)
    REQUIRE(pthread_create(&pub[i], NULL, publisher, NULL) == 0);
  for (int i = 0; i < PUBLISHERS; i++)
    pthread_join(pub[i], NULL);
  atomic_store(&churn_stop, 1);
  long churned = 0;
  for (int i = 0; i < CHURNERS; i++) {
    void *n;
    pthread_join(ch[i], &n);
    churned += (long)(intptr_t)n;
  }
  ebb_events_unsubscribe(s);
  ebb_events_unsubscribe(sq);
  CHECK_EQ_U64(atomic_load(&stays.calls), 1 + (uint64_t)PUBLISHERS * PER_THREAD);
  CHECK_EQ_U64(atomic_load(&stays.bytes), (uint64_t)PUBLISHERS * PER_THREAD);
  CHECK_EQ_U64(atomic_load(&max_seq), seq0 + (uint64_t)PUBLISHERS * PER_THREAD);
  CHECK_MSG(churned > 0, "the churning threads never subscribed");
}

/* The log is the bus's first subscriber: the fixed lines, word for word. */
static void test_log_lines(void) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  REQUIRE(f != NULL);
  base_log_set_stream(f);
  base_log_set_level(EBB_LOG_INFO);
  ebb_event rel = {.kind = EBB_EVENT_RELEASED,
                   .owner = "separate",
                   .what = "GPU memory",
                   .bytes = 3704ull << 20};
  base_event_publish(&rel);
  ebb_event quiet = rel;
  quiet.flags = EBB_EVENT_QUIET;
  base_event_publish(&quiet); /* no line */
  ebb_event_site site = {.bytes = 4 << 20, .site = "synthetic.c:120"};
  ebb_event leak = {.kind = EBB_EVENT_LEAK,
                    .owner = "b",
                    .bytes = 4 << 20,
                    .blocks = 1,
                    .sites = &site,
                    .nsites = 1};
  base_event_publish(&leak);
  base_event_publish_grant("gave", 4121, "ebb serve", "cuda:0", 8u << 20, 6u << 20, 13.4, "idle");
  base_event_publish_ask("cuda:0", 8u << 20, 9u << 20, 1, 1);
  base_log_set_stream(NULL);
  base_log_set_level(EBB_LOG_ERROR);
  fclose(f);
  CHECK_EQ_STR(buf, "[separate] released 3704 MiB of GPU memory\n"
                    "[b] leaked 4 MiB in 1 blocks; freed by ebb\n"
                    "[b]   4 MiB (4194304 bytes) at synthetic.c:120\n"
                    "[broker] pid 4121 (ebb serve) gave back 6 MiB on cuda:0 in 13 ms: idle\n"
                    "[broker] cuda:0: 9 MiB free of 8 MiB needed after asking 1 peer\n");
  free(buf);
}

int main(void) {
  base_log_set_level(EBB_LOG_ERROR);
  RUN(test_log_lines);
  RUN(test_subscribe_and_order);
  RUN(test_unsubscribe_during_publish);
  RUN(test_unsubscribe_waits);
  RUN(test_unsubscribe_inside_waits_others);
  RUN(test_unsubscribe_deep_inside);
  RUN(test_many_threads);
  return TEST_END();
}
