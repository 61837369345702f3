/* The `separate` stage (separate.h has the method): "audio" -> "vocals" and
 * "accompaniment", same rate and length. CUDA device: ebb's kernels; CPU
 * device: FFTW. */
#include "stages/audio/separate.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/stage.h"
#include "stages/options.h"
#include "stages/audio/st_util.h"
#include "stages/kernels/kernels.h"

typedef struct sep_state {
  stg_sep_options o;
  stg_sep_options melody; /* the stricter pass; repeats 0: none */
} sep_state;

/* The options, each written once (stages/options.h); stg_sep_options_default
 * takes its defaults from here too. Finer checks: stg_sep_plan. */
#define SEP_OPTIONS(NUM, INT, STR, BOOL, SEP, ...)                                                 \
  INT(n_fft, 1024, 64, 4096, "STFT size (power of two, 64..4096)")                                 \
  SEP INT(hop, 256, 1, 4096, "STFT hop in samples") SEP                                            \
  INT(repeats, 30, 1, 100, "REPET-SIM k: most similar frames per frame") SEP                       \
  NUM(min_distance, 1.0, 0, 60, "seconds between two repeating frames") SEP                        \
  NUM(max_lag, 30.0, 0.001, 600, "similarity search radius in seconds") SEP                        \
  INT(similarity_pool, 4, 1, 2049, "STFT bins per similarity band") SEP                            \
  NUM(repeat_quantile, 0.4, 0, 1,                                                                  \
      "the repeating model is this quantile of the similar frames (0.5: REPET-SIM's median); "     \
      "lower keeps a melody that holds or repeats a chord tone for seconds") SEP                   \
  BOOL(hpss, 1, "apply a median-filter harmonic mask (Fitzgerald 2010)") SEP                       \
  NUM(vocal_low_hz, 80, 0, 100000, "vocal band low edge") SEP                                      \
  NUM(vocal_high_hz, 6000, 0, 100000, "vocal band high edge") SEP                                  \
  NUM(outside_gain, 0.3, 0, 1, "vocal mask gain outside the band") SEP                             \
  INT(melody_repeats, 8, 0, 100,                                                                   \
      "also add the AUDIO item melody: a stricter separation (this k, melody_min_distance) that "  \
      "the "                                                                                       \
      "pitch stage's salience reads; it removes chords struck on every beat that the default "     \
      "keeps; 0: off") SEP                                                                         \
  NUM(melody_min_distance, 0.5, 0, 60, "see melody_repeats: seconds between repeating frames") SEP \
  NUM(melody_quantile, 0.3, 0, 1, "see melody_repeats: its repeat_quantile")
EBB_STAGE_OPTIONS(SEP_OPTIONS)

static void set_options(const stage_opts *v, stg_sep_options *o) {
  o->n_fft = v->n_fft;
  o->hop = v->hop;
  o->repeats = v->repeats;
  o->min_distance_s = v->min_distance;
  o->max_lag_s = v->max_lag;
  o->pool = v->similarity_pool;
  o->quantile = v->repeat_quantile;
  o->hpss = v->hpss;
  o->vocal_low_hz = v->vocal_low_hz;
  o->vocal_high_hz = v->vocal_high_hz;
  o->outside_gain = v->outside_gain;
}

void stg_sep_options_default(stg_sep_options *o) {
  stage_opts v; /* the option table's defaults, then the fields that are not options */
  stage_opts_read("separate", NULL, &v); /* no JSON: the defaults, cannot fail */
  set_options(&v, o);
  o->hpss_time_s = 0.2;
  o->hpss_freq_hz = 500.0;
  o->cancelled = NULL;
  o->cancel_arg = NULL;
}

/* o from the options; *melody (may be NULL) gets the "melody" pass's
 * options (repeats 0: no such pass). */
static int read_options(const char *json, stg_sep_options *o, stg_sep_options *melody) {
  stg_sep_options_default(o);
  json_t *root;
  stage_opts v;
  int rc = stage_opts_parse("separate", json, &root, &v);
  json_decref(root);
  if (rc)
    return rc;
  set_options(&v, o);
  /* Check the ranges now, at load, against the default working rate. */
  stg_stft_shape s;
  stg_repet_params rp;
  rc = stg_sep_plan(o, 16000, 0, &s, &rp);
  if (rc < 0)
    return ebb_errctx(EBB_ECONFIG, "bad options: ");
  if (melody) {
    *melody = *o;
    melody->repeats = v.melody_repeats;
    melody->min_distance_s = v.melody_min_distance;
    melody->quantile = v.melody_quantile;
    if (v.melody_repeats > 0 && stg_sep_plan(melody, 16000, 0, &s, &rp) < 0)
      return ebb_errctx(EBB_ECONFIG,
                        "bad options (melody_repeats, melody_min_distance, melody_quantile): ");
  }
  return 0;
}

static int sep_load(ebb_stage_ctx *ctx, const char *options_json, void **state) {
  sep_state *st = stg_st_calloc(1, sizeof *st);
  if (!st)
    return ebb_set_error(ctx, EBB_ENOMEM, "separate: out of host memory");
  int rc = read_options(options_json, &st->o, &st->melody);
  if (rc < 0) {
    stg_st_free(st);
    return stg_st_fail(ctx, rc, "%s", ebb_errmsg());
  }
  /* The twins are the kernels' definition on the fake GPU; referencing their
   * table here also keeps them linked into every program with this stage. */
  if (!stg_sep_kernel_has_twin("ebb_fft_radix2"))
    ebb_stage_log(ctx, 2, "kernel host twins are missing: the fake GPU cannot run separate");
  *state = st;
  return 0;
}

static int sep_cancelled(void *arg) { return ebb_cancelled((ebb_stage_ctx *)arg); }

/* The GPU path on a CUDA device (the CPU when it cannot run there), else the CPU. */
/* sh (may be NULL): what the CPU path's two passes share */
static int separate_any(ebb_stage_ctx *ctx, const stg_sep_options *o, uint32_t rate, const float *x,
                        long long nx, float *voc, float *acc, stg_repet_share *sh) {
  if (ebb_device_kind(ctx) != EBB_DEV_KIND_CUDA)
    return stg_separate_cpu_shared(o, rate, x, nx, voc, acc, NULL, sh);
  int rc = stg_separate_gpu_shared(ctx, stg_kernels_image(), o, rate, x, nx, voc, acc, NULL, sh);
  if (rc == EBB_EUNSUPPORTED) {
    stg_st_log(ctx, 2, "%s; running separation on the CPU (FFTW) instead", ebb_errmsg());
    rc = stg_separate_cpu_shared(o, rate, x, nx, voc, acc, NULL, sh);
  }
  return rc;
}

/* The "melody" pass shares the first pass's similarity rows (the passes
 * differ only in the REPET picks; the melody pass's picks are made in the
 * first pass) and, on the CPU, its harmonic factor (on a GPU that is on the
 * device): what the passes can share, in s (nothing without a melody pass
 * or where the plans differ; a buffer that cannot be had is not shared). */
typedef struct sep_share {
  stg_repet_share sh;
  stg_repet_params next; /* the melody pass's; sh.next points here */
} sep_share;

static void sep_share_init(ebb_stage_ctx *ctx, const stg_sep_options *o, const stg_sep_options *m,
                           uint32_t rate, long long nx, sep_share *s) {
  stg_stft_shape s1, s2;
  stg_repet_params r1;
  memset(s, 0, sizeof *s);
  if (m->repeats <= 0 || stg_sep_plan(o, rate, nx, &s1, &r1) < 0 ||
      stg_sep_plan(m, rate, nx, &s2, &s->next) < 0 || s1.nframes != s2.nframes ||
      s1.nbins != s2.nbins)
    return;
  size_t cells = (size_t)s1.nframes * (size_t)s1.nbins;
  if (ebb_device_kind(ctx) != EBB_DEV_KIND_CUDA && r1.hpss && s->next.hpss &&
      r1.hpss_time == s->next.hpss_time && r1.hpss_freq == s->next.hpss_freq)
    s->sh.hpss = stg_st_malloc(sizeof(float) * cells);
  if (r1.pool == s->next.pool && r1.max_lag == s->next.max_lag) {
    s->sh.picks = stg_st_malloc(sizeof(int) * (size_t)s1.nframes * (size_t)s->next.k);
    s->sh.npicks = stg_st_malloc(sizeof(int) * (size_t)s1.nframes);
    if (s->sh.picks && s->sh.npicks)
      s->sh.next = &s->next;
  }
}

static void sep_share_free(sep_share *s) {
  stg_st_free(s->sh.hpss);
  stg_st_free(s->sh.picks);
  stg_st_free(s->sh.npicks);
}

static int sep_run_counted(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out) {
  sep_state *st = state;
  stg_sep_options o = st->o;
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
  float *mono = NULL, *mel = NULL;
  sep_share share = {.sh = {.hpss = NULL}};
  stg_st_watch(ctx); /* the DSP's inner loops see a cancellation (st_util.h) */
  float *voc = stg_st_malloc(sizeof(float) * (size_t)(nx ? nx : 1));
  float *acc = stg_st_malloc(sizeof(float) * (size_t)(nx ? nx : 1));
  const float *x = info.samples;
  if (!voc || !acc) {
    rc = ebb_seterr(EBB_ENOMEM, "separate: out of host memory for %lld samples", nx);
    goto done;
  }
  if (info.channels > 1) { /* decode gives mono; mix down anything else */
    if (!(mono = stg_st_malloc(sizeof(float) * (size_t)(nx ? nx : 1)))) {
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
  /* both passes before any output item, so the items (the job's) do not
   * sit under the second pass's buffers */
  sep_share_init(ctx, &o, &st->melody, info.rate, nx, &share);
  if ((rc = separate_any(ctx, &o, info.rate, x, nx, voc, acc, &share.sh)) < 0)
    goto done;
  if (st->melody.repeats > 0) {
    stg_sep_options m = st->melody;
    m.cancelled = o.cancelled;
    m.cancel_arg = o.cancel_arg;
    if (!(mel = stg_st_malloc(sizeof(float) * (size_t)(nx ? nx : 1)))) {
      rc = ebb_seterr(EBB_ENOMEM, "separate: out of host memory for %lld samples", nx);
      goto done;
    }
    if ((rc = separate_any(ctx, &m, info.rate, x, nx, mel, NULL, &share.sh)) < 0)
      goto done;
  }
  if ((rc = ctx->host->add_audio(out, "vocals", voc, (uint64_t)nx, 1, info.rate)) < 0 ||
      (rc = ctx->host->add_audio(out, "accompaniment", acc, (uint64_t)nx, 1, info.rate)) < 0 ||
      (mel && (rc = ctx->host->add_audio(out, "melody", mel, (uint64_t)nx, 1, info.rate)) < 0)) {
    ebb_errctx(rc, "separate: adding outputs: ");
    goto done;
  }
  stg_st_log(ctx, 0, "separated %.1f s of audio", (double)nx / info.rate);
done:
  stg_st_unwatch();
  sep_share_free(&share);
  stg_st_free(mel);
  stg_st_free(mono);
  stg_st_free(acc);
  stg_st_free(voc);
  return rc < 0 ? stg_st_fail(ctx, rc, "%s", ebb_errmsg()) : 0;
}

static void sep_unload(ebb_stage_ctx *ctx, void *state) {
  (void)ctx;
  stg_st_free(state);
}

/* Declared needs (issue 17): the GPU path's device buffers for the job's
 * "audio" item (stg_separate_gpu_bytes, exact but for the allocator's
 * 512-byte rounding: about 1.47 MiB per second of 16 kHz audio at the
 * default options; the "melody" pass reuses as much with fewer picks); host:
 * the outputs (one more with the "melody" pass), the signal and the host
 * spectrogram, roughly. No input: 0 bytes plus the per-second figures. */
static int sep_estimate(const ebb_host_api *host, const char *options_json, const ebb_items *in,
                        ebb_estimate *out) {
  stg_sep_options o, m;
  int rc = read_options(options_json, &o, &m);
  if (rc < 0)
    return EBB_ECONFIG;
  uint64_t outputs = m.repeats > 0 ? 4 : 3;
  ebb_item_info info;
  memset(&info, 0, sizeof info);
  info.size = sizeof info;
  long long nx = 0;
  uint32_t rate = 16000;
  if (in && host->item_find(in, "audio", &info) >= 0 && info.kind == EBB_ITEM_AUDIO && info.rate) {
    nx = (long long)info.frames;
    rate = info.rate;
  }
  uint64_t minute = stg_separate_gpu_bytes(&o, rate, 60LL * rate);
  out->device_bytes = nx ? stg_separate_gpu_bytes(&o, rate, nx) : 0;
  out->host_bytes = nx ? out->device_bytes / 2 + outputs * sizeof(float) * (uint64_t)nx : 0;
  out->device_bytes_per_s = (double)minute / 60.0;
  out->host_bytes_per_s = (double)minute / 120.0 + (double)outputs * sizeof(float) * rate;
  return 0;
}

/* Work (the stage ABI's `work`), at the 16 kHz working rate (decode's
 * default: the stage is not told the rate decode will give it): F = input_s
 * * 16000 / hop frames; each costs SEP_FRAME_S per n_fft point (the STFT,
 * the masks, the median filters and the inverse), and the similarity search
 * compares each frame with the min(F, 2 max_lag / hop + 1) frames around it
 * over n_fft / 2 + 1 bins pooled by similarity_pool, SEP_SIM_S a pair-bin.
 * Both passes (the "melody" one too) are in the constants. Measured with
 * `ebb run --device cpu` on songgen's song repeated to 60 s (one core of the
 * 2-core development machine, wall "done in"): defaults 4.43 s, pool 1 11.97
 * s (so the search is 2.51 s of the 4.43 at the defaults: 1.39e-9 s a
 * pair-bin, the rest 1.92 s for 3750 frames of 1024 points: 5.0e-7 s a
 * point), hop 512 1.73 s (the model: 1.59), n_fft 2048 6.85 s (the model:
 * 8.9, on the safe side). `repeats` and the quantiles cost little (sorts of
 * at most 100) and are not in it. */
#define SEP_FRAME_S 5.0e-7
#define SEP_SIM_S 1.39e-9
double stg_separate_work_s(const stg_sep_options *o, double input_s) {
  double frames = input_s * 16000.0 / o->hop;
  double around = 2.0 * o->max_lag_s * 16000.0 / o->hop + 1.0;
  if (around > frames)
    around = frames;
  double bins = (o->n_fft / 2 + 1) / (double)o->pool;
  return frames * (SEP_FRAME_S * o->n_fft + SEP_SIM_S * around * bins);
}

static int sep_work(const ebb_host_api *host, const char *options_json, double input_s,
                    ebb_work *out) {
  (void)host;
  stg_sep_options o, m;
  if (read_options(options_json, &o, &m) < 0)
    return EBB_ECONFIG;
  out->cpu_s = stg_separate_work_s(&o, input_s);
  snprintf(out->drivers, sizeof out->drivers, "n_fft %d, hop %d, max_lag %g, similarity_pool %d",
           o.n_fft, o.hop, o.max_lag_s, o.pool);
  return 0;
}

/* Its host working buffers are the stage's (stg_st_malloc: host_alloc). */
static int sep_run(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out) {
  stg_st_host_begin(ctx);
  int rc = sep_run_counted(ctx, state, in, out);
  stg_st_host_end();
  return rc;
}

const ebb_stage stg_stage_separate = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "separate",
    /* keys the result cache: bump it whenever the outputs change (2: the
     * stricter melody pass and the lower repeating quantile) */
    .version = 2,
    .description = "vocals vs accompaniment: REPET-SIM (Rafii & Pardo 2012) + median-filter "
                   "harmonic mask (Fitzgerald 2010) over an STFT; ebb's own GPU kernels or FFTW",
    .options_schema = stage_opts_schema,
    .needs_gpu = 1,
    .load = sep_load,
    .run = sep_run,
    .unload = sep_unload,
    .release = NULL,
    .estimate = sep_estimate,
    .work = sep_work,
};
