/* Voice activity detection (align.h): frame levels in dBFS; a frame is
 * active when it is within range_db of the track's loud level (95th
 * percentile of frame levels), above floor_db, and periodic: YIN's
 * aperiodicity at most max_aperiodicity. The periodicity cue is what keeps a
 * separator's residue (drums, smeared pad) in the rests of separated vocals
 * from joining all phrases into one: on those rests the RMS stays within
 * 10 dB of the singing. Short gaps are filled, short blips dropped, and
 * segments closer than phrase_gap_s form phrases.
 *
 * The phrases (by default, level_phrases) come from the level alone, smoothed
 * over STG_VAD_SMOOTH_S, against the song's own quiet and loud levels (the
 * 10th and 95th percentiles of the smoothed level): a phrase starts where the
 * smoothed level rises above VAD_HI of the way from quiet to loud and lasts
 * while it stays above VAD_LO; its edges move to the first and last frame of
 * raw level above VAD_LO within half a smoothing window. A sung note is
 * loud for its whole length whether it is breathy, gliding or shifted; the
 * periodicity gate cut such lines into fragments (issue 43). */
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
#define VAD_Q_QUIET 0.10     /* the quiet level: this quantile of the smoothed level */
#define VAD_Q_LOUD 0.95      /* the loud level */
#define VAD_HI 0.5           /* a phrase starts above this share of the way from quiet to loud */
#define VAD_LO 0.3           /* ... and lasts while above this share */
#define VAD_AP_WEIGHT 3.0    /* the cue: level share minus this times the smoothed aperiodicity */
#define VAD_MIN_PERIODIC 0.1 /* a phrase needs this share of periodic frames (ap cue on) */

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

/* The mean of v over k frames centred on each frame, into sm. */
static void smooth(const double *v, size_t nf, size_t k, double *sm) {
  double sum = 0;
  size_t a = 0, e = 0; /* the window [a, e) */
  for (size_t f = 0; f < nf; f++) {
    size_t na = f >= k / 2 ? f - k / 2 : 0, ne = f + (k + 1) / 2 < nf ? f + (k + 1) / 2 : nf;
    for (; e < ne; e++)
      sum += v[e];
    for (; a < na; a++)
      sum -= v[a];
    sm[f] = sum / (double)(e - a);
  }
}

/* The q-quantile of v[0..nf) (scratch: tmp). */
static double quantile(const double *v, size_t nf, double q, double *tmp) {
  memcpy(tmp, v, nf * sizeof *tmp);
  qsort(tmp, nf, sizeof *tmp, cmp_double);
  return tmp[(size_t)(q * (double)(nf - 1))];
}

/* One phrase's frames [*a, *b) with edges moved in to the first / last raw frame above lo dB
 * within half a window of them (the smoothed cue rises before a sharp onset). */
static void refine_edges(const double *db, size_t half, double lo, size_t *a, size_t *b) {
  size_t s1 = *a + half < *b ? *a + half : *b;
  for (size_t f = *a; f < s1; f++)
    if (db[f] > lo) {
      *a = f;
      break;
    }
  size_t e0 = *b > *a + half ? *b - half : *a + 1;
  for (size_t f = *b; f > e0; f--)
    if (db[f - 1] > lo) {
      *b = f;
      break;
    }
}

/* The voice cue per frame into c (see the top): the smoothed level as a share of the way from
 * the song's quiet to its loud level, minus VAD_AP_WEIGHT times the smoothed aperiodicity (ap:
 * NULL when that cue is off). *lvl_lo: the raw level (dB) at VAD_LO of the way, *floor: the
 * least smoothed level a phrase may have. sm: the smoothed level; tmp, w: scratch; all nf. */
static void voice_cue(const double *db, const double *ap, size_t nf, size_t k,
                      const stg_vad_params *p, double *sm, double *tmp, double *w, double *c,
                      double *lvl_lo, double *floor) {
  for (size_t f = 0; f < nf; f++)    /* under the floor is as quiet as the floor: digital */
    w[f] = fmax(db[f], p->floor_db); /* silence (-200 dB) would outweigh a note nearby */
  smooth(w, nf, k, sm);
  double quiet = quantile(sm, nf, VAD_Q_QUIET, tmp), loud = quantile(sm, nf, VAD_Q_LOUD, tmp);
  double span = loud - quiet > 1e-9 ? loud - quiet : 1e-9;
  *lvl_lo = quiet + VAD_LO * span;
  *floor = fmax(p->floor_db, loud - p->range_db);
  if (ap) { /* the aperiodicity weighted by power: a window's loud frames speak for it */
    for (size_t f = 0; f < nf; f++)
      tmp[f] = pow(10.0, db[f] / 10.0);
    smooth(tmp, nf, k, c);
    for (size_t f = 0; f < nf; f++)
      w[f] = tmp[f] * ap[f];
    smooth(w, nf, k, tmp);
    for (size_t f = 0; f < nf; f++)
      tmp[f] = c[f] > 0 ? tmp[f] / c[f] : 1.0;
  }
  for (size_t f = 0; f < nf; f++)
    c[f] = (sm[f] - quiet) / span - (ap ? VAD_AP_WEIGHT * tmp[f] : 0);
}

/* Spans [a, b) of frames where the cue c rises above hi and stays above lo (and the smoothed
 * level sm above floor), into fa/fb; their count. */
static size_t cue_spans(const double *c, const double *sm, size_t nf, double lo, double hi,
                        double floor, size_t *fa, size_t *fb) {
  size_t n = 0, prev = 0;
  for (size_t f = 0; f < nf;) {
    if (c[f] <= hi || sm[f] <= floor) {
      f++;
      continue;
    }
    size_t a = f, b = f;
    while (a > prev && c[a - 1] > lo && sm[a - 1] > floor)
      a--;
    while (b < nf && c[b] > lo && sm[b] > floor)
      b++;
    fa[n] = a;
    fb[n++] = b;
    prev = f = b;
  }
  return n;
}

/* Spans closer than gap frames joined; those with fewer than VAD_MIN_PERIODIC periodic frames
 * (ap, when given) dropped; in place. Each then reaches out while the smoothed level stays
 * above lvl_lo (at most half frames, never into a neighbour) and in to its first and last raw
 * frame above edge_db. */
static size_t shape_spans(size_t *fa, size_t *fb, size_t n, size_t gap, const double *ap,
                          double max_ap, const double *sm, const double *db, size_t nf, size_t half,
                          double lvl_lo, double edge_db) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++) {
    if (m > 0 && fa[i] < fb[m - 1] + gap)
      fb[m - 1] = fb[i];
    else
      fa[m] = fa[i], fb[m++] = fb[i];
  }
  size_t k = 0;
  for (size_t i = 0; i < m; i++) {
    size_t per = 0;
    for (size_t f = fa[i]; ap && f < fb[i]; f++)
      per += ap[f] <= max_ap;
    if (!ap || (double)per >= VAD_MIN_PERIODIC * (double)(fb[i] - fa[i]))
      fa[k] = fa[i], fb[k++] = fb[i];
  }
  for (size_t i = 0; i < k; i++) {
    size_t lo_lim = i > 0 ? fb[i - 1] : 0, hi_lim = i + 1 < k ? fa[i + 1] : nf;
    size_t a = fa[i], b = fb[i];
    while (a > lo_lim && fa[i] - a < half && sm[a - 1] > lvl_lo)
      a--;
    while (b < hi_lim && b - fb[i] < half && sm[b] > lvl_lo)
      b++;
    refine_edges(db, half, edge_db, &a, &b);
    fa[i] = a, fb[i] = b;
  }
  return k;
}

/* The phrases from the voice cue (level_phrases; see the top): spans of time into s (room for
 * nf), their count; (size_t)-1: out of memory. */
static size_t level_spans(const double *db, const double *ap, size_t nf, size_t hop, uint32_t rate,
                          const stg_vad_params *p, stg_span *s) {
  size_t k = (size_t)lround(STG_VAD_SMOOTH_S / p->hop_s), n;
  double *sm = malloc(nf * sizeof *sm), *tmp = malloc(nf * sizeof *tmp),
         *w = malloc(nf * sizeof *w), *c = malloc(nf * sizeof *c);
  size_t *fa = malloc(nf * sizeof *fa), *fb = malloc(nf * sizeof *fb);
  if (!sm || !tmp || !w || !c || !fa || !fb) {
    free(sm), free(tmp), free(w), free(c), free(fa), free(fb);
    return (size_t)-1;
  }
  if (k < 1)
    k = 1;
  double lvl_lo, floor;
  voice_cue(db, ap, nf, k, p, sm, tmp, w, c, &lvl_lo, &floor);
  double cq = quantile(c, nf, VAD_Q_QUIET, tmp), cl = quantile(c, nf, VAD_Q_LOUD, tmp);
  n = cue_spans(c, sm, nf, cq + VAD_LO * (cl - cq), cq + VAD_HI * (cl - cq), floor, fa, fb);
  size_t gap = (size_t)lround(p->phrase_gap_s / p->hop_s);
  n = shape_spans(fa, fb, n, gap, ap, p->max_aperiodicity, sm, db, nf, k / 2, lvl_lo,
                  fmax(lvl_lo, p->floor_db));
  for (size_t i = 0; i < n; i++)
    s[i] = (stg_span){fmax(0.0, (double)fa[i] * hop / rate - p->hop_s / 2),
                      (double)fb[i] * hop / rate};
  free(sm), free(tmp), free(w), free(c), free(fa), free(fb);
  return n;
}

/* The phrases: from the level (level_phrases) or the segments s[0..k) joined; those under
 * min_phrase_s dropped. *ph malloc'd (NULL when *np is 0 or on error). */
static int make_phrases(const double *db, const double *ap, size_t nf, size_t hop, uint32_t rate,
                        const stg_vad_params *p, const stg_span *s, size_t k, stg_span **ph,
                        size_t *np) {
  size_t room = p->level_phrases ? nf : k;
  *np = 0;
  *ph = NULL;
  if (room == 0)
    return 0;
  if (!(*ph = malloc(room * sizeof **ph)))
    return ebb_seterr(EBB_ENOMEM, "vad: out of memory for %zu phrases", room);
  if (p->level_phrases) {
    if ((*np = level_spans(db, ap, nf, hop, rate, p, *ph)) == (size_t)-1) {
      free(*ph);
      *ph = NULL;
      *np = 0;
      return ebb_seterr(EBB_ENOMEM, "vad: out of memory for the level of %zu frames", nf);
    }
  } else {
    memcpy(*ph, s, k * sizeof *s);
    *np = k;
  }
  /* level phrases are joined across phrase_gap_s before their edges reach out */
  *np = join_spans(*ph, *np, p->level_phrases ? 0 : p->phrase_gap_s, p->min_phrase_s);
  return 0;
}

/* The voicing weight of each frame (stg_vad_voiced; issue 43), the evidence the acoustic
 * alignment gets of where a pitched voice sings: periodic (YIN's aperiodicity from VW_AP_LO,
 * weight 1, to VW_AP_HI, weight 0) times loud (from range_db under the loud level, weight 0, up
 * over VW_LEVEL_RAMP_DB to 1), then the most of that from VW_TAIL_S before the frame to
 * VW_LEAD_S after it (a word's consonants come before its vowel, a note's release after it).
 * VW_AP_HI: on the dev set's separated espeak-ng mixes the sung frames' aperiodicity has
 * quartiles 0.13/0.24/0.42 at 0 dB, the rests' 0.35/0.44/0.54; 0.35 aligned more words there
 * than 0.45 or 0.3. q: scratch; into v; both nf. */
#define VW_AP_LO 0.15
#define VW_AP_HI 0.35
#define VW_LEVEL_RAMP_DB 6.0
#define VW_LEAD_S 0.15
#define VW_TAIL_S 0.1
static void voicing_weight(const double *db, const double *ap, size_t nf, double loud,
                           const stg_vad_params *p, double *q, double *v) {
  double lo = fmax(p->floor_db, loud - p->range_db);
  for (size_t f = 0; f < nf; f++) {
    double per = fmin(1.0, fmax(0.0, (VW_AP_HI - ap[f]) / (VW_AP_HI - VW_AP_LO)));
    double lev = fmin(1.0, fmax(0.0, (db[f] - lo) / VW_LEVEL_RAMP_DB));
    q[f] = per * lev;
  }
  size_t lead = (size_t)lround(VW_LEAD_S / p->hop_s), tail = (size_t)lround(VW_TAIL_S / p->hop_s);
  for (size_t f = 0; f < nf; f++) { /* lead + tail is 25 frames: no running max needed */
    size_t a = f > tail ? f - tail : 0, e = f + lead + 1 < nf ? f + lead + 1 : nf;
    double m = 0;
    for (size_t g = a; g < e; g++)
      m = fmax(m, q[g]);
    v[f] = m;
  }
}

/* The frames' YIN aperiodicity: nf doubles in *out (the caller frees). */
static int frames_aperiodicity(const float *x, uint64_t n, uint32_t rate, double hop_s, size_t nf,
                               double **out) {
  double *ap = malloc(nf * sizeof *ap);
  if (!ap)
    return ebb_seterr(EBB_ENOMEM, "vad: out of memory for %zu frames", nf);
  int rc = aperiodicity(x, n, rate, hop_s, nf, ap);
  if (!rc && stg_st_stop()) /* its difference function broke off (st_util.h) */
    rc = ebb_seterr(EBB_ECANCELED, "vad: cancelled");
  if (rc) {
    free(ap);
    return rc;
  }
  *out = ap;
  return 0;
}

/* The frames' voicing weight (voicing_weight): nf doubles in *out (the
 * caller frees). */
static int frames_voicing(const double *db, const double *ap, size_t nf, double loud,
                          const stg_vad_params *p, double **out) {
  double *q = malloc(nf * sizeof *q), *v = malloc(nf * sizeof *v);
  if (!q || !v) {
    free(q), free(v);
    return ebb_seterr(EBB_ENOMEM, "vad: out of memory for %zu frames", nf);
  }
  voicing_weight(db, ap, nf, loud, p, q, v);
  free(q);
  *out = v;
  return 0;
}

int stg_vad(const float *x, uint64_t n, uint32_t rate, const stg_vad_params *p, stg_span **segs,
            size_t *nseg, stg_span **phrases, size_t *nphr) {
  return stg_vad_voiced(x, n, rate, p, segs, nseg, phrases, nphr, NULL, NULL);
}

int stg_vad_voiced(const float *x, uint64_t n, uint32_t rate, const stg_vad_params *p,
                   stg_span **segs, size_t *nseg, stg_span **phrases, size_t *nphr, double **voice,
                   size_t *nvoice) {
  *segs = *phrases = NULL;
  *nseg = *nphr = 0;
  if (voice)
    *voice = NULL, *nvoice = 0;
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
  if ((p->max_aperiodicity < 1.0 || voice) && n > 0) {
    int rc = frames_aperiodicity(x, n, rate, p->hop_s, nf, &ap);
    if (rc) {
      free(db);
      free(sorted);
      free(s);
      return rc;
    }
  }
  frame_levels(x, n, hop, win, nf, db);
  memcpy(sorted, db, nf * sizeof *db);
  qsort(sorted, nf, sizeof *sorted, cmp_double);
  double loud = sorted[(size_t)(0.95 * (double)(nf - 1))];
  double thr = fmax(p->floor_db, loud - p->range_db);
  if (voice && ap) {
    int rc = frames_voicing(db, ap, nf, loud, p, voice);
    if (rc) {
      free(db), free(sorted), free(s), free(ap);
      return rc;
    }
    *nvoice = nf;
  }
  const double *gate = p->max_aperiodicity < 1.0 ? ap : NULL; /* ap may be for the voicing */
  size_t k = active_frames(db, gate, nf, thr, hop, rate, p, s);
  double dur = (double)n / rate;
  for (size_t i = 0; i < k; i++)
    if (s[i].end > dur)
      s[i].end = dur;
  k = join_spans(s, k, p->fill_s + 1e-9, p->min_active_s);
  size_t np = 0;
  int rc = make_phrases(db, gate, nf, hop, rate, p, s, k, &ph, &np);
  free(ap);
  if (rc) {
    if (voice)
      free(*voice), *voice = NULL, *nvoice = 0;
    free(db);
    free(sorted);
    free(s);
    return rc;
  }
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
