/* The broker room on its own (docs/broker.md): the codec round-trips every
 * field and refuses another version, malformed lines and oversize ones,
 * naming what was wrong; a peer answers info and reclaim through its give
 * callback; the asker skips a silent peer within the timeout, removes the
 * entry of a dead one (pid gone, or socket refusing), and a reclaim asks
 * the most idle peer first and stops once enough was given. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "broker/broker.h"
#include "ebb/error.h"
#include "test.h"

static char dir[512];

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void test_codec_roundtrip(void) {
  char buf[BRK_MAX_LINE + 2];
  brk_request r = {.op = BRK_OP_RECLAIM, .bytes = 6442450944ull, .asker = 4121}, d;
  snprintf(r.device, sizeof r.device, "GPU-1234");
  int n = brk_encode_request(&r, buf, sizeof buf);
  CHECK(n > 0 && buf[n - 1] == '\n');
  CHECK_EQ_INT(brk_decode_request(buf, &d), 0);
  CHECK_EQ_INT(d.op, BRK_OP_RECLAIM);
  CHECK_EQ_U64(d.bytes, 6442450944ull);
  CHECK_EQ_INT(d.asker, 4121);
  CHECK(!strcmp(d.device, "GPU-1234"));

  brk_answer a = {.pid = 77, .given_bytes = 3ull << 30, .ms = 38, .nkept = 1}, b;
  snprintf(a.what, sizeof a.what, "ebb serve");
  snprintf(a.device, sizeof a.device, "GPU-1234");
  snprintf(a.label, sizeof a.label, "cuda:0");
  snprintf(a.reason, sizeof a.reason, "pipeline P asleep");
  snprintf(a.kept[0].what, sizeof a.kept[0].what, "pipeline K");
  a.kept[0].bytes = 1 << 30;
  snprintf(a.kept[0].why, sizeof a.kept[0].why, "\"evictable\": false");
  CHECK(brk_encode_answer(BRK_OP_RECLAIM, &a, buf, sizeof buf) > 0);
  CHECK_EQ_INT(brk_decode_answer(BRK_OP_RECLAIM, buf, &b), 0);
  CHECK_EQ_INT(b.pid, 77);
  CHECK_EQ_U64(b.given_bytes, 3ull << 30);
  CHECK(!strcmp(b.label, "cuda:0") && !strcmp(b.reason, "pipeline P asleep"));
  CHECK_EQ_INT(b.nkept, 1);
  CHECK(!strcmp(b.kept[0].why, "\"evictable\": false") && b.kept[0].bytes == 1u << 30);

  brk_answer i = {.pid = 5, .ndevices = 1}, j;
  snprintf(i.devices[0].uuid, sizeof i.devices[0].uuid, "GPU-1");
  i.devices[0].idle_s = 12.5;
  i.devices[0].held_bytes = 99;
  CHECK(brk_encode_answer(BRK_OP_INFO, &i, buf, sizeof buf) > 0);
  CHECK_EQ_INT(brk_decode_answer(BRK_OP_INFO, buf, &j), 0);
  CHECK_EQ_INT(j.ndevices, 1);
  CHECK(j.devices[0].idle_s == 12.5 && j.devices[0].held_bytes == 99);
}

static void expect_proto(const char *line, const char *needle) {
  brk_request r;
  int rc = brk_decode_request(line, &r);
  CHECK_MSG(rc == EBB_EPROTO && strstr(ebb_errmsg(), needle),
            "decoding %s: rc %d, message '%s', expected one naming '%s'", line, rc, ebb_errmsg(),
            needle);
}

static void test_codec_refuses(void) {
  expect_proto("{\"v\":2,\"op\":\"info\"}\n", "version 2, this side speaks 1");
  expect_proto("{\"op\":\"info\"}", "version -1");
  expect_proto("[1,2]", "not a JSON object");
  expect_proto("{\"v\":1,\"op\":\"take\"}", "\"op\" must be");
  expect_proto("{\"v\":1,\"op\":\"reclaim\",\"bytes\":5}", "\"device\"");
  expect_proto("{\"v\":1,\"op\":\"reclaim\",\"device\":\"G\",\"bytes\":-5}", "\"bytes\"");
  expect_proto("{\"v\":1,\"op\":\"reclaim\",\"device\":\"G\",\"bytes\":\"5\"}", "\"bytes\"");
  char *big = malloc(BRK_MAX_LINE + 10);
  REQUIRE(big);
  memset(big, ' ', BRK_MAX_LINE + 9);
  big[BRK_MAX_LINE + 9] = '\0';
  expect_proto(big, "limit");
  free(big);
  brk_request r = {.op = BRK_OP_RECLAIM};
  char small[16];
  CHECK_EQ_INT(brk_encode_request(&r, small, sizeof small), EBB_EINVAL);
}

/* A giver: info on one device; reclaim gives min(asked, have). */
typedef struct fake_giver {
  uint64_t have;
  double idle;
  int calls;
} fake_giver;

static int fake_give(void *arg, const brk_request *req, brk_answer *a) {
  fake_giver *g = arg;
  g->calls++;
  if (req->op == BRK_OP_INFO) {
    a->ndevices = 1;
    snprintf(a->devices[0].uuid, sizeof a->devices[0].uuid, "GPU-T");
    a->devices[0].idle_s = g->idle;
    return 0;
  }
  if (strcmp(req->device, "GPU-T"))
    return ebb_seterr(EBB_ENOTFOUND, "not on %s", req->device);
  uint64_t give = req->bytes < g->have ? req->bytes : g->have;
  g->have -= give;
  a->given_bytes = give;
  snprintf(a->device, sizeof a->device, "%s", req->device);
  snprintf(a->reason, sizeof a->reason, "test gave %llu", (unsigned long long)give);
  return 0;
}

static void test_peer_answers(void) {
  fake_giver g = {.have = 100, .idle = 1};
  brk_peer *p;
  brk_peer_opts o = {.size = sizeof o, .dir = dir, .what = "test", .group = (gid_t)-1,
                     .give = fake_give, .give_arg = &g};
  REQUIRE(brk_peer_start(&o, &p) == 0);
  char path[600];
  struct stat st;
  brk_sock_path(dir, getpid(), path, sizeof path);
  CHECK(stat(path, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 077) == 0);
  brk_request r = {.op = BRK_OP_RECLAIM, .bytes = 30};
  snprintf(r.device, sizeof r.device, "GPU-T");
  brk_answer a;
  CHECK_EQ_INT(brk_ask(dir, getpid(), &r, 2, &a), 0);
  CHECK_EQ_U64(a.given_bytes, 30);
  CHECK(!strcmp(a.what, "test") && a.pid == getpid());
  snprintf(r.device, sizeof r.device, "GPU-X");
  int rc = brk_ask(dir, getpid(), &r, 2, &a);
  CHECK_MSG(rc == EBB_EPROTO && strstr(ebb_errmsg(), "not on GPU-X"),
            "the giver's error comes back: rc %d '%s'", rc, ebb_errmsg());
  brk_peer_stats s;
  brk_peer_stats_get(p, &s);
  CHECK_EQ_U64(s.requests, 2);
  CHECK_EQ_U64(s.given_bytes, 30);
  brk_peer_stop(p);
  CHECK(stat(path, &st) != 0); /* its entry goes with it */
}

static void *kill_later(void *arg) {
  struct timespec ts = {0, 200 * 1000 * 1000};
  nanosleep(&ts, NULL);
  kill(*(pid_t *)arg, SIGKILL);
  return NULL;
}

/* A child that binds PID.sock, accepts and never answers (a peer stuck
 * mid-request); then SIGKILLed: its socket refuses and the entry goes. */
static void test_silent_then_dead(void) {
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  pid_t c = fork();
  REQUIRE(c >= 0);
  if (c == 0) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    brk_sock_path(dir, getpid(), sa.sun_path, sizeof sa.sun_path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 4))
      _exit(1);
    if (write(ready[1], "r", 1) != 1)
      _exit(1);
    for (int i = 0; i < 600; i++) { /* bounded: a minute at most */
      int a = accept(fd, NULL, NULL);
      (void)a;
      sleep(1);
    }
    _exit(0);
  }
  char x;
  REQUIRE(read(ready[0], &x, 1) == 1);
  brk_request r = {.op = BRK_OP_INFO};
  brk_answer a;
  double t0 = now_s();
  int rc = brk_ask(dir, c, &r, 0.3, &a);
  double took = now_s() - t0;
  CHECK_MSG(rc == EBB_ETIMEDOUT && strstr(ebb_errmsg(), "did not answer within 0.3 s"),
            "a silent peer: rc %d '%s'", rc, ebb_errmsg());
  CHECK_MSG(took < 1.0, "a silent peer held the asker %.2f s with a 0.3 s timeout", took);
  /* SIGKILLed mid-request: the asker, waiting up to 5 s, hears the socket
   * close at once; once the pid is gone its socket refuses and the entry goes */
  pthread_t killer;
  REQUIRE(pthread_create(&killer, NULL, kill_later, &c) == 0);
  t0 = now_s();
  rc = brk_ask(dir, c, &r, 5, &a);
  took = now_s() - t0;
  pthread_join(killer, NULL);
  CHECK_MSG(rc == EBB_EIO && strstr(ebb_errmsg(), "closed without a whole answer"),
            "a peer killed mid-request: rc %d '%s'", rc, ebb_errmsg());
  CHECK_MSG(took < 2.0, "a peer killed mid-request held the asker %.2f s", took);
  waitpid(c, NULL, 0);
  char path[600];
  brk_sock_path(dir, c, path, sizeof path);
  rc = brk_ask(dir, c, &r, 0.3, &a);
  CHECK_MSG(rc == EBB_EIO && strstr(ebb_errmsg(), "refuses"), "a dead peer: rc %d '%s'", rc,
            ebb_errmsg());
  CHECK_MSG(access(path, F_OK) != 0, "the dead peer's entry %s is still there", path);
  waitpid(c, NULL, 0);
  /* a socket file of a pid that is gone is removed by the listing */
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  brk_sock_path(dir, c, sa.sun_path, sizeof sa.sun_path);
  CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
  close(fd);
  pid_t pids[8];
  size_t n;
  CHECK_EQ_INT(brk_dir_peers(dir, pids, 8, &n), 0);
  CHECK_EQ_INT(n, 0);
  CHECK_MSG(access(sa.sun_path, F_OK) != 0, "a dead pid's entry survived the listing");
  close(ready[0]);
  close(ready[1]);
}

/* Two peers in children; the more idle one is asked first and the second
 * only for what is still missing. */
static pid_t spawn_giver(uint64_t have, double idle) {
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  pid_t c = fork();
  REQUIRE(c >= 0);
  if (c == 0) {
    static fake_giver g;
    g = (fake_giver){.have = have, .idle = idle};
    brk_peer *p;
    brk_peer_opts o = {.size = sizeof o, .dir = dir, .what = "child", .group = (gid_t)-1,
                       .give = fake_give, .give_arg = &g};
    if (brk_peer_start(&o, &p) != 0 || write(ready[1], "r", 1) != 1)
      _exit(1);
    sleep(30); /* killed by the test */
    _exit(0);
  }
  char x;
  REQUIRE(read(ready[0], &x, 1) == 1);
  close(ready[0]);
  close(ready[1]);
  return c;
}

static void test_reclaim_order(void) {
  pid_t busy = spawn_giver(1000, 1.0), idle = spawn_giver(60, 50.0);
  brk_reclaim_opts o = {.size = sizeof o, .dir = dir, .uuid = "GPU-T", .bytes = 100,
                        .timeout_s = 2};
  brk_reclaim_result r;
  CHECK_EQ_INT(brk_reclaim(&o, &r), 0);
  CHECK_EQ_INT(r.npeers, 2);
  CHECK(r.satisfied);
  CHECK_EQ_U64(r.given_bytes, 100);
  if (r.npeers == 2) {
    CHECK_MSG(r.peers[0].pid == idle && r.peers[0].ans.given_bytes == 60,
              "the most idle peer first: pid %d gave %llu", (int)r.peers[0].pid,
              (unsigned long long)r.peers[0].ans.given_bytes);
    CHECK_MSG(r.peers[1].pid == busy && r.peers[1].ans.given_bytes == 40,
              "the other only for what was missing: pid %d gave %llu", (int)r.peers[1].pid,
              (unsigned long long)r.peers[1].ans.given_bytes);
  }
  brk_reclaim_free(&r);
  o.bytes = 10000; /* more than both have */
  CHECK_EQ_INT(brk_reclaim(&o, &r), 0);
  CHECK(!r.satisfied);
  CHECK_EQ_U64(r.given_bytes, 960);
  brk_reclaim_free(&r);
  kill(busy, SIGKILL);
  kill(idle, SIGKILL);
  waitpid(busy, NULL, 0);
  waitpid(idle, NULL, 0);
}

static void test_dir_checks(void) {
  char out[512], bad[600];
  snprintf(bad, sizeof bad, "%s/open", dir);
  REQUIRE(mkdir(bad, 0777) == 0 && chmod(bad, 0777) == 0);
  int rc = brk_dir_open(bad, NULL, out, sizeof out);
  CHECK_MSG(rc == EBB_EINVAL && strstr(ebb_errmsg(), "writable by every user"),
            "a world-writable directory: rc %d '%s'", rc, ebb_errmsg());
  snprintf(bad, sizeof bad, "%s/new", dir);
  CHECK_EQ_INT(brk_dir_open(bad, NULL, out, sizeof out), 0);
  struct stat st;
  CHECK(stat(bad, &st) == 0 && (st.st_mode & 0777) == 0700);
  rc = brk_dir_open(bad, "no-such-group-ebb", out, sizeof out);
  CHECK_MSG(rc == EBB_EINVAL && strstr(ebb_errmsg(), "no-such-group-ebb"), "unknown group: '%s'",
            ebb_errmsg());
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const char *t = getenv("EBB_TEST_TMP");
  snprintf(dir, sizeof dir, "%s/broker", t ? t : "/tmp/ebb-broker-test");
  if (system("true") == 0) {
    char cmd[1800];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && chmod 700 '%s'", dir, dir, dir);
    REQUIRE(system(cmd) == 0);
  }
  RUN(test_codec_roundtrip);
  RUN(test_codec_refuses);
  RUN(test_peer_answers);
  RUN(test_silent_then_dead);
  RUN(test_reclaim_order);
  RUN(test_dir_checks);
  return TEST_END();
}
