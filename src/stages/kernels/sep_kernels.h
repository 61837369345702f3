/* Per-thread arithmetic of the STFT / separation kernels, shared word for word
 * by the CUDA kernels (separate.cu) and their host twins (sep_twins.c), so the
 * fake GPU runs exactly what a real GPU runs. Each function is one thread's
 * work between two barriers: the .cu kernel calls it once per thread and
 * __syncthreads() between phases; the twin loops over the block's threads in
 * the same phase order. Complex values are interleaved floats (re, im).
 *
 * Tables (window, twiddles) are computed once on the host in double and
 * uploaded, so no transcendental function runs on the device; nvcc builds
 * with -fmad=false so multiply-adds round like the host's (C17 mode, no FMA
 * contraction). */
#ifndef EBB_STAGES_KERNELS_SEP_KERNELS_H
#define EBB_STAGES_KERNELS_SEP_KERNELS_H

#ifdef __CUDACC__
#define EBB_KFN static __device__ __forceinline__
#else
#define EBB_KFN static inline
#include <math.h>
#endif

/* Launch geometry, shared with the host code that launches the kernels. */
#define EBB_KERNEL_MAX_THREADS 512 /* threads per block for per-frame kernels */
#define EBB_KERNEL_OLA_THREADS 256 /* threads per block for overlap-add */

/* Bit-reversal of the low `bits` bits of i. */
EBB_KFN int stg_k_bitrev(int i, int bits) {
  int r = 0;
  for (int b = 0; b < bits; b++)
    r = (r << 1) | ((i >> b) & 1);
  return r;
}

/* ebb_stft_window: frame f of the centred STFT: x[f*hop + i - pad] * win[i]
 * (0 outside the signal), imaginary part 0. */
EBB_KFN void stg_k_window(int tid, int nthreads, int f, const float *x, long long nx,
                          const float *win, float *frames, int n, int hop, int pad) {
  float *fr = frames + (long long)f * n * 2;
  for (int i = tid; i < n; i += nthreads) {
    long long s = (long long)f * hop + i - pad;
    float v = (s >= 0 && s < nx) ? x[s] * win[i] : 0.0f;
    fr[2 * i] = v;
    fr[2 * i + 1] = 0.0f;
  }
}

/* ebb_fft_radix2, phase 1: load one frame into shared memory in bit-reversed
 * order. */
EBB_KFN void stg_k_fft_load(int tid, int nthreads, const float *fr, float *sh, int n, int log2n) {
  for (int i = tid; i < n; i += nthreads) {
    int j = stg_k_bitrev(i, log2n);
    sh[2 * j] = fr[2 * i];
    sh[2 * j + 1] = fr[2 * i + 1];
  }
}

/* Phase 2 (once per stage, half = 1, 2, 4, ... n/2): the stage's n/2
 * butterflies. tw[2m], tw[2m+1] = cos, -sin of 2*pi*m/n (m < n/2); sign -1
 * conjugates the twiddles (inverse transform). */
EBB_KFN void stg_k_fft_stage(int tid, int nthreads, float *sh, const float *tw, int n, int half,
                             float sign) {
  int stride = n / (2 * half);
  for (int b = tid; b < n / 2; b += nthreads) {
    int group = b / half;
    int pos = b - group * half;
    int i0 = group * 2 * half + pos;
    int i1 = i0 + half;
    float wr = tw[2 * pos * stride];
    float wi = sign * tw[2 * pos * stride + 1];
    float br = sh[2 * i1], bi = sh[2 * i1 + 1];
    float tr = wr * br - wi * bi;
    float ti = wr * bi + wi * br;
    float ar = sh[2 * i0], ai = sh[2 * i0 + 1];
    sh[2 * i1] = ar - tr;
    sh[2 * i1 + 1] = ai - ti;
    sh[2 * i0] = ar + tr;
    sh[2 * i0 + 1] = ai + ti;
  }
}

/* Phase 3: store the frame back, scaled (1 forward, 1/n inverse). */
EBB_KFN void stg_k_fft_store(int tid, int nthreads, float *fr, const float *sh, int n,
                             float scale) {
  for (int i = tid; i < n; i += nthreads) {
    fr[2 * i] = sh[2 * i] * scale;
    fr[2 * i + 1] = sh[2 * i + 1] * scale;
  }
}

/* ebb_stft_magnitude: |X(f, k)| for k <= n/2, frame-major (f * nbins + k). */
EBB_KFN void stg_k_magnitude(int tid, int nthreads, int f, const float *frames, float *mag, int n,
                             int nbins) {
  const float *fr = frames + (long long)f * n * 2;
  for (int k = tid; k < nbins; k += nthreads) {
    float re = fr[2 * k], im = fr[2 * k + 1];
    mag[(long long)f * nbins + k] = sqrtf(re * re + im * im);
  }
}

/* ebb_sep_apply_mask: vocals = X * m, accompaniment = X * (1 - m) over the
 * full (Hermitian) frame; bin i > n/2 uses the mask of bin n - i. */
EBB_KFN void stg_k_apply_mask(int tid, int nthreads, int f, const float *mix, const float *mask,
                              float *voc, float *acc, int n, int nbins) {
  long long base = (long long)f * n * 2;
  for (int i = tid; i < n; i += nthreads) {
    int k = i <= n / 2 ? i : n - i;
    float m = mask[(long long)f * nbins + k];
    float am = 1.0f - m;
    float re = mix[base + 2 * i], im = mix[base + 2 * i + 1];
    voc[base + 2 * i] = re * m;
    voc[base + 2 * i + 1] = im * m;
    acc[base + 2 * i] = re * am;
    acc[base + 2 * i + 1] = im * am;
  }
}

/* ebb_istft_overlap_add: output sample s (one thread each) is the windowed
 * overlap-add of the real parts of the inverse-transformed frames covering it,
 * divided by the sum of squared windows (least-squares ISTFT, Griffin & Lim
 * 1984). A gather, so no atomics and the same summation order everywhere. */
EBB_KFN void stg_k_overlap_add(long long s, const float *frames, const float *win, float *y,
                               long long ny, int n, int hop, int pad, int nframes) {
  if (s >= ny)
    return;
  long long p = s + pad;
  long long f0 = p - n + 1 <= 0 ? 0 : (p - n + 1 + hop - 1) / hop;
  long long f1 = p / hop;
  if (f1 > nframes - 1)
    f1 = nframes - 1;
  float acc = 0.0f, wss = 0.0f;
  for (long long f = f0; f <= f1; f++) {
    int i = (int)(p - f * hop);
    float w = win[i];
    acc += frames[(f * n + i) * 2] * w;
    wss += w * w;
  }
  y[s] = wss > 1e-8f ? acc / wss : 0.0f;
}

/* --- the REPET-SIM / HPSS mask (dsp_repet.h has the method) --------------
 * The host chooses each frame's repeating frames (similarity search); these
 * kernels do the per-bin medians and the mask arithmetic, with the same
 * formulas as the CPU path (a median is an order statistic, so the insertion
 * sort here and the host's sorting network give the same value). */
#define EBB_KERNEL_MAX_MEDIAN 128 /* >= EBB_REPET_MAX_K and EBB_REPET_MAX_MEDIAN */

/* Sorts v[0..n-1] ascending (insertion sort: n <= EBB_KERNEL_MAX_MEDIAN). */
EBB_KFN void stg_k_sort(float *v, int n) {
  for (int i = 1; i < n; i++) {
    float x = v[i];
    int j = i - 1;
    while (j >= 0 && v[j] > x) {
      v[j + 1] = v[j];
      j--;
    }
    v[j + 1] = x;
  }
}

/* The q-quantile (0..1) of n sorted-or-selected values by linear
 * interpolation between the order statistics around q (n - 1): the index
 * of the one below, and in *frac how far towards the next (0: none). The
 * same float operations on the host (dsp_repet.c) and the device. */
EBB_KFN int stg_k_quantile_index(float q, int n, float *frac) {
  float pos = q * (float)(n - 1);
  int i = (int)pos;
  if (i >= n - 1) {
    *frac = 0.0f;
    return n - 1;
  }
  *frac = pos - (float)i;
  return i;
}

/* Between the order statistics lo and hi at frac; at 0.5 exactly the
 * median's mean of the two middle values. */
EBB_KFN float stg_k_quantile_mix(float lo, float hi, float frac) {
  if (frac == 0.5f)
    return 0.5f * (lo + hi);
  return frac > 0.0f ? (1.0f - frac) * lo + frac * hi : lo;
}

/* The q-quantile of v[0..n-1] (1 <= n <= EBB_KERNEL_MAX_MEDIAN); sorts v. */
EBB_KFN float stg_k_quantile(float *v, int n, float q) {
  stg_k_sort(v, n);
  float frac;
  int i = stg_k_quantile_index(q, n, &frac);
  return stg_k_quantile_mix(v[i], frac > 0.0f ? v[i + 1] : v[i], frac);
}

/* Median of v[0..n-1] (1 <= n <= EBB_KERNEL_MAX_MEDIAN; the mean of the two
 * middle values when n is even): the quantile at 0.5. Sorts v. */
EBB_KFN float stg_k_median(float *v, int n) { return stg_k_quantile(v, n, 0.5f); }

/* ebb_repet_mask: vocal mask 1 - W/V of frame f, W = min(the q-quantile of
 * the frame's repeating frames, V). picks: k ints per frame, npicks[f]
 * used. */
EBB_KFN void stg_k_repet_mask(int tid, int nthreads, int f, const float *mag, const int *picks,
                              const int *npicks, int k, float *mask, int nbins, float q) {
  float vals[EBB_KERNEL_MAX_MEDIAN];
  const int *pf = picks + (long long)f * k;
  int np = npicks[f];
  for (int b = tid; b < nbins; b += nthreads) {
    for (int j = 0; j < np; j++)
      vals[j] = mag[(long long)pf[j] * nbins + b];
    float w = stg_k_quantile(vals, np, q);
    float v = mag[(long long)f * nbins + b];
    if (w > v)
      w = v;
    mask[(long long)f * nbins + b] = v > 0 ? 1.0f - w / v : 0.0f;
  }
}

/* ebb_hpss_harmonic: H = |X| median-filtered along time (+-ht frames). */
EBB_KFN void stg_k_hpss_harm(int tid, int nthreads, int f, const float *mag, float *harm,
                             int nframes, int nbins, int ht) {
  float vals[EBB_KERNEL_MAX_MEDIAN];
  for (int b = tid; b < nbins; b += nthreads) {
    int n = 0;
    for (int g = f - ht; g <= f + ht; g++)
      if (g >= 0 && g < nframes)
        vals[n++] = mag[(long long)g * nbins + b];
    harm[(long long)f * nbins + b] = stg_k_median(vals, n);
  }
}

/* ebb_mask_finish: with hpss, P = |X| median-filtered along frequency
 * (+-hf bins) and mask *= H^2 / (H^2 + P^2); then the vocal band gain. */
EBB_KFN void stg_k_mask_finish(int tid, int nthreads, int f, const float *mag, const float *harm,
                               float *mask, int nbins, int hpss, int hf, int band_lo, int band_hi,
                               float gain) {
  float vals[EBB_KERNEL_MAX_MEDIAN];
  const float *m = mag + (long long)f * nbins;
  for (int b = tid; b < nbins; b += nthreads) {
    long long c = (long long)f * nbins + b;
    if (hpss) {
      int n = 0;
      for (int q = b - hf; q <= b + hf; q++)
        if (q >= 0 && q < nbins)
          vals[n++] = m[q];
      float perc = stg_k_median(vals, n);
      float h = harm[c];
      float h2 = h * h, p2 = perc * perc;
      float mh = h2 + p2 > 0 ? h2 / (h2 + p2) : 0.0f;
      mask[c] *= mh;
    }
    if (b < band_lo || b > band_hi)
      mask[c] *= gain;
  }
}

#endif
