/* The transcribe stage through its vtable (stg_stage_transcribe) with a
 * minimal host table: options and environment, the skip without a server,
 * the "vocals" -> "audio" fallback, stereo 44.1 kHz input, errors passed to
 * the host, cancellation and the job's deadline. */
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "ebb/stage.h"
#include "support/whisper_server.h"
#include "test.h"

extern const ebb_stage stg_stage_transcribe;

/* ---- a minimal host ------------------------------------------------------- */
typedef struct item {
  char name[64];
  ebb_item_kind kind;
  float *samples;
  uint64_t frames;
  uint32_t channels, rate;
  char *text;
} item;

struct ebb_items {
  item it[8];
  int n;
};

static char logs[16384];
static int last_err;
static char last_msg[2048];
static atomic_int cancelled;
static double deadline_left = -1;
static double last_progress = -1;

static void h_log(ebb_stage_ctx *c, int level, const char *msg) {
  (void)c;
  size_t n = strlen(logs);
  snprintf(logs + n, sizeof logs - n, "%d %s\n", level, msg);
}
static int h_set_error(ebb_stage_ctx *c, int code, const char *msg) {
  (void)c;
  last_err = code;
  snprintf(last_msg, sizeof last_msg, "%s", msg);
  return code;
}
static int h_cancelled(ebb_stage_ctx *c) {
  (void)c;
  return atomic_load(&cancelled);
}
static double h_seconds_left(ebb_stage_ctx *c) {
  (void)c;
  return deadline_left;
}
static void h_progress(ebb_stage_ctx *c, double f) {
  (void)c;
  last_progress = f;
}
static int h_count(const ebb_items *items) { return items->n; }
static int fill(const item *it, ebb_item_info *o) {
  memset(o, 0, sizeof *o);
  o->size = sizeof *o;
  o->kind = it->kind;
  o->name = it->name;
  o->samples = it->samples;
  o->frames = it->frames;
  o->channels = it->channels;
  o->rate = it->rate;
  o->text = it->text;
  return 0;
}
static int h_get(const ebb_items *items, int i, ebb_item_info *o) {
  return i >= 0 && i < items->n ? fill(&items->it[i], o) : EBB_ENOTFOUND;
}
static int h_find(const ebb_items *items, const char *name, ebb_item_info *o) {
  for (int i = 0; i < items->n; i++)
    if (!strcmp(items->it[i].name, name))
      return fill(&items->it[i], o);
  return EBB_ENOTFOUND;
}
static int h_add_json(ebb_items *out, const char *name, const char *json) {
  if (out->n == 8)
    return EBB_ENOMEM;
  item *it = &out->it[out->n++];
  memset(it, 0, sizeof *it);
  snprintf(it->name, sizeof it->name, "%s", name);
  it->kind = EBB_ITEM_JSON;
  it->text = strdup(json);
  return 0;
}
/* dev_alloc is never expected: the stage uses no device memory */
static int dev_allocs;
static int h_dev_alloc(ebb_stage_ctx *c, size_t n, const char *site, uint64_t *p) {
  (void)c;
  (void)n;
  (void)site;
  (void)p;
  dev_allocs++;
  return EBB_EOOM;
}

static const ebb_host_api host = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_host_api),
    .log = h_log,
    .set_error = h_set_error,
    .cancelled = h_cancelled,
    .seconds_left = h_seconds_left,
    .progress = h_progress,
    .dev_alloc = h_dev_alloc,
    .item_count = h_count,
    .item_get = h_get,
    .item_find = h_find,
    .add_json = h_add_json,
};
static ebb_stage_ctx ctx = {.host = &host};

static void items_add_audio(ebb_items *in, const char *name, double secs, uint32_t ch,
                            uint32_t rate) {
  item *it = &in->it[in->n++];
  memset(it, 0, sizeof *it);
  snprintf(it->name, sizeof it->name, "%s", name);
  it->kind = EBB_ITEM_AUDIO;
  it->frames = (uint64_t)(secs * rate);
  it->channels = ch;
  it->rate = rate;
  it->samples = malloc((it->frames * ch + 1) * sizeof(float));
  REQUIRE(it->samples != NULL);
  for (uint64_t i = 0; i < it->frames * ch; i++)
    it->samples[i] = 0.2f * (float)sin((double)i * 0.05);
}
static void items_free(ebb_items *x) {
  for (int i = 0; i < x->n; i++) {
    free(x->it[i].samples);
    free(x->it[i].text);
  }
  x->n = 0;
}

static void reset(void) {
  logs[0] = 0;
  last_err = 0;
  last_msg[0] = 0;
  atomic_store(&cancelled, 0);
  deadline_left = -1;
  last_progress = -1;
}

/* load + run + unload; returns run's (or load's) code. */
static int run_stage(const char *options, ebb_items *in, ebb_items *out) {
  void *st = NULL;
  int rc = stg_stage_transcribe.load(&ctx, options, &st);
  if (rc)
    return rc;
  rc = stg_stage_transcribe.run(&ctx, st, in, out);
  stg_stage_transcribe.unload(&ctx, st);
  return rc;
}

static whisper_server *srv;
static char opt_buf[1024];
static const char *opts(const char *path_query, const char *extra) {
  snprintf(opt_buf, sizeof opt_buf, "{\"url\":\"http://127.0.0.1:%u%s\"%s%s}",
           whisper_server_port(srv), path_query, extra ? "," : "", extra ? extra : "");
  return opt_buf;
}

/* ---- tests ---------------------------------------------------------------- */
static void test_vtable(void) {
  CHECK_EQ_INT(stg_stage_transcribe.abi_version, EBB_STAGE_ABI_VERSION);
  CHECK_EQ_INT(stg_stage_transcribe.size, sizeof(ebb_stage));
  CHECK_EQ_STR(stg_stage_transcribe.name, "transcribe");
  CHECK_EQ_INT(stg_stage_transcribe.needs_gpu, 0);
  json_error_t e;
  json_t *schema = json_loads(stg_stage_transcribe.options_schema, 0, &e);
  CHECK_MSG(json_is_object(schema), "options_schema is not a JSON object: %s (line %d col %d)",
            e.text, e.line, e.column);
  const char *keys[] = {"url",     "protocol", "model",     "language",          "prompt",
                        "api_key", "source",   "timeout_s", "connect_timeout_s", "retries"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    json_t *o = json_object_get(schema, keys[i]);
    CHECK_MSG(json_is_string(json_object_get(o, "type")) && json_object_get(o, "default"),
              "schema entry %s needs type and default", keys[i]);
  }
  json_decref(schema);
}

static void test_skipped_without_url(void) {
  reset();
  unsetenv("EBB_WHISPER_URL");
  ebb_items in = {0}, out = {0};
  items_add_audio(&in, "vocals", 1.0, 1, 16000);
  CHECK_EQ_INT(run_stage("{}", &in, &out), 0);
  CHECK_EQ_INT(out.n, 0);
  CHECK_MSG(strstr(logs, "skipped: no Whisper server configured (set the stage option url or "
                         "EBB_WHISPER_URL)") != NULL,
            "skip line: %s", logs);
  items_free(&in);
}

static void test_transcribes_vocals(void) {
  reset();
  ebb_items in = {0}, out = {0};
  items_add_audio(&in, "audio", 3.0, 2, 44100);
  items_add_audio(&in, "vocals", 2.0, 2, 44100);
  CHECK_EQ_INT(run_stage(opts("/inference?key=st1", "\"language\":\"en\""), &in, &out), 0);
  CHECK_MSG(last_err == 0, "error: %s", last_msg);
  CHECK_EQ_INT(dev_allocs, 0);
  CHECK_NEAR(whisper_server_last_duration(srv, "st1"), 2.0, 0.01); /* vocals, not audio */
  REQUIRE(out.n == 1);
  CHECK_EQ_STR(out.it[0].name, "transcript");
  json_t *t = json_loads(out.it[0].text, 0, NULL);
  REQUIRE(t != NULL);
  CHECK_EQ_STR(json_string_value(json_object_get(t, "protocol")), "whispercpp");
  CHECK_EQ_INT(json_array_size(json_object_get(t, "words")), 5);
  CHECK_MSG(strstr(logs, "transcribed 2.0 s of \"vocals\": 5 words, 1 segments, language en") !=
                NULL,
            "summary line: %s", logs);
  CHECK_NEAR(last_progress, 1.0, 1e-9);
  json_decref(t);
  items_free(&in);
  items_free(&out);
}

static void test_fallback_to_audio_and_env(void) {
  reset();
  char u[160];
  snprintf(u, sizeof u, "http://127.0.0.1:%u/v1/audio/transcriptions?key=env",
           whisper_server_port(srv));
  setenv("EBB_WHISPER_URL", u, 1);
  ebb_items in = {0}, out = {0};
  items_add_audio(&in, "audio", 1.5, 1, 16000);
  CHECK_EQ_INT(run_stage("{\"retries\": 0}", &in, &out), 0);
  CHECK_MSG(last_err == 0, "error: %s", last_msg);
  CHECK_EQ_INT(whisper_server_requests(srv, "env"), 1);
  CHECK_NEAR(whisper_server_last_duration(srv, "env"), 1.5, 1e-9);
  CHECK(strstr(logs, "no item \"vocals\"; transcribing \"audio\"") != NULL);
  REQUIRE(out.n == 1);
  CHECK(strstr(out.it[0].text, "\"protocol\":\"openai\"") != NULL);
  unsetenv("EBB_WHISPER_URL");
  items_free(&in);
  items_free(&out);

  reset();
  items_add_audio(&in, "drums", 1.0, 1, 16000);
  CHECK_EQ_INT(run_stage(opts("/inference", NULL), &in, &out), EBB_EINPUT);
  CHECK_EQ_INT(last_err, EBB_EINPUT);
  CHECK_MSG(strstr(last_msg, "no AUDIO item \"vocals\" (nor \"audio\")") != NULL, "%s", last_msg);
  items_free(&in);

  reset();
  items_add_audio(&in, "vocals", 0.0, 1, 16000);
  CHECK_EQ_INT(run_stage(opts("/inference", NULL), &in, &out), EBB_EINPUT);
  CHECK_MSG(strstr(last_msg, "item \"vocals\" is empty (0 frames)") != NULL, "%s", last_msg);
  items_free(&in);
}

static void test_errors_reach_host(void) {
  reset();
  ebb_items in = {0}, out = {0};
  items_add_audio(&in, "vocals", 1.0, 1, 16000);
  CHECK_EQ_INT(run_stage(opts("/v1/audio/transcriptions?mode=fail&key=sf", "\"retries\":1"), &in,
                         &out),
               EBB_EPROTO);
  CHECK_EQ_INT(last_err, EBB_EPROTO);
  CHECK_MSG(strstr(last_msg, "HTTP 500") && strstr(last_msg, "(after 2 attempts)"), "%s", last_msg);
  CHECK_EQ_INT(whisper_server_requests(srv, "sf"), 2);
  CHECK_EQ_INT(out.n, 0);

  reset();
  CHECK_EQ_INT(run_stage("{\"url\": \"http://x/inference\", \"protocol\": \"soap\"}", &in, &out),
               EBB_ECONFIG);
  CHECK_MSG(strstr(last_msg, "option protocol: \"soap\"") != NULL, "%s", last_msg);
  reset();
  CHECK_EQ_INT(run_stage("{\"url\": \"http://x/inference\", \"retries\": 1.5}", &in, &out),
               EBB_ECONFIG);
  CHECK_MSG(strstr(last_msg, "option retries") != NULL, "%s", last_msg);
  reset();
  CHECK_EQ_INT(run_stage("{\"url\": \"localhost:8080\"}", &in, &out), EBB_ECONFIG);
  CHECK_MSG(strstr(last_msg, "option url") != NULL, "%s", last_msg);
  items_free(&in);
}

static void test_api_key_from_env(void) {
  whisper_server *keyed;
  REQUIRE(whisper_server_start(0, "sekret", &keyed) == 0);
  char o[200];
  snprintf(o, sizeof o, "{\"url\":\"http://127.0.0.1:%u/v1/audio/transcriptions\"}",
           whisper_server_port(keyed));
  ebb_items in = {0}, out = {0};
  items_add_audio(&in, "vocals", 1.0, 1, 16000);
  reset();
  setenv("EBB_WHISPER_API_KEY", "wrong", 1);
  CHECK_EQ_INT(run_stage(o, &in, &out), EBB_ECONFIG);
  CHECK_MSG(strstr(last_msg, "HTTP 401") != NULL, "%s", last_msg);
  reset();
  setenv("EBB_WHISPER_API_KEY", "sekret", 1);
  CHECK_EQ_INT(run_stage(o, &in, &out), 0);
  CHECK_EQ_INT(out.n, 1);
  unsetenv("EBB_WHISPER_API_KEY");
  items_free(&in);
  items_free(&out);
  whisper_server_stop(keyed);
}

static void *cancel_later(void *arg) {
  (void)arg;
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL);
  atomic_store(&cancelled, 1);
  return NULL;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void test_cancel_and_deadline(void) {
  reset();
  ebb_items in = {0}, out = {0};
  items_add_audio(&in, "vocals", 1.0, 1, 16000);
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, cancel_later, NULL) == 0);
  double t0 = now_s();
  CHECK_EQ_INT(run_stage(opts("/v1/audio/transcriptions?mode=slow&sleep=20", NULL), &in, &out),
               EBB_ECANCELED);
  double el = now_s() - t0;
  pthread_join(th, NULL);
  CHECK_MSG(el < 3.0, "cancel took %.2f s", el);
  CHECK_EQ_INT(last_err, EBB_ECANCELED);

  /* the job's deadline (seconds_left) caps timeout_s */
  reset();
  deadline_left = 0.4;
  t0 = now_s();
  CHECK_EQ_INT(run_stage(opts("/v1/audio/transcriptions?mode=slow&sleep=20&key=dl",
                              "\"retries\":0"),
                         &in, &out),
               EBB_ETIMEDOUT);
  el = now_s() - t0;
  CHECK_MSG(el < 3.0, "deadline of 0.4 s took %.2f s", el);
  CHECK_MSG(strstr(last_msg, "timed out") != NULL, "%s", last_msg);
  items_free(&in);
}

int main(void) {
  setenv("no_proxy", "127.0.0.1,localhost", 1);
  setenv("NO_PROXY", "127.0.0.1,localhost", 1);
  unsetenv("EBB_WHISPER_API_KEY");
  REQUIRE(whisper_server_start(0, NULL, &srv) == 0);
  RUN(test_vtable);
  RUN(test_skipped_without_url);
  RUN(test_transcribes_vocals);
  RUN(test_fallback_to_audio_and_env);
  RUN(test_errors_reach_host);
  RUN(test_api_key_from_env);
  RUN(test_cancel_and_deadline);
  whisper_server_stop(srv);
  return TEST_END();
}
