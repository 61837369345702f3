/* The worker protocol's frame parser and reader reject what is not a frame
 * of a JSON object with a "type" (truncated, oversized, empty, invalid JSON
 * or UTF-8, not an object, no type) with a clear error, and never read past
 * what they were given; shared-memory payloads round-trip and are cleaned
 * up by prefix. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "test.h"
#include "worker/item_wire.h"
#include "worker/proc.h"
#include "worker/wire.h"

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A frame: 4-byte little-endian length + body (len may lie). */
static size_t frame(unsigned char *buf, uint32_t len, const char *body, size_t bodyn) {
  buf[0] = (unsigned char)len;
  buf[1] = (unsigned char)(len >> 8);
  buf[2] = (unsigned char)(len >> 16);
  buf[3] = (unsigned char)(len >> 24);
  memcpy(buf + 4, body, bodyn);
  return 4 + bodyn;
}

static void expect_bad(const char *body, size_t n, const char *what) {
  unsigned char buf[256];
  size_t len = frame(buf, (uint32_t)n, body, n), used = 99;
  json_t *m = (json_t *)1;
  int rc = wrk_wire_decode(buf, len, 0, &m, &used);
  CHECK_MSG(rc == EBB_EPROTO, "frame '%.*s': rc %d, expected EBB_EPROTO", (int)n, body, rc);
  CHECK_MSG(has(ebb_errmsg(), what), "frame '%.*s': message '%s' lacks '%s'", (int)n, body,
            ebb_errmsg(), what);
  CHECK(m == NULL && used == 0);
}

static void test_decode_good(void) {
  unsigned char buf[512];
  const char *a = "{\"type\":\"hello\",\"protocol\":1}", *b = "{\"type\":\"run\",\"items\":[]}";
  size_t n = frame(buf, (uint32_t)strlen(a), a, strlen(a));
  n += frame(buf + n, (uint32_t)strlen(b), b, strlen(b));
  json_t *m;
  size_t used;
  REQUIRE(wrk_wire_decode(buf, n, 0, &m, &used) == 0 && m);
  CHECK_EQ_STR(json_string_value(json_object_get(m, "type")), "hello");
  CHECK_EQ_U64(used, 4 + strlen(a));
  json_decref(m);
  REQUIRE(wrk_wire_decode(buf + used, n - used, 0, &m, &used) == 0 && m);
  CHECK_EQ_STR(json_string_value(json_object_get(m, "type")), "run");
  json_decref(m);
  /* round trip through the encoder */
  json_t *o = json_pack("{s:s, s:s}", "type", "log", "message", "h\xc3\xa9");
  unsigned char *f;
  size_t fn;
  REQUIRE(wrk_wire_encode(o, &f, &fn) == 0);
  REQUIRE(wrk_wire_decode(f, fn, 0, &m, &used) == 0 && m);
  CHECK_EQ_U64(used, fn);
  CHECK_EQ_STR(json_string_value(json_object_get(m, "message")), "h\xc3\xa9");
  json_decref(m);
  json_decref(o);
  free(f);
}

static void test_decode_partial(void) {
  unsigned char buf[128];
  const char *a = "{\"type\":\"hello\"}";
  size_t n = frame(buf, (uint32_t)strlen(a), a, strlen(a));
  for (size_t k = 0; k < n; k++) { /* every prefix is "not yet", never an error */
    json_t *m = (json_t *)1;
    size_t used = 99;
    CHECK_EQ_INT(wrk_wire_decode(buf, k, 0, &m, &used), 0);
    CHECK(m == NULL && used == 0);
  }
}

static void test_decode_bad(void) {
  expect_bad("not json", 8, "invalid JSON");
  expect_bad("{\"type\":", 8, "invalid JSON"); /* truncated JSON */
  expect_bad("[1,2]", 5, "must be an object");
  expect_bad("42", 2, "invalid JSON"); /* scalars are not decoded */
  expect_bad("{\"kind\":\"x\"}", 12, "no string \"type\"");
  expect_bad("{\"type\":7}", 10, "no string \"type\"");
  expect_bad("{\"type\":\"\"}", 11, "no string \"type\"");
  expect_bad("{\"type\":\"\xff\xfe\"}", 13, "invalid JSON");         /* not UTF-8 */
  expect_bad("{\"type\":\"a\",\"type\":\"b\"}", 23, "invalid JSON"); /* duplicate keys */
  expect_bad("{\"type\":\"a\"}\0junk", 17, "invalid JSON");          /* NUL inside */
  /* length 0 and oversized lengths, whatever follows */
  unsigned char buf[16];
  json_t *m;
  size_t used;
  size_t n = frame(buf, 0, "", 0);
  CHECK_EQ_INT(wrk_wire_decode(buf, n, 0, &m, &used), EBB_EPROTO);
  CHECK(has(ebb_errmsg(), "empty frame"));
  n = frame(buf, EBB_WIRE_MAX_FRAME + 1, "{", 1);
  CHECK_EQ_INT(wrk_wire_decode(buf, n, 0, &m, &used), EBB_EPROTO);
  CHECK(has(ebb_errmsg(), "oversized frame"));
  n = frame(buf, 0xffffffffu, "{", 1);
  CHECK_EQ_INT(wrk_wire_decode(buf, n, 0, &m, &used), EBB_EPROTO);
  CHECK(has(ebb_errmsg(), "4294967295"));
  n = frame(buf, 64, "{", 1); /* a caller's smaller limit */
  CHECK_EQ_INT(wrk_wire_decode(buf, n, 32, &m, &used), EBB_EPROTO);
  CHECK(has(ebb_errmsg(), "limit is 32"));
}

/* Writes bytes into one end of a socketpair, closes it when close_after,
 * and reads a message from the other. */
static int use_reader; /* 1: the same cases through wrk_wire_read; 2: with a spin */
static int recv_from(const void *bytes, size_t n, int close_after, double timeout_s, json_t **m) {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  if (n)
    REQUIRE(write(sv[1], bytes, n) == (ssize_t)n);
  if (close_after)
    close(sv[1]);
  double deadline = timeout_s > 0 ? now() + timeout_s : 0;
  int rc;
  if (use_reader) {
    static wrk_wire_reader r;
    wrk_wire_reader_init(&r, sv[0]);
    r.spin_us = use_reader == 2 ? 2000 : 0;
    rc = wrk_wire_read(&r, deadline, NULL, m);
  } else {
    rc = wrk_wire_recv(sv[0], deadline, NULL, m);
  }
  close(sv[0]);
  if (!close_after)
    close(sv[1]);
  return rc;
}

/* What every reader must answer: a frame, the peer closing between frames
 * or inside one, oversized, garbage, silence until the deadline. */
static void test_recv_cases(void) {
  unsigned char buf[256];
  json_t *m = NULL;
  const char *a = "{\"type\":\"result\",\"items\":[]}";
  size_t n = frame(buf, (uint32_t)strlen(a), a, strlen(a));
  CHECK_EQ_INT(recv_from(buf, n, 1, 2, &m), 0);
  CHECK(m && !strcmp(json_string_value(json_object_get(m, "type")), "result"));
  json_decref(m);
  /* closed between frames: EIO, the peer went away */
  CHECK_EQ_INT(recv_from(buf, 0, 1, 2, &m), EBB_EIO);
  CHECK(has(ebb_errmsg(), "closed the connection"));
  /* closed inside the length or the body: truncated */
  CHECK_EQ_INT(recv_from(buf, 2, 1, 2, &m), EBB_EPROTO);
  CHECK(has(ebb_errmsg(), "truncated frame") && has(ebb_errmsg(), "2 of 4"));
  CHECK_EQ_INT(recv_from(buf, n - 5, 1, 2, &m), EBB_EPROTO);
  CHECK(has(ebb_errmsg(), "truncated frame"));
  /* oversized: refused from the header alone, no allocation of 1 GiB */
  n = frame(buf, 1u << 30, "{", 1);
  CHECK_EQ_INT(recv_from(buf, n, 0, 2, &m), EBB_EPROTO);
  CHECK(has(ebb_errmsg(), "oversized frame"));
  /* garbage body */
  n = frame(buf, 5, "hello", 5);
  CHECK_EQ_INT(recv_from(buf, n, 0, 2, &m), EBB_EPROTO);
  CHECK(has(ebb_errmsg(), "invalid JSON"));
  /* silence: the deadline */
  double t0 = now();
  CHECK_EQ_INT(recv_from(buf, 0, 0, 0.2, &m), EBB_ETIMEDOUT);
  CHECK(now() - t0 < 2.0);
  CHECK(m == NULL);
  /* half a frame then silence: timed out in the middle of it */
  n = frame(buf, 40, "{\"ty", 4);
  CHECK_EQ_INT(recv_from(buf, n, 0, 0.2, &m), EBB_ETIMEDOUT);
  CHECK(has(ebb_errmsg(), "middle of a 40-byte frame"));
}

static void test_recv(void) {
  json_t *m = NULL;
  test_recv_cases();
  /* cancel */
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  atomic_int cancel = 1;
  CHECK_EQ_INT(wrk_wire_recv(sv[0], now() + 5, &cancel, &m), EBB_ECANCELED);
  close(sv[0]);
  /* frames back to back: each recv takes exactly one (a big one, past the
   * sender's in-place buffer, then a small one) */
  int pv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, pv) == 0);
  char *big = malloc(40001);
  REQUIRE(big);
  memset(big, 'x', 40000);
  big[40000] = 0;
  json_t *b = json_pack("{s:s, s:s}", "type", "log", "message", big);
  json_t *s = json_pack("{s:s}", "type", "result");
  CHECK_EQ_INT(wrk_wire_send(pv[1], b), 0);
  CHECK_EQ_INT(wrk_wire_send(pv[1], s), 0);
  json_t *got = NULL;
  CHECK_EQ_INT(wrk_wire_recv(pv[0], now() + 5, NULL, &got), 0);
  CHECK(got && strlen(json_string_value(json_object_get(got, "message"))) == 40000);
  json_decref(got);
  got = NULL;
  CHECK_EQ_INT(wrk_wire_recv(pv[0], now() + 5, NULL, &got), 0);
  CHECK(got && !strcmp(json_string_value(json_object_get(got, "type")), "result"));
  json_decref(got), json_decref(b), json_decref(s);
  free(big);
  close(pv[0]), close(pv[1]);
  /* sending to a closed peer is an error, not SIGPIPE */
  json_t *o = json_pack("{s:s}", "type", "exit");
  CHECK_EQ_INT(wrk_wire_send(sv[1], o), EBB_EIO);
  json_decref(o);
  close(sv[1]);
}

/* Runs the reader cases (mode: 1 plain, 2 with a spin), then makes a
 * socketpair with a fresh reader on sv[0]. */
static wrk_wire_reader *reader_after_cases(int mode, int sv[2]) {
  use_reader = mode;
  test_recv_cases();
  use_reader = 0;
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  static wrk_wire_reader r;
  wrk_wire_reader_init(&r, sv[0]);
  return &r;
}

/* The reader: the cases above, then what only it does: frames that arrive
 * together are returned one by one from one read-ahead, a frame larger than
 * its buffer between small ones, and a cancel seen while it waits. */
static void test_reader(void) {
  int sv[2];
  wrk_wire_reader *r = reader_after_cases(1, sv);
  char *big = malloc(100001);
  REQUIRE(big);
  memset(big, 'y', 100000);
  big[100000] = 0;
  json_t *a = json_pack("{s:s, s:i}", "type", "log", "n", 1);
  json_t *b = json_pack("{s:s, s:s}", "type", "log", "message", big);
  json_t *c = json_pack("{s:s, s:i}", "type", "result", "n", 3);
  /* three small frames in one write, then big, then small */
  unsigned char *f1, *f2;
  size_t n1, n2;
  REQUIRE(wrk_wire_encode(a, &f1, &n1) == 0 && wrk_wire_encode(c, &f2, &n2) == 0);
  unsigned char three[512];
  REQUIRE(n1 * 2 + n2 < sizeof three);
  memcpy(three, f1, n1), memcpy(three + n1, f1, n1), memcpy(three + 2 * n1, f2, n2);
  REQUIRE(write(sv[1], three, 2 * n1 + n2) == (ssize_t)(2 * n1 + n2));
  json_t *got = NULL;
  for (int i = 0; i < 3; i++) {
    CHECK_EQ_INT(wrk_wire_read(r, now() + 5, NULL, &got), 0);
    CHECK(got && json_integer_value(json_object_get(got, "n")) == (i < 2 ? 1 : 3));
    json_decref(got), got = NULL;
  }
  CHECK(r->start == r->end); /* nothing left over */
  CHECK_EQ_INT(wrk_wire_send(sv[1], c), 0);
  CHECK_EQ_INT(wrk_wire_send(sv[1], b), 0); /* 100 KB: fits the socket's buffer */
  CHECK_EQ_INT(wrk_wire_read(r, now() + 5, NULL, &got), 0);
  CHECK(got && json_integer_value(json_object_get(got, "n")) == 3);
  json_decref(got), got = NULL;
  CHECK_EQ_INT(wrk_wire_read(r, now() + 5, NULL, &got), 0);
  CHECK(got && strlen(json_string_value(json_object_get(got, "message"))) == 100000);
  json_decref(got), got = NULL;
  CHECK_EQ_INT(wrk_wire_send(sv[1], a), 0);
  CHECK_EQ_INT(wrk_wire_read(r, now() + 5, NULL, &got), 0);
  CHECK(got && json_integer_value(json_object_get(got, "n")) == 1);
  json_decref(got), got = NULL;
  /* silence: the deadline holds to within a wake-up, not a whole 100 ms late */
  double t0 = now();
  CHECK_EQ_INT(wrk_wire_read(r, now() + 0.25, NULL, &got), EBB_ETIMEDOUT);
  double took = now() - t0;
  CHECK(took >= 0.24 && took < 1.0);
  atomic_int cancel = 1;
  CHECK_EQ_INT(wrk_wire_read(r, 0, &cancel, &got), EBB_ECANCELED);
  CHECK(has(ebb_errmsg(), "cancelled"));
  close(sv[1]);
  CHECK_EQ_INT(wrk_wire_read(r, now() + 5, NULL, &got), EBB_EIO);
  CHECK(has(ebb_errmsg(), "closed the connection"));
  close(sv[0]);
  free(f1), free(f2), free(big);
  json_decref(a), json_decref(b), json_decref(c);
}

/* The busy poll (spin_us): the reader's cases with it on; a frame that
 * arrives while it spins, and one that comes after it gave up and slept;
 * cancel ends it at once; EBB_WORKER_SPIN_US is parsed strictly and a bad
 * value stops a worker from starting with an error naming it. */
static void test_spin(void) {
  int sv[2];
  wrk_wire_reader *r = reader_after_cases(2, sv);
  r->spin_us = EBB_WIRE_SPIN_US_MAX; /* 10 ms */
  json_t *got = NULL, *a = json_pack("{s:s, s:i}", "type", "result", "n", 7);
  for (int delay_us = 200; delay_us <= 50000; delay_us *= 250) { /* 0.2 ms, then 50 ms */
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      usleep((useconds_t)delay_us);
      _exit(wrk_wire_send(sv[1], a) ? 1 : 0);
    }
    double t0 = now();
    CHECK_EQ_INT(wrk_wire_read(r, now() + 5, NULL, &got), 0);
    CHECK(got && json_integer_value(json_object_get(got, "n")) == 7);
    CHECK(now() - t0 >= delay_us / 1e6 * 0.9);
    json_decref(got), got = NULL;
    int st = 0;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  atomic_int cancel = 1;
  double t0 = now();
  CHECK_EQ_INT(wrk_wire_read(r, 0, &cancel, &got), EBB_ECANCELED);
  CHECK(now() - t0 < 0.005); /* not after a 10 ms spin */
  close(sv[0]), close(sv[1]);
  json_decref(a);
  /* EBB_WORKER_SPIN_US */
  const char *bad = NULL;
  unsetenv("EBB_WORKER_SPIN_US");
  CHECK_EQ_INT((int)wrk_wire_spin_us(&bad), EBB_WIRE_SPIN_US_DEFAULT);
  CHECK(bad == NULL);
  setenv("EBB_WORKER_SPIN_US", "0", 1);
  CHECK_EQ_INT((int)wrk_wire_spin_us(&bad), 0);
  setenv("EBB_WORKER_SPIN_US", "120", 1);
  CHECK_EQ_INT((int)wrk_wire_spin_us(&bad), 120);
  CHECK(bad == NULL);
  const char *wrong[] = {"", "abc", "12us", "-1", "10001", "99999999999999999999"};
  for (size_t i = 0; i < sizeof wrong / sizeof *wrong; i++) {
    setenv("EBB_WORKER_SPIN_US", wrong[i], 1);
    CHECK_EQ_INT((int)wrk_wire_spin_us(&bad), EBB_WIRE_SPIN_US_DEFAULT);
    CHECK(bad && !strcmp(bad, wrong[i]));
  }
  setenv("EBB_WORKER_SPIN_US", "fast", 1);
  wrk_wproc *w = NULL;
  const char *args[] = {"-c", "exit 0"};
  CHECK_EQ_INT(wrk_wproc_spawn("/bin/sh", args, 2, "spin", &w), EBB_EINVAL);
  CHECK(w == NULL && has(ebb_errmsg(), "EBB_WORKER_SPIN_US='fast'"));
  unsetenv("EBB_WORKER_SPIN_US");
}

static void test_shm(void) {
  char prefix[64], name[96];
  snprintf(prefix, sizeof prefix, "ebb-wtest-%ld-", (long)getpid());
  snprintf(name, sizeof name, "%sa", prefix);
  float data[1000];
  for (int i = 0; i < 1000; i++)
    data[i] = (float)i * 0.5f;
  REQUIRE(wrk_shm_put(name, data, sizeof data) == 0);
  CHECK_EQ_INT(wrk_shm_put(name, data, sizeof data), EBB_EIO); /* exclusive */
  const void *p;
  REQUIRE(wrk_shm_map(name, sizeof data, &p) == 0 && p);
  CHECK(memcmp(p, data, sizeof data) == 0);
  wrk_shm_unmap(p, sizeof data);
  CHECK_EQ_INT(wrk_shm_map(name, sizeof data + 4, &p), EBB_EPROTO); /* shorter than claimed */
  CHECK(has(ebb_errmsg(), "holds 4000 bytes"));
  CHECK_EQ_INT(wrk_shm_map("../etc/passwd", 4, &p), EBB_EPROTO); /* names stay in /dev/shm */
  CHECK_EQ_INT(wrk_shm_put("a/b", data, 4), EBB_EINVAL);
  /* a FIFO under the name must not block the reader */
  char fifo[160];
  snprintf(name, sizeof name, "%sfifo", prefix);
  snprintf(fifo, sizeof fifo, "/dev/shm/%s", name);
  REQUIRE(mkfifo(fifo, 0600) == 0);
  CHECK_EQ_INT(wrk_shm_map(name, 4, &p), EBB_EPROTO);
  CHECK(has(ebb_errmsg(), "not a regular file"));
  unlink(fifo);
  CHECK(!wrk_shm_name_ok("..") && !wrk_shm_name_ok("") && wrk_shm_name_ok("ebb-w1-2-o3"));
  snprintf(name, sizeof name, "%sb", prefix);
  REQUIRE(wrk_shm_put(name, data, 8) == 0);
  /* a producer builds its payload in shm and hands over the name */
  char made[96];
  snprintf(made, sizeof made, "%smade", prefix);
  void *w = NULL;
  REQUIRE(wrk_shm_create(made, sizeof data, &w) == 0 && w);
  memcpy(w, data, sizeof data);
  CHECK_EQ_INT(wrk_shm_create(made, sizeof data, &w), EBB_EIO); /* exclusive */
  REQUIRE(wrk_shm_map(made, sizeof data, &p) == 0 && p);
  CHECK(memcmp(p, data, sizeof data) == 0);
  wrk_shm_unmap(p, sizeof data);
  CHECK_EQ_INT(wrk_shm_create("a/b", 4, &w), EBB_EINVAL);
  CHECK(w == NULL);
  CHECK_EQ_INT(wrk_shm_create(made, 0, &w), EBB_EINVAL);
  CHECK(has(ebb_errmsg(), "size 0"));
  CHECK_EQ_INT(wrk_shm_unlink_prefix(prefix), 3);
  CHECK_EQ_INT(wrk_shm_map(name, 8, &p), EBB_EPROTO);
  CHECK_EQ_INT(wrk_shm_unlink_prefix(prefix), 0);
}

static void test_codes_and_status(void) {
  CHECK_EQ_INT(wrk_wire_code("EBB_EOOM"), EBB_EOOM);
  CHECK_EQ_INT(wrk_wire_code("EBB_ECONFIG"), EBB_ECONFIG);
  CHECK_EQ_INT(wrk_wire_code("whatever"), EBB_ESTAGE);
  CHECK_EQ_INT(wrk_wire_code(NULL), EBB_ESTAGE);
  char buf[256];
  wrk_wait_status_describe(3 << 8, buf, sizeof buf);
  CHECK_EQ_STR(buf, "exited with status 3");
  pid_t p = fork(); /* no CUDA in this test process: a plain fork is fine */
  if (p == 0) {
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
    _exit(0);
  }
  int st;
  REQUIRE(waitpid(p, &st, 0) == p);
  wrk_wait_status_describe(st, buf, sizeof buf);
  CHECK_MSG(has(buf, "was killed by signal SIGSEGV (Segmentation fault)"), "got '%s'", buf);
  CHECK_EQ_STR(wrk_signal_name(SIGABRT), "SIGABRT");
}

/* Seeded mutations of valid frames (bytes flipped, lengths changed,
 * truncations): decode answers a well-formed message, "need more", or
 * EBB_EPROTO, and never consumes more than it was given. */
static void test_mutations(void) {
  const char *seeds[] = {"{\"type\":\"hello\",\"protocol\":1,\"shm_prefix\":\"ebb-w1-2-\"}",
                         "{\"type\":\"result\",\"items\":[{\"kind\":\"audio\",\"name\":\"a\","
                         "\"frames\":4,\"channels\":1,\"rate\":8000,\"shm\":\"x\",\"bytes\":16}]}",
                         "{\"type\":\"error\",\"code\":\"EBB_EOOM\",\"message\":\"\u00e9\"}"};
  unsigned seed = 12345;
  int ok = 0, more = 0, bad = 0, items_ok = 0;
  for (int iter = 0; iter < 30000; iter++) {
    const char *b = seeds[iter % 3];
    unsigned char buf[512];
    size_t n = frame(buf, (uint32_t)strlen(b), b, strlen(b));
    int edits = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 4;
    for (int e = 0; e < edits; e++) {
      seed = seed * 1103515245u + 12345u;
      size_t at = (seed >> 8) % n;
      switch ((seed >> 4) % 4) {
      case 0: buf[at] ^= (unsigned char)(1u << ((seed >> 20) % 8)); break;
      case 1: buf[at] = (unsigned char)(seed >> 24); break;
      case 2: n = at ? at : 1; break;                                     /* truncate */
      case 3: buf[(seed >> 12) % 4] = (unsigned char)(seed >> 16); break; /* length */
      }
    }
    json_t *m = NULL;
    size_t used = 0;
    int rc = wrk_wire_decode(buf, n, 0, &m, &used);
    if (rc == 0 && m) {
      ok++;
      CHECK(used <= n && json_is_object(m) &&
            json_string_value(json_object_get(m, "type")) != NULL);
      /* and the items of a decoded frame through the one item codec */
      json_t *items = json_object_get(m, "items");
      for (size_t i = 0; i < json_array_size(items); i++) {
        wrk_wire_item it;
        int irc = wrk_wire_item_decode(json_array_get(items, i), i, NULL, &it);
        items_ok += irc == 0;
        CHECK_MSG(irc == 0 || (irc == EBB_EPROTO && has(ebb_errmsg(), "item #")),
                  "iteration %d: item rc %d '%s'", iter, irc, ebb_errmsg());
        CHECK_MSG(irc || it.kind != EBB_ITEM_AUDIO || (it.channels >= 1 && it.channels <= 64),
                  "iteration %d: accepted %u channels", iter, it.channels);
      }
    } else if (rc == 0) {
      more++;
      CHECK(used == 0);
    } else {
      bad++;
      CHECK_MSG(rc == EBB_EPROTO && m == NULL && ebb_errmsg()[0], "iteration %d: rc %d", iter, rc);
    }
    json_decref(m);
  }
  fprintf(stderr, "mutations: %d decoded (%d items accepted), %d incomplete, %d refused\n", ok,
          items_ok, more, bad);
  CHECK(ok > 0 && more > 0 && bad > 0 && items_ok > 0); /* every outcome was exercised */
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  RUN(test_decode_good);
  RUN(test_decode_partial);
  RUN(test_decode_bad);
  RUN(test_recv);
  RUN(test_reader);
  RUN(test_spin);
  RUN(test_mutations);
  RUN(test_shm);
  RUN(test_codes_and_status);
  return TEST_END();
}
