/* Note onsets for the pitch stage (pitch.h): an onset detection function on
 * the analysed signal and the note refinement that uses it.
 *
 * Why: pYIN follows the pitch, not the attacks. Two equal notes in a row stay
 * one voiced run when the instrument's release (or the room) fills the gap
 * between them, and after a pitch change the old note's release holds the
 * track on the old pitch for 30-60 ms, so the new note starts late. The
 * attack of a note is a burst of new spectral energy, which a spectral flux
 * finds.
 *
 * The detection function is SuperFlux (S. Böck and G. Widmer, "Maximum
 * filter vibrato suppression for onset detection", DAFx 2013): the positive
 * difference of log magnitudes against the frame two hops back, maximum-
 * filtered over 3 bins so vibrato and glides do not count as new energy. It is
 * normalised by its 90th percentile over the track's sounding frames, so the
 * thresholds do not depend on the level. Frames are centred like the pitch
 * frames (frame f on sample f*hop).
 *
 * A re-attack is scored (reattack_score) on the rise of the energy at the
 * harmonics of the note's pitch (stg_pitch_harmonic_level), where a chord
 * struck in the gap between two equal notes does not fill the dip; by
 * default the re-attack model (pitch_reattack.c) rates each peak that scores
 * at least reattack_score_min on 70 features of the level, the onset
 * strength, the voicing and the pitch around it (reattack_features), and
 * the best-rated peaks split the note first; once the notes are refined, the f0
 * track's frames that still hold the previous note's release take the new
 * note's pitch (stg_pitch_track_to_notes). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/midi.h"
#include "stages/audio/pitch.h"
#include "stages/audio/stft.h"
#include "stages/audio/st_util.h"

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* flux and level of every frame from the magnitudes (nb bins per frame) */
static void flux_from_mag(const float *mag, int nframes, int nb, int klo, int khi, float *odf,
                          float *level_db, double norm) {
  for (int f = 0; f < nframes; f++) {
    const float *m = mag + (size_t)f * nb;
    double e = 0.0, fl = 0.0;
    for (int k = 0; k < nb; k++)
      e += (double)m[k] * m[k];
    level_db[f] = (float)(10.0 * log10(e * norm + 1e-20));
    if (f >= 2) {
      const float *q = mag + (size_t)(f - 2) * nb;
      for (int k = klo; k < khi; k++) {
        double prev = fmax(fmax(q[k - 1], q[k]), q[k + 1]);
        double d = log1p(m[k]) - log1p(prev);
        if (d > 0.0)
          fl += d;
      }
    }
    odf[f] = (float)fl;
  }
}

/* odf /= its 90th percentile over frames within 40 dB of the loud level */
static int normalise_odf(float *odf, const float *level_db, size_t n) {
  float *tmp = stg_st_malloc((n ? n : 1) * sizeof *tmp);
  if (!tmp)
    return ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %zu onset frames", n);
  memcpy(tmp, level_db, n * sizeof *tmp);
  qsort(tmp, n, sizeof *tmp, cmp_float);
  float loud = n ? tmp[(size_t)(0.95 * (double)(n - 1))] : 0.0f;
  size_t k = 0;
  for (size_t f = 0; f < n; f++)
    if (level_db[f] > loud - 40.0f)
      tmp[k++] = odf[f];
  qsort(tmp, k, sizeof *tmp, cmp_float);
  float scale = k ? tmp[(size_t)(0.9 * (double)(k - 1))] : 0.0f;
  for (size_t f = 0; f < n; f++)
    odf[f] = scale > 0.0f ? odf[f] / scale : 0.0f;
  stg_st_free(tmp);
  return 0;
}

/* The onset spectrogram of x: a Hann STFT of about 32 ms at the pitch hop;
 * *mag malloc'd (s->nframes * s->nbins floats; caller frees). */
static int onset_spectrogram(const float *x, uint64_t n, uint32_t rate, int hop, stg_stft_shape *s,
                             float **mag) {
  int nfft = 64;
  while (nfft < 4096 && nfft < (int)(0.032 * rate))
    nfft *= 2;
  *mag = NULL;
  int rc = stg_stft_shape_init(s, nfft, hop < nfft ? hop : nfft, (long long)n);
  if (rc)
    return rc;
  if (!(*mag = stg_st_malloc((size_t)s->nframes * s->nbins * sizeof **mag)))
    return ebb_seterr(EBB_ENOMEM, "pitch: out of memory for the onset spectrogram (%d frames)",
                      s->nframes);
  if ((rc = stg_stft_forward_cpu(s, x, NULL, *mag))) {
    stg_st_free(*mag);
    *mag = NULL;
  }
  return rc;
}

/* Hann-windowed energy to mean square: 1 / (sum w^2 * nfft / 2) ~ 8 / (3 nfft^2) */
static double energy_norm(int nfft) { return 8.0 / (3.0 * (double)nfft * nfft); }

int stg_pitch_onset_strength(const float *x, uint64_t n, uint32_t rate, int hop, size_t n_frames,
                             float *odf, float *level_db) {
  stg_stft_shape s;
  float *mag = NULL, *o = NULL, *l = NULL;
  int rc = onset_spectrogram(x, n, rate, hop, &s, &mag);
  if (rc)
    return rc;
  o = stg_st_malloc((size_t)s.nframes * sizeof *o);
  l = stg_st_malloc((size_t)s.nframes * sizeof *l);
  if (!o || !l) {
    rc = ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %d onset frames", s.nframes);
    goto done;
  }
  int klo = (int)(30.0 * s.n / rate) + 1, khi = (int)(6000.0 * s.n / rate);
  if (khi > s.nbins - 1)
    khi = s.nbins - 1;
  if (klo >= khi)
    klo = 1;
  flux_from_mag(mag, s.nframes, s.nbins, klo, khi, o, l, energy_norm(s.n));
  for (size_t f = 0; f < n_frames; f++) {
    size_t g = f < (size_t)s.nframes ? f : (size_t)s.nframes - 1;
    odf[f] = o[g];
    level_db[f] = l[g];
  }
  rc = normalise_odf(odf, level_db, n_frames);
done:
  stg_st_free(mag);
  stg_st_free(o);
  stg_st_free(l);
  return rc;
}

/* The level of frame m's energy in the bins at the harmonics of hz (each
 * harmonic's nearest bin and its two neighbours, up to 6 kHz and at most
 * `harmonics` of them; bins counted once). */
static double harmonic_energy(const float *m, int nb, double bin_hz, double hz, int harmonics) {
  double e = 0.0;
  int last = -1;
  for (int h = 1; h <= harmonics && h * hz < 6000.0; h++) {
    int c = (int)lround(h * hz / bin_hz);
    for (int k = c - 1 > last ? c - 1 : last + 1; k <= c + 1 && k < nb; k++)
      e += (double)m[k] * m[k];
    last = c + 1;
  }
  return e;
}

int stg_pitch_harmonic_level(const float *x, uint64_t n, uint32_t rate, int hop, size_t n_frames,
                             const float *ref_hz, int harmonics, float *harm_db) {
  stg_stft_shape s;
  float *mag = NULL;
  int rc = onset_spectrogram(x, n, rate, hop, &s, &mag);
  if (rc)
    return rc;
  double bin_hz = (double)rate / s.n, norm = energy_norm(s.n);
  for (size_t f = 0; f < n_frames; f++) {
    if ((f & 1023) == 0 && stg_st_stop()) {
      stg_st_free(mag);
      return ebb_seterr(EBB_ECANCELED, "pitch: cancelled at frame %zu of %zu", f, n_frames);
    }
    const float *m = mag + (f < (size_t)s.nframes ? f : (size_t)s.nframes - 1) * s.nbins;
    double e = 0.0;
    if (ref_hz[f] > 0.0f)
      e = harmonic_energy(m, s.nbins, bin_hz, ref_hz[f], harmonics);
    else
      for (int k = 0; k < s.nbins; k++)
        e += (double)m[k] * m[k];
    harm_db[f] = (float)(10.0 * log10(e * norm + 1e-20));
  }
  stg_st_free(mag);
  return 0;
}

/* --- notes refined by the onsets ---------------------------------------------- */

typedef struct seg_ctx {
  const float *frames, *odf, *level_db;
  size_t nf;
  const stg_pitch_params *p;
  double hop_s;
  size_t minf;           /* frames of the shortest note */
  size_t gapf;           /* frames between a note's start and a re-attack of its pitch (>= minf) */
  size_t w20, w60, w150; /* the re-attack score's windows in frames */
  double *score;         /* nf scratch scores */
  unsigned char *reattack; /* per note out: 1 where it starts at a re-attack */
  double loud;             /* the level's 95th percentile (a feature of the model) */
  FILE *dump;              /* EBB_PITCH_REATTACK_FEATURES, or NULL */
} seg_ctx;

#define REATTACK_W_ODF 2.78
#define REATTACK_W_VOICING 9.1

/* odf[t] is the largest of [t-3, t+3] */
static int is_peak(const seg_ctx *c, size_t t) {
  size_t lo = t >= 3 ? t - 3 : 0, hi = t + 3 < c->nf ? t + 3 : c->nf - 1;
  for (size_t k = lo; k <= hi; k++)
    if (c->odf[k] > c->odf[t])
      return 0;
  return 1;
}

/* The dip window of onset peak t, [t - 60 ms, t + 20 ms] in *d0..*d1, and
 * the frame of the level's minimum in it. */
static size_t level_dip(const seg_ctx *c, size_t t, size_t *d0, size_t *d1) {
  *d0 = t >= c->w60 ? t - c->w60 : 0;
  *d1 = t + c->w20 < c->nf ? t + c->w20 : c->nf - 1;
  size_t dip = *d0;
  for (size_t k = *d0; k <= *d1; k++)
    if (c->level_db[k] < c->level_db[dip])
      dip = k;
  return dip;
}

/* The rise and the voicing dip of onset peak t (see reattack_score). */
static void reattack_parts(const seg_ctx *c, size_t t, double *rise, double *vdip_out) {
  size_t nf = c->nf, w60 = c->w60, w150 = c->w150, d0, d1;
  size_t dip = level_dip(c, t, &d0, &d1);
  double vmin = INFINITY;
  for (size_t k = d0; k <= d1; k++)
    vmin = fmin(vmin, c->frames[3 * k + 2]);
  float hi = -INFINITY;
  for (size_t k = dip > t ? dip : t; k < nf && k <= t + w150; k++)
    hi = fmaxf(hi, c->level_db[k]);
  double pre = 0.0, post = 0.0;
  size_t npre = 0, npost = 0;
  for (size_t k = t >= w150 ? t - w150 : 0; k < d0 && t >= w60; k++, npre++)
    pre += c->frames[3 * k + 2];
  for (size_t k = d1 + 1; k < nf && k < t + w150; k++, npost++)
    post += c->frames[3 * k + 2];
  double vdip = 0.0;
  if (npre || npost) {
    double lower = npre && npost ? fmin(pre / (double)npre, post / (double)npost)
                   : npre        ? pre / (double)npre
                                 : post / (double)npost;
    vdip = lower - vmin;
  }
  *rise = (double)(hi - c->level_db[dip]);
  *vdip_out = vdip;
}

/* The re-attack score of onset peak t in dB (-INFINITY when t is no peak
 * of at least EBB_PITCH_REATTACK_MIN_ODF):
 *   rise + REATTACK_W_ODF * ln(odf[t]) + REATTACK_W_VOICING * vdip
 * rise: the level's rise from its minimum over [t - 60 ms, t + 20 ms] to its
 *   maximum from there (or t) to t + 150 ms (a slow attack peaks late);
 * vdip: how far the track's voicing dips over [t - 60 ms, t + 20 ms] below
 *   the lower of its means over the 90 ms before and the 120 ms after (the
 *   release between two notes is weakly periodic; a tremolo's trough is not).
 * The weights are a logistic regression's on the onset peaks of
 * bench/songtrace_real.py's tuning clips (seeds 1000), labelled by whether
 * a truth onset lies within 50 ms, scaled so the rise counts 1 per dB;
 * docs/songtrace.md has the held-out check. */
static double reattack_score(const seg_ctx *c, size_t t, double *rise_out, double *vdip_out) {
  if (c->odf[t] < EBB_PITCH_REATTACK_MIN_ODF || !is_peak(c, t))
    return -INFINITY;
  double rise, vdip;
  reattack_parts(c, t, &rise, &vdip);
  *rise_out = rise;
  *vdip_out = vdip;
  return rise + REATTACK_W_ODF * log(c->odf[t]) + REATTACK_W_VOICING * vdip;
}

/* frame t + ms, clamped to the track */
static size_t frame_at(const seg_ctx *c, size_t t, int ms) {
  long f = (long)t + lround(ms / 1000.0 / c->hop_s);
  return (size_t)(f < 0 ? 0 : f >= (long)c->nf ? (long)c->nf - 1 : f);
}

/* The re-attack model's features of onset peak t in note [a, b) whose
 * median pitch is med (MIDI) and whose score parts are rise and vdip
 * (reattack_score), in this order (EBB_PITCH_REATTACK_NFEAT):
 *   the score's three parts: rise (dB), ln(onset strength), voicing dip;
 *   the level at the note's harmonics from t - 200 to t + 200 ms in 20 ms
 *   steps, less its value at t (21);
 *   ln(onset strength + 0.01) from t - 100 to t + 100 ms in 10 ms steps (21);
 *   the voicing probability from t - 150 to t + 150 ms in 30 ms steps (11);
 *   the track's pitch less med from t - 150 to t + 150 ms in 30 ms steps,
 *   in semitones within +-3, unvoiced frames -3 (11);
 *   ln of the seconds from the note's start and to its end, and the level
 *   at t less the track's loud level (3).
 * Frames beyond the track repeat its first or last. bench/train_reattack.py
 * trains on exactly these (the stage writes them out for it). */
/* samples of the level (-200..200 ms by 20), the onset strength (-100..100
 * by 10) and the voicing and the pitch (-150..150 by 30) */
enum { RA_LEVEL_N = 21, RA_ODF_N = 21, RA_TRACK_N = 11 };
_Static_assert(3 + RA_LEVEL_N + RA_ODF_N + 2 * RA_TRACK_N + 3 == EBB_PITCH_REATTACK_NFEAT,
               "reattack_features builds another number of features than the model takes");

static void reattack_features(const seg_ctx *c, size_t a, size_t b, size_t t, double med,
                              double rise, double vdip, float *x) {
  int n = 0;
  x[n++] = (float)rise;
  x[n++] = (float)log(c->odf[t]);
  x[n++] = (float)vdip;
  for (int i = 0; i < RA_LEVEL_N; i++)
    x[n++] = c->level_db[frame_at(c, t, -200 + 20 * i)] - c->level_db[t];
  for (int i = 0; i < RA_ODF_N; i++)
    x[n++] = (float)log(c->odf[frame_at(c, t, -100 + 10 * i)] + 0.01);
  for (int i = 0; i < RA_TRACK_N; i++)
    x[n++] = c->frames[3 * frame_at(c, t, -150 + 30 * i) + 2];
  for (int i = 0; i < RA_TRACK_N; i++) {
    float hz = c->frames[3 * frame_at(c, t, -150 + 30 * i) + 1];
    double d = hz > 0.0f ? stg_midi_from_hz(hz) - med : -3.0;
    x[n++] = (float)(d < -3.0 ? -3.0 : d > 3.0 ? 3.0 : d);
  }
  x[n++] = (float)log((double)(t - a) * c->hop_s);
  x[n++] = (float)log((double)(b > t + 1 ? b - t : 1) * c->hop_s);
  x[n++] = (float)(c->level_db[t] - c->loud);
}

/* The strongest onset peak in [a, b] at or above thr, or (size_t)-1. */
static size_t best_onset(const seg_ctx *c, size_t a, size_t b, double thr) {
  size_t best = (size_t)-1;
  for (size_t t = a; t <= b && t < c->nf; t++)
    if (c->odf[t] >= thr && is_peak(c, t) && (best == (size_t)-1 || c->odf[t] > c->odf[best]))
      best = t;
  return best;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median pitch (MIDI, fractional) of the voiced frames in [a, b); hz0's
 * when none are voiced. */
static double median_midi(const seg_ctx *c, size_t a, size_t b, double hz0, double *tmp) {
  size_t n = 0;
  for (size_t f = a; f < b; f++)
    if (c->frames[3 * f + 1] > 0.0f)
      tmp[n++] = stg_midi_from_hz(c->frames[3 * f + 1]);
  if (!n)
    return stg_midi_from_hz(hz0);
  qsort(tmp, n, sizeof *tmp, cmp_double);
  return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

/* The note over frames [a, b) at that median. */
static stg_pitch_note make_note(const seg_ctx *c, size_t a, size_t b, double hz0, double *tmp) {
  double m = median_midi(c, a, b, hz0, tmp);
  return (stg_pitch_note){.onset = (double)a * c->hop_s,
                          .offset = (double)b * c->hop_s,
                          .hz = stg_midi_to_hz(m),
                          .midi = (int)lround(m)};
}

static size_t frame_of(const seg_ctx *c, double t) {
  double f = floor(t / c->hop_s + 0.5);
  return f <= 0 ? 0 : (size_t)f >= c->nf ? c->nf : (size_t)f;
}

/* Where the attack of onset peak t starts: the first frame from its dip on
 * whose level is reattack_rise_db above the dip's (t when none is, or the
 * option is 0). The spectral flux peaks where the attack is steepest, late
 * on a slow one (a voice's, 60-150 ms after the note starts); the level
 * starts rising at the note's start whatever the attack. */
static size_t attack_start(const seg_ctx *c, size_t t) {
  if (!(c->p->reattack_rise_db > 0.0))
    return t;
  size_t d0, d1, dip = level_dip(c, t, &d0, &d1);
  for (size_t k = dip; k < t; k++)
    if (c->level_db[k] >= c->level_db[dip] + c->p->reattack_rise_db)
      return k;
  return t;
}

/* Splits note [a, b) at its re-attacks into out (*k notes so far): the
 * best peak first, then the best of those at least gapf frames from every
 * split so far, down to the threshold (so a weaker peak just before the real
 * re-attack does not take its place). "Best" is the model's log-odds, down
 * to reattack_logit, among the peaks scoring reattack_score_min or more;
 * without reattack_model, the score down to reattack_score. A split lies at
 * least gapf from the note's start and minf from its end. With
 * EBB_PITCH_REATTACK_FEATURES set, every candidate's features go to c->dump. */
static void split_note(const seg_ctx *c, size_t a, size_t b, double hz, stg_pitch_note *out,
                       size_t *k, double *tmp) {
  double *sc = c->score;
  size_t lo = a + c->gapf, hi = b >= c->minf ? b - c->minf : 0; /* splits in [lo, hi] */
  int model = c->p->reattack_model || c->dump;
  double med = model ? median_midi(c, a, b, hz, tmp) : 0.0;
  /* sc[t]: how far peak t is above the threshold (-INFINITY: no peak) */
  for (size_t t = lo; t <= hi && t < b; t++) {
    double rise = 0.0, vdip = 0.0, lin = reattack_score(c, t, &rise, &vdip);
    sc[t] = lin - c->p->reattack_score;
    if (!model || lin == -INFINITY)
      continue;
    float x[EBB_PITCH_REATTACK_NFEAT];
    reattack_features(c, a, b, t, med, rise, vdip, x);
    if (c->dump) {
      size_t on = attack_start(c, t);
      fprintf(c->dump, "%.4f %.4f %.4f", (double)t * c->hop_s,
              (double)(on < a + c->minf ? t : on) * c->hop_s, lin);
      for (int i = 0; i < EBB_PITCH_REATTACK_NFEAT; i++)
        fprintf(c->dump, " %.6g", x[i]);
      fputc('\n', c->dump);
    }
    if (c->p->reattack_model)
      sc[t] = lin >= c->p->reattack_score_min ? stg_pitch_reattack_logit(x) - c->p->reattack_logit
                                              : -INFINITY;
  }
  for (;;) {
    size_t best = (size_t)-1;
    for (size_t t = lo; t <= hi && t < b; t++)
      if (sc[t] >= 0.0 && sc[t] < INFINITY && (best == (size_t)-1 || sc[t] > sc[best]))
        best = t;
    if (best == (size_t)-1)
      break;
    for (size_t t = best > lo + c->gapf ? best - c->gapf + 1 : lo; t <= hi && t < best + c->gapf;
         t++)
      sc[t] = -INFINITY;
    sc[best] = INFINITY; /* chosen */
  }
  size_t start = a;
  c->reattack[*k] = 0;
  for (size_t t = lo; t <= hi && t < b; t++)
    if (sc[t] == INFINITY) {
      size_t on = attack_start(c, t);
      if (on < start + c->minf)
        on = t;
      out[(*k)++] = make_note(c, start, on, hz, tmp);
      c->reattack[*k] = 1;
      start = on;
    }
  out[(*k)++] = make_note(c, start, b, hz, tmp);
}

/* c's frame counts (minimum note, re-attack gap, the 20/60/150 ms
 * windows) from the frames' hop. */
static void seg_scale(seg_ctx *c) {
  const stg_pitch_params *p = c->p;
  c->hop_s = stg_pitch_frame_step(c->frames, c->nf);
  c->minf = stg_pitch_frames_for(fmax(p->min_note_s, 0.05), c->hop_s);
  c->gapf = stg_pitch_frames_for(p->reattack_min_s, c->hop_s);
  if (c->gapf < c->minf)
    c->gapf = c->minf;
  c->w20 = (size_t)lround(0.02 / c->hop_s);
  c->w60 = (size_t)lround(0.06 / c->hop_s);
  c->w150 = (size_t)lround(0.15 / c->hop_s);
}

/* A note whose first voiced frame a follows an unvoiced gap (from frame
 * floor, the note before's end): its start, the strongest onset peak up to
 * onset_lead_s before a when the onset shift would leave the note after it
 * (a + shift is returned, so that the shift puts the note on the peak),
 * else a. pYIN voices a sung word from its vowel; its first consonant is
 * the onset. */
#define LEAD_DIP_DB 6.0
static size_t lead_onset(const seg_ctx *c, size_t a, size_t floor) {
  const stg_pitch_params *p = c->p;
  if (!(p->onset_lead_s > 0.0))
    return a;
  size_t lead = stg_pitch_frames_for(p->onset_lead_s, c->hop_s);
  size_t shift = stg_pitch_frames_for(p->onset_shift_s, c->hop_s);
  size_t lo = a > lead ? a - lead : 0;
  if (lo < floor)
    lo = floor;
  size_t t = lo < a ? best_onset(c, lo, a - 1, p->onset_threshold) : (size_t)-1;
  if (t == (size_t)-1 || t + shift >= a)
    return a;
  for (size_t f = t + 1; f < a; f++) /* the sound goes on from the onset into the note */
    if (c->level_db[f] < c->level_db[t] - LEAD_DIP_DB)
      return a;
  return t + shift;
}

/* The detectors' delay: every onset of out[0..k) shift_s earlier, never
 * before the note before it starts (that note then ends where this one
 * starts). */
static void shift_onsets(stg_pitch_note *out, size_t k, double shift_s, double hop_s) {
  for (size_t i = 0; i < k && shift_s > 0.0; i++) {
    double on = out[i].onset - shift_s;
    double floor_s = i ? out[i - 1].onset + hop_s : 0.0;
    out[i].onset = on > floor_s ? on : floor_s > out[i].onset ? out[i].onset : floor_s;
    if (i && out[i - 1].offset > out[i].onset)
      out[i - 1].offset = out[i].onset;
  }
}

int stg_pitch_notes_onsets(const float *frames, size_t nf, const float *odf, const float *level_db,
                           const stg_pitch_params *p, stg_pitch_note **notes, size_t *n) {
  if (*n == 0 || nf < 2 || !(p->onset_threshold > 0.0))
    return 0;
  seg_ctx c = {.frames = frames, .odf = odf, .level_db = level_db, .nf = nf, .p = p};
  seg_scale(&c);
  size_t look = stg_pitch_frames_for(p->onset_lookback_s, c.hop_s);
  /* at most one note per minf frames */
  size_t cap = *n + nf / (c.minf ? c.minf : 1) + 1, k = 0;
  stg_pitch_note *out = stg_st_malloc(cap * sizeof *out);
  double *tmp = stg_st_malloc(nf * sizeof *tmp);
  c.score = stg_st_malloc(nf * sizeof *c.score);
  c.reattack = stg_st_malloc(cap);
  if (!out || !tmp || !c.score || !c.reattack) {
    stg_st_free(out);
    stg_st_free(tmp);
    stg_st_free(c.score);
    stg_st_free(c.reattack);
    return ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %zu notes", cap);
  }
  const char *dump = getenv(EBB_PITCH_REATTACK_FEATURES_ENV);
  if (p->reattack_model || (dump && *dump)) {
    for (size_t f = 0; f < nf; f++)
      tmp[f] = level_db[f];
    qsort(tmp, nf, sizeof *tmp, cmp_double);
    c.loud = tmp[(size_t)(0.95 * (double)(nf - 1))];
  }
  if (dump && *dump && !(c.dump = fopen(dump, "a"))) {
    int rc = ebb_seterr(EBB_EIO, "pitch: %s=%s: cannot open it: %s",
                        EBB_PITCH_REATTACK_FEATURES_ENV, dump, strerror(errno));
    stg_st_free(out);
    stg_st_free(tmp);
    stg_st_free(c.score);
    stg_st_free(c.reattack);
    return rc;
  }
  stg_pitch_note *in = *notes;
  for (size_t i = 0; i < *n; i++) {
    size_t a = frame_of(&c, in[i].onset), b = frame_of(&c, in[i].offset);
    int joined = k > 0 && frame_of(&c, out[k - 1].offset) + 2 >= a;
    /* the pitch turns within onset_lookback_ms of the start of the note
     * before, which is a re-attack or the turn has no onset of its own:
     * that attack was this note's, and the piece between (the old pitch's
     * release, or a scoop, under the new attack) is this note's start */
    if (joined && out[k - 1].midi != in[i].midi && a <= frame_of(&c, out[k - 1].onset) + look &&
        (c.reattack[k - 1] ||
         best_onset(&c, a >= 2 ? a - 2 : 0, a + 2, p->onset_threshold) == (size_t)-1)) {
      a = frame_of(&c, out[k - 1].onset);
      k--;
    } else if (joined) {
      /* a pitch change inside a voiced run: the new note's attack is
       * earlier than where the pitch track turns (the old note's release
       * masks it) */
      size_t pa = frame_of(&c, out[k - 1].onset), lo = a > look ? a - look : 0;
      if (lo < pa + c.minf)
        lo = pa + c.minf;
      size_t t = lo <= a ? best_onset(&c, lo, a + 2, p->onset_threshold) : (size_t)-1;
      if (t != (size_t)-1 && t < a) {
        a = t;
        out[k - 1].offset = (double)t * c.hop_s;
      }
    } else { /* after an unvoiced gap: its first consonant may come first */
      a = lead_onset(&c, a, k ? frame_of(&c, out[k - 1].offset) : 0);
    }
    if (b > a)
      split_note(&c, a, b, in[i].hz, out, &k, tmp);
  }
  /* the detectors' delay: every onset earlier, never before the note
   * before it starts (that note then ends where this one starts) */
  shift_onsets(out, k, p->onset_shift_s, c.hop_s);
  if (c.dump)
    fclose(c.dump);
  stg_st_free(tmp);
  stg_st_free(c.score);
  stg_st_free(c.reattack);
  stg_st_free(in);
  *notes = out;
  *n = k;
  return 0;
}

/* Each frame's reference pitch for the harmonic level: the pitch of the
 * note it lies in, else of the note that ended (or, failing that, starts)
 * within 0.3 s of it; 0 elsewhere. */
static void reference_pitch(const stg_pitch_note *notes, size_t n_notes, double hop_s, size_t nf,
                            float *ref) {
  memset(ref, 0, nf * sizeof *ref);
  long ext = (long)ceil(0.3 / hop_s);
  for (int inner = 0; inner < 2; inner++)
    for (size_t i = 0; i < n_notes; i++) {
      long a = lround(notes[i].onset / hop_s), b = lround(notes[i].offset / hop_s);
      if (!inner) {
        a -= ext;
        b += ext;
      }
      for (long f = a < 0 ? 0 : a; f < b && f < (long)nf; f++)
        if (inner || ref[f] == 0.0f)
          ref[f] = (float)notes[i].hz;
    }
}

int stg_pitch_refine_notes(const float *mono, uint64_t n, uint32_t rate, const stg_pitch_params *p,
                           const float *frames, size_t nf, stg_pitch_note **notes,
                           size_t *n_notes) {
  if (!(p->onset_threshold > 0.0) || *n_notes == 0)
    return 0;
  float *odf = stg_st_malloc(nf * sizeof *odf), *db = stg_st_malloc(nf * sizeof *db);
  float *ref = stg_st_malloc(nf * sizeof *ref);
  int rc = odf && db && ref
               ? 0
               : ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %zu onset frames", nf);
  if (!rc)
    rc = stg_pitch_onset_strength(mono, n, rate, p->hop, nf, odf, db);
  if (!rc && p->onset_harmonics > 0) {
    reference_pitch(*notes, *n_notes, (double)p->hop / rate, nf, ref);
    rc = stg_pitch_harmonic_level(mono, n, rate, p->hop, nf, ref, p->onset_harmonics, db);
  }
  if (!rc)
    rc = stg_pitch_notes_onsets(frames, nf, odf, db, p, notes, n_notes);
  stg_st_free(odf);
  stg_st_free(db);
  stg_st_free(ref);
  return rc;
}

void stg_pitch_track_to_notes(float *frames, size_t nf, const stg_pitch_note *notes, size_t n) {
  if (nf < 2)
    return;
  double hop_s = stg_pitch_frame_step(frames, nf);
  for (size_t i = 1; i < n; i++) {
    double prev = stg_midi_from_hz(notes[i - 1].hz);
    double cur = stg_midi_from_hz(notes[i].hz);
    if (fabs(cur - prev) < 0.5)
      continue;
    double f = floor(notes[i].onset / hop_s + 0.5);
    for (size_t k = f <= 0 ? 0 : (size_t)f; k < nf && frames[3 * k] < notes[i].offset; k++) {
      float hz = frames[3 * k + 1];
      if (hz <= 0.0f)
        continue;
      double m = stg_midi_from_hz(hz);
      if (fabs(m - prev) >= 0.5 || fabs(m - cur) < 0.5)
        break; /* the track has turned (or left both notes) */
      frames[3 * k + 1] = (float)notes[i].hz;
    }
  }
}
