/* The `separate` stage (separate.h has the method): "audio" -> "vocals" and
 * "accompaniment", same rate and length. CUDA device: ebb's kernels; CPU
 * device: FFTW. */
#include "stages/audio/separate.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/stage.h"
#include "stages/kernels/kernels.h"

typedef struct sep_state {
  ebb_sep_options o;
} sep_state;

static const char sep_schema[] =
    "{"
    "\"n_fft\": {\"type\": \"integer\", \"default\": 1024, \"description\": \"STFT size (power of two, 64..4096)\"},"
    "\"hop\": {\"type\": \"integer\", \"default\": 256, \"description\": \"STFT hop in samples\"},"
    "\"repeats\": {\"type\": \"integer\", \"default\": 30, \"description\": \"REPET-SIM k: most similar frames per frame\"},"
    "\"min_distance\": {\"type\": \"number\", \"default\": 1.0, \"description\": \"seconds between two repeating frames\"},"
    "\"max_lag\": {\"type\": \"number\", \"default\": 30.0, \"description\": \"similarity search radius in seconds\"},"
    "\"similarity_pool\": {\"type\": \"integer\", \"default\": 4, \"description\": \"STFT bins per similarity band\"},"
    "\"hpss\": {\"type\": \"boolean\", \"default\": true, \"description\": \"apply a median-filter harmonic mask (Fitzgerald 2010)\"},"
    "\"vocal_low_hz\": {\"type\": \"number\", \"default\": 80, \"description\": \"vocal band low edge\"},"
    "\"vocal_high_hz\": {\"type\": \"number\", \"default\": 6000, \"description\": \"vocal band high edge\"},"
    "\"outside_gain\": {\"type\": \"number\", \"default\": 0.3, \"description\": \"vocal mask gain outside the band\"}"
    "}";

static void sep_log(ebb_stage_ctx *ctx, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void sep_log(ebb_stage_ctx *ctx, int level, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ebb_stage_log(ctx, level, msg);
}

static int sep_fail(ebb_stage_ctx *ctx, int rc) {
  ebb_set_error(ctx, rc, ebb_errmsg());
  return rc;
}

static int read_options(const char *json, ebb_sep_options *o) {
  ebb_sep_options_default(o);
  if (!json || !*json)
    return 0;
  json_error_t jerr;
  json_t *root = json_loads(json, 0, &jerr);
  if (!root || !json_is_object(root)) {
    json_decref(root);
    return ebb_seterr(EBB_ECONFIG, "separate: options are not a JSON object (line %d: %s)",
                      jerr.line, jerr.text);
  }
  json_t *v;
  if ((v = json_object_get(root, "n_fft")) && json_is_integer(v))
    o->n_fft = (int)json_integer_value(v);
  if ((v = json_object_get(root, "hop")) && json_is_integer(v))
    o->hop = (int)json_integer_value(v);
  if ((v = json_object_get(root, "repeats")) && json_is_integer(v))
    o->repeats = (int)json_integer_value(v);
  if ((v = json_object_get(root, "similarity_pool")) && json_is_integer(v))
    o->pool = (int)json_integer_value(v);
  if ((v = json_object_get(root, "min_distance")) && json_is_number(v))
    o->min_distance_s = json_number_value(v);
  if ((v = json_object_get(root, "max_lag")) && json_is_number(v))
    o->max_lag_s = json_number_value(v);
  if ((v = json_object_get(root, "hpss")) && json_is_boolean(v))
    o->hpss = json_is_true(v);
  if ((v = json_object_get(root, "vocal_low_hz")) && json_is_number(v))
    o->vocal_low_hz = json_number_value(v);
  if ((v = json_object_get(root, "vocal_high_hz")) && json_is_number(v))
    o->vocal_high_hz = json_number_value(v);
  if ((v = json_object_get(root, "outside_gain")) && json_is_number(v))
    o->outside_gain = json_number_value(v);
  json_decref(root);
  /* Check the ranges now, at load, against the default working rate. */
  ebb_stft_shape s;
  ebb_repet_params rp;
  int rc = ebb_sep_plan(o, 16000, 0, &s, &rp);
  return rc < 0 ? ebb_errctx(EBB_ECONFIG, "bad options: ") : 0;
}

static int sep_load(ebb_stage_ctx *ctx, const char *options_json, void **state) {
  sep_state *st = calloc(1, sizeof *st);
  if (!st)
    return ebb_set_error(ctx, EBB_ENOMEM, "separate: out of host memory");
  int rc = read_options(options_json, &st->o);
  if (rc < 0) {
    free(st);
    return sep_fail(ctx, rc);
  }
  /* The twins are the kernels' definition on the fake GPU; referencing their
   * table here also keeps them linked into every program with this stage. */
  if (!ebb_sep_kernel_has_twin("ebb_fft_radix2"))
    ebb_stage_log(ctx, 2, "kernel host twins are missing: the fake GPU cannot run separate");
  *state = st;
  return 0;
}

static int sep_cancelled(void *arg) { return ebb_cancelled((ebb_stage_ctx *)arg); }

static int sep_run(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out) {
  sep_state *st = state;
  ebb_sep_options o = st->o;
  o.cancelled = sep_cancelled;
  o.cancel_arg = ctx;
  ebb_item_info info;
  memset(&info, 0, sizeof info);
  info.size = sizeof info;
  if (ctx->host->item_find(in, "audio", &info) < 0 || info.kind != EBB_ITEM_AUDIO)
    return ebb_set_error(ctx, EBB_EINPUT, "separate: no AUDIO item \"audio\" (run decode first)");
  if (info.channels == 0 || info.rate == 0 || !info.samples)
    return ebb_set_error(ctx, EBB_EINPUT, "separate: item \"audio\" has no channels or rate 0");
  long long nx = (long long)info.frames;
  int rc = 0;
  float *mono = NULL, *voc = malloc(sizeof(float) * (size_t)(nx ? nx : 1));
  float *acc = malloc(sizeof(float) * (size_t)(nx ? nx : 1));
  const float *x = info.samples;
  if (!voc || !acc) {
    rc = ebb_seterr(EBB_ENOMEM, "separate: out of host memory for %lld samples", nx);
    goto done;
  }
  if (info.channels > 1) { /* decode gives mono; mix down anything else */
    if (!(mono = malloc(sizeof(float) * (size_t)(nx ? nx : 1)))) {
      rc = ebb_seterr(EBB_ENOMEM, "separate: out of host memory for %lld samples", nx);
      goto done;
    }
    for (long long i = 0; i < nx; i++) {
      float s = 0;
      for (uint32_t c = 0; c < info.channels; c++)
        s += info.samples[i * info.channels + c];
      mono[i] = s / (float)info.channels;
    }
    x = mono;
  }
  if (ebb_device_kind(ctx) == EBB_DEV_KIND_CUDA) {
    rc = ebb_separate_gpu(ctx, ebb_kernels_image(), &o, info.rate, x, nx, voc, acc, NULL);
    if (rc == EBB_EUNSUPPORTED) {
      sep_log(ctx, 2, "%s; running separation on the CPU (FFTW) instead", ebb_errmsg());
      rc = ebb_separate_cpu(&o, info.rate, x, nx, voc, acc, NULL);
    }
  } else {
    rc = ebb_separate_cpu(&o, info.rate, x, nx, voc, acc, NULL);
  }
  if (rc < 0)
    goto done;
  if ((rc = ctx->host->add_audio(out, "vocals", voc, (uint64_t)nx, 1, info.rate)) < 0 ||
      (rc = ctx->host->add_audio(out, "accompaniment", acc, (uint64_t)nx, 1, info.rate)) < 0) {
    ebb_errctx(rc, "separate: adding outputs: ");
    goto done;
  }
  sep_log(ctx, 0, "separated %.1f s of audio", (double)nx / info.rate);
done:
  free(mono);
  free(acc);
  free(voc);
  return rc < 0 ? sep_fail(ctx, rc) : 0;
}

static void sep_unload(ebb_stage_ctx *ctx, void *state) {
  (void)ctx;
  free(state);
}

const ebb_stage ebb_stage_separate = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "separate",
    .version = 1,
    .description = "vocals vs accompaniment: REPET-SIM (Rafii & Pardo 2012) + median-filter "
                   "harmonic mask (Fitzgerald 2010) over an STFT; ebb's own GPU kernels or FFTW",
    .options_schema = sep_schema,
    .needs_gpu = 1,
    .load = sep_load,
    .run = sep_run,
    .unload = sep_unload,
    .release = NULL,
};
