/* The separation algorithm behind the `separate` stage (separate.h): the CPU
 * path (FFTW, the whole mask on the host) and the GPU path (ebb's kernels
 * through ctx->host; only the similarity search, which chooses each frame's
 * repeating frames, runs on the host). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stages/audio/separate.h"
#include "stages/kernels/kernels.h"
#include "stages/kernels/sep_kernels.h"
#include "stages/audio/st_util.h"

_Static_assert(EBB_REPET_MAX_K <= EBB_KERNEL_MAX_MEDIAN &&
                   EBB_REPET_MAX_MEDIAN <= EBB_KERNEL_MAX_MEDIAN,
               "the mask kernels' median buffers must hold every median the host allows");

static int odd_at_least_1(double v) {
  int n = (int)lround(v);
  if (n < 1)
    n = 1;
  n |= 1;
  return n > EBB_REPET_MAX_MEDIAN ? EBB_REPET_MAX_MEDIAN : n;
}

int stg_sep_plan(const stg_sep_options *o, uint32_t rate, long long nx, stg_stft_shape *shape,
                 stg_repet_params *rp) {
  if (rate == 0)
    return ebb_seterr(EBB_EINVAL, "separate: sample rate 0");
  int rc = stg_stft_shape_init(shape, o->n_fft, o->hop, nx);
  if (rc < 0)
    return rc;
  if (o->repeats < 1 || o->repeats > 100)
    return ebb_seterr(EBB_EINVAL, "separate: option repeats=%d must be in 1..100", o->repeats);
  if (!(o->min_distance_s >= 0 && o->min_distance_s <= 60))
    return ebb_seterr(EBB_EINVAL, "separate: option min_distance=%g s must be in 0..60",
                      o->min_distance_s);
  if (!(o->max_lag_s > 0 && o->max_lag_s <= 600))
    return ebb_seterr(EBB_EINVAL, "separate: option max_lag=%g s must be in (0, 600]",
                      o->max_lag_s);
  if (o->pool < 1 || o->pool > shape->nbins)
    return ebb_seterr(EBB_EINVAL, "separate: option similarity_pool=%d must be in 1..%d", o->pool,
                      shape->nbins);
  if (!(o->vocal_low_hz >= 0 && o->vocal_high_hz > o->vocal_low_hz))
    return ebb_seterr(EBB_EINVAL, "separate: vocal band %g..%g Hz is empty", o->vocal_low_hz,
                      o->vocal_high_hz);
  if (!(o->quantile >= 0 && o->quantile <= 1))
    return ebb_seterr(EBB_EINVAL, "separate: option repeat_quantile=%g must be in 0..1",
                      o->quantile);
  if (!(o->outside_gain >= 0 && o->outside_gain <= 1))
    return ebb_seterr(EBB_EINVAL, "separate: option outside_gain=%g must be in 0..1",
                      o->outside_gain);
  double fps = (double)rate / o->hop, hz_per_bin = (double)rate / o->n_fft;
  memset(rp, 0, sizeof *rp);
  rp->k = o->repeats;
  rp->min_dist = (int)lround(o->min_distance_s * fps);
  if (rp->min_dist < 1)
    rp->min_dist = 1;
  double lag = o->max_lag_s * fps;
  rp->max_lag = lag > shape->nframes ? shape->nframes : (int)lround(lag);
  if (rp->max_lag < 1)
    rp->max_lag = 1;
  rp->pool = o->pool;
  rp->quantile = (float)o->quantile;
  rp->hpss = o->hpss;
  rp->hpss_time = odd_at_least_1(o->hpss_time_s * fps);
  rp->hpss_freq = odd_at_least_1(o->hpss_freq_hz / hz_per_bin);
  rp->band_lo = (int)floor(o->vocal_low_hz / hz_per_bin);
  rp->band_hi = (int)ceil(o->vocal_high_hz / hz_per_bin);
  rp->outside_gain = (float)o->outside_gain;
  rp->cancelled = o->cancelled;
  rp->cancel_arg = o->cancel_arg;
  return 0;
}

/* --- CPU path ------------------------------------------------------------ */

int stg_separate_cpu(const stg_sep_options *o, uint32_t rate, const float *x, long long nx,
                     float *voc, float *acc, float *mag_out) {
  return stg_separate_cpu_shared(o, rate, x, nx, voc, acc, mag_out, NULL);
}

int stg_separate_cpu_shared(const stg_sep_options *o, uint32_t rate, const float *x, long long nx,
                            float *voc, float *acc, float *mag_out, stg_repet_share *sh) {
  stg_stft_shape s;
  stg_repet_params rp;
  int rc = stg_sep_plan(o, rate, nx, &s, &rp);
  if (rc < 0)
    return rc;
  size_t cells = (size_t)s.nframes * (size_t)s.nbins;
  float *spec = stg_st_malloc(sizeof(float) * 2 * cells);
  float *vspec = stg_st_malloc(sizeof(float) * 2 * cells);
  float *mag = mag_out ? mag_out : stg_st_malloc(sizeof(float) * cells);
  float *mask = stg_st_malloc(sizeof(float) * cells);
  if (!spec || !vspec || !mag || !mask) {
    rc = ebb_seterr(EBB_ENOMEM, "separate: out of host memory for a %d x %d spectrogram", s.nframes,
                    s.nbins);
    goto done;
  }
  if ((rc = stg_stft_forward_cpu(&s, x, spec, mag)) < 0)
    goto done;
  if ((rc = stg_repet_vocal_mask_shared(mag, s.nframes, s.nbins, &rp, sh, mask)) < 0)
    goto done;
  for (size_t c = 0; c < cells; c++) {
    float m = mask[c], am = 1.0f - m;
    float re = spec[2 * c], im = spec[2 * c + 1];
    vspec[2 * c] = re * m;
    vspec[2 * c + 1] = im * m;
    spec[2 * c] = re * am;
    spec[2 * c + 1] = im * am;
  }
  if ((rc = stg_stft_inverse_cpu(&s, vspec, voc)) < 0 || !acc)
    goto done;
  rc = stg_stft_inverse_cpu(&s, spec, acc);
done:
  stg_st_free(mask);
  if (mag != mag_out)
    stg_st_free(mag);
  stg_st_free(vspec);
  stg_st_free(spec);
  return rc;
}

/* --- GPU path ------------------------------------------------------------ */

typedef struct gpu_run {
  ebb_stage_ctx *ctx;
  const void *image;
  int launched; /* a launch has succeeded */
  uint64_t d_x, d_win, d_tw, d_mix, d_voc, d_mag, d_mask, d_y, d_picks, d_npicks, d_harm;
} gpu_run;

static int host_err(gpu_run *g, int rc, const char *what) {
  (void)g;
  if (rc == 0)
    return 0;
  return ebb_errctx(rc, "separate (GPU path): %s: ", what);
}

static int launch(gpu_run *g, const char *name, unsigned grid, unsigned block, unsigned shmem,
                  void **params) {
  const unsigned gr[3] = {grid, 1, 1}, bl[3] = {block, 1, 1};
  /* Launching by name runs the host twin on the fake GPU: every kernel must
   * have one (this reference also keeps the twins linked in). */
  if (!g->image && !stg_sep_kernel_has_twin(name))
    return ebb_seterr(EBB_EINVAL, "separate: kernel %s has no host twin", name);
  int rc = g->ctx->host->launch(g->ctx, g->image, name, gr, bl, shmem, params);
  if (rc < 0) {
    if (!g->launched)
      return ebb_errctx(EBB_EUNSUPPORTED, "separate: the device cannot run kernel %s (%s): ", name,
                        g->image ? "the embedded kernel image does not load here"
                                 : "no kernel image was built (nvcc absent)");
    return ebb_errctx(rc, "separate: kernel %s (grid %u, block %u): ", name, grid, block);
  }
  g->launched = 1;
  return 0;
}

/* Frames per launch of a per-frame kernel whose frame costs about
 * per_frame operations: some 2^20 operations a launch (about a ms on the
 * fake GPU's host twins, 10 ms under ASan; microseconds on a GPU), at least
 * one frame. */
static int frames_per_launch(double per_frame) {
  double k = 1048576.0 / (per_frame > 1.0 ? per_frame : 1.0);
  return k < 1.0 ? 1 : k > 1e9 ? 1000000000 : (int)k;
}

/* Kernel `name` over frames [0, nf) in launches of at most `step` frames,
 * the job's cancellation checked before each (a launch cannot be stopped
 * midway): the device addresses *slot[i] (params point at them) advance by
 * stride[i] bytes a frame, and are restored after; *f0 (may be NULL) is set
 * to each launch's first frame, for a kernel that takes it. */
static int launch_frames(gpu_run *g, const char *name, int nf, int step, unsigned bs,
                         unsigned shmem, void **params, uint64_t *const *slot,
                         const uint64_t *stride, int nslot, int *f0) {
  uint64_t base[8];
  int rc = 0;
  for (int i = 0; i < nslot; i++)
    base[i] = *slot[i];
  for (int f = 0; f < nf && rc == 0; f += step) {
    if (ebb_cancelled(g->ctx)) {
      rc = ebb_seterr(EBB_ECANCELED, "separate: cancelled before kernel %s at frame %d of %d", name,
                      f, nf);
      break;
    }
    for (int i = 0; i < nslot; i++)
      *slot[i] = base[i] + (uint64_t)f * stride[i];
    if (f0)
      *f0 = f;
    rc = launch(g, name, (unsigned)(nf - f < step ? nf - f : step), bs, shmem, params);
  }
  for (int i = 0; i < nslot; i++)
    *slot[i] = base[i];
  return rc < 0 ? rc : 0;
}

static int alloc(gpu_run *g, size_t bytes, uint64_t *d) {
  int rc = ebb_dev_alloc(g->ctx, bytes ? bytes : 4, d);
  if (rc < 0)
    return ebb_errctx(rc, "separate: device allocation of %zu bytes: ", bytes);
  return 0;
}

static int inverse_to_host(gpu_run *g, const stg_stft_shape *s, uint64_t d_frames, float *out) {
  int n = s->n, log2n = s->log2n, hop = s->hop, pad = s->pad, nf = s->nframes;
  unsigned bs = (unsigned)(n / 2 < EBB_KERNEL_MAX_THREADS ? n / 2 : EBB_KERNEL_MAX_THREADS);
  float sign = -1.0f, scale = 1.0f / (float)n;
  void *fp[] = {&d_frames, &g->d_tw, &n, &log2n, &sign, &scale};
  uint64_t *fs[] = {&d_frames}, fstride[] = {sizeof(float) * 2 * (uint64_t)n};
  int rc = launch_frames(g, "ebb_fft_radix2", nf, frames_per_launch(8.0 * n * log2n), bs,
                         (unsigned)(sizeof(float) * 2 * n), fp, fs, fstride, 1, NULL);
  if (rc < 0)
    return rc;
  long long ny = s->nx;
  if (ny == 0)
    return 0;
  void *op[] = {&d_frames, &g->d_win, &g->d_y, &ny, &n, &hop, &pad, &nf};
  unsigned blocks = (unsigned)((ny + EBB_KERNEL_OLA_THREADS - 1) / EBB_KERNEL_OLA_THREADS);
  if ((rc = launch(g, "ebb_istft_overlap_add", blocks, EBB_KERNEL_OLA_THREADS, 0, op)) < 0)
    return rc;
  return host_err(g, g->ctx->host->copy_dtoh(g->ctx, out, g->d_y, sizeof(float) * (size_t)ny),
                  "copying the output to the host");
}

uint64_t stg_separate_gpu_bytes(const stg_sep_options *o, uint32_t rate, long long nx) {
  stg_stft_shape s;
  stg_repet_params rp;
  if (stg_sep_plan(o, rate, nx, &s, &rp) < 0)
    return 0;
  uint64_t cells = (uint64_t)s.nframes * (uint64_t)s.nbins;
  uint64_t frames = (uint64_t)s.nframes * (uint64_t)s.n * 2;
  uint64_t picks = (uint64_t)s.nframes * ((uint64_t)rp.k + 1);
  return 4 * (2 * (uint64_t)nx + 2 * (uint64_t)s.n + 2 * frames + 2 * cells + picks +
              (rp.hpss ? cells : 1));
}

/* Every device buffer of the run, then the signal, window and twiddles on
 * the device. tables: the window (n floats) then the twiddles (n floats). */
static int gpu_setup(gpu_run *g, const stg_stft_shape *s, const stg_repet_params *rp,
                     const float *x, long long nx, const float *tables) {
  ebb_stage_ctx *ctx = g->ctx;
  int n = s->n, nf = s->nframes, rc;
  size_t cells = (size_t)nf * (size_t)s->nbins, pick_cells = (size_t)nf * (size_t)rp->k;
  size_t frame_bytes = sizeof(float) * 2 * (size_t)n * (size_t)nf;
  if ((rc = alloc(g, sizeof(float) * (size_t)nx, &g->d_x)) < 0 ||
      (rc = alloc(g, sizeof(float) * (size_t)n, &g->d_win)) < 0 ||
      (rc = alloc(g, sizeof(float) * (size_t)n, &g->d_tw)) < 0 ||
      (rc = alloc(g, frame_bytes, &g->d_mix)) < 0 || (rc = alloc(g, frame_bytes, &g->d_voc)) < 0 ||
      (rc = alloc(g, sizeof(float) * cells, &g->d_mag)) < 0 ||
      (rc = alloc(g, sizeof(float) * cells, &g->d_mask)) < 0 ||
      (rc = alloc(g, sizeof(float) * (size_t)nx, &g->d_y)) < 0 ||
      (rc = alloc(g, sizeof(int) * pick_cells, &g->d_picks)) < 0 ||
      (rc = alloc(g, sizeof(int) * (size_t)nf, &g->d_npicks)) < 0 ||
      (rc = alloc(g, sizeof(float) * (rp->hpss ? cells : 1), &g->d_harm)) < 0)
    return rc;
  if ((rc = host_err(g, ctx->host->copy_htod(ctx, g->d_x, x, sizeof(float) * (size_t)nx),
                     "copying the signal")) < 0 ||
      (rc = host_err(g, ctx->host->copy_htod(ctx, g->d_win, tables, sizeof(float) * (size_t)n),
                     "copying the window")) < 0)
    return rc;
  return host_err(g, ctx->host->copy_htod(ctx, g->d_tw, tables + n, sizeof(float) * (size_t)n),
                  "copying the twiddles");
}

/* Forward STFT of d_x into d_mix and its magnitudes into d_mag and mag. */
static int gpu_forward(gpu_run *g, const stg_stft_shape *s, long long nx, float *mag) {
  int n = s->n, nbins = s->nbins, hop = s->hop, pad = s->pad, log2n = s->log2n, nf = s->nframes;
  unsigned bs = (unsigned)(n / 2 < EBB_KERNEL_MAX_THREADS ? n / 2 : EBB_KERNEL_MAX_THREADS);
  long long nxl = nx;
  int f0 = 0;
  void *wp[] = {&g->d_x, &nxl, &g->d_win, &g->d_mix, &n, &hop, &pad, &f0};
  int rc = launch_frames(g, "ebb_stft_window", nf, frames_per_launch(8.0 * n), bs, 0, wp, NULL,
                         NULL, 0, &f0);
  if (rc < 0)
    return rc;
  float fwd = 1.0f, one = 1.0f;
  void *fp[] = {&g->d_mix, &g->d_tw, &n, &log2n, &fwd, &one};
  uint64_t *fs[] = {&g->d_mix}, fstride[] = {sizeof(float) * 2 * (uint64_t)n};
  if ((rc = launch_frames(g, "ebb_fft_radix2", nf, frames_per_launch(8.0 * n * log2n), bs,
                          (unsigned)(sizeof(float) * 2 * n), fp, fs, fstride, 1, NULL)) < 0)
    return rc;
  void *mp[] = {&g->d_mix, &g->d_mag, &n, &nbins};
  uint64_t *ms[] = {&g->d_mix, &g->d_mag};
  uint64_t mstride[] = {sizeof(float) * 2 * (uint64_t)n, sizeof(float) * (uint64_t)nbins};
  if ((rc = launch_frames(g, "ebb_stft_magnitude", nf, frames_per_launch(4.0 * nbins), bs, 0, mp,
                          ms, mstride, 2, NULL)) < 0)
    return rc;
  size_t cells = (size_t)nf * (size_t)nbins;
  return host_err(g, g->ctx->host->copy_dtoh(g->ctx, mag, g->d_mag, sizeof(float) * cells),
                  "copying the magnitudes");
}

/* The repeating frames (picks, npicks: host buffers of the search's result)
 * to the device, then the mask kernels and its application: vocals into
 * d_voc, accompaniment in place of the mixture. */
static int gpu_mask(gpu_run *g, const stg_stft_shape *s, const stg_repet_params *rp,
                    const int *picks, const int *npicks) {
  ebb_stage_ctx *ctx = g->ctx;
  int n = s->n, nbins = s->nbins, nf = s->nframes, rc;
  unsigned bs = (unsigned)(n / 2 < EBB_KERNEL_MAX_THREADS ? n / 2 : EBB_KERNEL_MAX_THREADS);
  size_t pick_cells = (size_t)nf * (size_t)rp->k;
  /* The mask kernel runs in launches of `step` frames (below); its magnitude
   * pointer is moved to each launch's first frame, so the picks it reads
   * go to the device relative to that frame. */
  int step = frames_per_launch((double)nbins * (rp->k * 8.0 + 4.0));
  int *rel = stg_st_malloc(sizeof(int) * (pick_cells ? pick_cells : 1));
  if (!rel)
    return ebb_seterr(EBB_ENOMEM, "separate: out of host memory for %zu picks", pick_cells);
  for (size_t c = 0; c < pick_cells; c++)
    rel[c] = picks[c] - (int)((c / (size_t)rp->k) / (size_t)step) * step;
  rc = host_err(g, ctx->host->copy_htod(ctx, g->d_picks, rel, sizeof(int) * pick_cells),
                "copying the repeating frames");
  stg_st_free(rel);
  if (rc < 0 ||
      (rc = host_err(g, ctx->host->copy_htod(ctx, g->d_npicks, npicks, sizeof(int) * (size_t)nf),
                     "copying the repeating frame counts")) < 0)
    return rc;
  int k = rp->k, hpss = rp->hpss, ht = rp->hpss_time / 2, hf = rp->hpss_freq / 2;
  int band_lo = rp->band_lo, band_hi = rp->band_hi;
  float gain = rp->outside_gain;
  float q = rp->quantile;
  void *rmp[] = {&g->d_mag, &g->d_picks, &g->d_npicks, &k, &g->d_mask, &nbins, &q};
  uint64_t row = sizeof(float) * (uint64_t)nbins, spec = sizeof(float) * 2 * (uint64_t)n;
  uint64_t *rs[] = {&g->d_mag, &g->d_picks, &g->d_npicks, &g->d_mask};
  uint64_t rstride[] = {row, sizeof(int) * (uint64_t)k, sizeof(int), row};
  if ((rc = launch_frames(g, "ebb_repet_mask", nf, step, bs, 0, rmp, rs, rstride, 4, NULL)) < 0)
    return rc;
  if (hpss) {
    int f0 = 0;
    void *hp[] = {&g->d_mag, &g->d_harm, &nf, &nbins, &ht, &f0};
    int hstep = frames_per_launch((double)nbins * (2 * ht + 1) * 8.0);
    if ((rc = launch_frames(g, "ebb_hpss_harmonic", nf, hstep, bs, 0, hp, NULL, NULL, 0, &f0)) < 0)
      return rc;
  }
  void *fp2[] = {&g->d_mag, &g->d_harm, &g->d_mask, &nbins, &hpss, &hf, &band_lo, &band_hi, &gain};
  uint64_t *fs2[] = {&g->d_mag, &g->d_harm, &g->d_mask};
  uint64_t fstride2[] = {row, hpss ? row : 0, row};
  if ((rc = launch_frames(g, "ebb_mask_finish", nf, frames_per_launch(nbins * (2.0 * hf + 9) * 8),
                          bs, 0, fp2, fs2, fstride2, 3, NULL)) < 0)
    return rc;
  void *ap[] = {&g->d_mix, &g->d_mask, &g->d_voc, &g->d_mix, &n, &nbins};
  uint64_t *as[] = {&g->d_mix, &g->d_mask, &g->d_voc}, astride[] = {spec, row, spec};
  return launch_frames(g, "ebb_sep_apply_mask", nf, frames_per_launch(8.0 * n), bs, 0, ap, as,
                       astride, 3, NULL);
}

/* Frees every device buffer, in reverse order of allocation; a zero handle
 * was never allocated. */
static void gpu_release(gpu_run *g) {
  uint64_t *bufs[] = {&g->d_harm, &g->d_npicks, &g->d_picks, &g->d_y,   &g->d_mask, &g->d_mag,
                      &g->d_voc,  &g->d_mix,    &g->d_tw,    &g->d_win, &g->d_x};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
    if (*bufs[i]) {
      ebb_dev_free(g->ctx, *bufs[i]);
      *bufs[i] = 0;
    }
}

/* Progress and a cancellation check between the phases. */
static int gpu_checkpoint(ebb_stage_ctx *ctx, double progress, const char *after) {
  if (ctx->host->progress)
    ctx->host->progress(ctx, progress);
  if (ebb_cancelled(ctx))
    return ebb_seterr(EBB_ECANCELED, "separate: cancelled after %s", after);
  return 0;
}

int stg_separate_gpu(ebb_stage_ctx *ctx, const void *image, const stg_sep_options *o, uint32_t rate,
                     const float *x, long long nx, float *voc, float *acc, float *mag_out) {
  return stg_separate_gpu_shared(ctx, image, o, rate, x, nx, voc, acc, mag_out, NULL);
}

int stg_separate_gpu_shared(ebb_stage_ctx *ctx, const void *image, const stg_sep_options *o,
                            uint32_t rate, const float *x, long long nx, float *voc, float *acc,
                            float *mag_out, stg_repet_share *sh) {
  stg_stft_shape s;
  stg_repet_params rp;
  int rc = stg_sep_plan(o, rate, nx, &s, &rp);
  if (rc < 0)
    return rc;
  gpu_run g = {.ctx = ctx, .image = image};
  int n = s.n, nf = s.nframes;
  size_t cells = (size_t)nf * (size_t)s.nbins;
  float *tables = stg_st_malloc(sizeof(float) * 2 * (size_t)n);
  float *mag = mag_out ? mag_out : stg_st_malloc(sizeof(float) * cells);
  int *picks = stg_st_malloc(sizeof(int) * (size_t)nf * (size_t)rp.k);
  int *npicks = stg_st_malloc(sizeof(int) * (size_t)nf);
  if (!tables || !mag || !picks || !npicks) {
    rc = ebb_seterr(EBB_ENOMEM, "separate: out of host memory for a %d x %d spectrogram", nf,
                    s.nbins);
    goto done;
  }
  stg_stft_hann(n, tables);
  stg_stft_twiddles(n, tables + n);
  /* the similarity search (which frames repeat which) runs on the host
   * between the forward STFT and the mask kernels */
  if ((rc = gpu_setup(&g, &s, &rp, x, nx, tables)) < 0 || (rc = gpu_forward(&g, &s, nx, mag)) < 0 ||
      (rc = gpu_checkpoint(ctx, 0.2, "the forward STFT")) < 0 ||
      (rc = stg_repet_picks_shared(mag, nf, s.nbins, &rp, picks, npicks, sh)) < 0 ||
      (rc = gpu_checkpoint(ctx, 0.7, "the similarity search")) < 0 ||
      (rc = gpu_mask(&g, &s, &rp, picks, npicks)) < 0 ||
      (rc = inverse_to_host(&g, &s, g.d_voc, voc)) < 0 || !acc)
    goto done;
  rc = inverse_to_host(&g, &s, g.d_mix, acc);
done:
  gpu_release(&g);
  stg_st_free(npicks);
  stg_st_free(picks);
  if (mag != mag_out)
    stg_st_free(mag);
  stg_st_free(tables);
  return rc;
}
