/* The allocator's facts on the bus (include/ebb/events.h): a ledger mark is
 * an EBB_EVENT_MARK and an allocation the driver cannot serve (after the
 * trim and retry) an EBB_EVENT_OOM, each published once, naming the device
 * (and the owner, the bytes asked), in the order they happened among the
 * other facts of the process; the ledger still records both for the
 * timeline, and the allocation's error message is still the allocator's.
 * An owner parked or put to sleep is an EBB_EVENT_PARKED. */
#include "base/events.h"
#include "memory_util.h"
#include "test.h"

#define MAXSEEN 32

typedef struct seen {
  ebb_event_kind kind;
  uint64_t seq, bytes;
  char device[32], owner[64], message[64], state[16];
} seen;

static seen got[MAXSEEN];
static int ngot;

static void cp(char *dst, size_t n, const char *s) { snprintf(dst, n, "%s", s ? s : ""); }

static void on_event(void *ctx, const ebb_event *ev) {
  (void)ctx;
  if (ngot == MAXSEEN)
    return;
  seen *s = &got[ngot++];
  s->kind = ev->kind;
  s->seq = ev->seq;
  s->bytes = ev->bytes;
  cp(s->device, sizeof s->device, ev->device);
  cp(s->owner, sizeof s->owner, ev->owner);
  cp(s->message, sizeof s->message, ev->message);
  cp(s->state, sizeof s->state, ev->state);
}

/* A fact of another room, published between the allocator's. */
static void other_fact(const char *owner) {
  ebb_event ev = {.kind = EBB_EVENT_RELEASED, .flags = EBB_EVENT_QUIET, .owner = owner};
  base_event_publish(&ev);
}

static size_t ledger_kinds(mem_ledger *l, mem_ledger_kind k) {
  mem_ledger_event ev[256];
  size_t n = 0, hits = 0;
  mem_ledger_events(l, ev, 256, &n, NULL);
  for (size_t i = 0; i < n; i++)
    hits += ev[i].kind == k;
  return hits;
}

static void test_marks_and_oom_in_order(void) {
  /* a 1 GiB fake device of our own (the state file is this test's alone) */
  setenv("FAKEGPU_MEMORY_MIB", "1024", 1);
  setenv("FAKEGPU_CONTEXT_MIB", "300", 1);
  dev_device *d = mt_open("cuda:0");
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *o = NULL;
  REQUIRE(mem_owner_create(a, "separate", NULL, &o) == 0);
  mem_owner_set_kind(o, "stage");
  mem_ledger *l = mem_allocator_ledger(a);
  ebb_subscription *sub = NULL;
  REQUIRE(ebb_events_subscribe(on_event, NULL, &sub) == 0);

  mem_ledger_mark(l, "separate load");
  other_fact("first");
  uint64_t x = 0;
  CHECK_EQ_INT(mem_alloc(o, 2048 * MiB, "o.c:1", &x), EBB_EOOM);
  const char *m = ebb_errmsg();
  CHECK_MSG(strstr(m, "out of device memory: stage 'separate' asked for 2.0 GiB"),
            "the allocation's message is no longer the allocator's: %s", m);
  other_fact("second");
  mem_ledger_mark(l, "separate release");
  ebb_events_unsubscribe(sub);

  static const ebb_event_kind want[] = {EBB_EVENT_MARK, EBB_EVENT_RELEASED, EBB_EVENT_OOM,
                                        EBB_EVENT_RELEASED, EBB_EVENT_MARK};
  CHECK_MSG(ngot == 5,
            "the subscriber saw %d facts, not 5 (mark, fact, oom, fact, mark): "
            "marks and out-of-memory do not reach the bus",
            ngot);
  for (int i = 0; i < ngot && i < 5; i++) {
    CHECK_MSG(got[i].kind == want[i], "fact %d is %s, expected %s", i,
              ebb_event_kind_name(got[i].kind), ebb_event_kind_name(want[i]));
    if (i)
      CHECK_EQ_U64(got[i].seq, got[i - 1].seq + 1);
  }
  if (ngot == 5) {
    CHECK_EQ_STR(got[0].device, "cuda:0");
    CHECK_EQ_STR(got[0].message, "separate load");
    CHECK_EQ_STR(got[2].device, "cuda:0");
    CHECK_EQ_STR(got[2].owner, "separate");
    CHECK_EQ_U64(got[2].bytes, 2048 * MiB);
    CHECK_EQ_STR(got[4].message, "separate release");
  }
  CHECK_EQ_STR(ebb_event_kind_name(EBB_EVENT_OOM), "oom");
  CHECK_EQ_STR(ebb_event_kind_name(EBB_EVENT_MARK), "mark");
  /* the timeline keeps its own record of both */
  CHECK_EQ_INT(ledger_kinds(l, EBB_EV_MARK), 2);
  CHECK_EQ_INT(ledger_kinds(l, EBB_EV_OOM), 1);
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

/* Parking and sleeping an owner are facts (EBB_EVENT_PARKED): the owner,
 * the device, the device bytes given back, "parked" or "asleep". */
static void test_parked_is_a_fact(void) {
  dev_device *d = mt_open("cuda:0");
  REQUIRE(dev_supports_vmm(d));
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *o = NULL;
  REQUIRE(mem_owner_create(a, "whisper", NULL, &o) == 0);
  uint64_t x = 0, parked = 0;
  REQUIRE(mem_alloc(o, 64 * MiB, "w.c:1", &x) == 0);
  ebb_subscription *sub = NULL;
  ngot = 0;
  REQUIRE(ebb_events_subscribe(on_event, NULL, &sub) == 0);
  CHECK_EQ_INT(ebb_owner_park(o, &parked), 0);
  CHECK_EQ_INT(ebb_owner_wake(o), 0);
  mem_sleep_stats st = {.size = sizeof st};
  CHECK_EQ_INT(mem_owner_sleep(o, &st), 0);
  ebb_events_unsubscribe(sub);
  CHECK_MSG(ngot == 2, "the subscriber saw %d facts, not 2 (parked, asleep)", ngot);
  for (int i = 0; i < ngot && i < 2; i++) {
    CHECK_MSG(got[i].kind == EBB_EVENT_PARKED, "fact %d is %s, expected parked", i,
              ebb_event_kind_name(got[i].kind));
    CHECK_EQ_STR(got[i].device, "cuda:0");
    CHECK_EQ_STR(got[i].owner, "whisper");
    CHECK_EQ_STR(got[i].state, i ? "asleep" : "parked");
    CHECK_EQ_U64(got[i].bytes, i ? st.device_bytes : parked);
  }
  CHECK(parked >= 64 * MiB);
  CHECK_EQ_STR(ebb_event_kind_name(EBB_EVENT_PARKED), "parked");
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

/* A refusal that is not the driver's (the owner's quota) is no OOM fact. */
static void test_quota_is_no_oom(void) {
  dev_device *d = mt_open("cpu");
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *o = NULL;
  REQUIRE(mem_owner_create(a, "small", NULL, &o) == 0);
  REQUIRE(mem_owner_set_quota(o, 4 * MiB) == 0);
  ebb_subscription *sub = NULL;
  ngot = 0;
  REQUIRE(ebb_events_subscribe(on_event, NULL, &sub) == 0);
  uint64_t x = 0;
  CHECK(mem_alloc(o, 8 * MiB, "q.c:1", &x) != 0);
  ebb_events_unsubscribe(sub);
  for (int i = 0; i < ngot; i++)
    CHECK_MSG(got[i].kind != EBB_EVENT_OOM, "a quota refusal was published as out of memory");
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

int main(void) {
  RUN(test_marks_and_oom_in_order);
  RUN(test_parked_is_a_fact);
  RUN(test_quota_is_no_oom);
  return TEST_END();
}
