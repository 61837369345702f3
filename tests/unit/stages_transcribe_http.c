/* The transcribe stage's HTTP client against the test Whisper server
 * (tests/support/whisper_server.c) in every mode: answers of both protocols,
 * retries (counted on both sides), no retry after a 4xx (the status in the
 * message, never the remote's body), timeouts, hang-ups,
 * connection refused, cancellation, API keys, bad word times. */
#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ebb/error.h"
#include "stages/audio/transcribe.h"
#include "support/whisper_server.h"
#include "test.h"

static whisper_server *srv;
static char logs[8192];
static atomic_int cancel_flag;

static void cap_log(void *arg, int level, const char *msg) {
  (void)arg;
  size_t n = strlen(logs);
  snprintf(logs + n, sizeof logs - n, "%d %s\n", level, msg);
}
static int cap_cancel(void *arg) {
  (void)arg;
  return atomic_load(&cancel_flag);
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static float *tone(double secs, unsigned rate, uint64_t *frames) {
  *frames = (uint64_t)(secs * rate);
  float *p = malloc(*frames * sizeof *p);
  REQUIRE(p != NULL);
  for (uint64_t i = 0; i < *frames; i++)
    p[i] = 0.3f * (float)sin(2 * M_PI * 220.0 * (double)i / rate);
  return p;
}

static char url_buf[512];
static const char *url(const char *path, const char *query) {
  snprintf(url_buf, sizeof url_buf, "http://127.0.0.1:%u%s%s%s", whisper_server_port(srv), path,
           query ? "?" : "", query ? query : "");
  return url_buf;
}

static stg_transcribe_opts opts_for(const char *u) {
  stg_transcribe_opts o = {.url = u,
                           .timeout_s = 10,
                           .connect_timeout_s = 2,
                           .retries = 2,
                           .backoff_s = 0.05,
                           .cancelled = cap_cancel,
                           .log = cap_log};
  return o;
}

/* Runs one request on `secs` of tone at `rate`; returns rc, *out the parsed
 * transcript (or NULL). */
static int request(const stg_transcribe_opts *o, double secs, unsigned rate, json_t **out,
                   stg_transcribe_stats *st) {
  uint64_t n;
  float *pcm = tone(secs, rate, &n);
  char *js = NULL;
  logs[0] = 0;
  int rc = stg_transcribe_request(o, pcm, n, rate, &js, st);
  free(pcm);
  *out = NULL;
  if (!rc) {
    *out = json_loads(js, 0, NULL);
    CHECK_MSG(*out != NULL, "transcript is not JSON: %s", js);
  }
  free(js);
  return rc;
}

static void check_msg(const char *needle) {
  CHECK_MSG(strstr(ebb_errmsg(), needle) != NULL, "message \"%s\" lacks \"%s\"", ebb_errmsg(),
            needle);
}

/* A remote's error body never reaches the job's message (a job that chose
 * the URL would read an internal service through it): the status only. */
static void no_body_in_msg(const char *body_text) {
  CHECK_MSG(strstr(ebb_errmsg(), body_text) == NULL, "message \"%s\" echoes the remote's body",
            ebb_errmsg());
}

static double word_end(json_t *t, size_t i) {
  return json_real_value(json_object_get(json_array_get(json_object_get(t, "words"), i), "end"));
}
static const char *word_text(json_t *t, size_t i) {
  return json_string_value(json_object_get(json_array_get(json_object_get(t, "words"), i), "word"));
}

static void test_openai_normal(void) {
  stg_transcribe_opts o = opts_for(url("/v1/audio/transcriptions", "key=oa"));
  o.language = "en";
  o.prompt = "lyrics";
  json_t *t;
  stg_transcribe_stats st;
  int rc = request(&o, 2.0, 16000, &t, &st);
  REQUIRE(rc == 0);
  CHECK_EQ_INT(st.attempts, 1);
  CHECK_EQ_INT(st.http_status, 200);
  CHECK_EQ_U64(st.upload_bytes, 44 + 2 * 32000);
  CHECK_NEAR(whisper_server_last_duration(srv, "oa"), 2.0, 1e-9);
  CHECK_EQ_STR(json_string_value(json_object_get(t, "protocol")), "openai");
  CHECK_EQ_STR(json_string_value(json_object_get(t, "language")), "en");
  CHECK_EQ_STR(json_string_value(json_object_get(t, "text")), "hello from whisper test server");
  CHECK_EQ_INT(json_array_size(json_object_get(t, "words")), 5);
  CHECK_EQ_STR(word_text(t, 4), "server");
  CHECK_NEAR(word_end(t, 4), 2.0 * 4.8 / 5, 1e-3); /* times follow the uploaded duration */
  CHECK_EQ_STR(json_string_value(json_object_get(t, "server")), url_buf);
  json_decref(t);
}

/* whisper.cpp wants 16 kHz mono: 44.1 kHz input must be resampled first. */
static void test_whispercpp_resampled(void) {
  const char *shapes[] = {"key=cw&shape=words", "key=ct&shape=tokens"};
  for (int i = 0; i < 2; i++) {
    stg_transcribe_opts o = opts_for(url("/inference", shapes[i]));
    json_t *t;
    stg_transcribe_stats st;
    int rc = request(&o, 3.0, 44100, &t, &st);
    CHECK_MSG(rc == 0, "%s: %s", shapes[i], ebb_errmsg());
    if (rc)
      continue;
    CHECK_NEAR(whisper_server_last_duration(srv, i ? "ct" : "cw"), 3.0, 0.01);
    CHECK_EQ_STR(json_string_value(json_object_get(t, "protocol")), "whispercpp");
    CHECK_EQ_STR(json_string_value(json_object_get(t, "language")), "en");
    REQUIRE(json_array_size(json_object_get(t, "words")) == 5);
    CHECK_EQ_STR(word_text(t, 0), "hello");
    CHECK_EQ_STR(word_text(t, 2), "whisper");
    CHECK_EQ_STR(word_text(t, 4), "server.");
    CHECK_NEAR(word_end(t, 0), 3.0 * 0.8 / 5, 0.011);
    CHECK_NEAR(word_end(t, 4), 3.0 * 4.8 / 5, 0.011);
    json_decref(t);
  }
}

static void test_malformed_and_missing(void) {
  struct {
    const char *path, *q, *needle;
  } cases[] = {
      {"/v1/audio/transcriptions", "mode=malformed", "answered malformed JSON at line 2 column"},
      {"/v1/audio/transcriptions", "mode=missing", "without a \"text\" string"},
      {"/inference", "mode=cpperror", "answered an error: failed to read WAV file"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    stg_transcribe_opts o = opts_for(url(cases[i].path, cases[i].q));
    json_t *t;
    stg_transcribe_stats st;
    CHECK_EQ_INT(request(&o, 1.0, 16000, &t, &st), EBB_EPROTO);
    check_msg(cases[i].needle);
    check_msg(url_buf);
    CHECK_EQ_INT(st.attempts, 1); /* a bad answer is not retried */
  }
}

static void test_retry_then_ok(void) {
  stg_transcribe_opts o = opts_for(url("/v1/audio/transcriptions", "mode=flaky&fails=2&key=fl"));
  json_t *t;
  stg_transcribe_stats st;
  int rc = request(&o, 1.0, 16000, &t, &st);
  CHECK_MSG(rc == 0, "flaky: %s", ebb_errmsg());
  CHECK_EQ_INT(st.attempts, 3);
  CHECK_EQ_INT(whisper_server_requests(srv, "fl"), 3);
  CHECK_MSG(strstr(logs, "attempt 1 of 3 failed") && strstr(logs, "HTTP 500") &&
                strstr(logs, "attempt 2 of 3 failed"),
            "retries are logged: %s", logs);
  json_decref(t);

  o = opts_for(url("/v1/audio/transcriptions", "mode=flaky&fails=1&status=429&key=fl429"));
  rc = request(&o, 1.0, 16000, &t, &st);
  CHECK_MSG(rc == 0, "429: %s", ebb_errmsg());
  CHECK_EQ_INT(st.attempts, 2);
  CHECK_EQ_INT(whisper_server_requests(srv, "fl429"), 2);
  json_decref(t);
}

static void test_always_500(void) {
  stg_transcribe_opts o = opts_for(url("/v1/audio/transcriptions", "mode=fail&key=f500"));
  json_t *t;
  stg_transcribe_stats st;
  CHECK_EQ_INT(request(&o, 1.0, 16000, &t, &st), EBB_EPROTO);
  CHECK_EQ_INT(st.attempts, 3);
  CHECK_EQ_INT(st.http_status, 500);
  CHECK_EQ_INT(whisper_server_requests(srv, "f500"), 3);
  check_msg("answered HTTP 500 (its body is not shown)");
  no_body_in_msg("failing on purpose");
  check_msg("(after 3 attempts)");
}

static void test_no_retry_on_400(void) {
  stg_transcribe_opts o = opts_for(url("/v1/audio/transcriptions", "mode=error400&key=e400"));
  json_t *t;
  stg_transcribe_stats st;
  CHECK_EQ_INT(request(&o, 1.0, 16000, &t, &st), EBB_EPROTO);
  CHECK_EQ_INT(st.attempts, 1);
  CHECK_EQ_INT(whisper_server_requests(srv, "e400"), 1);
  check_msg("answered HTTP 400 (its body is not shown)");
  no_body_in_msg("rejected on purpose");
  CHECK_MSG(strstr(ebb_errmsg(), "attempts") == NULL, "no retries claimed: %s", ebb_errmsg());

  /* a wrong protocol makes the server reject the form: also a 4xx, no retry */
  o = opts_for(url("/v1/audio/transcriptions", "key=wrongproto"));
  o.protocol = EBB_WHISPER_WHISPERCPP; /* sends no model field */
  CHECK_EQ_INT(request(&o, 1.0, 16000, &t, &st), EBB_EPROTO);
  CHECK_EQ_INT(whisper_server_requests(srv, "wrongproto"), 1);
  check_msg("HTTP 400 (its body is not shown)");
  no_body_in_msg("you must provide");
}

static void test_timeout(void) {
  stg_transcribe_opts o = opts_for(url("/v1/audio/transcriptions", "mode=slow&sleep=10&key=slow"));
  o.timeout_s = 0.5;
  o.retries = 1;
  json_t *t;
  stg_transcribe_stats st;
  double t0 = now_s();
  CHECK_EQ_INT(request(&o, 1.0, 16000, &t, &st), EBB_ETIMEDOUT);
  double el = now_s() - t0;
  CHECK_EQ_INT(st.attempts, 2);
  CHECK_EQ_INT(whisper_server_requests(srv, "slow"), 2);
  check_msg("timed out (timeout_s 0.5");
  check_msg("(after 2 attempts)");
  CHECK_MSG(el >= 1.0 && el < 5.0, "two 0.5 s attempts took %.2f s", el);
}

static void test_hangup(void) {
  stg_transcribe_opts o = opts_for(url("/v1/audio/transcriptions", "mode=hangup&key=hang"));
  o.retries = 1;
  json_t *t;
  stg_transcribe_stats st;
  CHECK_EQ_INT(request(&o, 1.0, 16000, &t, &st), EBB_EIO);
  CHECK_EQ_INT(st.attempts, 2);
  CHECK_EQ_INT(whisper_server_requests(srv, "hang"), 2);
  check_msg("closed the connection without an answer");
}

static void test_connection_refused(void) {
  /* a bound socket that does not listen: connections are refused */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  REQUIRE(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0);
  socklen_t len = sizeof sa;
  REQUIRE(getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
  char u[128];
  snprintf(u, sizeof u, "http://127.0.0.1:%u/v1/audio/transcriptions", ntohs(sa.sin_port));
  stg_transcribe_opts o = opts_for(u);
  o.retries = 1;
  json_t *t;
  stg_transcribe_stats st;
  CHECK_EQ_INT(request(&o, 1.0, 16000, &t, &st), EBB_EIO);
  CHECK_EQ_INT(st.attempts, 2);
  check_msg("cannot connect to ");
  check_msg(u);
  close(fd);
}

static void *cancel_later(void *arg) {
  (void)arg;
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL);
  atomic_store(&cancel_flag, 1);
  return NULL;
}

static void test_cancel(void) {
  stg_transcribe_opts o = opts_for(url("/v1/audio/transcriptions", "mode=slow&sleep=20&key=cx"));
  o.timeout_s = 30;
  pthread_t th;
  atomic_store(&cancel_flag, 0);
  REQUIRE(pthread_create(&th, NULL, cancel_later, NULL) == 0);
  json_t *t;
  stg_transcribe_stats st;
  double t0 = now_s();
  CHECK_EQ_INT(request(&o, 1.0, 16000, &t, &st), EBB_ECANCELED);
  double el = now_s() - t0;
  pthread_join(th, NULL);
  atomic_store(&cancel_flag, 0);
  check_msg("cancelled while waiting for");
  CHECK_EQ_INT(st.attempts, 1);
  CHECK_MSG(el < 3.0, "cancellation took %.2f s", el);

  /* cancelled during the backoff between attempts */
  o = opts_for(url("/v1/audio/transcriptions", "mode=fail&key=cxb"));
  o.backoff_s = 5;
  REQUIRE(pthread_create(&th, NULL, cancel_later, NULL) == 0);
  t0 = now_s();
  CHECK_EQ_INT(request(&o, 1.0, 16000, &t, &st), EBB_ECANCELED);
  el = now_s() - t0;
  pthread_join(th, NULL);
  atomic_store(&cancel_flag, 0);
  check_msg("cancelled while waiting to retry");
  CHECK_MSG(el < 3.0, "cancellation in backoff took %.2f s", el);
}

static void test_bad_times(void) {
  stg_transcribe_opts o = opts_for(url("/v1/audio/transcriptions", "mode=badtimes"));
  json_t *t;
  stg_transcribe_stats st;
  REQUIRE(request(&o, 2.0, 16000, &t, &st) == 0);
  CHECK_EQ_INT(st.words_dropped, 2);
  CHECK_EQ_INT(json_array_size(json_object_get(t, "words")), 3);
  CHECK_MSG(strstr(logs, "2 dropped 2 word(s)/segment(s) with bad times") != NULL, "warned: %s",
            logs);
  json_decref(t);
}

static void test_api_key(void) {
  whisper_server *keyed;
  REQUIRE(whisper_server_start(0, "sekret", &keyed) == 0);
  char u[160], ucred[200];
  snprintf(u, sizeof u, "http://127.0.0.1:%u/v1/audio/transcriptions", whisper_server_port(keyed));
  snprintf(ucred, sizeof ucred, "http://bob:pa55word@127.0.0.1:%u/v1/audio/transcriptions",
           whisper_server_port(keyed));
  stg_transcribe_opts o = opts_for(u);
  json_t *t;
  stg_transcribe_stats st;
  CHECK_EQ_INT(request(&o, 1.0, 16000, &t, &st), EBB_ECONFIG);
  CHECK_EQ_INT(st.attempts, 1);
  check_msg("answered HTTP 401");
  no_body_in_msg("Incorrect API key");
  o.api_key = "sekret";
  CHECK_EQ_INT(request(&o, 1.0, 16000, &t, &st), 0);
  json_decref(t);
  /* credentials in the URL never reach messages or the transcript */
  o.url = ucred;
  CHECK_EQ_INT(request(&o, 1.0, 16000, &t, &st), 0);
  const char *server = json_string_value(json_object_get(t, "server"));
  CHECK_MSG(server && !strstr(server, "pa55word") && strstr(server, "***@127.0.0.1"),
            "server field redacted: %s", server ? server : "(null)");
  json_decref(t);
  whisper_server_stop(keyed);
}

static void test_bad_url(void) {
  stg_transcribe_opts o = opts_for("ftp://example/x");
  json_t *t;
  CHECK_EQ_INT(request(&o, 1.0, 16000, &t, NULL), EBB_ECONFIG);
  check_msg("is not an http:// or https:// URL");
}

int main(void) {
  /* the requests go to 127.0.0.1 directly even where a proxy is configured */
  setenv("no_proxy", "127.0.0.1,localhost", 1);
  setenv("NO_PROXY", "127.0.0.1,localhost", 1);
  REQUIRE(whisper_server_start(0, NULL, &srv) == 0);
  RUN(test_openai_normal);
  RUN(test_whispercpp_resampled);
  RUN(test_malformed_and_missing);
  RUN(test_retry_then_ok);
  RUN(test_always_500);
  RUN(test_no_retry_on_400);
  RUN(test_timeout);
  RUN(test_hangup);
  RUN(test_connection_refused);
  RUN(test_cancel);
  RUN(test_bad_times);
  RUN(test_api_key);
  RUN(test_bad_url);
  whisper_server_stop(srv);
  return TEST_END();
}
