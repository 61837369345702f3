/* REPET-SIM on the host (dsp_repet.h): the similarity of frames, the k most
 * similar ones' median as the repeating model, the soft mask from it. */
#include "stages/audio/dsp_repet.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/st_util.h"
#include "stages/kernels/sep_kernels.h"

/* k-th smallest (0-based) of v[0..n-1], partially reordering v (Hoare's
 * selection with a median-of-three pivot; insertion sort for short runs). */
static float select_kth(float *v, int n, int k) {
  int lo = 0, hi = n - 1;
  while (hi - lo > 16) {
    int mid = lo + (hi - lo) / 2;
    float a = v[lo], b = v[mid], c = v[hi];
    float pivot = (a < b) ? ((b < c) ? b : (a < c ? c : a)) : ((a < c) ? a : (b < c ? c : b));
    int i = lo, j = hi;
    while (i <= j) {
      while (v[i] < pivot)
        i++;
      while (v[j] > pivot)
        j--;
      if (i <= j) {
        float t = v[i];
        v[i] = v[j];
        v[j] = t;
        i++;
        j--;
      }
    }
    if (k <= j)
      hi = j;
    else if (k >= i)
      lo = i;
    else
      return v[k];
  }
  for (int i = lo + 1; i <= hi; i++) {
    float x = v[i];
    int j = i - 1;
    while (j >= lo && v[j] > x) {
      v[j + 1] = v[j];
      j--;
    }
    v[j + 1] = x;
  }
  return v[k];
}

float stg_dsp_quantile(float *v, int n, float q) {
  float frac;
  int i = stg_k_quantile_index(q, n, &frac);
  float lo = select_kth(v, n, i), hi = lo;
  if (frac > 0.0f) {
    /* after selection everything above i is >= lo: the next order
     * statistic is their min */
    hi = v[i + 1];
    for (int j = i + 2; j < n; j++)
      if (v[j] < hi)
        hi = v[j];
  }
  return stg_k_quantile_mix(lo, hi, frac);
}

float stg_dsp_median(float *v, int n) { return stg_dsp_quantile(v, n, 0.5f); }

/* Unit-norm similarity features: sums over `pool` adjacent bins, stored
 * feature-major (feat[b * nframes + f]) so that a similarity row is a run of
 * contiguous multiply-adds the compiler vectorises. */
static void make_features(const float *mag, int nframes, int nbins, int pool, int nfeat,
                          float *feat) {
  for (int f = 0; f < nframes; f++) {
    const float *m = mag + (long long)f * nbins;
    double norm = 0;
    for (int b = 0; b < nfeat; b++) {
      float s = 0;
      int k1 = (b + 1) * pool < nbins ? (b + 1) * pool : nbins;
      for (int k = b * pool; k < k1; k++)
        s += m[k];
      feat[(long long)b * nframes + f] = s;
      norm += (double)s * s;
    }
    float inv = norm > 0 ? (float)(1.0 / sqrt(norm)) : 0.0f;
    for (int b = 0; b < nfeat; b++)
      feat[(long long)b * nframes + f] *= inv;
  }
}

typedef struct cand {
  float sim;
  int frame;
} cand;

/* Highest similarity first, the earlier frame first among equals, for
 * candidates in frame order with similarities > 0: a stable radix sort on
 * the complement of the similarity's bits (a positive float's bits order as
 * its value), a byte a pass (a pass where every key has the same byte is
 * skipped). The order a comparison sort by (similarity, frame) gives, without
 * a comparator call per comparison. tmp: n cands. */
static void sort_cands(cand *c, cand *tmp, int n) {
  cand *src = c, *dst = tmp;
  for (int shift = 0; shift < 32; shift += 8) {
    int count[257] = {0};
    for (int i = 0; i < n; i++) {
      uint32_t b;
      memcpy(&b, &src[i].sim, sizeof b);
      count[((~b >> shift) & 255u) + 1]++;
    }
    int skip = 0;
    for (int d = 1; d <= 256 && !skip; d++)
      skip = count[d] == n;
    if (skip)
      continue;
    for (int d = 0; d < 256; d++)
      count[d + 1] += count[d];
    for (int i = 0; i < n; i++) {
      uint32_t b;
      memcpy(&b, &src[i].sim, sizeof b);
      dst[count[(~b >> shift) & 255u]++] = src[i];
    }
    cand *t = src;
    src = dst;
    dst = t;
  }
  if (src != c)
    memcpy(c, src, sizeof *c * (size_t)n);
}

/* row[i] += fj * fi[i]: eight lanes a step, which the compiler turns into
 * vector multiplies and adds (each element's own mul and add, so exactly the
 * scalar loop's result; the plain loop stayed scalar at -O2). */
static void row_add(float *restrict row, const float *restrict fi, float fj, int len) {
  int i = 0;
  for (; i + 8 <= len; i += 8)
    for (int l = 0; l < 8; l++)
      row[i + l] += fj * fi[i + l];
  for (; i < len; i++)
    row[i] += fj * fi[i];
}

/* The similarity row of frame j over [lo, hi] (lo = j - max_lag, hi =
 * j + max_lag, clipped) into row[0 .. hi - lo]. */
static void similarity_row(const float *feat, int nfeat, int nframes, int j, int max_lag,
                           float *row, int *lo_out, int *hi_out) {
  int lo = j - max_lag < 0 ? 0 : j - max_lag;
  int hi = j + max_lag > nframes - 1 ? nframes - 1 : j + max_lag;
  int len = hi - lo + 1;
  for (int i = 0; i < len; i++)
    row[i] = 0.0f;
  for (int b = 0; b < nfeat && !((b & 15) == 0 && stg_st_stop()); b++)
    row_add(row, feat + (long long)b * nframes + lo, feat[(long long)b * nframes + j], len);
  *lo_out = lo;
  *hi_out = hi;
}

/* The repeating frames of frame j from its similarity row over [lo, hi]:
 * itself, then the highest local maxima of the row (similarity > 0),
 * greedily, each at least min_dist from every frame already chosen. Returns
 * how many (<= k) went into picks. */
static int pick_similar(const float *row, int lo, int hi, int j, const stg_repet_params *p,
                        cand *cands, cand *tmp, int *picks) {
  int ncand = 0;
  for (int i = lo; i <= hi; i++) {
    float s = row[i - lo];
    if (s <= 0 || abs(i - j) < p->min_dist)
      continue;
    if (i > lo && row[i - lo - 1] > s)
      continue;
    if (i < hi && row[i - lo + 1] >= s)
      continue;
    cands[ncand].sim = s;
    cands[ncand].frame = i;
    ncand++;
  }
  sort_cands(cands, tmp, ncand);
  int npick = 0;
  picks[npick++] = j;
  for (int c = 0; c < ncand && npick < p->k; c++) {
    int f = cands[c].frame, near = 0;
    for (int q = 1; q < npick && !near; q++)
      near = abs(picks[q] - f) < p->min_dist;
    if (!near)
      picks[npick++] = f;
  }
  return npick;
}

/* Inserts x into the sorted run v[0..n-1] (n + 1 after). */
static void sorted_insert(float *v, int n, float x) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (v[mid] <= x)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (int i = n; i > lo; i--) /* short runs: a loop, not a memmove call */
    v[i] = v[i - 1];
  v[lo] = x;
}

/* Removes one element equal to x from the sorted run v[0..n-1]. */
static void sorted_remove(float *v, int n, float x) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (v[mid] < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  for (int i = lo; i < n - 1; i++)
    v[i] = v[i + 1];
}

/* One insertion and one removal a step instead of a selection over the
 * whole window (dsp_repet.h). */
void stg_dsp_sliding_median(const float *x, long long stride, int n, int half, float *out,
                            long long ostride, float *win) {
  int m = 0;
  for (int j = 0; j < half && j < n; j++)
    sorted_insert(win, m++, x[j * stride]);
  for (int i = 0; i < n; i++) {
    if (i + half < n)
      sorted_insert(win, m++, x[(long long)(i + half) * stride]);
    if (i - half - 1 >= 0)
      sorted_remove(win, m--, x[(long long)(i - half - 1) * stride]);
    out[i * ostride] = m % 2 ? win[m / 2] : 0.5f * (win[m / 2 - 1] + win[m / 2]);
  }
}

/* H (median along time) and P (median along frequency) -> the factor
 * H^2/(H^2+P^2) of every cell into fac (nframes * nbins; it holds H first). */
static int hpss_factor(const float *mag, int nframes, int nbins, const stg_repet_params *p,
                       float *fac) {
  int ht = p->hpss_time / 2, hf = p->hpss_freq / 2;
  float *win = stg_st_malloc(sizeof(float) * (size_t)(2 * (ht > hf ? ht : hf) + 2 + nbins));
  if (!win)
    return ebb_seterr(EBB_ENOMEM, "separate: out of host memory for the harmonic mask (%d x %d)",
                      nframes, nbins);
  float *perc = win + 2 * (ht > hf ? ht : hf) + 2;
  for (int k = 0; k < nbins; k++)
    stg_dsp_sliding_median(mag + k, nbins, nframes, ht, fac + k, nbins, win);
  for (int f = 0; f < nframes; f++) {
    stg_dsp_sliding_median(mag + (long long)f * nbins, 1, nbins, hf, perc, 1, win);
    for (int k = 0; k < nbins; k++) {
      float h = fac[(long long)f * nbins + k];
      float h2 = h * h, p2 = perc[k] * perc[k];
      fac[(long long)f * nbins + k] = h2 + p2 > 0 ? h2 / (h2 + p2) : 0.0f;
    }
  }
  stg_st_free(win);
  return 0;
}

/* vocal *= the harmonic factor: computed into hpss unless *ready (a scratch
 * buffer when hpss is NULL) */
static int apply_hpss(const float *mag, int nframes, int nbins, const stg_repet_params *p,
                      float *hpss, int *ready, float *mask) {
  size_t cells = (size_t)nframes * (size_t)nbins;
  float *fac = hpss ? hpss : stg_st_malloc(sizeof(float) * cells);
  if (!fac)
    return ebb_seterr(EBB_ENOMEM, "separate: out of host memory for the harmonic mask (%d x %d)",
                      nframes, nbins);
  int rc = 0;
  if (!(hpss && *ready) && (rc = hpss_factor(mag, nframes, nbins, p, fac)) == 0 && hpss)
    *ready = 1;
  for (size_t c = 0; !rc && c < cells; c++)
    mask[c] *= fac[c];
  if (!hpss)
    stg_st_free(fac);
  return rc;
}

static int check_params(int nframes, int nbins, const stg_repet_params *p) {
  if (nframes < 1 || nbins < 2 || p->k < 1 || p->k > EBB_REPET_MAX_K || p->min_dist < 1 ||
      p->max_lag < 1 || p->pool < 1 || !(p->quantile >= 0.0f && p->quantile <= 1.0f) ||
      (p->hpss && (p->hpss_time < 1 || p->hpss_time > EBB_REPET_MAX_MEDIAN || p->hpss_freq < 1 ||
                   p->hpss_freq > EBB_REPET_MAX_MEDIAN)) ||
      !(p->outside_gain >= 0 && p->outside_gain <= 1))
    return ebb_seterr(EBB_EINVAL,
                      "separate: bad mask parameters (frames %d, bins %d, k %d, min_dist %d, "
                      "max_lag %d, pool %d, quantile %g, hpss %d x %d, outside_gain %g)",
                      nframes, nbins, p->k, p->min_dist, p->max_lag, p->pool, (double)p->quantile,
                      p->hpss_time, p->hpss_freq, (double)p->outside_gain);
  return 0;
}

/* The picks of p into picks/npicks and, when p2 is not NULL, those of p2
 * (same pool and max_lag) into picks2/npicks2, from one similarity row per
 * frame. */
static int picks_of(const float *mag, int nframes, int nbins, const stg_repet_params *p, int *picks,
                    int *npicks, const stg_repet_params *p2, int *picks2, int *npicks2) {
  int nfeat = (nbins + p->pool - 1) / p->pool;
  int wlen = 2 * p->max_lag + 1;
  float *feat = stg_st_malloc(sizeof(float) * (size_t)nframes * (size_t)nfeat);
  float *row = stg_st_malloc(sizeof(float) * (size_t)wlen);
  cand *cands = stg_st_malloc(sizeof(cand) * 2 * (size_t)wlen); /* and a radix sort's copy */
  int rc = 0;
  if (!feat || !row || !cands) {
    rc = ebb_seterr(EBB_ENOMEM, "separate: out of host memory for the similarity of %d frames",
                    nframes);
    goto done;
  }
  make_features(mag, nframes, nbins, p->pool, nfeat, feat);
  /* a cancellation check about every 2^22 multiply-adds of the search (and
   * within a row, st_util.h), whatever max_lag and pool make a row cost */
  long long every = ((long long)1 << 22) / ((long long)nfeat * wlen);
  for (int j = 0; j < nframes; j++) {
    if ((p->cancelled && j % (every > 1 ? every : 1) == 0 && p->cancelled(p->cancel_arg)) ||
        stg_st_stop()) {
      rc = ebb_seterr(EBB_ECANCELED, "separate: cancelled at frame %d of %d", j, nframes);
      goto done;
    }
    int lo, hi;
    similarity_row(feat, nfeat, nframes, j, p->max_lag, row, &lo, &hi);
    for (int pass = 0; pass < (p2 ? 2 : 1); pass++) {
      const stg_repet_params *q = pass ? p2 : p;
      int *pj = (pass ? picks2 : picks) + (long long)j * q->k;
      int *np = (pass ? npicks2 : npicks) + j;
      *np = pick_similar(row, lo, hi, j, q, cands, cands + wlen, pj);
      for (int r = *np; r < q->k; r++)
        pj[r] = j; /* unused slots: defined values */
    }
  }
done:
  stg_st_free(cands);
  stg_st_free(row);
  stg_st_free(feat);
  return rc;
}

/* Whether sh shares picks with p, and checks that it can. */
static int shares_picks(const stg_repet_share *sh, const stg_repet_params *p) {
  if (!sh || !sh->next || !sh->picks || !sh->npicks)
    return 0;
  if (sh->next->pool != p->pool || sh->next->max_lag != p->max_lag ||
      (sh->picks_ready && sh->next->k != p->k))
    return ebb_seterr(EBB_EINVAL,
                      "separate: passes that share picks differ (pool %d/%d, max_lag %d/%d, k "
                      "%d/%d)",
                      p->pool, sh->next->pool, p->max_lag, sh->next->max_lag, p->k, sh->next->k);
  return check_params(1, 2, sh->next) < 0 ? EBB_EINVAL : 1;
}

int stg_repet_picks_shared(const float *mag, int nframes, int nbins, const stg_repet_params *p,
                           int *picks, int *npicks, stg_repet_share *sh) {
  int rc = check_params(nframes, nbins, p), share = rc < 0 ? rc : shares_picks(sh, p);
  if (share < 0)
    return share;
  if (share && sh->picks_ready) {
    memcpy(picks, sh->picks, sizeof(int) * (size_t)nframes * (size_t)p->k);
    memcpy(npicks, sh->npicks, sizeof(int) * (size_t)nframes);
    return 0;
  }
  rc = picks_of(mag, nframes, nbins, p, picks, npicks, share ? sh->next : NULL,
                share ? sh->picks : NULL, share ? sh->npicks : NULL);
  if (!rc && share)
    sh->picks_ready = 1;
  return rc;
}

int stg_repet_picks(const float *mag, int nframes, int nbins, const stg_repet_params *p, int *picks,
                    int *npicks) {
  int rc = check_params(nframes, nbins, p);
  return rc < 0 ? rc : picks_of(mag, nframes, nbins, p, picks, npicks, NULL, NULL, NULL);
}

int stg_repet_vocal_mask(const float *mag, int nframes, int nbins, const stg_repet_params *p,
                         float *mask) {
  return stg_repet_vocal_mask_shared(mag, nframes, nbins, p, NULL, mask);
}

/* The comparators (a < b) of Batcher's odd-even merge sort for the next
 * power of two >= n, less those whose b is n or more: with the missing
 * values taken as +inf such a comparator never moves anything, so the rest
 * sort n values. Returns how many went into cmp (at most BATCHER_MAX). */
#define BATCHER_MAX 1471 /* n = 128 (EBB_KERNEL_MAX_MEDIAN) */
#define QBLOCK 64        /* bins sorted side by side */
static int batcher(int n, short (*cmp)[2]) {
  int np2 = 1, c = 0;
  while (np2 < n)
    np2 <<= 1;
  for (int p = 1; p < np2; p <<= 1)
    for (int k = p; k >= 1; k >>= 1)
      for (int j = k % p; j + k < np2; j += 2 * k)
        for (int i = 0; i < k && i + j + k < np2; i++)
          if ((i + j) / (2 * p) == (i + j + k) / (2 * p) && i + j + k < n) {
            cmp[c][0] = (short)(i + j);
            cmp[c][1] = (short)(i + j + k);
            c++;
          }
  return c;
}

/* Rows a and b of QBLOCK lanes into (min, max) lane by lane, eight lanes a
 * step: the compiler turns each step into vector compares and selects (a
 * plain loop stayed scalar, with branches, at -O2). */
static void compare_exchange(float *restrict a, float *restrict b) {
  for (int l = 0; l < QBLOCK; l += 8)
    for (int u = 0; u < 8; u++) {
      float x = a[l + u], y = b[l + u];
      float lo = y < x ? y : x, hi = y < x ? x : y;
      a[l + u] = lo;
      b[l + u] = hi;
    }
}

/* The mask of frame j's bins k0 .. k0 + QBLOCK - 1 (fewer at the end): the
 * q-quantile of the picks' magnitudes in each bin, all bins of the block
 * sorted at once by the comparator network net (blk: np rows of QBLOCK).
 * A sort gives the order statistics a selection gives, so the mask is the
 * one stg_dsp_quantile gave, bit for bit. */
static void mask_block(const float *mag, int nbins, int j, const int *pj, int np, short (*net)[2],
                       int ncmp, float q, int k0, float *blk, float *mask) {
  int nk = nbins - k0 < QBLOCK ? nbins - k0 : QBLOCK;
  for (int r = 0; r < np; r++) {
    float *row = blk + (size_t)r * QBLOCK;
    memcpy(row, mag + (long long)pj[r] * nbins + k0, sizeof(float) * (size_t)nk);
    for (int l = nk; l < QBLOCK; l++)
      row[l] = 0.0f;
  }
  for (int c = 0; c < ncmp; c++)
    compare_exchange(blk + (size_t)net[c][0] * QBLOCK, blk + (size_t)net[c][1] * QBLOCK);
  float frac;
  int i = stg_k_quantile_index(q, np, &frac);
  const float *v = mag + (long long)j * nbins + k0;
  float *m = mask + (long long)j * nbins + k0;
  for (int l = 0; l < nk; l++) {
    float lo = blk[(size_t)i * QBLOCK + l];
    float w = stg_k_quantile_mix(lo, frac > 0.0f ? blk[(size_t)(i + 1) * QBLOCK + l] : lo, frac);
    if (w > v[l])
      w = v[l];
    m[l] = v[l] > 0 ? 1.0f - w / v[l] : 0.0f;
  }
}

int stg_repet_vocal_mask_shared(const float *mag, int nframes, int nbins, const stg_repet_params *p,
                                stg_repet_share *sh, float *mask) {
  int rc = check_params(nframes, nbins, p);
  if (rc < 0)
    return rc;
  int *picks = stg_st_malloc(sizeof(int) * (size_t)nframes * (size_t)p->k);
  int *npicks = stg_st_malloc(sizeof(int) * (size_t)nframes);
  float *blk = stg_st_malloc(sizeof(float) * QBLOCK * (size_t)p->k);
  short(*net)[2] = stg_st_malloc(sizeof *net * BATCHER_MAX);
  if (!picks || !npicks || !blk || !net) {
    rc = ebb_seterr(EBB_ENOMEM, "separate: out of host memory for the picks of %d frames", nframes);
    goto done;
  }
  if ((rc = stg_repet_picks_shared(mag, nframes, nbins, p, picks, npicks, sh)) < 0)
    goto done;
  for (int j = 0; j < nframes; j++) {
    const int *pj = picks + (long long)j * p->k;
    int np = npicks[j], ncmp = batcher(np, net);
    for (int k0 = 0; k0 < nbins; k0 += QBLOCK)
      mask_block(mag, nbins, j, pj, np, net, ncmp, p->quantile, k0, blk, mask);
  }
  if (p->hpss && (rc = apply_hpss(mag, nframes, nbins, p, sh ? sh->hpss : NULL,
                                  sh ? &sh->hpss_ready : NULL, mask)) < 0)
    goto done;
  for (int f = 0; f < nframes; f++)
    for (int k = 0; k < nbins; k++)
      if (k < p->band_lo || k > p->band_hi)
        mask[(long long)f * nbins + k] *= p->outside_gain;
done:
  stg_st_free(net);
  stg_st_free(blk);
  stg_st_free(npicks);
  stg_st_free(picks);
  return rc;
}
