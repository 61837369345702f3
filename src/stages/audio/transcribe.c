/* The `transcribe` stage: sends the job's vocals to a Whisper-compatible HTTP
 * server and adds its answer as the JSON item "transcript" (shape in
 * transcribe.h). It takes no device memory at all (needs_gpu 0, no
 * ebb_dev_alloc), so while it waits minutes on the server it holds nothing on
 * the GPU: what the stage before it used was released after that stage. Without
 * a configured server it logs that it was skipped and succeeds. */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/stage.h"
#include "stages/audio/transcribe.h"
#include "stages/audio/wav_encode.h"

typedef struct transcribe_state {
  char *url; /* NULL: no server configured, the stage is skipped */
  char *model, *language, *prompt, *api_key, *source;
  ebb_whisper_protocol protocol;
  double timeout_s, connect_timeout_s;
  int retries;
} transcribe_state;

static const char options_schema[] =
    "{"
    "\"url\":{\"type\":\"string\",\"default\":\"\",\"description\":\"Whisper server endpoint, e.g. "
    "http://host:8080/inference (whisper.cpp) or https://api.openai.com/v1/audio/transcriptions; "
    "empty: the environment variable EBB_WHISPER_URL; neither: the stage is skipped\"},"
    "\"protocol\":{\"type\":\"string\",\"default\":\"auto\",\"description\":\"auto (a URL ending in "
    "/inference is whisper.cpp, anything else OpenAI), openai or whispercpp\"},"
    "\"model\":{\"type\":\"string\",\"default\":\"whisper-1\",\"description\":\"model field sent "
    "to OpenAI-style servers\"},"
    "\"language\":{\"type\":\"string\",\"default\":\"\",\"description\":\"ISO 639-1 code of the "
    "sung language; empty: the server detects it\"},"
    "\"prompt\":{\"type\":\"string\",\"default\":\"\",\"description\":\"optional prompt (lyrics "
    "vocabulary)\"},"
    "\"api_key\":{\"type\":\"string\",\"default\":\"\",\"description\":\"sent as Authorization: "
    "Bearer; empty: the environment variable EBB_WHISPER_API_KEY, if set\"},"
    "\"source\":{\"type\":\"string\",\"default\":\"vocals\",\"description\":\"AUDIO item to "
    "transcribe; when absent the item audio is used\"},"
    "\"timeout_s\":{\"type\":\"number\",\"default\":600,\"description\":\"per attempt, whole "
    "request (transcription takes minutes)\"},"
    "\"connect_timeout_s\":{\"type\":\"number\",\"default\":10,\"description\":\"per attempt\"},"
    "\"retries\":{\"type\":\"integer\",\"default\":2,\"description\":\"extra attempts after "
    "connection errors, timeouts, HTTP 5xx and 429 (backoff 0.5 s, 1 s, ...); never after "
    "another 4xx\"}"
    "}";

static void state_free(transcribe_state *s) {
  if (!s)
    return;
  free(s->url);
  free(s->model);
  free(s->language);
  free(s->prompt);
  free(s->api_key);
  free(s->source);
  free(s);
}

static int fail(ebb_stage_ctx *ctx, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(ebb_stage_ctx *ctx, int code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ebb_set_error(ctx, code, msg);
}

/* A string option, else the environment variable `env` (may be NULL), else
 * `def` (may be NULL). Empty strings count as unset. *out is malloc'd or NULL. */
static int opt_string(ebb_stage_ctx *ctx, json_t *opts, const char *key, const char *env,
                      const char *def, char **out) {
  json_t *v = json_object_get(opts, key);
  const char *s = NULL;
  if (v && !json_is_string(v) && !json_is_null(v))
    return fail(ctx, EBB_ECONFIG, "option %s: expected a string", key);
  if (json_is_string(v) && *json_string_value(v))
    s = json_string_value(v);
  if (!s && env) {
    const char *e = getenv(env);
    if (e && *e)
      s = e;
  }
  if (!s)
    s = def;
  *out = NULL;
  if (s && !(*out = strdup(s)))
    return fail(ctx, EBB_ENOMEM, "option %s: out of memory", key);
  return 0;
}

static int opt_number(ebb_stage_ctx *ctx, json_t *opts, const char *key, double def, double min,
                      double max, double *out) {
  json_t *v = json_object_get(opts, key);
  if (!v || json_is_null(v)) {
    *out = def;
    return 0;
  }
  if (!json_is_number(v))
    return fail(ctx, EBB_ECONFIG, "option %s: expected a number", key);
  double d = json_number_value(v);
  if (!(d >= min && d <= max))
    return fail(ctx, EBB_ECONFIG, "option %s: %g is outside [%g, %g]", key, d, min, max);
  *out = d;
  return 0;
}

static int transcribe_load(ebb_stage_ctx *ctx, const char *options_json, void **state) {
  json_error_t jerr;
  json_t *opts = options_json && *options_json ? json_loads(options_json, 0, &jerr) : json_object();
  if (!opts)
    return fail(ctx, EBB_ECONFIG, "options: malformed JSON at line %d column %d: %s", jerr.line,
                jerr.column, jerr.text);
  int rc = 0;
  char *proto = NULL;
  double retries = 0;
  transcribe_state *s = calloc(1, sizeof *s);
  if (!s) {
    rc = fail(ctx, EBB_ENOMEM, "out of memory");
    goto done;
  }
  if (!json_is_object(opts)) {
    rc = fail(ctx, EBB_ECONFIG, "options: expected a JSON object");
    goto done;
  }
  if ((rc = opt_string(ctx, opts, "url", "EBB_WHISPER_URL", NULL, &s->url)) ||
      (rc = opt_string(ctx, opts, "protocol", NULL, "auto", &proto)) ||
      (rc = opt_string(ctx, opts, "model", NULL, "whisper-1", &s->model)) ||
      (rc = opt_string(ctx, opts, "language", NULL, NULL, &s->language)) ||
      (rc = opt_string(ctx, opts, "prompt", NULL, NULL, &s->prompt)) ||
      (rc = opt_string(ctx, opts, "api_key", "EBB_WHISPER_API_KEY", NULL, &s->api_key)) ||
      (rc = opt_string(ctx, opts, "source", NULL, "vocals", &s->source)) ||
      (rc = opt_number(ctx, opts, "timeout_s", 600, 0.001, 86400, &s->timeout_s)) ||
      (rc = opt_number(ctx, opts, "connect_timeout_s", 10, 0.001, 3600, &s->connect_timeout_s)) ||
      (rc = opt_number(ctx, opts, "retries", 2, 0, 20, &retries)))
    goto done;
  if (retries != (double)(int)retries) {
    rc = fail(ctx, EBB_ECONFIG, "option retries: %g is not a whole number", retries);
    goto done;
  }
  s->retries = (int)retries;
  if (ebb_whisper_protocol_parse(proto, &s->protocol)) {
    rc = fail(ctx, EBB_ECONFIG, "%s", ebb_errmsg());
    goto done;
  }
  if (s->url && strncmp(s->url, "http://", 7) && strncmp(s->url, "https://", 8)) {
    rc = fail(ctx, EBB_ECONFIG, "option url: \"%s\" is not an http:// or https:// URL", s->url);
    goto done;
  }
  *state = s;
  s = NULL;
done:
  free(proto);
  state_free(s);
  json_decref(opts);
  return rc;
}

static void transcribe_unload(ebb_stage_ctx *ctx, void *state) {
  (void)ctx;
  state_free(state);
}

static int cb_cancelled(void *arg) { return ebb_cancelled(arg); }
static void cb_log(void *arg, int level, const char *msg) { ebb_stage_log(arg, level, msg); }
static void cb_progress(void *arg, double f) {
  ebb_stage_ctx *ctx = arg;
  if (ctx->host->progress)
    ctx->host->progress(ctx, 0.5 * f); /* the upload is the first half; the wait the rest */
}

/* Finds the AUDIO item to transcribe: `source`, else "audio". */
static int find_audio(ebb_stage_ctx *ctx, const transcribe_state *s, const ebb_items *in,
                      ebb_item_info *info) {
  memset(info, 0, sizeof *info);
  info->size = sizeof *info;
  const char *name = s->source;
  int rc = ctx->host->item_find(in, name, info);
  if (rc && strcmp(name, "audio")) {
    memset(info, 0, sizeof *info);
    info->size = sizeof *info;
    if (!ctx->host->item_find(in, "audio", info)) {
      char msg[256];
      snprintf(msg, sizeof msg, "no item \"%s\"; transcribing \"audio\"", name);
      ebb_stage_log(ctx, 1, msg);
      name = "audio";
      rc = 0;
    }
  }
  if (rc)
    return fail(ctx, EBB_EINPUT, "no AUDIO item \"%s\"%s in the job", s->source,
                strcmp(s->source, "audio") ? " (nor \"audio\")" : "");
  if (info->kind != EBB_ITEM_AUDIO || !info->channels || !info->rate ||
      (info->frames && !info->samples))
    return fail(ctx, EBB_EINPUT, "item \"%s\" is not usable AUDIO (kind %d, %u channels, %u Hz)",
                name, (int)info->kind, info->channels, info->rate);
  if (info->frames == 0)
    return fail(ctx, EBB_EINPUT, "item \"%s\" is empty (0 frames): nothing to transcribe", name);
  return 0;
}

static int transcribe_run(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out) {
  transcribe_state *s = state;
  if (!s->url) {
    ebb_stage_log(ctx, 1,
                  "skipped: no Whisper server configured (set the stage option url or "
                  "EBB_WHISPER_URL)");
    return 0;
  }
  if (ebb_cancelled(ctx))
    return fail(ctx, EBB_ECANCELED, "cancelled before the request to %s", s->url);
  ebb_item_info info;
  int rc = find_audio(ctx, s, in, &info);
  if (rc)
    return rc;

  float *mono = NULL;
  uint64_t frames = info.frames;
  const float *pcm = info.samples;
  if (info.channels > 1) {
    if ((rc = ebb_pcm_to_mono_rate(info.samples, info.frames, info.channels, info.rate, info.rate,
                                   &mono, &frames)))
      return fail(ctx, rc, "%s", ebb_errmsg());
    pcm = mono;
  }

  double timeout = s->timeout_s;
  double left = ctx->host->seconds_left ? ctx->host->seconds_left(ctx) : -1;
  if (left >= 0 && left < timeout)
    timeout = left > 0.001 ? left : 0.001; /* the job's deadline comes first */
  ebb_transcribe_opts o = {
      .url = s->url,
      .protocol = s->protocol,
      .model = s->model,
      .language = s->language,
      .prompt = s->prompt,
      .api_key = s->api_key,
      .timeout_s = timeout,
      .connect_timeout_s = s->connect_timeout_s,
      .retries = s->retries,
      .cancelled = cb_cancelled,
      .cancel_arg = ctx,
      .log = cb_log,
      .log_arg = ctx,
      .progress = cb_progress,
      .progress_arg = ctx,
  };
  char *json = NULL;
  ebb_transcribe_stats st;
  rc = ebb_transcribe_request(&o, pcm, frames, info.rate, &json, &st);
  free(mono);
  if (rc)
    return fail(ctx, rc, "%s", ebb_errmsg());

  json_t *t = json_loads(json, 0, NULL);
  json_t *lang = json_object_get(t, "language");
  char msg[768];
  snprintf(msg, sizeof msg,
           "transcribed %.1f s of \"%s\": %zu words, %zu segments, language %s (%s, %d "
           "attempt%s, %zu bytes uploaded)",
           (double)info.frames / info.rate, info.name ? info.name : "?",
           json_array_size(json_object_get(t, "words")),
           json_array_size(json_object_get(t, "segments")),
           json_is_string(lang) ? json_string_value(lang) : "unknown",
           json_string_value(json_object_get(t, "server")), st.attempts,
           st.attempts == 1 ? "" : "s", st.upload_bytes);
  json_decref(t);
  ebb_stage_log(ctx, 1, msg);
  rc = ctx->host->add_json(out, "transcript", json);
  free(json);
  if (rc)
    return fail(ctx, rc, "cannot add the transcript item");
  if (ctx->host->progress)
    ctx->host->progress(ctx, 1.0);
  return 0;
}

const ebb_stage ebb_stage_transcribe = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "transcribe",
    .version = 1,
    .description = "Transcribes the vocals through a Whisper-compatible HTTP server (OpenAI "
                   "/v1/audio/transcriptions or whisper.cpp /inference): words with times, "
                   "segments, language. Uses no GPU memory while it waits.",
    .options_schema = options_schema,
    .needs_gpu = 0,
    .load = transcribe_load,
    .run = transcribe_run,
    .unload = transcribe_unload,
    .release = NULL,
};
