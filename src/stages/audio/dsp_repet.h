/* The time-frequency mask of the `separate` stage, computed on the host from
 * a magnitude spectrogram (frame-major: mag[f * nbins + k]).
 *
 * Method: REPET-SIM (Z. Rafii and B. Pardo, "Music/Voice Separation using the
 * Similarity Matrix", ISMIR 2012). The accompaniment of popular music repeats;
 * for every frame, the k frames most similar to it (cosine similarity of
 * magnitude spectra, peaks at least min_dist frames apart, the frame itself
 * included) are found, their element-wise median is the repeating-background
 * model W = min(median, V), and W / V is a soft background mask; the vocal
 * mask is 1 - W / V. ebb takes a lower quantile than the median (quantile,
 * 0.4 by default): a melody that holds or repeats a chord tone for seconds
 * is in most of the frames most similar to its own, so the median models
 * it as background and the vocals lose it. Two refinements, both optional:
 *  - harmonic/percussive separation by median filtering (D. Fitzgerald,
 *    "Harmonic/Percussive Separation using Median Filtering", DAFx 2010): the
 *    vocal mask is multiplied by the harmonic Wiener-like mask H^2/(H^2+P^2)
 *    (H: median along time, P: median along frequency), since a voice is
 *    harmonic and drum hits are not;
 *  - a vocal band: outside [band_lo, band_hi] bins the vocal mask is scaled
 *    by outside_gain.
 * Engineering limits (documented in docs/songtrace.md): similarity is taken
 * over bands of `pool` adjacent bins and within +-max_lag frames, so a whole
 * song costs O(frames * max_lag * bins / pool) instead of O(frames^2 * bins). */
#ifndef EBB_STAGES_AUDIO_DSP_REPET_H
#define EBB_STAGES_AUDIO_DSP_REPET_H

typedef struct stg_repet_params {
  int k;                /* repeating frames per frame, self included (1..EBB_REPET_MAX_K) */
  int min_dist;         /* frames between two chosen frames (>= 1) */
  int max_lag;          /* search window half-width in frames (>= 1) */
  int pool;             /* bins per similarity band (>= 1) */
  float quantile;       /* the repeating model's quantile of the picks, 0..1 (0.5: median) */
  int hpss;             /* 1: apply the harmonic mask */
  int hpss_time;        /* harmonic median length in frames (odd, <= EBB_REPET_MAX_MEDIAN) */
  int hpss_freq;        /* percussive median length in bins (odd, <= EBB_REPET_MAX_MEDIAN) */
  int band_lo, band_hi; /* vocal band, bins (inclusive) */
  float outside_gain;   /* vocal mask gain outside the band, 0..1 */
  /* Optional: polled every few hundred frames; when it answers 1 the mask
   * stops with EBB_ECANCELED. NULL: never. */
  int (*cancelled)(void *arg);
  void *cancel_arg;
} stg_repet_params;

#define EBB_REPET_MAX_K 100      /* most repeating frames per frame */
#define EBB_REPET_MAX_MEDIAN 127 /* longest harmonic/percussive median */

/* The REPET-SIM frame choice alone (the similarity part): for every frame j,
 * npicks[j] (1..k) frame indices in picks[j * k ...] (itself first); unused
 * slots hold j. Caller owns the buffers (nframes * k and nframes ints). */
int stg_repet_picks(const float *mag, int nframes, int nbins, const stg_repet_params *p, int *picks,
                    int *npicks);

/* Writes the vocal soft mask (values in [0, 1], nframes * nbins floats) for
 * mag. Caller owns both buffers. EBB_EINVAL for bad parameters, EBB_ENOMEM. */
int stg_repet_vocal_mask(const float *mag, int nframes, int nbins, const stg_repet_params *p,
                         float *mask);

/* What two passes over one spectrogram share (separate's "melody" pass),
 * all caller-owned. The harmonic mask's factor depends only on mag and the
 * HPSS sizes; the similarity rows only on mag, pool and max_lag, so the
 * second pass's repeating frames are picked from the first pass's rows. */
typedef struct stg_repet_share {
  float *hpss;    /* nframes * nbins floats, or NULL: each pass its own factor */
  int hpss_ready; /* 0: computed into hpss (also the workspace), then set; 1: used */
  /* the second pass's parameters (same pool and max_lag) and its picks
   * (nframes * next->k and nframes ints), or NULL: each pass its own */
  const stg_repet_params *next;
  int *picks, *npicks;
  int picks_ready; /* 0: picked alongside this pass's, then set; 1: they are this pass's */
} stg_repet_share;

/* As stg_repet_picks, sharing with another pass through sh (NULL: as
 * stg_repet_picks): with sh->picks_ready, its picks are copied out (they
 * are this pass's); else the next pass's are made alongside from the same
 * rows and sh->picks_ready set. EBB_EINVAL as below. */
int stg_repet_picks_shared(const float *mag, int nframes, int nbins, const stg_repet_params *p,
                           int *picks, int *npicks, stg_repet_share *sh);

/* As stg_repet_vocal_mask, sharing with another pass through sh (NULL: as
 * stg_repet_vocal_mask). The mask is bit for bit the same either way.
 * EBB_EINVAL when sh->next differs from p in pool or max_lag, or (picks
 * ready) in k. */
int stg_repet_vocal_mask_shared(const float *mag, int nframes, int nbins, const stg_repet_params *p,
                                stg_repet_share *sh, float *mask);

/* The median of v[0..n-1] (n >= 1; mean of the two middle values when n is
 * even): stg_dsp_quantile at 0.5. Reorders v. */
float stg_dsp_median(float *v, int n);

/* The q-quantile (0..1) of v[0..n-1] (n >= 1), interpolated linearly
 * between the order statistics around q (n - 1) (at 0.5 the median), and
 * the value is bit for bit the kernels' (sep_kernels.h). Reorders v. */
float stg_dsp_quantile(float *v, int n, float q);

/* out[i * ostride] = stg_dsp_median of x[j * stride] for j in
 * [i - half, i + half] and [0, n), for every i < n (the same value bit for
 * bit), by a sorted window slid along x. win: scratch of 2 * half + 2 floats. */
void stg_dsp_sliding_median(const float *x, long long stride, int n, int half, float *out,
                            long long ostride, float *win);

#endif
