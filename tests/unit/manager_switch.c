/* The manager on a 2048 MiB fake device (context 300 MiB): A and B each
 * take ~1200 MiB, so they never fit together.
 *   - load A, a session on A, load B: A's session is stopped, A unloaded
 *     with the three fixed log lines (free before/after unload, after load)
 *     and the context released in between; no out-of-memory.
 *   - a known need that does not fit (memory held elsewhere) waits, bounded,
 *     then fails with EBB_EOOM naming the numbers, without starting the load;
 *     a wait that sees the memory come back succeeds.
 *   - a job of a loaded pipeline reuses its stages (no reload); unload of
 *     everything leaves 0 reserved and no context.
 *   - a peer's give-back while the device thread does its own housekeeping
 *     (the idle tick, here a 300 ms task) waits for it and gives A back,
 *     instead of saying a job runs when none does. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "pipeline/manager.h"
#include "pipeline/manager_int.h" /* pl__mgr_on_device: the housekeeping stand-in */
#include "pipeline_util.h"

static pl_config *cfg;
static char tmp[1024], input[1100];

/* the X.XX figure of "[pipeline P] GPU memory free WHEN: X.XX GiB" */
static double gib(const char *log, const char *p, const char *when) {
  char key[256];
  snprintf(key, sizeof key, "[pipeline %s] GPU memory free %s: ", p, when);
  const char *s = strstr(log, key);
  return s ? atof(s + strlen(key)) : -1;
}

static pl_manager *manager(double wait_s) {
  pl_manager_opts o = {.size = sizeof o,
                       .dev = dev,
                       .alloc = alloc,
                       .reg = reg,
                       .cfg = cfg,
                       .work_dir = tmp,
                       .load_wait_s = wait_s};
  pl_manager *m = NULL;
  REQUIRE(pl_manager_create(&o, &m) == 0);
  return m;
}

static void test_switch(void) {
  pl_manager *m = manager(1);
  capture();
  char sid[40];
  CHECK_EQ_INT(pl_manager_session_open(m, "A", sid), 0);
  CHECK(pl_manager_is_loaded(m, "A"));
  uint64_t held_a = allocated();
  CHECK_MSG(held_a >= (900ull << 20), "A holds %llu MiB", (unsigned long long)(held_a >> 20));
  pl_job_result res;
  CHECK_EQ_INT(pl_manager_session_item(m, sid, input, tmp, NULL, NULL, NULL, &res), 0);
  CHECK_EQ_U64(allocated(), held_a); /* kept loaded, not reloaded */
  CHECK_EQ_INT(pl_manager_load(m, "B"), 0);
  char *log = captured();
  CHECK(pl_manager_is_loaded(m, "B"));
  CHECK(!pl_manager_is_loaded(m, "A"));
  const char *b4 = strstr(log, "[pipeline A] GPU memory free before unload: ");
  const char *af = strstr(log, "[pipeline A] GPU memory free after unload: ");
  const char *ld = strstr(log, "[pipeline B] GPU memory free after load: ");
  CHECK_MSG(b4 && af && ld && b4 < af && af < ld, "the three lines are missing or out of order");
  CHECK_NEAR(gib(log, "A", "after unload"), 2.00, 0.001);
  CHECK_NEAR(gib(log, "A", "before unload"), 0.77, 0.05);
  CHECK_NEAR(gib(log, "B", "after load"), 0.83, 0.05);
  CHECK(has(log, "[pipeline A] stopped 1 session (drained)"));
  CHECK(!has(log, "out of device memory"));
  free(log);
  /* the session on A is stopped */
  CHECK_EQ_INT(pl_manager_session_item(m, sid, input, tmp, NULL, NULL, NULL, &res), EBB_EBUSY);
  CHECK(has(res.message, "pipeline 'A' was unloaded"));
  CHECK_EQ_INT(pl_manager_session_close(m, sid), 0);
  /* a job of the loaded B reuses its stage: nothing is loaded again */
  capture();
  uint64_t before = allocated();
  CHECK_EQ_INT(pl_manager_run_job(m, "B", input, tmp, NULL, NULL, NULL, &res), 0);
  log = captured();
  CHECK_EQ_U64(allocated(), before);
  CHECK(pl_manager_is_loaded(m, "B"));
  CHECK_MSG(!has(log, "released"), "a job on a loaded pipeline released its stages");
  free(log);
  /* unknown names */
  CHECK_EQ_INT(pl_manager_load(m, "nosuch"), EBB_ENOTFOUND);
  CHECK(has(ebb_errmsg(), "known: "));
  uint64_t rel = 0;
  CHECK_EQ_INT(pl_manager_unload(m, "B", &rel), 0);
  CHECK_MSG(rel >= (1100ull << 20), "unload B released %llu MiB", (unsigned long long)(rel >> 20));
  CHECK_EQ_U64(reserved(), 0);
  CHECK(!dev_ctx_active(dev));
  CHECK_EQ_INT(pl_manager_unload(m, "B", &rel), 0); /* not loaded: nothing to do */
  CHECK_EQ_U64(rel, 0);
  pl_manager_destroy(m);
}

typedef struct {
  pl_manager *m;
  int rc;
  char msg[1024];
} load_arg;
static void *loader(void *p) {
  load_arg *a = p;
  a->rc = pl_manager_load(a->m, "A");
  snprintf(a->msg, sizeof a->msg, "%s", a->rc ? ebb_errmsg() : "");
  return NULL;
}

static void test_wait_or_fail(void) {
  pl_manager *m = manager(0.5);
  REQUIRE(pl_manager_load(m, "A") == 0); /* measures A's need */
  REQUIRE(pl_manager_unload(m, "A", NULL) == 0);
  /* something else takes 1000 MiB: A's ~1264 MiB cannot fit in ~748 */
  ebb_owner *other = NULL;
  uint64_t blk = 0;
  REQUIRE(mem_owner_create(alloc, "someone else", NULL, &other) == 0);
  REQUIRE(mem_alloc(other, 1000u << 20, "test", &blk) == 0);
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(alloc, &st);
  uint64_t seg_allocs = st.seg_allocs;
  capture();
  int rc = pl_manager_load(m, "A");
  char *log = captured();
  CHECK_EQ_INT(rc, EBB_EOOM);
  CHECK_MSG(has(ebb_errmsg(), "needs about") && has(ebb_errmsg(), "MiB free"), "message: %s",
            ebb_errmsg());
  mem_allocator_get_stats(alloc, &st);
  CHECK_MSG(st.seg_allocs == seg_allocs, "a load predicted not to fit was started");
  CHECK(!has(log, "after load"));
  CHECK(!pl_manager_is_loaded(m, "A"));
  free(log);
  pl_manager_destroy(m);

  /* the same with a longer wait: the memory comes back after 300 ms */
  REQUIRE(mem_free(alloc, blk) == 0);
  mem_allocator_trim(alloc, NULL);
  /* the memory comes back after 300 ms and the load goes on at once; the
   * budget only has to outlast freeing 1000 MiB, which under ASan on a busy
   * machine took over 5 s */
  m = manager(30);
  REQUIRE(pl_manager_load(m, "A") == 0);
  REQUIRE(pl_manager_unload(m, "A", NULL) == 0);
  REQUIRE(mem_alloc(other, 1000u << 20, "test", &blk) == 0);
  load_arg a = {m, 1, ""};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, loader, &a) == 0);
  struct timespec ts = {0, 300 * 1000000L};
  nanosleep(&ts, NULL);
  CHECK_MSG(!pl_manager_is_loaded(m, "A"), "A was loaded while the memory was held elsewhere");
  REQUIRE(mem_free(alloc, blk) == 0);
  mem_owner_destroy(other, NULL);
  mem_allocator_trim(alloc, NULL);
  pthread_join(th, NULL);
  CHECK_MSG(a.rc == 0, "the load failed (%d) after the memory came back: %s", a.rc, a.msg);
  CHECK(pl_manager_is_loaded(m, "A"));
  pl_manager_destroy(m); /* unloads A, releases the context */
  CHECK_EQ_U64(reserved(), 0);
  CHECK(!dev_ctx_active(dev));
}

/* unload finds what a stage leaked, reports it and frees it: owners end at 0 */
static void test_unload_reports_leaks(void) {
  pl_manager *m = manager(1);
  char sid[40];
  REQUIRE(pl_manager_session_open(m, "L", sid) == 0);
  pl_job_result res;
  CHECK_EQ_INT(pl_manager_session_item(m, sid, input, tmp, NULL, NULL, NULL, &res), 0);
  capture();
  uint64_t rel = 0;
  CHECK_EQ_INT(pl_manager_unload(m, "L", &rel), 0);
  char *log = captured();
  CHECK_MSG(has(log, "[l1] leaked 16 MiB in 1 blocks; freed by ebb"), "no leak report");
  CHECK(has(log, "[pipeline L] GPU memory free after unload: 2.00 GiB"));
  CHECK_EQ_U64(reserved(), 0);
  CHECK(!dev_ctx_active(dev));
  CHECK_EQ_INT(pl_manager_session_close(m, sid), 0);
  free(log);
  pl_manager_destroy(m);
}

static int housekeeping(void *arg) {
  (void)arg;
  struct timespec ts = {0, 300 * 1000000L};
  nanosleep(&ts, NULL);
  return 0;
}

static void *occupy(void *arg) {
  pl__mgr_on_device(arg, housekeeping, NULL);
  return NULL;
}

static void test_give_back_past_housekeeping(void) {
  pl_manager *m = manager(1);
  CHECK_EQ_INT(pl_manager_load(m, "A"), 0);
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, occupy, m) == 0);
  struct timespec ts = {0, 50 * 1000000L};
  nanosleep(&ts, NULL); /* the device thread is in the task now */
  pl_giveback g;
  CHECK_EQ_INT(pl_manager_give_back(m, 800ull << 20, 0, &g), 0);
  pthread_join(th, NULL);
  for (size_t i = 0; i < g.nkept; i++)
    CHECK_MSG(strcmp(g.kept[i].what, "device") != 0, "kept the device: %s", g.kept[i].why);
  CHECK_MSG(!pl_manager_is_loaded(m, "A"), "A was not given back: %s", g.reason);
  CHECK_MSG(g.given >= (800ull << 20), "gave %llu MiB", (unsigned long long)(g.given >> 20));
  pl_manager_destroy(m);
}

int main(void) {
  const char *t = getenv("EBB_TEST_TMP");
  REQUIRE(t);
  snprintf(tmp, sizeof tmp, "%s", t);
  mkdir(tmp, 0755);
  snprintf(input, sizeof input, "%s/input.txt", tmp);
  pt_write(input, "any input\n");
  setenv("FAKEGPU_CONTEXT_MIB", "300", 1);
  remove(getenv("FAKEGPU_STATE") ? getenv("FAKEGPU_STATE") : "/nonexistent");
  unsetenv("EBB_STAGE_HOOK");
  pt_open("cuda", "2048");
  REQUIRE(pl_config_load_string(
              "{\"pipelines\": {"
              "\"A\": {\"stages\": [{\"stage\": \"synthetic\", \"name\": \"a1\", \"cache\": false,"
              " \"options\": {\"weights_mib\": 600}}, {\"stage\": \"synthetic\", \"name\": \"a2\","
              " \"cache\": false, \"options\": {\"weights_mib\": 300}}]},"
              "\"B\": {\"stages\": [{\"stage\": \"synthetic\", \"name\": \"b1\", \"cache\": false,"
              " \"options\": {\"weights_mib\": 900}}]},"
              "\"L\": {\"stages\": [{\"stage\": \"synthetic\", \"name\": \"l1\", \"cache\": false,"
              " \"options\": {\"weights_mib\": 32, \"leak_mib\": 16}}]}}}",
              "test.json", &cfg) == 0);
  RUN(test_switch);
  RUN(test_wait_or_fail);
  RUN(test_unload_reports_leaks);
  RUN(test_give_back_past_housekeeping);
  pl_config_free(cfg);
  pt_close();
  return TEST_END();
}
