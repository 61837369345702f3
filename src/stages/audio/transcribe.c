/* The `transcribe` stage: sends the job's vocals to a Whisper-compatible HTTP
 * server and adds its answer as the JSON item "transcript" (shape in
 * transcribe.h). It takes no device memory at all (needs_gpu 0, no
 * ebb_dev_alloc), so while it waits minutes on the server it holds nothing on
 * the GPU: what the stage before it used was released after that stage. Without
 * a configured server it logs that it was skipped and succeeds. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/stage.h"
#include "stages/options.h"
#include "stages/audio/st_util.h"
#include "stages/audio/transcribe.h"
#include "stages/audio/wav_encode.h"

typedef struct transcribe_state {
  char *url; /* NULL: no server configured, the stage is skipped */
  char *model, *language, *prompt, *api_key, *source;
  stg_whisper_protocol protocol;
  double timeout_s, connect_timeout_s;
  int retries;
} transcribe_state;

/* The options, each written once (stages/options.h). */
#define TRANSCRIBE_OPTIONS(NUM, INT, STR, BOOL, SEP, OP_NUM, OP_INT, PATH, URL, SECRET) \
  URL(url, "",                                                                                    \
      "Whisper server endpoint, e.g. http://host:8080/inference (whisper.cpp) or "                \
      "https://api.openai.com/v1/audio/transcriptions; empty: the environment variable "          \
      "EBB_WHISPER_URL; neither: the stage is skipped") SEP                                       \
  STR(protocol, "auto",                                                                           \
      "auto (a URL ending in /inference is whisper.cpp, anything else OpenAI), openai or "        \
      "whispercpp") SEP                                                                           \
  STR(model, "whisper-1", "model field sent to OpenAI-style servers") SEP                         \
  STR(language, "", "ISO 639-1 code of the sung language; empty: the server detects it") SEP     \
  STR(prompt, "", "optional prompt (lyrics vocabulary)") SEP                                      \
  SECRET(api_key, "",                                                                                \
      "sent as Authorization: Bearer; empty: the environment variable EBB_WHISPER_API_KEY, if "   \
      "set") SEP                                                                                  \
  STR(source, "vocals", "AUDIO item to transcribe; when absent the item audio is used") SEP      \
  OP_NUM(timeout_s, 600, 0.001, 86400, "per attempt, whole request (transcription takes minutes)")   \
  SEP                                                                                             \
  OP_NUM(connect_timeout_s, 10, 0.001, 3600, "per attempt") SEP                                      \
  OP_INT(retries, 2, 0, 20,                                                                          \
      "extra attempts after connection errors, timeouts, HTTP 5xx and 429 (backoff 0.5 s, 1 s, "  \
      "...); never after another 4xx")
EBB_STAGE_OPTIONS(TRANSCRIBE_OPTIONS)

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

/* A string option's value, where empty counts as unset: else the
 * environment variable `env` (may be NULL), else the table's default `def`
 * when it is not empty. *out is malloc'd or NULL. */
/* 1 when s holds a byte below 0x20 or 0x7f. */
static int has_control(const char *s) {
  for (; s && *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f)
      return 1;
  return 0;
}

static int set_string(ebb_stage_ctx *ctx, const char *key, const char *value, const char *env,
                      const char *def, char **out) {
  const char *s = value && *value ? value : NULL;
  if (!s && env) {
    const char *e = getenv(env);
    if (e && *e)
      s = e;
  }
  if (!s && def && *def)
    s = def;
  *out = NULL;
  if (s && !(*out = strdup(s)))
    return stg_st_fail(ctx, EBB_ENOMEM, "option %s: out of memory", key);
  return 0;
}

static int transcribe_load(ebb_stage_ctx *ctx, const char *options_json, void **state) {
  json_t *opts = NULL;
  stage_opts v, d;
  char *proto = NULL;
  transcribe_state *s = NULL;
  int rc = stage_opts_parse("transcribe", options_json, &opts, &v);
  stage_opts_read("transcribe", NULL, &d); /* the defaults, for options given as "" */
  if (rc) {
    rc = stg_st_fail(ctx, rc, "%s", ebb_errmsg());
    goto done;
  }
  if (!(s = calloc(1, sizeof *s))) {
    rc = stg_st_fail(ctx, EBB_ENOMEM, "out of memory");
    goto done;
  }
  if ((rc = set_string(ctx, "url", v.url, "EBB_WHISPER_URL", d.url, &s->url)) ||
      (rc = set_string(ctx, "protocol", v.protocol, NULL, d.protocol, &proto)) ||
      (rc = set_string(ctx, "model", v.model, NULL, d.model, &s->model)) ||
      (rc = set_string(ctx, "language", v.language, NULL, d.language, &s->language)) ||
      (rc = set_string(ctx, "prompt", v.prompt, NULL, d.prompt, &s->prompt)) ||
      (rc = set_string(ctx, "api_key", v.api_key, "EBB_WHISPER_API_KEY", d.api_key, &s->api_key)) ||
      (rc = set_string(ctx, "source", v.source, NULL, d.source, &s->source)))
    goto done;
  s->timeout_s = v.timeout_s;
  s->connect_timeout_s = v.connect_timeout_s;
  s->retries = v.retries;
  if (stg_whisper_protocol_parse(proto, &s->protocol)) {
    rc = stg_st_fail(ctx, EBB_ECONFIG, "%s", ebb_errmsg());
    goto done;
  }
  /* the URL and the key go into the request line and a header: a CR or LF
   * there would add headers of the value's choosing */
  const char *ctl = has_control(s->url) ? "url" : has_control(s->api_key) ? "api_key" : NULL;
  if (ctl) {
    rc = stg_st_fail(ctx, EBB_ECONFIG,
                     "option %s: the value holds a control character (from "
                     "the options or %s)",
                     ctl, ctl[0] == 'u' ? "EBB_WHISPER_URL" : "EBB_WHISPER_API_KEY");
    goto done;
  }
  if (s->url && strncmp(s->url, "http://", 7) && strncmp(s->url, "https://", 8)) {
    rc = stg_st_fail(ctx, EBB_ECONFIG, "option url: \"%s\" is not an http:// or https:// URL",
                     s->url);
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

/* Work (the stage ABI's `work`): the local part is encoding the upload
 * (16-bit WAV), about TR_ENCODE_S per second of input (a 1-second WAV
 * encode over a 60-second input is under the timer's resolution: 0.0005 is
 * a bound, not a fit). The remote's time is not ours: the wait is bounded
 * by the options, (retries + 1) x (connect_timeout_s + timeout_s), reported
 * as wait_s and cut short by the job's deadline, not counted as work. */
#define TR_ENCODE_S 0.0005
static int transcribe_work(const ebb_host_api *host, const char *options_json, double input_s,
                           ebb_work *out) {
  (void)host;
  json_t *o = NULL;
  stage_opts v;
  int rc = stage_opts_parse("transcribe", options_json, &o, &v);
  json_decref(o);
  if (rc)
    return rc;
  out->cpu_s = input_s * TR_ENCODE_S;
  out->wait_s = (v.retries + 1) * (v.connect_timeout_s + v.timeout_s);
  snprintf(out->drivers, sizeof out->drivers, "timeout_s %g, connect_timeout_s %g, retries %d",
           v.timeout_s, v.connect_timeout_s, v.retries);
  return 0;
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
    return stg_st_fail(ctx, EBB_EINPUT, "no AUDIO item \"%s\"%s in the job", s->source,
                       strcmp(s->source, "audio") ? " (nor \"audio\")" : "");
  if (info->kind != EBB_ITEM_AUDIO || !info->channels || !info->rate ||
      (info->frames && !info->samples))
    return stg_st_fail(ctx, EBB_EINPUT,
                       "item \"%s\" is not usable AUDIO (kind %d, %u channels, %u Hz)", name,
                       (int)info->kind, info->channels, info->rate);
  if (info->frames == 0)
    return stg_st_fail(ctx, EBB_EINPUT, "item \"%s\" is empty (0 frames): nothing to transcribe",
                       name);
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
    return stg_st_fail(ctx, EBB_ECANCELED, "cancelled before the request to %s", s->url);
  ebb_item_info info;
  int rc = find_audio(ctx, s, in, &info);
  if (rc)
    return rc;

  float *mono = NULL;
  uint64_t frames = info.frames;
  const float *pcm = info.samples;
  if (info.channels > 1) {
    if ((rc = stg_pcm_to_mono_rate(info.samples, info.frames, info.channels, info.rate, info.rate,
                                   &mono, &frames)))
      return stg_st_fail(ctx, rc, "%s", ebb_errmsg());
    pcm = mono;
  }

  double timeout = s->timeout_s;
  double left = ctx->host->seconds_left ? ctx->host->seconds_left(ctx) : -1;
  if (left >= 0 && left < timeout)
    timeout = left > 0.001 ? left : 0.001; /* the job's deadline comes first */
  stg_transcribe_opts o = {
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
  stg_transcribe_stats st;
  rc = stg_transcribe_request(&o, pcm, frames, info.rate, &json, &st);
  free(mono);
  if (rc)
    return stg_st_fail(ctx, rc, "%s", ebb_errmsg());

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
    return stg_st_fail(ctx, rc, "cannot add the transcript item");
  if (ctx->host->progress)
    ctx->host->progress(ctx, 1.0);
  return 0;
}

const ebb_stage stg_stage_transcribe = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "transcribe",
    .version = 1,
    .description = "Transcribes the vocals through a Whisper-compatible HTTP server (OpenAI "
                   "/v1/audio/transcriptions or whisper.cpp /inference): words with times, "
                   "segments, language. Uses no GPU memory while it waits.",
    .options_schema = stage_opts_schema,
    .needs_gpu = 0,
    .load = transcribe_load,
    .run = transcribe_run,
    .unload = transcribe_unload,
    .release = NULL,
    .work = transcribe_work,
};
