/* Worker processes from the host side, with plain shell commands for
 * workers: a worker that exits, crashes, hangs or cannot be started is
 * reported with its pid and what happened, and is always reaped (no
 * zombie, no process left); a clean one that says hello and exits on EOF
 * ends with status 0. The worker gets the socket as fd 3 and its
 * EBB_WORKER_* environment. */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "worker/proc.h"
#include "worker/wire.h"

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static wrk_wproc *sh(const char *script) {
  const char *args[] = {"-c", script};
  wrk_wproc *w = NULL;
  REQUIRE(wrk_wproc_spawn("/bin/sh", args, 2, "sh", &w) == 0 && w);
  return w;
}

static int gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

static json_t *hello(void) { return json_pack("{s:s, s:i}", "type", "hello", "protocol", 1); }

static void test_exit_early(void) {
  wrk_wproc *w = sh("exit 3");
  pid_t pid = wrk_wproc_pid(w);
  json_t *m = hello(), *r = NULL;
  int rc = wrk_wproc_call(w, m, now() + 5, NULL, &r);
  CHECK_EQ_INT(rc, EBB_ESTAGE);
  char want[64];
  snprintf(want, sizeof want, "worker pid %ld (sh) exited with status 3", (long)pid);
  CHECK_MSG(has(ebb_errmsg(), want), "message '%s' lacks '%s'", ebb_errmsg(), want);
  CHECK(!wrk_wproc_alive(w));
  CHECK(gone(pid));
  CHECK(wrk_wproc_stop(w, 0, NULL) != 0);
  json_decref(m);
}

static void test_crash(void) {
  wrk_wproc *w = sh("kill -SEGV $$");
  pid_t pid = wrk_wproc_pid(w);
  json_t *m = hello(), *r = NULL;
  CHECK_EQ_INT(wrk_wproc_call(w, m, now() + 5, NULL, &r), EBB_ESTAGE);
  CHECK_MSG(has(ebb_errmsg(), "was killed by signal SIGSEGV"), "got '%s'", ebb_errmsg());
  CHECK(gone(pid));
  wrk_wproc_stop(w, 0, NULL);
  json_decref(m);
}

static void test_hang(void) {
  wrk_wproc *w = sh("exec sleep 30");
  pid_t pid = wrk_wproc_pid(w);
  json_t *m = hello(), *r = NULL;
  double t0 = now();
  CHECK_EQ_INT(wrk_wproc_call(w, m, now() + 0.3, NULL, &r), EBB_ETIMEDOUT);
  CHECK(now() - t0 < 3);
  CHECK_MSG(has(ebb_errmsg(), "did not answer hello in time (timeout); killed"), "got '%s'",
            ebb_errmsg());
  CHECK(gone(pid));
  wrk_wproc_stop(w, 0, NULL);
  json_decref(m);
}

static void test_cancel(void) {
  wrk_wproc *w = sh("exec sleep 30");
  pid_t pid = wrk_wproc_pid(w);
  json_t *m = hello(), *r = NULL;
  atomic_int cancel = 1;
  CHECK_EQ_INT(wrk_wproc_call(w, m, now() + 10, &cancel, &r), EBB_ECANCELED);
  CHECK(has(ebb_errmsg(), "cancelled"));
  CHECK(gone(pid));
  wrk_wproc_stop(w, 0, NULL);
  json_decref(m);
}

static void test_garbage(void) {
  /* answers hello with a length of 5 and "hello" */
  wrk_wproc *w = sh("printf '\\005\\000\\000\\000hello' >&3; exec sleep 30");
  pid_t pid = wrk_wproc_pid(w);
  json_t *m = hello(), *r = NULL;
  CHECK_EQ_INT(wrk_wproc_call(w, m, now() + 5, NULL, &r), EBB_EPROTO);
  CHECK_MSG(has(ebb_errmsg(), "protocol error during hello: invalid JSON"), "got '%s'",
            ebb_errmsg());
  CHECK(gone(pid));
  wrk_wproc_stop(w, 0, NULL);
  json_decref(m);
}

static void test_env_and_clean_exit(void) {
  /* a "worker" that checks its environment and fd 3, answers with a frame
   * built by the shell, and exits 0 when it reads EOF */
  char script[512];
  snprintf(script, sizeof script,
           "[ \"$EBB_WORKER_FD\" = 3 ] && [ \"$EBB_WORKER_PARENT\" = %ld ] && [ -S /dev/fd/3 ] "
           "|| exit 9; printf '\\016\\000\\000\\000{\"type\":\"bye\"}' >&3; cat <&3 >/dev/null; "
           "exit 0",
           (long)getpid());
  wrk_wproc *w = sh(script);
  json_t *m = json_pack("{s:s}", "type", "exit"), *r = NULL;
  int rc = wrk_wproc_call(w, m, now() + 5, NULL, &r);
  CHECK_MSG(rc == 0, "call: %s", ebb_errmsg());
  CHECK(r && !strcmp(json_string_value(json_object_get(r, "type")), "bye"));
  json_decref(r);
  json_decref(m);
  char how[256];
  CHECK_EQ_INT(wrk_wproc_stop(w, 5, how), 0);
  CHECK_EQ_STR(how, "exited with status 0");
}

static void test_no_such_program(void) {
  wrk_wproc *w = NULL;
  CHECK(wrk_wproc_spawn("/no/such/worker", NULL, 0, NULL, &w) != 0);
  CHECK(w == NULL);
  CHECK(has(ebb_errmsg(), "cannot start worker /no/such/worker"));
  CHECK_EQ_INT(wrk_wproc_stop(NULL, 0, NULL), 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  RUN(test_exit_early);
  RUN(test_crash);
  RUN(test_hang);
  RUN(test_cancel);
  RUN(test_garbage);
  RUN(test_env_and_clean_exit);
  RUN(test_no_such_program);
  /* nothing left behind: no child of ours remains */
  CHECK(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD);
  return TEST_END();
}
