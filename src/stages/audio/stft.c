/* The CPU short-time Fourier transform and its inverse (stft.h) with FFTW:
 * the reference the GPU kernels are checked against. */
#include "stages/audio/stft.h"

#include <fftw3.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/st_util.h"

/* FFTW's planner is not thread-safe (executing a plan is): stages may run in
 * parallel jobs, so planning and destroying plans is serialised. */
static pthread_mutex_t plan_lock = PTHREAD_MUTEX_INITIALIZER;

void stg_fftw_plan_lock(int lock) {
  if (lock)
    pthread_mutex_lock(&plan_lock);
  else
    pthread_mutex_unlock(&plan_lock);
}

int stg_stft_shape_init(stg_stft_shape *s, int n, int hop, long long nx) {
  memset(s, 0, sizeof *s);
  int log2n = 0;
  while ((1 << log2n) < n && log2n < 30)
    log2n++;
  if (n < 64 || n > 4096 || (1 << log2n) != n)
    return ebb_seterr(EBB_EINVAL, "STFT size n_fft=%d: must be a power of two in 64..4096", n);
  if (hop < 1 || hop > n)
    return ebb_seterr(EBB_EINVAL, "STFT hop=%d: must be in 1..n_fft (%d)", hop, n);
  if (nx < 0)
    return ebb_seterr(EBB_EINVAL, "STFT of a negative length (%lld)", nx);
  long long padded = nx + 2LL * (n / 2);
  long long frames = padded <= n ? 1 : 1 + (padded - n + hop - 1) / hop;
  if (frames > INT_MAX / 2 || frames * (long long)n > (1LL << 40))
    return ebb_seterr(EBB_EINVAL, "STFT of %lld samples: too many frames (%lld)", nx, frames);
  s->n = n;
  s->hop = hop;
  s->log2n = log2n;
  s->nbins = n / 2 + 1;
  s->pad = n / 2;
  s->nframes = (int)frames;
  s->nx = nx;
  return 0;
}

void stg_stft_hann(int n, float *win) {
  for (int i = 0; i < n; i++)
    win[i] = (float)(0.5 - 0.5 * cos(2.0 * M_PI * (double)i / (double)n));
}

void stg_stft_twiddles(int n, float *tw) {
  for (int m = 0; m < n / 2; m++) {
    tw[2 * m] = (float)cos(2.0 * M_PI * (double)m / (double)n);
    tw[2 * m + 1] = (float)-sin(2.0 * M_PI * (double)m / (double)n);
  }
}

/* A forward (real in, complex out) or, given cin/rout, an inverse n-point plan, made under
 * plan_lock (FFTW's planner is not thread-safe); what names the transform in the error. */
static int plan_1d(int n, float *rin, fftwf_complex *cout, fftwf_complex *cin, float *rout,
                   const char *what, fftwf_plan *plan) {
  pthread_mutex_lock(&plan_lock);
  *plan = cin ? fftwf_plan_dft_c2r_1d(n, cin, rout, FFTW_ESTIMATE)
              : fftwf_plan_dft_r2c_1d(n, rin, cout, FFTW_ESTIMATE);
  pthread_mutex_unlock(&plan_lock);
  if (!*plan)
    return ebb_seterr(EBB_ENOMEM, "%s: FFTW could not plan a %d-point transform", what, n);
  return 0;
}

static void destroy_plan(fftwf_plan plan) {
  if (!plan)
    return;
  pthread_mutex_lock(&plan_lock);
  fftwf_destroy_plan(plan);
  pthread_mutex_unlock(&plan_lock);
}

int stg_stft_forward_cpu(const stg_stft_shape *s, const float *x, float *spec, float *mag) {
  int rc = 0, n = s->n, nb = s->nbins;
  float *win = stg_st_malloc(sizeof(float) * (size_t)n);
  float *in = fftwf_malloc(sizeof(float) * (size_t)n);
  fftwf_complex *out = fftwf_malloc(sizeof(fftwf_complex) * (size_t)nb);
  fftwf_plan plan = NULL;
  if (!win || !in || !out) {
    rc = ebb_seterr(EBB_ENOMEM, "STFT: out of host memory for %d-point buffers", n);
    goto done;
  }
  if ((rc = plan_1d(n, in, out, NULL, NULL, "STFT", &plan)))
    goto done;
  stg_stft_hann(n, win);
  for (int f = 0; f < s->nframes; f++) {
    if ((f & 63) == 0 && stg_st_stop()) {
      rc = ebb_seterr(EBB_ECANCELED, "STFT: cancelled at frame %d of %d", f, s->nframes);
      goto done;
    }
    for (int i = 0; i < n; i++) {
      long long t = (long long)f * s->hop + i - s->pad;
      in[i] = (t >= 0 && t < s->nx) ? x[t] * win[i] : 0.0f;
    }
    fftwf_execute(plan);
    long long base = (long long)f * nb;
    for (int k = 0; k < nb; k++) {
      float re = out[k][0], im = out[k][1];
      if (spec) {
        spec[2 * (base + k)] = re;
        spec[2 * (base + k) + 1] = im;
      }
      if (mag)
        mag[base + k] = sqrtf(re * re + im * im);
    }
  }
done:
  destroy_plan(plan);
  fftwf_free(out);
  fftwf_free(in);
  stg_st_free(win);
  return rc;
}

int stg_stft_inverse_cpu(const stg_stft_shape *s, const float *spec, float *y) {
  int rc = 0, n = s->n, nb = s->nbins;
  float *win = stg_st_malloc(sizeof(float) * (size_t)n);
  /* Overlap-add by scatter, frame by frame in increasing order: per sample
   * the same additions in the same order as the kernels' gather
   * (stg_k_overlap_add), without holding every frame. */
  float *wss = stg_st_calloc((size_t)s->nx + 1, sizeof(float));
  fftwf_complex *in = fftwf_malloc(sizeof(fftwf_complex) * (size_t)nb);
  float *out = fftwf_malloc(sizeof(float) * (size_t)n);
  fftwf_plan plan = NULL;
  if (!win || !wss || !in || !out) {
    rc = ebb_seterr(EBB_ENOMEM, "inverse STFT: out of host memory for %lld samples", s->nx);
    goto done;
  }
  if ((rc = plan_1d(n, NULL, NULL, in, out, "inverse STFT", &plan)))
    goto done;
  stg_stft_hann(n, win);
  memset(y, 0, sizeof(float) * (size_t)s->nx);
  float scale = 1.0f / (float)n;
  for (int f = 0; f < s->nframes; f++) {
    const float *sp = spec + 2 * (long long)f * nb;
    for (int k = 0; k < nb; k++) {
      in[k][0] = sp[2 * k];
      in[k][1] = sp[2 * k + 1];
    }
    /* c2r reads bins 0..n/2 and takes the imaginary parts of DC and Nyquist
     * as zero: the real inverse of a masked real signal's spectrum. */
    fftwf_execute(plan);
    for (int i = 0; i < n; i++) {
      long long t = (long long)f * s->hop + i - s->pad;
      if (t < 0 || t >= s->nx)
        continue;
      float w = win[i];
      y[t] += (out[i] * scale) * w;
      wss[t] += w * w;
    }
  }
  for (long long t = 0; t < s->nx; t++)
    y[t] = wss[t] > 1e-8f ? y[t] / wss[t] : 0.0f;
done:
  destroy_plan(plan);
  fftwf_free(out);
  fftwf_free(in);
  stg_st_free(wss);
  stg_st_free(win);
  return rc;
}
