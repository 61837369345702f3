/* Melody salience for the pitch stage (pitch.h): harmonic summation over the
 * spectral peaks of the mixture, after J. Salamon and E. Gómez, "Melody
 * Extraction from Polyphonic Music Signals using Pitch Contour
 * Characteristics", IEEE TASLP 20(6), 2012 (section II-A/B).
 *
 * Why: pYIN on the separated vocals loses a melody that `separate` removed
 * with the repeating accompaniment (a melody note that doubles a chord tone,
 * a soft instrument under the band), and on the mix it follows the loudest
 * periodic source. The salience of an f0 is the weighted energy of the
 * spectral peaks at its harmonics; folded into pYIN's observation it lets the
 * Viterbi path follow the melody where the vocals lost it.
 *
 * Per frame (centred on sample f*hop, as the pitch frames): a Hann window of
 * 64 ms zero-padded 4x, spectral peaks within 40 dB of the frame's strongest
 * (frequency by parabolic interpolation of the log magnitude, 55 Hz..5 kHz),
 * and for each peak and harmonic h = 1..SAL_H the weight
 * cos^2(pi/2 * d) * SAL_ALPHA^(h-1) * magnitude added to every pYIN bin
 * (10 cents) within d < 1 semitone of peak/h. */
#include <fftw3.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/pitch.h"
#include "stages/audio/stft.h"
#include "stages/audio/st_util.h"

#define SAL_H 3
#define SAL_ALPHA 0.8
#define SAL_RANGE_DB 40.0
#define SAL_MAXPEAKS 48
#define SAL_VOICE_DB 12.0 /* frames this far below the loud frames: no voicing */

typedef struct sal_fft {
  int win, nfft, nbins;
  float *w, *in;
  fftwf_complex *out;
  fftwf_plan plan;
  float *mag;
} sal_fft;

static void fft_free(sal_fft *s) {
  if (s->plan) {
    stg_fftw_plan_lock(1);
    fftwf_destroy_plan(s->plan);
    stg_fftw_plan_lock(0);
  }
  fftwf_free(s->in);
  fftwf_free(s->out);
  stg_st_free(s->w);
  stg_st_free(s->mag);
  memset(s, 0, sizeof *s); /* a second call frees nothing */
}

static int fft_init(sal_fft *s, uint32_t rate) {
  memset(s, 0, sizeof *s);
  s->win = 64;
  while (s->win < 4096 && s->win < (int)(0.064 * rate))
    s->win *= 2;
  s->nfft = 4 * s->win;
  s->nbins = s->nfft / 2 + 1;
  s->w = stg_st_malloc((size_t)s->win * sizeof *s->w);
  s->mag = stg_st_malloc((size_t)s->nbins * sizeof *s->mag);
  s->in = fftwf_malloc((size_t)s->nfft * sizeof *s->in);
  s->out = fftwf_malloc((size_t)s->nbins * sizeof *s->out);
  if (s->w && s->mag && s->in && s->out) {
    stg_fftw_plan_lock(1);
    s->plan = fftwf_plan_dft_r2c_1d(s->nfft, s->in, s->out, FFTW_ESTIMATE);
    stg_fftw_plan_lock(0);
  }
  if (!s->plan) {
    fft_free(s);
    return ebb_seterr(EBB_ENOMEM, "pitch: out of memory for the salience FFT");
  }
  stg_stft_hann(s->win, s->w);
  return 0;
}

/* hypotf(re, im) of finite values as glibc (2.36) computes it, without the
 * call: bit for bit the same on 2e8 random pairs (finite bit patterns,
 * subnormals and scaled integers); FFT outputs are finite. */
static inline float mag_of(float re, float im) {
  return (float)sqrt((double)re * re + (double)im * im);
}

/* |X| of the frame centred on sample c */
static void frame_mag(sal_fft *s, const float *x, uint64_t n, long long c) {
  memset(s->in, 0, (size_t)s->nfft * sizeof *s->in);
  for (int i = 0; i < s->win; i++) {
    long long t = c - s->win / 2 + i;
    s->in[i] = t >= 0 && t < (long long)n ? x[t] * s->w[i] : 0.0f;
  }
  fftwf_execute(s->plan);
  for (int k = 0; k < s->nbins; k++)
    s->mag[k] = mag_of(s->out[k][0], s->out[k][1]);
}

typedef struct peak {
  float hz, amp;
} peak;

static int cmp_peak(const void *a, const void *b) {
  float x = ((const peak *)a)->amp, y = ((const peak *)b)->amp;
  return (x < y) - (x > y);
}

/* the frame's spectral peaks, strongest first, at most SAL_MAXPEAKS */
static int find_peaks(const sal_fft *s, uint32_t rate, peak *pk) {
  const float *m = s->mag;
  float top = 0.0f;
  for (int k = 1; k < s->nbins; k++)
    top = m[k] > top ? m[k] : top; /* fmaxf's answer: m is never NaN, top never -0 */
  float floor_amp = top * (float)pow(10.0, -SAL_RANGE_DB / 20.0);
  int klo = (int)(55.0 * s->nfft / rate) + 1, khi = (int)(5000.0 * s->nfft / rate), n = 0;
  if (khi > s->nbins - 2)
    khi = s->nbins - 2;
  static const int cap = 512;
  peak all[512];
  for (int k = klo; k <= khi && n < cap; k++)
    if (m[k] > floor_amp && m[k] > m[k - 1] && m[k] >= m[k + 1]) {
      double a = log(m[k - 1] + 1e-12), b = log(m[k] + 1e-12), c = log(m[k + 1] + 1e-12);
      double den = a - 2.0 * b + c, off = den < 0.0 ? 0.5 * (a - c) / den : 0.0;
      all[n++] = (peak){.hz = (float)((k + off) * rate / s->nfft), .amp = m[k]};
    }
  qsort(all, (size_t)n, sizeof *all, cmp_peak);
  if (n > SAL_MAXPEAKS)
    n = SAL_MAXPEAKS;
  memcpy(pk, all, (size_t)n * sizeof *pk);
  return n;
}

/* height[b] = 2^(salience_height * octaves of bin b above fmin) */
static void harmonic_sum(const peak *pk, int np, double fmin, int nb, const float *height,
                         float *row) {
  for (int b = 0; b < nb; b++)
    row[b] = 0.0f;
  double alpha[SAL_H + 1]; /* the same pow calls, once a frame instead of once a peak */
  for (int h = 1; h <= SAL_H; h++)
    alpha[h] = pow(SAL_ALPHA, h - 1);
  for (int i = 0; i < np; i++)
    for (int h = 1; h <= SAL_H; h++) {
      double c = 120.0 * log2(pk[i].hz / h / fmin); /* in 10-cent bins */
      double wh = alpha[h] * pk[i].amp;
      int lo = (int)ceil(c - 10.0), hi = (int)floor(c + 10.0);
      for (int b = lo < 0 ? 0 : lo; b <= hi && b < nb; b++) {
        double d = fabs(b - c) / 10.0, w = cos(d * M_PI / 2.0);
        row[b] += (float)(w * w * wh);
      }
    }
  for (int b = 0; b < nb; b++)
    row[b] *= height[b];
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* Each row becomes (row / its max)^sharpen scaled to sum to the frame's
 * voicing: 1 at the loud frames' salience (95th percentile), 0 at
 * SAL_VOICE_DB below. */
static int normalise_rows(float *sal, size_t nf, int nb, double sharpen) {
  float *top = stg_st_malloc((nf ? nf : 1) * sizeof *top),
        *tmp = stg_st_malloc((nf ? nf : 1) * sizeof *tmp);
  if (!top || !tmp) {
    stg_st_free(top);
    stg_st_free(tmp);
    return ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %zu salience frames", nf);
  }
  for (size_t f = 0; f < nf; f++) {
    top[f] = 0.0f;
    for (int b = 0; b < nb; b++)
      top[f] = sal[f * nb + b] > top[f] ? sal[f * nb + b] : top[f]; /* as fmaxf: no NaN */
  }
  memcpy(tmp, top, nf * sizeof *tmp);
  qsort(tmp, nf, sizeof *tmp, cmp_float);
  double loud = nf ? tmp[(size_t)(0.95 * (double)(nf - 1))] : 0.0;
  for (size_t f = 0; f < nf; f++) {
    float *row = sal + f * nb;
    double v = top[f] > 0.0f && loud > 0.0 ? 1.0 + 20.0 * log10(top[f] / loud) / SAL_VOICE_DB : 0;
    v = v < 0.0 ? 0.0 : v > 1.0 ? 1.0 : v;
    double sum = 0.0;
    for (int b = 0; b < nb; b++) {
      /* pow(0, sharpen) is 0: the empty bins skip the call */
      row[b] = top[f] > 0.0f && row[b] != 0.0f ? (float)pow(row[b] / top[f], sharpen) : 0.0f;
      sum += row[b];
    }
    for (int b = 0; b < nb; b++)
      row[b] = sum > 0.0 ? (float)(row[b] * v / sum) : 0.0f;
  }
  stg_st_free(top);
  stg_st_free(tmp);
  return 0;
}

int stg_pitch_salience(const float *x, uint64_t n, uint32_t rate, const stg_pitch_params *p,
                       size_t n_frames, float **out) {
  int nb = stg_pitch_salience_bins(p);
  sal_fft s;
  int rc = fft_init(&s, rate);
  if (rc)
    return rc;
  float *sal = stg_st_malloc((n_frames ? n_frames : 1) * (size_t)nb * sizeof *sal);
  float *height = stg_st_malloc((size_t)nb * sizeof *height);
  if (!sal || !height) {
    stg_st_free(sal);
    stg_st_free(height);
    fft_free(&s);
    return ebb_seterr(EBB_ENOMEM, "pitch: out of memory for the salience of %zu frames", n_frames);
  }
  for (int b = 0; b < nb; b++)
    height[b] = (float)pow(2.0, p->salience_height * b / 120.0); /* 120 bins an octave */
  peak pk[SAL_MAXPEAKS];
  for (size_t f = 0; f < n_frames && !stg_st_stop(); f++) {
    frame_mag(&s, x, n, (long long)f * p->hop);
    harmonic_sum(pk, find_peaks(&s, rate, pk), p->fmin, nb, height, sal + f * (size_t)nb);
  }
  fft_free(&s);
  stg_st_free(height);
  if (stg_st_stop())
    rc = ebb_seterr(EBB_ECANCELED, "pitch: cancelled during the salience of %zu frames", n_frames);
  if (rc || (rc = normalise_rows(sal, n_frames, nb, p->salience_sharpen))) {
    stg_st_free(sal);
    return rc;
  }
  *out = sal;
  return 0;
}

double stg_pitch_salience_mix(const float *row, int nb, double w, double vp, double *obs) {
  double vs = 0.0;
  for (int b = 0; b < nb; b++) {
    obs[b] = (1.0 - w) * obs[b] + w * row[b];
    vs += row[b];
  }
  double v = (1.0 - w) * vp + w * vs;
  return v > 1.0 ? 1.0 : v;
}

void stg_pitch_salience_blend_row(float *dst, const float *r, const float *q, int nb, double share,
                                  double vocals_only) {
  double sv = 0.0, sm = 0.0;
  for (int k = 0; k < nb; k++) {
    sv += r[k];
    sm += q[k];
  }
  float w = sv > vocals_only && sm < 0.05 * sv ? 0.0f : (float)share;
  for (int k = 0; k < nb; k++)
    dst[k] = (1.0f - w) * r[k] + w * q[k];
}

void stg_pitch_salience_blend(float *sal, const float *mel, size_t nf, int nb, double share,
                              double vocals_only) {
  for (size_t f = 0; f < nf; f++)
    stg_pitch_salience_blend_row(sal + f * (size_t)nb, sal + f * (size_t)nb, mel + f * (size_t)nb,
                                 nb, share, vocals_only);
}

static double row_sum(const float *r, int nb) {
  double v = 0.0;
  for (int k = 0; k < nb; k++)
    v += r[k];
  return v;
}

/* energy of x over [c - win/2, c + win/2) */
static double energy_at(const float *x, uint64_t n, long long c, int win) {
  double e = 0.0;
  long long a = c - win / 2, b = a + win;
  for (long long i = a < 0 ? 0 : a; i < b && i < (long long)n; i++)
    e += (double)x[i] * x[i];
  return e;
}

/* x is ratio_db or more, and silent_db or less, under the mix over the win
 * samples centred on c */
static int quiet_under_mix(const float *x, const float *mix, uint64_t n, long long c, int win,
                           double ratio, double silent) {
  double ex = energy_at(x, n, c, win), em = energy_at(mix, n, c, win);
  return em > 0.0 && ex <= ratio * em && ex >= silent * em;
}

size_t stg_pitch_salience_fill_mark(const float *sal, size_t nf, int nb, const float *x,
                                    const float *mix, uint64_t n, const stg_pitch_fill *fp,
                                    unsigned char *filled) {
  size_t k = 0, last = (size_t)-1; /* the last voiced frame so far */
  double ratio = pow(10.0, -fp->ratio_db / 10.0), silent = pow(10.0, -fp->silent_db / 10.0);
  size_t min_run = fp->min_frames ? fp->min_frames : 1;
  memset(filled, 0, nf);
  for (size_t f = 0; f < nf; f++) {
    if (row_sum(sal + f * (size_t)nb, nb) < EBB_PITCH_FILL_VOICED)
      continue;
    /* frames (last, f) are a hole between two voiced frames: its runs of
     * frames quiet under the mix, at least min_run long, are filled */
    if (last != (size_t)-1 && f - last - 1 <= fp->gap_frames)
      for (size_t u = last + 1; u < f;) {
        size_t e = u;
        while (e < f && quiet_under_mix(x, mix, n, (long long)e * fp->hop, fp->win, ratio, silent))
          e++;
        for (size_t v = u; e - u >= min_run && v < e; v++, k++)
          filled[v] = 1;
        u = e > u ? e : u + 1;
      }
    last = f;
  }
  return k;
}

void stg_pitch_salience_fill_apply(float *sal, const float *mixsal, size_t nf, int nb,
                                   double weight, const unsigned char *filled) {
  for (size_t f = 0; f < nf; f++)
    for (int j = 0; filled[f] && j < nb; j++)
      sal[f * (size_t)nb + j] = (float)(weight * mixsal[f * (size_t)nb + j]);
}

size_t stg_pitch_salience_fill(float *sal, const float *mixsal, size_t nf, int nb, const float *x,
                               const float *mix, uint64_t n, const stg_pitch_fill *fp,
                               unsigned char *filled) {
  size_t k = stg_pitch_salience_fill_mark(sal, nf, nb, x, mix, n, fp, filled);
  stg_pitch_salience_fill_apply(sal, mixsal, nf, nb, fp->weight, filled);
  return k;
}

int stg_pitch_salience_bins(const stg_pitch_params *p) {
  return (int)floor(1200.0 * log2(p->fmax / p->fmin) / 10.0) + 1;
}

/* Contour character (pitch.h). At most VIB_PEAKS peaks a row, strongest
 * first; prev/next link a peak to the one it continues in the row before
 * and after (-1: none). */
#define VIB_PEAKS EBB_PITCH_ROW_PEAKS
#define VIB_LINK_BINS 5.0 /* 50 cents a frame: vibrato of 45 cents at 6.5 Hz moves 18 */

typedef stg_pitch_peak vib_peak;

int stg_pitch_row_peaks_at(const float *r, int nb, vib_peak *pk, int maxn, double floor_share) {
  float top = 0.0f;
  for (int b = 0; b < nb; b++)
    top = r[b] > top ? r[b] : top;
  int n = 0;
  if (!(top > 0.0f))
    return 0;
  float floor_v = (float)(floor_share * top);
  vib_peak all[EBB_PITCH_VOICE_PEAKS + 1];
  maxn = maxn > EBB_PITCH_VOICE_PEAKS ? EBB_PITCH_VOICE_PEAKS : maxn;
  for (int b = 1; b + 1 < nb; b++) {
    if (!(r[b] >= floor_v && r[b] > r[b - 1] && r[b] >= r[b + 1]))
      continue;
    double a = log(r[b - 1] + 1e-30), m = log(r[b]), c = log(r[b + 1] + 1e-30);
    double den = a - 2.0 * m + c, off = den < 0.0 ? 0.5 * (a - c) / den : 0.0;
    off = off < -0.5 ? -0.5 : off > 0.5 ? 0.5 : off;
    vib_peak q = {.pos = (float)(b + off), .bin = b, .lo = b, .hi = b, .prev = -1, .next = -1};
    while (q.lo > 0 && r[q.lo - 1] > 0.0f && r[q.lo - 1] < r[q.lo])
      q.lo--;
    while (q.hi + 1 < nb && r[q.hi + 1] > 0.0f && r[q.hi + 1] <= r[q.hi])
      q.hi++;
    /* insertion by strength, ties by bin (deterministic) */
    int i = n < maxn ? n++ : maxn;
    all[i] = q;
    for (; i > 0 && r[all[i].bin] > r[all[i - 1].bin]; i--) {
      vib_peak t = all[i];
      all[i] = all[i - 1];
      all[i - 1] = t;
    }
  }
  memcpy(pk, all, (size_t)n * sizeof *pk);
  return n;
}

/* Links each peak of row f to the nearest free peak of row f - 1 within
 * VIB_LINK_BINS, strongest first. */
void stg_pitch_link_rows(vib_peak *pre, int npre, vib_peak *cur, int ncur) {
  for (int i = 0; i < ncur; i++) {
    int best = -1;
    double bd = VIB_LINK_BINS;
    for (int j = 0; j < npre; j++) {
      double d = fabs(cur[i].pos - pre[j].pos);
      if (pre[j].next < 0 && d <= bd) {
        best = j;
        bd = d;
      }
    }
    if (best >= 0) {
      cur[i].prev = best;
      pre[best].next = i;
    }
  }
}

/* The standard deviation in cents of peak i of frame f's contour over
 * +-half frames, or -1 where the contour has fewer than half + 1 frames
 * there. pk: VIB_PEAKS a frame. */
static double contour_sd(const vib_peak *pk, size_t nf, size_t f, int i, size_t half) {
  double s1 = 0.0, s2 = 0.0;
  size_t k = 0, g = f;
  for (int j = i; j >= 0 && k <= half; j = pk[g * VIB_PEAKS + j].prev, g--) {
    s1 += pk[g * VIB_PEAKS + j].pos;
    s2 += (double)pk[g * VIB_PEAKS + j].pos * pk[g * VIB_PEAKS + j].pos;
    k++;
    if (g == 0)
      break;
  }
  g = f + 1;
  for (int j = pk[f * VIB_PEAKS + i].next; j >= 0 && g < nf && g - f <= half;
       j = pk[g * VIB_PEAKS + j].next, g++) {
    s1 += pk[g * VIB_PEAKS + j].pos;
    s2 += (double)pk[g * VIB_PEAKS + j].pos * pk[g * VIB_PEAKS + j].pos;
    k++;
  }
  if (k < half + 1)
    return -1.0;
  double mean = s1 / (double)k, var = s2 / (double)k - mean * mean;
  return 10.0 * sqrt(var > 0.0 ? var : 0.0); /* 10 cents a bin */
}

/* Weighs up the lobes of row r's moving peaks (frame f), keeping its sum;
 * w: nb floats of scratch. */
static void weigh_row(float *r, int nb, const vib_peak *pk, size_t nf, size_t f, int np,
                      double gain, size_t half, double cents, float *w) {
  int any = 0;
  for (int b = 0; b < nb; b++)
    w[b] = 1.0f;
  for (int i = 0; i < np; i++) {
    double sd = contour_sd(pk, nf, f, i, half);
    if (sd < 0.0)
      continue;
    float m = (float)(1.0 + gain * (sd >= cents ? 1.0 : sd / cents));
    const vib_peak *q = pk + f * VIB_PEAKS + i;
    for (int b = q->lo; b <= q->hi; b++)
      w[b] = m > w[b] ? m : w[b];
    any = 1;
  }
  double before = 0.0, after = 0.0;
  for (int b = 0; any && b < nb; b++) {
    before += r[b];
    after += (double)r[b] * w[b];
  }
  for (int b = 0; any && after > 0.0 && b < nb; b++)
    r[b] = (float)(r[b] * w[b] * (before / after));
}

/* The peaks (VIB_PEAKS a frame, np[f] of them in frame f) stay allocated
 * only while this runs: at 8 peaks a frame they are under one salience row. */
int stg_pitch_salience_vibrato(float *sal, size_t nf, int nb, double gain, size_t half,
                               double cents) {
  if (!(gain > 0.0) || nf == 0 || nb < 3)
    return 0;
  int rc = 0;
  vib_peak *pk = stg_st_malloc(nf * VIB_PEAKS * sizeof *pk);
  int *np = stg_st_malloc(nf * sizeof *np);
  float *w = stg_st_malloc((size_t)nb * sizeof *w);
  if (!pk || !np || !w) {
    rc = ebb_seterr(EBB_ENOMEM, "pitch: out of memory for the salience contours of %zu frames", nf);
    goto done;
  }
  for (size_t f = 0; f < nf; f++) {
    np[f] = stg_pitch_row_peaks_at(sal + f * (size_t)nb, nb, pk + f * VIB_PEAKS, VIB_PEAKS,
                                   EBB_PITCH_VIBRATO_PEAK);
    if (f > 0)
      stg_pitch_link_rows(pk + (f - 1) * VIB_PEAKS, np[f - 1], pk + f * VIB_PEAKS, np[f]);
  }
  for (size_t f = 0; f < nf; f++)
    weigh_row(sal + f * (size_t)nb, nb, pk, nf, f, np[f], gain, half, cents, w);
done:
  stg_st_free(w);
  stg_st_free(np);
  stg_st_free(pk);
  return rc;
}
