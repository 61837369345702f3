/* The session table: counted leases per pipeline, one item at a time per
 * session, stopping a pipeline's sessions waits for their items in flight
 * (drain) and then refuses new items naming why, close waits too. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "pipeline/sessions.h"
#include "test.h"

static pl_sessions *s;
static char sa1[40], sa2[40], sb[40];
static atomic_int stop_done;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static void test_leases(void) {
  REQUIRE(pl_sessions_open(s, "A", sa1) == 0);
  REQUIRE(pl_sessions_open(s, "A", sa2) == 0);
  REQUIRE(pl_sessions_open(s, "B", sb) == 0);
  CHECK(strcmp(sa1, sa2) != 0);
  CHECK_EQ_INT(pl_sessions_leases(s, "A"), 2);
  CHECK_EQ_INT(pl_sessions_leases(s, "B"), 1);
  CHECK_EQ_INT(pl_sessions_leases(s, "C"), 0);
  CHECK_EQ_INT(pl_sessions_leases(s, NULL), 3);
  pl_session_info si;
  CHECK_EQ_INT(pl_sessions_info(s, sb, &si), 0);
  CHECK_EQ_STR(si.pipeline, "B");
  CHECK_EQ_INT(si.state, EBB_SESSION_OPEN);
  CHECK_EQ_INT(pl_sessions_info(s, "nope", &si), EBB_ENOTFOUND);
}

static void test_one_item_at_a_time(void) {
  char p[128];
  CHECK_EQ_INT(pl_sessions_item_begin(s, sa1, p), 0);
  CHECK_EQ_STR(p, "A");
  CHECK_EQ_INT(pl_sessions_item_begin(s, sa1, p), EBB_EBUSY);
  CHECK_MSG(strstr(ebb_errmsg(), "already running"), "message: %s", ebb_errmsg());
  pl_sessions_item_end(s, sa1, 0);
  CHECK_EQ_INT(pl_sessions_item_begin(s, sa1, p), 0);
  pl_sessions_item_end(s, sa1, 1);
  pl_session_info si;
  pl_sessions_info(s, sa1, &si);
  CHECK_EQ_U64(si.items_done, 1);
  CHECK_EQ_U64(si.items_failed, 1);
  CHECK_EQ_INT(pl_sessions_item_begin(s, "nope", p), EBB_ENOTFOUND);
}

static void *stopper(void *arg) {
  (void)arg;
  int n = -1;
  pl_sessions_stop_pipeline(s, "A", "pipeline 'A' was unloaded", &n);
  atomic_store(&stop_done, n + 1);
  return NULL;
}

static void test_stop_drains(void) {
  char p[128];
  REQUIRE(pl_sessions_item_begin(s, sa2, p) == 0); /* an item in flight on A */
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, stopper, NULL) == 0);
  sleep_ms(200);
  CHECK_MSG(atomic_load(&stop_done) == 0, "stop returned while an item was in flight");
  /* stopped already: no new item on A, B unaffected */
  CHECK_EQ_INT(pl_sessions_item_begin(s, sa1, p), EBB_EBUSY);
  CHECK_MSG(strstr(ebb_errmsg(), "pipeline 'A' was unloaded"), "message: %s", ebb_errmsg());
  CHECK_EQ_INT(pl_sessions_leases(s, "A"), 0);
  CHECK_EQ_INT(pl_sessions_item_begin(s, sb, p), 0);
  pl_sessions_item_end(s, sb, 0);
  pl_sessions_item_end(s, sa2, 0); /* the drain ends */
  pthread_join(th, NULL);
  CHECK_EQ_INT(atomic_load(&stop_done), 2 + 1); /* two sessions stopped */
  pl_session_info si;
  CHECK_EQ_INT(pl_sessions_info(s, sa2, &si), 0);
  CHECK_EQ_INT(si.state, EBB_SESSION_STOPPED);
  CHECK_EQ_U64(si.items_done, 1);
}

static void test_close(void) {
  CHECK_EQ_INT(pl_sessions_close(s, sa1), 0);
  CHECK_EQ_INT(pl_sessions_close(s, sa1), EBB_ENOTFOUND);
  CHECK_EQ_INT(pl_sessions_close(s, sa2), 0);
  CHECK_EQ_INT(pl_sessions_leases(s, "B"), 1);
  pl_sessions_stop_all(s, "shutting down");
  CHECK_EQ_INT(pl_sessions_leases(s, NULL), 0);
  CHECK_EQ_INT(pl_sessions_close(s, sb), 0);
}

int main(void) {
  REQUIRE(pl_sessions_create(&s) == 0);
  RUN(test_leases);
  RUN(test_one_item_at_a_time);
  RUN(test_stop_drains);
  RUN(test_close);
  pl_sessions_destroy(s);
  pl_sessions_destroy(NULL);
  return TEST_END();
}
