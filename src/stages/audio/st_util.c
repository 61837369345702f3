/* See st_util.h. */
#include "stages/audio/st_util.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int stg_st_fail(ebb_stage_ctx *ctx, int code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return ebb_set_error(ctx, code, msg);
}

void stg_st_log(ebb_stage_ctx *ctx, int level, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ebb_stage_log(ctx, level, msg);
}

int stg_st_options(ebb_stage_ctx *ctx, const char *options_json, json_t **opts) {
  json_error_t jerr;
  json_t *o = options_json && *options_json ? json_loads(options_json, 0, &jerr) : json_object();
  if (!o)
    return stg_st_fail(ctx, EBB_ECONFIG, "options: malformed JSON at line %d column %d: %s",
                       jerr.line, jerr.column, jerr.text);
  if (!json_is_object(o)) {
    json_decref(o);
    return stg_st_fail(ctx, EBB_ECONFIG, "options: expected a JSON object");
  }
  *opts = o;
  return 0;
}

int stg_st_opt_number(ebb_stage_ctx *ctx, json_t *opts, const char *key, double def, double min,
                      double max, double *out) {
  json_t *v = json_object_get(opts, key);
  if (!v || json_is_null(v)) {
    *out = def;
    return 0;
  }
  if (!json_is_number(v))
    return stg_st_fail(ctx, EBB_ECONFIG, "option %s: expected a number", key);
  double d = json_number_value(v);
  if (!(d >= min && d <= max))
    return stg_st_fail(ctx, EBB_ECONFIG, "option %s: %g is outside [%g, %g]", key, d, min, max);
  *out = d;
  return 0;
}

int stg_st_opt_int(ebb_stage_ctx *ctx, json_t *opts, const char *key, int def, int min, int max,
                   int *out) {
  double d;
  int rc = stg_st_opt_number(ctx, opts, key, def, min, max, &d);
  if (rc)
    return rc;
  if (d != floor(d))
    return stg_st_fail(ctx, EBB_ECONFIG, "option %s: %g is not a whole number", key, d);
  *out = (int)d;
  return 0;
}

int stg_st_opt_string(ebb_stage_ctx *ctx, json_t *opts, const char *key, const char *def,
                      const char **out) {
  json_t *v = json_object_get(opts, key);
  if (!v || json_is_null(v)) {
    *out = def;
    return 0;
  }
  if (!json_is_string(v))
    return stg_st_fail(ctx, EBB_ECONFIG, "option %s: expected a string", key);
  *out = json_string_value(v);
  return 0;
}

int stg_st_find_mono(ebb_stage_ctx *ctx, const ebb_items *in, const char *const *names,
                     float **mono, uint64_t *frames, uint32_t *rate, const char **used) {
  for (; *names; names++) {
    ebb_item_info info;
    memset(&info, 0, sizeof info);
    info.size = sizeof info;
    if (ctx->host->item_find(in, *names, &info) != 0)
      continue;
    if (info.kind != EBB_ITEM_AUDIO || !info.channels || !info.rate ||
        (info.frames && !info.samples))
      return stg_st_fail(ctx, EBB_EINPUT,
                         "item \"%s\" is not usable AUDIO (kind %d, %u channels, %u Hz)", *names,
                         (int)info.kind, info.channels, info.rate);
    float *m = stg_st_malloc((info.frames ? info.frames : 1) * sizeof *m);
    if (!m)
      return stg_st_fail(ctx, EBB_ENOMEM, "out of memory for %llu samples of \"%s\"",
                         (unsigned long long)info.frames, *names);
    for (uint64_t i = 0; i < info.frames; i++) {
      float s = 0.0f;
      for (uint32_t c = 0; c < info.channels; c++)
        s += info.samples[i * info.channels + c];
      m[i] = s / (float)info.channels;
    }
    *mono = m;
    *frames = info.frames;
    *rate = info.rate;
    *used = *names;
    return 0;
  }
  return EBB_ENOTFOUND;
}

/* --- host working buffers counted for the running stage ------------------------- */
static __thread ebb_stage_ctx *st_host;
void stg_st_host_begin(ebb_stage_ctx *ctx) { st_host = ctx; }
void stg_st_host_end(void) { st_host = NULL; }
ebb_stage_ctx *stg_st_host_ctx(void) { return st_host; }
void stg_st_free(void *p) {
  if (!p)
    return;
  if (EBB_HOST_HAS_ALLOC_(st_host) && st_host->host->host_free(st_host, p) == 0)
    return;
  free(p);
}

/* --- cancellation below a stage's run ------------------------------------------- */
static __thread ebb_stage_ctx *st_watch;
static __thread int st_stopped;
void stg_st_watch(ebb_stage_ctx *ctx) {
  st_watch = ctx;
  st_stopped = 0;
}
void stg_st_unwatch(void) {
  st_watch = NULL;
  st_stopped = 0;
}
int stg_st_stop(void) {
  if (!st_stopped && st_watch && st_watch->host->cancelled(st_watch))
    st_stopped = 1;
  return st_stopped;
}
int stg_st_stopped(ebb_stage_ctx *ctx, const char *what) {
  if (!stg_st_stop())
    return 0;
  return stg_st_fail(ctx, EBB_ECANCELED, "cancelled during %s", what);
}
