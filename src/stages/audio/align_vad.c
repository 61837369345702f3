/* Voice activity detection (align.h): frame levels in dBFS; a frame is
 * active when it is within range_db of the track's loud level (95th
 * percentile of frame levels), above floor_db, and periodic: YIN's
 * aperiodicity at most max_aperiodicity. The periodicity cue is what keeps a
 * separator's residue (drums, smeared pad) in the rests of separated vocals
 * from joining all phrases into one: on those rests the RMS stays within
 * 10 dB of the singing. Short gaps are filled, short blips dropped, and
 * segments closer than phrase_gap_s form phrases. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/align.h"
#include "stages/audio/decode.h"
#include "stages/audio/pitch.h"
#include "stages/audio/st_util.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define AP_RATE 16000u

/* YIN's aperiodicity per VAD frame: the minimum of the cumulative mean
 * normalised difference d'(tau) over the lags of 65..1000 Hz (de Cheveigne &
 * Kawahara 2002, where it is the aperiodicity of the frame), on the
 * pre-emphasised signal at 16 kHz with pitch.h's analysis (1024-sample
 * frames, 512-sample window). Low (< ~0.15) for a sung vowel, high for noise,
 * drums and the smeared residue a separator leaves in the rests. Then a
 * running median over 5 frames so single transition frames do not count.
 * ap[f] for VAD frame f (centred on f * hop_s). */
static int aperiodicity(const float *x, uint64_t n, uint32_t rate, double hop_s, size_t nf,
                        double *ap) {
  float *res = NULL, *pad = NULL, *emph = NULL, *cm = NULL;
  double *raw = NULL;
  const float *y = x;
  uint64_t ny = n;
  int rc;
  if (rate != AP_RATE) {
    if ((rc = stg_audio_resample(x, n, rate, AP_RATE, &res, &ny)))
      return rc;
    y = res;
  }
  stg_pitch_params pp = stg_pitch_defaults();
  pp.hop = (int)lround(hop_s * AP_RATE);
  if (pp.hop < 1)
    pp.hop = 1;
  stg_pitch_geom g;
  if ((rc = stg_pitch_geometry(&pp, AP_RATE, ny, &g)) || (rc = stg_pitch_pad(y, ny, &g, &pad)) ||
      (rc = stg_pitch_preemphasis(pad, g.padded_len, pp.preemphasis, &emph)))
    goto done;
  size_t row = (size_t)g.tau_max + 1;
  cm = malloc(g.n_frames * row * sizeof *cm);
  raw = malloc(g.n_frames * sizeof *raw);
  if (!cm || !raw) {
    rc =
        ebb_seterr(EBB_ENOMEM, "vad: out of memory for the aperiodicity of %zu frames", g.n_frames);
    goto done;
  }
  stg_pitch_cmndf_cpu(emph, &g, cm);
  for (size_t f = 0; f < g.n_frames; f++) {
    const float *d = cm + f * row;
    double m = 1.0;
    for (int t = g.tau_min; t < g.tau_max; t++)
      if (d[t] < m)
        m = d[t];
    raw[f] = m;
  }
  for (size_t f = 0; f < nf; f++) {
    double w[5];
    int k = 0;
    for (int o = -2; o <= 2; o++) {
      int64_t i = (int64_t)f + o;
      if (i >= 0 && (uint64_t)i < g.n_frames)
        w[k++] = raw[i];
    }
    if (k == 0) {
      ap[f] = 1.0;
      continue;
    }
    for (int a = 1; a < k; a++) /* insertion sort of <= 5 */
      for (int b = a; b > 0 && w[b] < w[b - 1]; b--) {
        double t = w[b];
        w[b] = w[b - 1];
        w[b - 1] = t;
      }
    ap[f] = w[k / 2];
  }
done:
  free(res);
  free(pad);
  free(emph);
  free(cm);
  free(raw);
  return rc;
}

/* Joins spans closer than gap, drops those shorter than min; in place. */
static size_t join_spans(stg_span *s, size_t n, double gap, double min) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (k > 0 && s[i].start - s[k - 1].end < gap)
      s[k - 1].end = s[i].end;
    else
      s[k++] = s[i];
  }
  size_t m = 0;
  for (size_t i = 0; i < k; i++)
    if (s[i].end - s[i].start >= min - 1e-9)
      s[m++] = s[i];
  return m;
}

/* The level of each frame in dB, over a window centred on the frame. */
static void frame_levels(const float *x, uint64_t n, size_t hop, size_t win, size_t nf,
                         double *db) {
  for (size_t f = 0; f < nf; f++) {
    int64_t a = (int64_t)(f * hop) - (int64_t)win / 2, e = a + (int64_t)win;
    double sum = 0.0;
    for (int64_t k = a; k < e; k++)
      if (k >= 0 && (uint64_t)k < n)
        sum += (double)x[k] * x[k];
    db[f] = 10.0 * log10(sum / (double)win + 1e-20);
  }
}

/* The frames loud enough (and periodic enough, when ap is given) as spans of time, adjacent
 * frames merged; answers how many spans went into s. */
static size_t active_frames(const double *db, const double *ap, size_t nf, double thr, size_t hop,
                            uint32_t rate, const stg_vad_params *p, stg_span *s) {
  size_t k = 0;
  for (size_t f = 0; f < nf; f++) {
    if (db[f] < thr || (ap && ap[f] > p->max_aperiodicity))
      continue;
    double t0 = (double)f * hop / rate - p->hop_s / 2, t1 = t0 + p->hop_s;
    if (t0 < 0)
      t0 = 0;
    if (k > 0 && t0 - s[k - 1].end < 1e-9)
      s[k - 1].end = t1;
    else
      s[k++] = (stg_span){t0, t1};
  }
  return k;
}

int stg_vad(const float *x, uint64_t n, uint32_t rate, const stg_vad_params *p, stg_span **segs,
            size_t *nseg, stg_span **phrases, size_t *nphr) {
  *segs = *phrases = NULL;
  *nseg = *nphr = 0;
  if (rate == 0 || !(p->hop_s > 0.0) || !(p->win_s > 0.0))
    return ebb_seterr(EBB_EINVAL, "vad: bad rate %u, hop %g s or window %g s", rate, p->hop_s,
                      p->win_s);
  size_t hop = (size_t)lround(p->hop_s * rate), win = (size_t)lround(p->win_s * rate);
  if (hop < 1)
    hop = 1;
  if (win < 1)
    win = 1;
  size_t nf = (size_t)(n / hop) + 1;
  double *db = malloc(nf * sizeof *db), *sorted = malloc(nf * sizeof *sorted), *ap = NULL;
  stg_span *s = malloc(nf * sizeof *s), *ph = NULL;
  if (!db || !sorted || !s) {
    free(db);
    free(sorted);
    free(s);
    return ebb_seterr(EBB_ENOMEM, "vad: out of memory for %zu frames", nf);
  }
  if (p->max_aperiodicity < 1.0 && n > 0) {
    int rc;
    if (!(ap = malloc(nf * sizeof *ap)))
      rc = ebb_seterr(EBB_ENOMEM, "vad: out of memory for %zu frames", nf);
    else
      rc = aperiodicity(x, n, rate, p->hop_s, nf, ap);
    if (!rc && stg_st_stop()) /* its difference function broke off (st_util.h) */
      rc = ebb_seterr(EBB_ECANCELED, "vad: cancelled");
    if (rc) {
      free(db);
      free(sorted);
      free(s);
      free(ap);
      return rc;
    }
  }
  frame_levels(x, n, hop, win, nf, db);
  memcpy(sorted, db, nf * sizeof *db);
  qsort(sorted, nf, sizeof *sorted, cmp_double);
  double loud = sorted[(size_t)(0.95 * (double)(nf - 1))];
  double thr = fmax(p->floor_db, loud - p->range_db);
  size_t k = active_frames(db, ap, nf, thr, hop, rate, p, s);
  double dur = (double)n / rate;
  for (size_t i = 0; i < k; i++)
    if (s[i].end > dur)
      s[i].end = dur;
  k = join_spans(s, k, p->fill_s + 1e-9, p->min_active_s);
  free(ap);
  if (k) {
    ph = malloc(k * sizeof *ph);
    if (!ph) {
      free(db);
      free(sorted);
      free(s);
      return ebb_seterr(EBB_ENOMEM, "vad: out of memory");
    }
    memcpy(ph, s, k * sizeof *ph);
  }
  size_t np = join_spans(ph, k, p->phrase_gap_s, p->min_phrase_s);
  free(db);
  free(sorted);
  if (k == 0) {
    free(s);
    s = NULL;
  }
  if (np == 0) {
    free(ph);
    ph = NULL;
  }
  *segs = s;
  *nseg = k;
  *phrases = ph;
  *nphr = np;
  return 0;
}
