/* A program built against the INSTALLED libebb with nothing but
 * `cc embed_app.c $(pkg-config --cflags --libs ebb)` (tests/integration/
 * lib_install.sh): owners with a parent, allocation with an owner and with
 * the thread's current owner, usage figures, a leak report naming the site,
 * owner release and context release checked against fakegpu-smi, park/wake,
 * and every other function the installed headers declare (the default owner,
 * pinned buffers, release hooks, the timeline, the PyTorch entry points, the
 * error functions): lib_install.sh checks that this program references each
 * one, through pkg-config and through find_package(ebb) (tests/lib/
 * find_package/CMakeLists.txt). The events (ebb/events.h): a subscriber
 * sees the owner's release with the bytes ebb_owner_release answered, and
 * the leak with its site; none after it unsubscribed. Run on the fake GPU (EBB_LIBCUDA,
 * EBB_LIBNVML, FAKEGPU_STATE, FAKEGPU_SMI); argv[1]: a scratch directory. */
#define _POSIX_C_SOURCE 200809L /* fdopen, posix_spawn in smi.h under -std=c17 */
#include <ebb/ebb.h>
#include <ebb/events.h>
#include <errno.h>

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "smi.h"
#include "test.h"

#define OK(call)                                                               \
  do {                                                                         \
    int rc_ = (call);                                                          \
    CHECK_MSG(rc_ == 0, "%s: %s (%s)", #call, ebb_errmsg(), ebb_errname(rc_)); \
  } while (0)

static long ctx_mib(void) {
  const char *e = getenv("FAKEGPU_CONTEXT_MIB");
  return e ? atol(e) : 300;
}

static ebb_gpu *g;
static const char *scratch = ".";

static void test_version(void) {
  CHECK_EQ_INT(ebb_api_version(), EBB_API_VERSION);
  CHECK(ebb_version_string() && *ebb_version_string());
  ebb_gpu_info info = {.size = sizeof info};
  OK(ebb_gpu_get_info(g, &info));
  CHECK_EQ_STR(info.label, "cuda:0");
  CHECK_EQ_INT(info.is_cuda, 1);
  CHECK(info.total_bytes > 0);
  CHECK_EQ_INT(smi_me(), 0); /* opening made no context */
  /* a bad spec is refused with a message naming it */
  ebb_gpu *bad = NULL;
  CHECK(ebb_gpu_open("tpu:3", &bad) != 0 && !bad);
  CHECK_MSG(strstr(ebb_errmsg(), "tpu:3"), "message does not name the spec: %s", ebb_errmsg());
}

static void test_owners_and_release(void) {
  ebb_owner *pipe = NULL, *sep = NULL, *align = NULL;
  OK(ebb_owner_open(g, "pipeline songtrace", NULL, &pipe));
  OK(ebb_owner_open(g, "separate", pipe, &sep));
  OK(ebb_owner_open(g, "align", pipe, &align));
  REQUIRE(pipe && sep && align);
  CHECK_EQ_STR(ebb_owner_get_name(sep), "separate");
  CHECK(ebb_owner_gpu(sep) == g);

  uint64_t w = 0, act = 0, lost = 0;
  OK(ebb_alloc(sep, 1 * GiB, "embed_app.c:weights", &w));
  /* the current owner: ebb_gpu_alloc attributes to it */
  OK(ebb_push(align));
  CHECK(ebb_current(g) == align);
  OK(ebb_gpu_alloc(g, 256 * MiB, "embed_app.c:act", &act));
  OK(ebb_gpu_alloc(g, 512 * MiB, "embed_app.c:forgotten", &lost));
  OK(ebb_pop());
  CHECK(ebb_current(g) == NULL);
  CHECK(ebb_pop() == EBB_ESTATE);

  ebb_owner *who = NULL;
  uint64_t sz = 0;
  OK(ebb_lookup(g, act, &who, &sz));
  CHECK(who == align);
  CHECK_EQ_U64(sz, 256 * MiB);

  ebb_owner_usage u = {.size = sizeof u};
  OK(ebb_owner_get_usage(align, &u));
  CHECK_EQ_U64(u.bytes, 768 * MiB);
  CHECK_EQ_U64(u.blocks, 2);
  OK(ebb_owner_get_usage(pipe, &u));
  CHECK_EQ_U64(u.bytes, 0);
  CHECK_EQ_U64(u.tree_bytes, (1024 + 768) * MiB);

  ebb_gpu_stats st = {.size = sizeof st};
  OK(ebb_gpu_get_stats(g, &st));
  CHECK_EQ_U64(st.reserved, (1024 + 768) * MiB);
  CHECK_EQ_INT(st.ctx_active, 1);
  long used = smi_me();
  CHECK_EQ_INT(used, ctx_mib() + 1024 + 768);
  CHECK_EQ_INT(used, (long)((st.reserved + st.context_bytes) / MiB));
  CHECK_EQ_INT(st.unattributed, 0);

  /* align frees one block and forgets the other: release reclaims it as a
   * leak that names the site, and the driver gets both back */
  OK(ebb_free(g, act));
  CHECK(ebb_free(g, act) == EBB_ENOTFOUND); /* double free */
  ebb_leak_list *leaks = NULL;
  ebb_released r = {.size = sizeof r};
  long before = smi_me();
  OK(ebb_owner_release(align, 0, &leaks, &r));
  long after = smi_me();
  REQUIRE(leaks != NULL);
  CHECK_EQ_U64(leaks->count, 1);
  CHECK_EQ_U64(leaks->bytes, 512 * MiB);
  CHECK_EQ_STR(leaks->leaks[0].site, "embed_app.c:forgotten");
  CHECK_EQ_STR(leaks->leaks[0].owner, "align");
  CHECK_EQ_U64(r.leaked_bytes, 512 * MiB);
  CHECK_EQ_U64(r.released_bytes, 768 * MiB);
  CHECK_EQ_INT(before - after, (long)(r.released_bytes / MiB));
  ebb_leak_list_free(leaks);
  CHECK(ebb_free(g, lost) == EBB_ENOTFOUND); /* ebb freed it already */

  /* separate frees its weights: nothing leaks, 1 GiB goes back */
  OK(ebb_free(g, w));
  before = smi_me();
  OK(ebb_owner_release(sep, 0, &leaks, &r));
  after = smi_me();
  CHECK(leaks == NULL);
  CHECK_EQ_U64(r.released_bytes, 1 * GiB);
  CHECK_EQ_INT(before - after, 1024);
  CHECK_EQ_INT(after, ctx_mib());

  /* closing the parent closes the children and reports what they hold */
  OK(ebb_alloc(sep, 10 * MiB, "embed_app.c:late", &w));
  ebb_owner_close(pipe, &leaks);
  REQUIRE(leaks != NULL);
  CHECK_EQ_U64(leaks->bytes, 10 * MiB);
  CHECK_EQ_STR(leaks->leaks[0].site, "embed_app.c:late");
  ebb_leak_list_free(leaks);
}

static void test_quota(void) {
  ebb_owner *q = NULL;
  OK(ebb_owner_open(g, "quota", NULL, &q));
  OK(ebb_owner_quota(q, 100 * MiB));
  uint64_t p = 0;
  CHECK(ebb_alloc(q, 200 * MiB, "embed_app.c:big", &p) == EBB_EQUOTA);
  CHECK_MSG(strstr(ebb_errmsg(), "quota"), "quota message: %s", ebb_errmsg());
  ebb_owner_close(q, NULL);
}

static void test_park_wake(void) {
  ebb_owner *o = NULL;
  OK(ebb_owner_open(g, "sleeper", NULL, &o));
  uint64_t p = 0, parked = 0;
  OK(ebb_alloc(o, 256 * MiB, "embed_app.c:model", &p));
  long awake = smi_me();
  OK(ebb_owner_park(o, &parked));
  CHECK_EQ_U64(parked, 256 * MiB);
  CHECK_EQ_INT(awake - smi_me(), 256);
  OK(ebb_owner_wake(o));
  CHECK_EQ_INT(smi_me(), awake);
  OK(ebb_free(g, p));
  ebb_owner_close(o, NULL);
}

static void test_errors(void) {
  CHECK_EQ_STR(ebb_strerror(EBB_EOOM), "out of device memory");
  CHECK_EQ_STR(ebb_errname(EBB_EOOM), "EBB_EOOM");
  CHECK_EQ_STR(ebb_strerror(-9999), "unknown error");
  CHECK_EQ_INT(ebb_seterr(EBB_EINPUT, "song.wav: %d bytes", 3), EBB_EINPUT);
  CHECK_EQ_STR(ebb_errmsg(), "song.wav: 3 bytes");
  CHECK_EQ_INT(ebb_errctx(EBB_EINPUT, "decode: "), EBB_EINPUT);
  CHECK_EQ_STR(ebb_errmsg(), "decode: song.wav: 3 bytes");
  ebb_clearerr();
  CHECK_EQ_STR(ebb_errmsg(), "success");
}

/* With no current owner, ebb_gpu_alloc charges g's default owner. */
static void test_default_owner(void) {
  ebb_owner *d = ebb_gpu_default_owner(g);
  REQUIRE(d != NULL);
  CHECK_EQ_STR(ebb_owner_get_name(d), "default");
  uint64_t p = 0, sz = 0;
  ebb_owner *who = NULL;
  OK(ebb_gpu_alloc(g, 2 * MiB, "embed_app.c:default", &p));
  OK(ebb_lookup(g, p, &who, &sz));
  CHECK(who == d);
  CHECK_EQ_U64(sz, 2 * MiB);
  OK(ebb_free(g, p));
}

static void test_pinned(void) {
  ebb_owner *o = NULL;
  OK(ebb_owner_open(g, "pinned", NULL, &o));
  REQUIRE(o != NULL);
  void *p = NULL;
  OK(ebb_pinned_alloc_for(o, 1 * MiB, &p));
  REQUIRE(p != NULL);
  memset(p, 0x5a, 1 * MiB); /* host memory the program may touch */
  ebb_owner_usage u = {.size = sizeof u};
  OK(ebb_owner_get_usage(o, &u));
  CHECK_EQ_U64(u.pinned_bytes, 1 * MiB);
  OK(ebb_pinned_free_for(g, p));
  CHECK(ebb_pinned_free_for(g, p) == EBB_ENOTFOUND); /* double free */
  OK(ebb_owner_get_usage(o, &u));
  CHECK_EQ_U64(u.pinned_bytes, 0);
  ebb_owner_close(o, NULL);
}

static int hook_runs;
static void count_hook(void *arg) { (*(int *)arg)++; }

/* A release hook runs on every release until it is removed. */
static void test_release_hook(void) {
  uint64_t h = 0;
  OK(ebb_release_hook_add("embed_app cache", count_hook, &hook_runs, &h));
  ebb_released r = {.size = sizeof r};
  OK(ebb_gpu_release(g, 0, &r));
  CHECK_EQ_INT(hook_runs, 1);
  CHECK(r.callbacks_run >= 1);
  OK(ebb_release_hook_remove(h));
  OK(ebb_gpu_release(g, 0, &r));
  CHECK_EQ_INT(hook_runs, 1);
  CHECK(ebb_release_hook_remove(h) == EBB_ENOTFOUND);
}

static void test_timeline(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/embed_app_timeline.json", scratch);
  OK(ebb_gpu_mark(g, "embed_app mark"));
  OK(ebb_gpu_write_timeline(g, path));
  FILE *f = fopen(path, "r");
  REQUIRE(f != NULL);
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  CHECK_MSG(strstr(text, "embed_app mark"), "the timeline %s lacks the mark", path);
}

/* PyTorch's pluggable allocator entry points: the block is ebb's, on the
 * handle ebb_gpu_for_ordinal gives, and goes back with ebb_torch_free. */
static void test_torch_entry_points(void) {
  ebb_gpu *t = NULL;
  OK(ebb_gpu_for_ordinal(0, &t));
  REQUIRE(t != NULL);
  void *p = ebb_torch_alloc(4 * MiB, 0, NULL);
  CHECK_MSG(p != NULL, "ebb_torch_alloc: %s", ebb_errmsg());
  uint64_t sz = 0;
  OK(ebb_lookup(t, (uint64_t)(uintptr_t)p, NULL, &sz));
  CHECK_EQ_U64(sz, 4 * MiB);
  ebb_torch_free(p, 4 * MiB, 0, NULL);
  CHECK(ebb_lookup(t, (uint64_t)(uintptr_t)p, NULL, &sz) == EBB_ENOTFOUND);
  /* with a site (the Python plug-in's entry, API 1.2) */
  void *q = NULL;
  OK(ebb_torch_alloc_at(2 * MiB, 0, "embed_app.py:7", &q));
  REQUIRE(q != NULL);
  OK(ebb_lookup(t, (uint64_t)(uintptr_t)q, NULL, &sz));
  CHECK_EQ_U64(sz, 2 * MiB);
  ebb_torch_free(q, 2 * MiB, 0, NULL);
  CHECK(ebb_lookup(t, (uint64_t)(uintptr_t)q, NULL, &sz) == EBB_ENOTFOUND);
  /* API 1.3: a C program has no Python frames: the site is "torch"; a
   * Python layout this library does not know is refused, naming it */
  char site[64];
  OK(ebb_torch_site(site, sizeof site));
  CHECK_MSG(!strcmp(site, "torch"), "ebb_torch_site in C: '%s'", site);
  ebb_python_sites ps = {.size = sizeof ps,
                         .hexversion = 0x02070000,
                         .this_thread_state = site,
                         .addr2line = site};
  CHECK(ebb_torch_python_sites(&ps) == EBB_EUNSUPPORTED);
  CHECK_MSG(strstr(ebb_errmsg(), "CPython 2.7"), "message: %s", ebb_errmsg());
  OK(ebb_torch_python_sites(NULL));
  /* a refused allocation is counted and its reason kept */
  uint64_t before = 0, after = 0;
  OK(ebb_torch_last_error(NULL, 0, &before));
  CHECK(ebb_torch_alloc((ssize_t)1 << 60, 0, NULL) == NULL);
  char why[256];
  OK(ebb_torch_last_error(why, sizeof why, &after));
  CHECK_EQ_U64(after, before + 1);
  CHECK_MSG(why[0] != 0, "no reason kept for the refused allocation");
  /* peaks reset to what is held now */
  void *big = ebb_torch_alloc(8 * MiB, 0, NULL);
  REQUIRE(big != NULL);
  ebb_torch_free(big, 8 * MiB, 0, NULL);
  ebb_gpu_stats st = {.size = sizeof st};
  OK(ebb_gpu_get_stats(t, &st));
  CHECK(st.allocated_peak >= st.allocated + 8 * MiB && st.blocks_total > 0);
  OK(ebb_gpu_reset_peaks(t));
  OK(ebb_gpu_get_stats(t, &st));
  CHECK_EQ_U64(st.allocated_peak, st.allocated);
  CHECK_EQ_U64(st.reserved_peak, st.reserved);
  /* on a stream (API 1.3): the legacy stream, 0 */
  OK(ebb_torch_alloc_on(2 * MiB, 0, NULL, "embed_app.py:8", &q));
  REQUIRE(q != NULL);
  OK(ebb_record_stream(t, (uint64_t)(uintptr_t)q, 0));
  ebb_torch_free(q, 2 * MiB, 0, NULL);
  CHECK(ebb_lookup(t, (uint64_t)(uintptr_t)q, NULL, &sz) == EBB_ENOTFOUND);
}

/* API 1.3: streams, an owner's live blocks, a block kept through its
 * owner's release. */
static void test_streams_and_keep(void) {
  ebb_gpu *g = NULL;
  OK(ebb_gpu_open("cuda:0", &g));
  ebb_owner *o = NULL;
  OK(ebb_owner_open(g, "keeper", NULL, &o));
  OK(ebb_push(o));
  uint64_t a = 0, b = 0;
  OK(ebb_gpu_alloc_on(g, 3 * MiB, "embed_app.c:keep", 0, &a));
  OK(ebb_gpu_alloc_on(g, 1 * MiB, "embed_app.c:leak", EBB_STREAM_NONE, &b));
  OK(ebb_pop());
  ebb_leak_list *l = NULL;
  OK(ebb_owner_blocks(o, &l));
  REQUIRE(l != NULL);
  CHECK_EQ_U64(l->count, 2);
  CHECK_EQ_U64(l->bytes, 4 * MiB);
  ebb_leak_list_free(l);
  OK(ebb_keep(g, a));
  ebb_released r = {.size = sizeof r};
  OK(ebb_owner_release(o, 0, &l, &r));
  REQUIRE(l != NULL);
  CHECK_EQ_U64(l->count, 1); /* b; a is kept */
  CHECK_EQ_U64(l->leaks[0].addr, b);
  ebb_leak_list_free(l);
  OK(ebb_free_on(g, a, 0));
  OK(ebb_owner_blocks(o, &l));
  CHECK(l == NULL);
  ebb_owner_close(o, NULL);
  ebb_gpu_close(g);
}

/* ebb_reclaim with no peer in an empty broker directory: memory already
 * free is had at once, more than the device holds is refused naming it,
 * a device that is not cuda:N is refused. */
static void test_reclaim(void) {
  char dir[600];
  snprintf(dir, sizeof dir, "%s/embed_app_broker", scratch);
  REQUIRE(mkdir(dir, 0700) == 0 || errno == EEXIST);
  ebb_reclaim_result r = {.size = sizeof r};
  OK(ebb_reclaim("cuda:0", 1 * MiB, dir, 1.0, &r));
  CHECK_EQ_INT(r.peers_asked, 0);
  CHECK(r.free_after >= 1 * MiB);
  CHECK_EQ_INT(ebb_reclaim("cuda:0", (uint64_t)1 << 50, dir, 1.0, &r), EBB_EOOM);
  CHECK_EQ_U64(r.given_bytes, 0);
  CHECK_EQ_INT(ebb_reclaim("cpu", 1 * MiB, dir, 1.0, NULL), EBB_EINVAL);
  /* the giving side: a socket named by this pid while joined (an asker
   * never asks itself: still nobody to ask), gone after leaving */
  ebb_broker *b = NULL;
  CHECK(ebb_broker_join(dir, "embed_app", NULL) == EBB_EINVAL);
  OK(ebb_broker_join(dir, "embed_app", &b));
  char sock[700];
  snprintf(sock, sizeof sock, "%s/%ld.sock", dir, (long)getpid());
  CHECK(access(sock, F_OK) == 0);
  OK(ebb_reclaim("cuda:0", 1 * MiB, dir, 1.0, &r));
  CHECK_EQ_INT(r.peers_asked, 0);
  ebb_broker_leave(b);
  CHECK(access(sock, F_OK) != 0);
  ebb_broker_leave(NULL);
}

static void test_context_release(void) {
  ebb_released r = {.size = sizeof r};
  OK(ebb_gpu_release(g, EBB_GPU_RELEASE_CONTEXT, &r));
  CHECK_EQ_INT(r.context_released, 1);
  CHECK_EQ_U64(r.context_bytes, (uint64_t)ctx_mib() * MiB);
  CHECK_EQ_INT(smi_me(), 0);
  /* releasing again never creates a context */
  OK(ebb_gpu_release(g, EBB_GPU_RELEASE_CONTEXT, &r));
  CHECK_EQ_INT(smi_me(), 0);
}

/* What the subscriber saw (the event's pointers live only during the call). */
typedef struct seen {
  int released, leaks, others;
  uint64_t released_bytes, leak_bytes;
  char owner[64], device[32], leak_site[64];
} seen;

static void on_event(void *ctx, const ebb_event *ev) {
  seen *s = ctx;
  if (ev->kind == EBB_EVENT_RELEASED && ev->owner && !strcmp(ev->owner, "events")) {
    s->released++;
    s->released_bytes = ev->bytes;
    snprintf(s->owner, sizeof s->owner, "%s", ev->owner);
    snprintf(s->device, sizeof s->device, "%s", ev->device ? ev->device : "");
  } else if (ev->kind == EBB_EVENT_LEAK && ev->owner && !strcmp(ev->owner, "events")) {
    s->leaks++;
    s->leak_bytes = ev->bytes;
    if (ev->nsites)
      snprintf(s->leak_site, sizeof s->leak_site, "%s", ev->sites[0].site);
  } else {
    s->others++;
  }
}

static void test_events(void) {
  CHECK(ebb_events_subscribe(NULL, NULL, NULL) == EBB_EINVAL);
  seen s = {0};
  ebb_subscription *sub = NULL;
  OK(ebb_events_subscribe(on_event, &s, &sub));
  REQUIRE(sub != NULL);
  ebb_owner *o = NULL;
  uint64_t a = 0, b = 0;
  OK(ebb_owner_open(g, "events", NULL, &o));
  OK(ebb_alloc(o, 96 * MiB, "embed_app.c:kept", &a));
  OK(ebb_alloc(o, 32 * MiB, "embed_app.c:leaked", &b));
  OK(ebb_free(g, a));
  ebb_released r = {.size = sizeof r};
  ebb_leak_list *leaks = NULL;
  OK(ebb_owner_release(o, 0, &leaks, &r));
  ebb_leak_list_free(leaks);
  CHECK_EQ_U64(r.released_bytes, 128 * MiB);
  CHECK_EQ_INT(s.released, 1);
  CHECK_EQ_U64(s.released_bytes, r.released_bytes);
  CHECK_EQ_STR(s.owner, "events");
  CHECK_EQ_STR(s.device, "cuda:0");
  CHECK_EQ_STR(ebb_event_kind_name(EBB_EVENT_RELEASED), "released");
  CHECK_EQ_STR(ebb_event_kind_name((ebb_event_kind)99), "?");
  /* a leak the owner's close reports to nobody (no list asked for) is
   * still a fact: the subscriber sees it with its site */
  OK(ebb_alloc(o, 8 * MiB, "embed_app.c:late", &b));
  ebb_owner_close(o, NULL);
  CHECK_EQ_INT(s.leaks, 1);
  CHECK_EQ_U64(s.leak_bytes, 8 * MiB);
  CHECK_EQ_STR(s.leak_site, "embed_app.c:late");
  ebb_events_unsubscribe(sub);
  ebb_events_unsubscribe(NULL);
  /* gone: a later release is not seen */
  OK(ebb_owner_open(g, "events", NULL, &o));
  OK(ebb_alloc(o, 16 * MiB, "embed_app.c:after", &a));
  OK(ebb_free(g, a));
  OK(ebb_owner_release(o, 0, NULL, &r));
  ebb_owner_close(o, NULL);
  CHECK_EQ_INT(s.released, 1);
}

int main(int argc, char **argv) {
  if (argc > 1)
    scratch = argv[1];
  int rc = ebb_gpu_open("cuda:0", &g);
  if (rc) {
    fprintf(stderr, "ebb_gpu_open(cuda:0): %s\n", ebb_errmsg());
    return 1;
  }
  RUN(test_version);
  RUN(test_owners_and_release);
  RUN(test_events);
  RUN(test_quota);
  RUN(test_park_wake);
  RUN(test_errors);
  RUN(test_default_owner);
  RUN(test_pinned);
  RUN(test_release_hook);
  RUN(test_timeline);
  RUN(test_torch_entry_points);
  RUN(test_streams_and_keep);
  RUN(test_reclaim);
  RUN(test_context_release);
  ebb_gpu_close(g);
  ebb_gpu_close(NULL);
  return TEST_END();
}
