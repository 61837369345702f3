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
  brk_request r = {.op = BRK_OP_RECLAIM, .bytes = 6442450944ull, .asker = 4121, .by = BRK_BY_TOKEN},
              d;
  snprintf(r.device, sizeof r.device, "GPU-1234");
  int n = brk_encode_request(&r, buf, sizeof buf);
  CHECK(n > 0 && buf[n - 1] == '\n');
  CHECK_EQ_INT(brk_decode_request(buf, &d), 0);
  CHECK_EQ_INT(d.op, BRK_OP_RECLAIM);
  CHECK_EQ_U64(d.bytes, 6442450944ull);
  CHECK_EQ_INT(d.asker, 4121);
  CHECK_EQ_INT(d.by, BRK_BY_TOKEN);
  CHECK(strstr(buf, "\"by\":\"token\"") != NULL);
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

  brk_answer c = {.pid = 77, .commit_bytes = 5ull << 30, .eta_ms = 19000}, e;
  snprintf(c.what, sizeof c.what, "ebb serve");
  snprintf(c.device, sizeof c.device, "GPU-1234");
  CHECK(brk_encode_commit(&c, buf, sizeof buf) > 0);
  CHECK_EQ_INT(brk_decode_answer(BRK_OP_RECLAIM, buf, &e), 0);
  CHECK_MSG(e.commit && e.commit_bytes == 5ull << 30 && e.eta_ms == 19000 && e.pid == 77,
            "a commit line round-trips: commit %d, %llu bytes, %.0f ms", e.commit,
            (unsigned long long)e.commit_bytes, e.eta_ms);

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
  expect_proto("{\"v\":1,\"op\":\"info\"}\n", "version 1, this side speaks 2");
  expect_proto("{\"op\":\"info\"}", "version -1");
  expect_proto("[1,2]", "not a JSON object");
  expect_proto("{\"v\":2,\"op\":\"take\"}", "\"op\" must be");
  expect_proto("{\"v\":2,\"op\":\"reclaim\",\"bytes\":5}", "\"device\"");
  expect_proto("{\"v\":2,\"op\":\"reclaim\",\"device\":\"G\",\"bytes\":-5}", "\"bytes\"");
  expect_proto("{\"v\":2,\"op\":\"reclaim\",\"device\":\"G\",\"bytes\":\"5\"}", "\"bytes\"");
  expect_proto("{\"v\":2,\"op\":\"reclaim\",\"device\":\"G\",\"bytes\":5}", "\"by\" must be");
  expect_proto("{\"v\":2,\"op\":\"reclaim\",\"device\":\"G\",\"bytes\":5,\"by\":\"root\"}",
               "\"by\" must be");
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
  int calls, last_by;
  int slow_ms; /* commits at once, then takes this long to give */
} fake_giver;

static int fake_give(void *arg, const brk_request *req, brk_answer *a, brk_giving *gv) {
  fake_giver *g = arg;
  g->calls++;
  if (req->op == BRK_OP_INFO) {
    a->ndevices = 1;
    snprintf(a->devices[0].uuid, sizeof a->devices[0].uuid, "GPU-T");
    a->devices[0].idle_s = g->idle;
    a->devices[0].givable_bytes = g->have;
    return 0;
  }
  g->last_by = req->by;
  if (strcmp(req->device, "GPU-T"))
    return ebb_seterr(EBB_ENOTFOUND, "not on %s", req->device);
  uint64_t give = req->bytes < g->have ? req->bytes : g->have;
  snprintf(a->device, sizeof a->device, "%s", req->device);
  brk_commit(gv, a, give, g->slow_ms);
  if (g->slow_ms) {
    struct timespec ts = {g->slow_ms / 1000, (g->slow_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  g->have -= give;
  a->given_bytes = give;
  snprintf(a->device, sizeof a->device, "%s", req->device);
  snprintf(a->reason, sizeof a->reason, "test gave %llu", (unsigned long long)give);
  return 0;
}

static void test_peer_answers(void) {
  fake_giver g = {.have = 100, .idle = 1};
  brk_peer *p;
  brk_peer_opts o = {.size = sizeof o,
                     .dir = dir,
                     .what = "test",
                     .group = (gid_t)-1,
                     .give = fake_give,
                     .give_arg = &g};
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
static pid_t spawn_giver_slow(uint64_t have, double idle, int slow_ms) {
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  pid_t c = fork();
  REQUIRE(c >= 0);
  if (c == 0) {
    static fake_giver g;
    g = (fake_giver){.have = have, .idle = idle, .slow_ms = slow_ms};
    brk_peer *p;
    brk_peer_opts o = {.size = sizeof o,
                       .dir = dir,
                       .what = "child",
                       .group = (gid_t)-1,
                       .give = fake_give,
                       .give_arg = &g};
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

static pid_t spawn_giver(uint64_t have, double idle) { return spawn_giver_slow(have, idle, 0); }

static void test_reclaim_order(void) {
  pid_t busy = spawn_giver(1000, 1.0), idle = spawn_giver(60, 50.0);
  brk_reclaim_opts o = {.size = sizeof o,
                        .dir = dir,
                        .uuid = "GPU-T",
                        .bytes = 100,
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

static void reap(pid_t *ps, size_t n) {
  for (size_t i = 0; i < n; i++) {
    kill(ps[i], SIGKILL);
    waitpid(ps[i], NULL, 0);
  }
}

/* A silent child: binds PID.sock, accepts, never answers. */
static pid_t spawn_silent(void) {
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  pid_t c = fork();
  REQUIRE(c >= 0);
  if (c == 0) {
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    brk_sock_path(dir, getpid(), sa.sun_path, sizeof sa.sun_path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) || listen(fd, 4) ||
        write(ready[1], "r", 1) != 1)
      _exit(1);
    for (int i = 0; i < 60; i++) { /* bounded: killed by the test */
      (void)accept(fd, NULL, NULL);
      sleep(1);
    }
    _exit(0);
  }
  char x;
  REQUIRE(read(ready[0], &x, 1) == 1);
  close(ready[0]);
  close(ready[1]);
  return c;
}

/* Four silent peers cost one timeout, not four: they are asked at once. */
static void test_silent_peers_at_once(void) {
  pid_t ps[4];
  for (int i = 0; i < 4; i++)
    ps[i] = spawn_silent();
  brk_reclaim_opts o =
      {.size = sizeof o, .dir = dir, .uuid = "GPU-T", .bytes = 100, .timeout_s = 0.5, .wait_s = 5};
  brk_reclaim_result r;
  double t0 = now_s();
  CHECK_EQ_INT(brk_reclaim(&o, &r), 0);
  double took = now_s() - t0;
  CHECK(!r.satisfied);
  CHECK_EQ_INT(r.npeers, 4);
  for (size_t i = 0; i < r.npeers; i++)
    CHECK_MSG(r.peers[i].status == EBB_ETIMEDOUT, "silent peer %zu: status %d '%s'", i,
              r.peers[i].status, r.peers[i].ans.err_msg);
  CHECK_MSG(took < 1.5,
            "4 silent peers at --broker-timeout 0.5 held the asker %.2f s "
            "(asked in turn they would cost 2 s)",
            took);
  brk_reclaim_free(&r);
  reap(ps, 4);
}

/* A peer that commits at once and then takes longer than --broker-timeout
 * to give is waited for within the asker's deadline, not skipped; past the
 * deadline it is named as committed but unfinished. */
static void test_slow_giver_waited(void) {
  pid_t p = spawn_giver_slow(100, 5, 1200);
  brk_reclaim_opts o =
      {.size = sizeof o, .dir = dir, .uuid = "GPU-T", .bytes = 100, .timeout_s = 0.3, .wait_s = 5};
  brk_reclaim_result r;
  CHECK_EQ_INT(brk_reclaim(&o, &r), 0);
  CHECK_MSG(r.satisfied && r.given_bytes == 100 && r.npeers == 1 && r.peers[0].status == 0,
            "a slow giver (1.2 s, timeout 0.3 s): satisfied %d, given %llu, status %d '%s'",
            r.satisfied, (unsigned long long)r.given_bytes, r.npeers ? r.peers[0].status : -99,
            r.npeers ? r.peers[0].ans.err_msg : "");
  CHECK(r.npeers == 1 && r.peers[0].committed && r.peers[0].commit == 100);
  brk_reclaim_free(&r);
  o.wait_s = 0.6;
  CHECK_EQ_INT(brk_reclaim(&o, &r), 0); /* it has nothing left: the commit is 0 */
  brk_reclaim_free(&r);
  reap(&p, 1);
  p = spawn_giver_slow(100, 5, 1500);
  CHECK_EQ_INT(brk_reclaim(&o, &r), 0);
  CHECK_MSG(!r.satisfied && r.npeers == 1 && r.peers[0].status == EBB_ETIMEDOUT &&
                strstr(r.peers[0].ans.err_msg, "committed 0 MiB"),
            "past the asker's deadline: satisfied %d, status %d '%s'", r.satisfied,
            r.npeers ? r.peers[0].status : -99, r.npeers ? r.peers[0].ans.err_msg : "");
  brk_reclaim_free(&r);
  reap(&p, 1);
}

typedef struct ask_arg {
  double took;
  int rc;
} ask_arg;

/* An asker trickling its request a byte at a time holds only its own
 * connection: another asker is answered meanwhile. */
static void test_trickler(void) {
  fake_giver g = {.have = 100, .idle = 1};
  brk_peer *p;
  brk_peer_opts po = {.size = sizeof po,
                      .dir = dir,
                      .what = "test",
                      .group = (gid_t)-1,
                      .give = fake_give,
                      .give_arg = &g};
  REQUIRE(brk_peer_start(&po, &p) == 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  brk_sock_path(dir, getpid(), sa.sun_path, sizeof sa.sun_path);
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
  REQUIRE(send(fd, "{", 1, MSG_NOSIGNAL) == 1);
  brk_request r = {.op = BRK_OP_INFO};
  brk_answer a;
  double t0 = now_s();
  int rc = brk_ask(dir, getpid(), &r, 2, &a);
  double took = now_s() - t0;
  CHECK_MSG(rc == 0 && took < 0.5, "asked beside a trickling asker: rc %d in %.2f s ('%s')", rc,
            took, ebb_errmsg());
  /* the trickler is cut at BRK_READ_MS in all, not per byte */
  t0 = now_s();
  char buf[512];
  ssize_t n = 0;
  for (int i = 0; i < 40; i++) {
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, 0) == 1) {
      n = recv(fd, buf, sizeof buf - 1, 0);
      break;
    }
    if (send(fd, " ", 1, MSG_NOSIGNAL) != 1)
      break;
  }
  took = now_s() - t0;
  buf[n > 0 ? n : 0] = '\0';
  CHECK_MSG(n > 0 && strstr(buf, "no whole request within") && took < 2.0,
            "a trickling asker is cut after %d ms in all: %.2f s, answer '%s'", BRK_READ_MS, took,
            buf);
  close(fd);
  brk_peer_stop(p);
}

/* A process's start time, as /proc/PID/stat says (field 22). */
static unsigned long long start_of(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f)
    fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  for (int field = 2; p && field < 22; field++)
    p = strchr(p + 1, ' ');
  unsigned long long v = 0;
  return p && sscanf(p, " %llu", &v) == 1 ? v : 0;
}

static void put(const char *name, const char *text) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  REQUIRE(f);
  fputs(text, f);
  fclose(f);
}

static int there(const char *name) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat st;
  return lstat(path, &st) == 0;
}

/* The directory is hostile input: a FIFO, a symlink and a 100 MB file
 * named like claims, a FIFO in the lock's place and one named like a peer
 * are never waited on; claims for a dead holder, for a live holder's pid
 * with another start time, and one standing for a year are dropped. */
static void test_hostile_dir(void) {
  char path[700], line[512];
  pid_t dead = fork();
  REQUIRE(dead >= 0);
  if (dead == 0)
    _exit(0);
  waitpid(dead, NULL, 0);
  snprintf(path, sizeof path, "%s/claim.999", dir);
  REQUIRE(mkfifo(path, 0600) == 0);
  snprintf(path, sizeof path, "%s/claim.998", dir);
  REQUIRE(symlink("/etc/passwd", path) == 0);
  snprintf(path, sizeof path, "%s/claim.997", dir);
  FILE *f = fopen(path, "w");
  REQUIRE(f && ftruncate(fileno(f), 100 << 20) == 0);
  fclose(f);
  snprintf(path, sizeof path, "%s/claims.lock", dir);
  unlink(path);
  REQUIRE(mkfifo(path, 0600) == 0);
  snprintf(path, sizeof path, "%s/%d.sock", dir, (int)getppid());
  REQUIRE(mkfifo(path, 0600) == 0);
  double far = (double)time(NULL) + 365 * 86400.0;
  snprintf(line, sizeof line,
           "{\"v\":2,\"seq\":996,\"holder\":%d,\"device\":\"GPU-T\",\"bytes\":8589934592,"
           "\"base\":0,\"start\":0,\"until\":%.0f}",
           (int)dead, far);
  put("claim.996", line);
  snprintf(line, sizeof line,
           "{\"v\":2,\"seq\":995,\"holder\":1,\"device\":\"GPU-T\",\"bytes\":8589934592,"
           "\"base\":0,\"start\":%llu,\"until\":%.0f}",
           start_of(1), far);
  put("claim.995", line); /* pid 1 alive, its start time right: a year is forged */
  snprintf(line, sizeof line,
           "{\"v\":2,\"seq\":994,\"holder\":%d,\"device\":\"GPU-T\",\"bytes\":8589934592,"
           "\"base\":0,\"start\":%llu,\"until\":%.0f}",
           (int)getpid(), start_of(getpid()) + 1, far);
  put("claim.994", line); /* this pid, but another process's start time */
  brk_claims_opts co = {.dir = dir, .uuid = "GPU-T", .holder = getpid(), .bytes = 10};
  brk_claims_seen seen;
  double t0 = now_s();
  CHECK_EQ_INT(brk_claims_before(&co, 0, &seen), 0);
  CHECK_MSG(seen.total == 0 && seen.bytes == 0, "junk counted as claims: %zu claims, %llu bytes",
            seen.total, (unsigned long long)seen.bytes);
  CHECK_MSG(!there("claim.996") && !there("claim.995") && !there("claim.994"),
            "a forged claim was not dropped (dead holder %d, a year, another start: %d %d %d)",
            (int)dead, there("claim.996"), there("claim.995"), there("claim.994"));
  CHECK_MSG(!there("claim.999") && !there("claim.998") && !there("claim.997"),
            "junk named like a claim was left");
  brk_claim_handle h;
  CHECK_EQ_INT(brk_claim_open(&co, &h, &seen), 0); /* the FIFO lock is made anew */
  CHECK(h.path[0] && seen.total == 0);
  brk_claim_release(&h);
  pid_t pids[8];
  size_t n;
  CHECK_EQ_INT(brk_dir_peers(dir, pids, 8, &n), 0);
  CHECK_MSG(n == 0, "a FIFO named like a peer was listed as one (%zu)", n);
  brk_reclaim_opts o =
      {.size = sizeof o, .dir = dir, .uuid = "GPU-T", .bytes = 100, .timeout_s = 0.5, .wait_s = 1};
  brk_reclaim_result r;
  CHECK_EQ_INT(brk_reclaim(&o, &r), 0);
  brk_reclaim_free(&r);
  double took = now_s() - t0;
  CHECK_MSG(took < 1.5, "the junk held the asker %.2f s", took);
  snprintf(path, sizeof path, "%s/%d.sock", dir, (int)getppid());
  unlink(path);
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
  RUN(test_silent_peers_at_once);
  RUN(test_slow_giver_waited);
  RUN(test_trickler);
  RUN(test_hostile_dir);
  RUN(test_dir_checks);
  return TEST_END();
}
