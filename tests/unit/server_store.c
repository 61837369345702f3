/* The job store (SQLite): insert / running / finish / get / counts / queued;
 * a reopened store keeps the history, marks jobs left running as failed
 * ("server restarted") and keeps queued ones queued; ids keep growing;
 * public ids and owners, requeue, retention by count and age;
 * errors name the path. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include <sys/stat.h>

#include "server/store.h"
#include "test.h"

static char db[1200];

static const char *sget(json_t *o, const char *k) {
  return json_string_value(json_object_get(o, k));
}

static void test_lifecycle_and_restart(void) {
  srv_store *s = NULL;
  int interrupted = -1;
  REQUIRE(srv_store_open(db, &s, &interrupted) == 0);
  CHECK_EQ_INT(interrupted, 0);
  int64_t a = 0, b = 0, c = 0;
  CHECK_EQ_INT(srv_store_insert(s, "uid-a", "", "syn", "/in/a", "{\"x\":{\"run_ms\":5}}", &a), 0);
  CHECK_EQ_INT(srv_store_insert(s, "uid-b", "t1", "syn", "/in/b", NULL, &b), 0);
  CHECK_EQ_INT(srv_store_insert(s, "uid-c", "", "songtrace", NULL, NULL, &c), 0);
  CHECK(a > 0 && b > a && c > b);
  CHECK_EQ_INT(srv_store_set_input(s, c, "/data/jobs/3/input-x.wav", "/data/jobs/3/out"), 0);
  CHECK_EQ_INT(srv_store_set_running(s, a), 0);
  CHECK_EQ_INT(srv_store_finish(s, a, EBB_JOB_SUCCEEDED, NULL, NULL, "{\"files\":[\"f\"]}",
                                123456789, "[{\"name\":\"x\",\"released_bytes\":7}]"),
               0);
  CHECK_EQ_INT(srv_store_set_running(s, b), 0);

  json_t *o = NULL;
  REQUIRE(srv_store_get(s, a, &o) == 0);
  CHECK_EQ_STR(sget(o, "state"), "succeeded");
  CHECK_EQ_STR(sget(o, "pipeline"), "syn");
  CHECK_EQ_STR(sget(o, "input"), "/in/a");
  CHECK_EQ_INT(json_integer_value(
                   json_object_get(json_object_get(json_object_get(o, "options"), "x"), "run_ms")),
               5);
  CHECK_EQ_U64(json_integer_value(json_object_get(o, "released_bytes")), 123456789);
  CHECK(json_is_null(json_object_get(o, "error")));
  CHECK(json_is_number(json_object_get(o, "started")) &&
        json_is_number(json_object_get(o, "finished")));
  CHECK_EQ_STR(json_string_value(
                   json_array_get(json_object_get(json_object_get(o, "result"), "files"), 0)),
               "f");
  CHECK_EQ_INT(json_integer_value(json_object_get(json_array_get(json_object_get(o, "stages"), 0),
                                                  "released_bytes")),
               7);
  json_decref(o);
  REQUIRE(srv_store_get(s, c, &o) == 0);
  CHECK_EQ_STR(sget(o, "output_dir"), "/data/jobs/3/out");
  CHECK_EQ_STR(sget(o, "state"), "queued");
  CHECK(json_is_array(json_object_get(o, "stages")));
  json_decref(o);

  uint64_t n[EBB_JOB_NSTATES];
  CHECK_EQ_INT(srv_store_counts(s, n), 0);
  CHECK_EQ_U64(n[EBB_JOB_SUCCEEDED], 1);
  CHECK_EQ_U64(n[EBB_JOB_RUNNING], 1);
  CHECK_EQ_U64(n[EBB_JOB_QUEUED], 1);
  CHECK_EQ_INT(srv_store_get(s, 999, &o), EBB_ENOTFOUND);
  srv_job_state st;
  CHECK_EQ_INT(srv_store_state(s, 999, &st), EBB_ENOTFOUND);
  srv_store_close(s);

  /* restart: b was running */
  REQUIRE(srv_store_open(db, &s, &interrupted) == 0);
  CHECK_EQ_INT(interrupted, 1);
  CHECK_EQ_INT(srv_store_state(s, b, &st), 0);
  CHECK_EQ_INT(st, EBB_JOB_FAILED);
  REQUIRE(srv_store_get(s, b, &o) == 0);
  const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
  CHECK_MSG(msg && strstr(msg, "server restarted"), "restart message: %s", msg ? msg : "(none)");
  json_decref(o);
  CHECK_EQ_INT(srv_store_state(s, a, &st), 0);
  CHECK_EQ_INT(st, EBB_JOB_SUCCEEDED);
  int64_t *ids = NULL;
  size_t nq = 0;
  CHECK_EQ_INT(srv_store_queued(s, &ids, &nq), 0);
  CHECK_EQ_INT(nq, 1);
  CHECK(nq == 1 && ids[0] == c);
  free(ids);
  int64_t d = 0;
  CHECK_EQ_INT(srv_store_insert(s, "uid-d", "", "syn", "/in/d", NULL, &d), 0);
  CHECK(d > c);
  CHECK_EQ_INT(srv_store_finish(s, d, EBB_JOB_FAILED, "EBB_ESTAGE", "stage 'x' failed", NULL, 0,
                                "[]"),
               0);
  REQUIRE(srv_store_get(s, d, &o) == 0);
  CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(o, "error"), "code")),
               "EBB_ESTAGE");
  json_decref(o);
  srv_store_close(s);
  srv_store_close(NULL);
}

/* public ids and owners, requeue, retention by count and by age */
static int pruned;
static void on_prune(void *arg, int64_t id, const char *dir) {
  (void)arg;
  (void)id;
  (void)dir;
  pruned++;
}

static void test_ids_requeue_prune(void) {
  char p[1300];
  snprintf(p, sizeof p, "%s.ids", db);
  remove(p);
  srv_store *s = NULL;
  REQUIRE(srv_store_open(p, &s, NULL) == 0);
  int64_t ids[6] = {0}, id = 0;
  char uid[16], owner[32];
  for (int i = 0; i < 6; i++) {
    snprintf(uid, sizeof uid, "u%d", i);
    CHECK_EQ_INT(srv_store_insert(s, uid, i % 2 ? "tok" : "", "syn", "/in", NULL, &ids[i]), 0);
  }
  CHECK_EQ_INT(srv_store_find(s, "u3", &id, owner, sizeof owner), 0);
  CHECK(id == ids[3]);
  CHECK_EQ_STR(owner, "tok");
  CHECK_EQ_INT(srv_store_find(s, "3", &id, owner, sizeof owner), EBB_ENOTFOUND);
  json_t *o = NULL;
  REQUIRE(srv_store_get(s, ids[3], &o) == 0);
  CHECK_EQ_STR(sget(o, "id"), "u3");
  CHECK(!json_object_get(o, "owner")); /* never shown */
  json_decref(o);
  /* a job stopped by the server goes back to queued */
  CHECK_EQ_INT(srv_store_set_running(s, ids[5]), 0);
  CHECK_EQ_INT(srv_store_requeue(s, ids[5]), 0);
  srv_job_state st;
  CHECK_EQ_INT(srv_store_state(s, ids[5], &st), 0);
  CHECK_EQ_INT(st, EBB_JOB_QUEUED);
  for (int i = 0; i < 5; i++)
    srv_store_finish(s, ids[i], EBB_JOB_SUCCEEDED, NULL, NULL, NULL, 0, "[]");
  /* keep the newest 2 finished: 0, 1, 2 go; the queued one stays */
  pruned = 0;
  CHECK_EQ_INT(srv_store_prune(s, 2, 0, on_prune, NULL), 3);
  CHECK_EQ_INT(pruned, 3);
  CHECK_EQ_INT(srv_store_state(s, ids[2], &st), EBB_ENOTFOUND);
  CHECK_EQ_INT(srv_store_state(s, ids[3], &st), 0);
  CHECK_EQ_INT(srv_store_state(s, ids[5], &st), 0);
  CHECK_EQ_INT(srv_store_prune(s, 2, 0, NULL, NULL), 0);
  /* by age: finished more than an hour ago: none; 1 ms: both */
  CHECK_EQ_INT(srv_store_prune(s, 0, 3600, NULL, NULL), 0);
  struct timespec ts = {0, 5 * 1000000L};
  nanosleep(&ts, NULL);
  CHECK_EQ_INT(srv_store_prune(s, 0, 0.001, NULL, NULL), 2);
  CHECK_EQ_INT(srv_store_state(s, ids[5], &st), 0);
  srv_store_close(s);
}

static void test_bad_path(void) {
  srv_store *s = NULL;
  char p[1300];
  snprintf(p, sizeof p, "%s.missing-dir/jobs.db", db);
  int rc = srv_store_open(p, &s, NULL);
  CHECK_EQ_INT(rc, EBB_EIO);
  CHECK_MSG(strstr(ebb_errmsg(), p) != NULL, "message does not name the path: %s", ebb_errmsg());
  CHECK(s == NULL);
}

static void test_state_names(void) {
  CHECK_EQ_STR(srv_job_state_name(EBB_JOB_QUEUED), "queued");
  CHECK_EQ_STR(srv_job_state_name(EBB_JOB_CANCELLED), "cancelled");
  CHECK_EQ_STR(srv_job_state_name(EBB_JOB_NSTATES), "unknown");
}

int main(void) {
  const char *t = getenv("EBB_TEST_TMP");
  REQUIRE(t);
  mkdir(t, 0755);
  snprintf(db, sizeof db, "%s/jobs.db", t);
  remove(db);
  char w[1300];
  snprintf(w, sizeof w, "%s-wal", db);
  remove(w);
  RUN(test_lifecycle_and_restart);
  RUN(test_ids_requeue_prune);
  RUN(test_bad_path);
  RUN(test_state_names);
  return TEST_END();
}
