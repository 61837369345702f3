/* Which salience peak is the sung voice (pitch.h, salience_model; issue 44).
 *
 * Why: where the accompaniment is louder than the voice, its chord tones
 * hold the larger share of the melody salience and the track follows them
 * (docs/songtrace.md, "songtrace on sung melodies": a sixth of the sung
 * frames at another pitch, two fifths with the voice 6 dB under the piano).
 * No single cue told the voice's peak from a chord tone's (the stems'
 * balance, the level trend and the contour's movement were each tried); a
 * small perceptron over several of them, trained offline on material the
 * benchmarks' generators make (bench/train_salience.py), weighs them
 * together. Its weights are in pitch_voice_model.h.
 *
 * It runs on the host after the salience for both devices (the salience has
 * no kernel), between the rows of the vocals and melody items and their
 * blend, where each stem's row at a peak is still known. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/pitch.h"
#include "stages/audio/pitch_voice_model.h"
#include "stages/audio/st_util.h"

#define NFEAT EBB_PITCH_VOICE_NFEAT
#define NPK EBB_PITCH_VOICE_PEAKS
#define VOICE_TREND 10 /* frames along the contour: the level trend over 100 ms */
#define VOICE_RUN 30   /* a contour's length is counted up to this on each side */

_Static_assert(sizeof stg_voice_mu / sizeof stg_voice_mu[0] == NFEAT,
               "the voice model's feature count is not pitch_voice.c's");
_Static_assert(sizeof stg_voice_w1 / sizeof stg_voice_w1[0] == NFEAT * EBB_VOICE_HIDDEN,
               "the voice model's first layer has the wrong shape");

double stg_pitch_voice_logit(const float *x) {
  double z[NFEAT], out = stg_voice_b2;
  for (int i = 0; i < NFEAT; i++)
    z[i] = ((double)x[i] - stg_voice_mu[i]) / stg_voice_sd[i];
  for (int j = 0; j < EBB_VOICE_HIDDEN; j++) {
    double s = stg_voice_b1[j];
    for (int i = 0; i < NFEAT; i++)
      s += z[i] * stg_voice_w1[i * EBB_VOICE_HIDDEN + j];
    out += tanh(s) * stg_voice_w2[j];
  }
  return out;
}

void stg_pitch_voice_check(double *got, double *want) {
  float x[NFEAT];
  for (int i = 0; i < NFEAT; i++)
    x[i] = (float)stg_voice_check_x[i];
  *got = stg_pitch_voice_logit(x);
  *want = stg_voice_check_logit;
}

static void row_stats(const float *r, int nb, double *top, double *sum) {
  *top = 0.0;
  *sum = 0.0;
  for (int b = 0; b < nb; b++) {
    *top = r[b] > *top ? r[b] : *top;
    *sum += r[b];
  }
}

/* Frame f's peaks (on the blended row, made in row) and what each stem
 * holds at them (features 6..9), NSTEM floats a peak in stem. */
#define NSTEM 4
static int stem_features(const float *voc, const float *mel, int nb, const stg_pitch_voice_in *in,
                         float *row, stg_pitch_peak *pk, float *stem) {
  if (mel)
    stg_pitch_salience_blend_row(row, voc, mel, nb, in->share, in->vocals_only);
  else
    memcpy(row, voc, (size_t)nb * sizeof *row);
  int np = stg_pitch_row_peaks_at(row, nb, pk, NPK, EBB_PITCH_VOICE_FLOOR);
  double vt, vs, mt = 0.0, ms = 0.0;
  row_stats(voc, nb, &vt, &vs);
  if (mel)
    row_stats(mel, nb, &mt, &ms);
  for (int i = 0; i < np; i++) {
    float *x = stem + i * NSTEM, v = vt > 0.0 ? (float)(voc[pk[i].bin] / vt) : 0.0f;
    x[0] = v;
    x[1] = mel ? (mt > 0.0 ? (float)(mel[pk[i].bin] / mt) : 0.0f) : v;
    x[2] = (float)vs;
    x[3] = (float)(mel ? ms : vs);
  }
  return np;
}

/* d' of frame row c (tau_max + 1 values) at the fractional lag L,
 * linearly between its neighbours; 1 outside tau_min..tau_max. */
static double cm_at(const float *c, const stg_pitch_geom *g, double L) {
  if (!c || L < g->tau_min || L + 1.0 > g->tau_max)
    return 1.0;
  int t = (int)L;
  double u = L - t;
  return (1.0 - u) * c[t] + u * c[t + 1];
}

static double cm_min(const float *c, const stg_pitch_geom *g) {
  double m = 1.0;
  for (int t = g->tau_min; c && t <= g->tau_max; t++)
    m = c[t] < m ? c[t] : m;
  return m;
}

/* The contour of peak i of frame f: its movement over +-half frames (the
 * standard deviation of its position, cents, at most 200), its length
 * back and forward (up to VOICE_RUN frames) and the row's value at it
 * VOICE_TREND frames back and forward (or as far as it goes; 0 where it
 * starts or ends here). */
typedef struct contour {
  double sd, back, fwd, h_back, h_fwd;
} contour;

static contour follow(const float *sal, int nb, const stg_pitch_peak *pk, size_t nf, size_t f,
                      int i, size_t half) {
  contour c = {0};
  double s1 = 0.0, s2 = 0.0, k = 0.0;
  size_t g = f;
  for (int j = i;;) {
    const stg_pitch_peak *q = pk + g * NPK + j;
    if (f - g <= half) {
      s1 += q->pos;
      s2 += (double)q->pos * q->pos;
      k += 1.0;
    }
    if (g < f && f - g <= VOICE_TREND)
      c.h_back = sal[g * (size_t)nb + q->bin];
    c.back = (double)(f - g);
    if (g == 0 || q->prev < 0 || f - g >= VOICE_RUN)
      break;
    j = q->prev;
    g--;
  }
  g = f + 1;
  for (int j = pk[f * NPK + i].next; j >= 0 && g < nf && g - f <= VOICE_RUN;
       j = pk[g * NPK + j].next, g++) {
    const stg_pitch_peak *q = pk + g * NPK + j;
    if (g - f <= half) {
      s1 += q->pos;
      s2 += (double)q->pos * q->pos;
      k += 1.0;
    }
    if (g - f <= VOICE_TREND)
      c.h_fwd = sal[g * (size_t)nb + q->bin];
    c.fwd = (double)(g - f);
  }
  double var = k > 1.0 ? s2 / k - (s1 / k) * (s1 / k) : 0.0;
  c.sd = 10.0 * sqrt(var > 0.0 ? var : 0.0);
  c.sd = c.sd > 200.0 ? 200.0 : c.sd;
  return c;
}

/* The features of frame f's peaks (NFEAT a peak into feat): 0..5 and
 * 10..20 from the blended rows, 6..9 from stem (NSTEM a peak). */
static void row_features(const float *sal, int nb, const stg_pitch_peak *pk, const int *np,
                         size_t nf, size_t f, const stg_pitch_voice_in *in, const float *stem,
                         float *feat) {
  const float *r = sal + f * (size_t)nb;
  const float *c = in->cm ? in->cm + f * (size_t)(in->g->tau_max + 1) : NULL;
  double top, sum, dmin = cm_min(c, in->g), soft = 0.0;
  row_stats(r, nb, &top, &sum);
  /* the row's number of peaks, each counted up to 1 by its height against
   * 5 % of the maximum: a peak that rounding puts either side of the
   * candidates' floor (EBB_PITCH_VOICE_FLOOR) hardly moves it */
  for (int i = 0; top > 0.0 && i < np[f]; i++) {
    double h = r[pk[f * NPK + i].bin] / (top * EBB_PITCH_VIBRATO_PEAK);
    soft += h < 1.0 ? h : 1.0;
  }
  for (int i = 0; i < np[f]; i++) {
    const stg_pitch_peak *q = pk + f * NPK + i;
    float *x = feat + i * NFEAT;
    double lobe = 0.0, hz = in->fmin * pow(2.0, q->pos / 120.0), L = in->g->rate / hz;
    for (int b = q->lo; b <= q->hi; b++)
      lobe += r[b];
    contour k = follow(sal, nb, pk, nf, f, i, in->half);
    double h = r[q->bin];
    x[0] = q->pos / 120.0f;
    x[1] = (float)(r[q->bin] / top);
    x[2] = (float)(sum > 0.0 ? lobe / sum : 0.0);
    x[3] = (float)sum;
    x[4] = (float)i / NPK;
    x[5] = (float)(soft / NPK);
    memcpy(x + 6, stem + i * NSTEM, NSTEM * sizeof *x);
    x[10] = (float)k.sd;
    x[11] = (float)(k.back / VOICE_RUN);
    x[12] = (float)(k.fwd / VOICE_RUN);
    x[13] = (float)log((h + 1e-3) / (k.h_back + 1e-3));
    x[14] = (float)log((k.h_fwd + 1e-3) / (h + 1e-3));
    x[15] = (float)cm_at(c, in->g, L);
    x[16] = (float)cm_at(c, in->g, L / 2.0);
    x[17] = (float)dmin;
    x[18] = q->bin >= 120 ? (float)(r[q->bin - 120] / top) : 0.0f;
    x[19] = q->bin + 120 < nb ? (float)(r[q->bin + 120] / top) : 0.0f;
    x[20] = (q->pos - pk[f * NPK].pos) / 120.0f;
  }
}

/* Multiplies the lobe of each peak of row r by 1 + gain x its probability
 * (the larger where two lobes meet), then scales the row back to its
 * maximum: the likely voice keeps its height and the rest falls under it.
 * (Scaled back to its sum instead, the row kept its voicing and the HMM's
 * voiced states gained on the unvoiced one: voicing false alarm 0.237 ->
 * 0.252 on the sung set, 0.447 -> 0.467 on the instruments.) */
static void weigh_row(float *r, int nb, const stg_pitch_peak *pk, int np, const float *prob,
                      double gain, double power, float *w) {
  float top = 0.0f;
  for (int b = 0; b < nb; b++) {
    w[b] = 1.0f;
    top = r[b] > top ? r[b] : top;
  }
  for (int i = 0; i < np; i++) {
    /* the weight rises from 1 at the candidates' floor to its own at twice
     * the floor, so a peak that rounding puts either side of the floor
     * weighs (almost) the same either way */
    double u = (r[pk[i].bin] / (double)top - EBB_PITCH_VOICE_FLOOR) / EBB_PITCH_VOICE_FLOOR;
    u = u < 0.0 ? 0.0 : u > 1.0 ? 1.0 : u;
    float m = (float)(1.0 + u * (pow(1.0 + gain * prob[i], power > 0.0 ? power : 1.0) - 1.0));
    for (int b = pk[i].lo; b <= pk[i].hi; b++)
      w[b] = m > w[b] ? m : w[b];
  }
  float before = 0.0f, after = 0.0f;
  for (int b = 0; b < nb; b++) {
    before = r[b] > before ? r[b] : before;
    after = r[b] * w[b] > after ? r[b] * w[b] : after;
  }
  for (int b = 0; np > 0 && after > 0.0f && b < nb; b++)
    r[b] = (float)(r[b] * w[b] * ((double)before / after));
}

static int dump_open(FILE **out) {
  const char *path = getenv(EBB_PITCH_SALIENCE_FEATURES_ENV);
  *out = NULL;
  if (!path || !*path)
    return 0;
  if (!(*out = fopen(path, "a")))
    return ebb_seterr(EBB_EIO, "pitch: %s=%s: cannot open it: %s", EBB_PITCH_SALIENCE_FEATURES_ENV,
                      path, strerror(errno));
  return 0;
}

static void dump_row(FILE *d, size_t f, const stg_pitch_voice_in *in, const stg_pitch_peak *pk,
                     int np, const float *feat) {
  for (int i = 0; i < np; i++) {
    fprintf(d, "%zu %.3f", f, in->fmin * pow(2.0, pk[i].pos / 120.0));
    for (int k = 0; k < NFEAT; k++)
      fprintf(d, " %.7g", feat[i * NFEAT + k]);
    fputc('\n', d);
  }
}

/* Features and probabilities of every frame (prob: NPK a frame), then the
 * weighing (the blend done; the peaks linked, stem their NSTEM values each).
 * All probabilities come first: a frame's features read the rows of the
 * frames around it (the level trend), which must be the rows the trainer
 * saw, not rows already weighed (until session 25 the frames before were). */
static int voice_apply(float *sal, size_t nf, int nb, const stg_pitch_voice_in *in,
                       const stg_pitch_peak *pk, const int *np, const float *stem, float *prob,
                       float *w, FILE *d) {
  for (size_t f = 0; f < nf && !stg_st_stop(); f++) {
    float x[NPK * NFEAT];
    row_features(sal, nb, pk, np, nf, f, in, stem + (size_t)f * NPK * NSTEM, x);
    if (d)
      dump_row(d, f, in, pk + f * NPK, np[f], x);
    for (int i = 0; i < np[f]; i++)
      prob[f * NPK + i] = (float)(1.0 / (1.0 + exp(-stg_pitch_voice_logit(x + i * NFEAT))));
  }
  for (size_t f = 0; in->gain > 0.0 && f < nf && !stg_st_stop(); f++)
    weigh_row(sal + f * (size_t)nb, nb, pk + f * NPK, np[f], prob + f * NPK, in->gain, in->power,
              w);
  return stg_st_stop() ? ebb_seterr(EBB_ECANCELED, "pitch: cancelled in the voice model") : 0;
}

int stg_pitch_voice_weigh(float *voc, size_t nf, int nb, const stg_pitch_voice_in *in) {
  FILE *d = NULL;
  int rc = dump_open(&d);
  if (rc || (!(in->gain > 0.0) && !d) || nf == 0 || nb < 3) {
    if (in->mel)
      stg_pitch_salience_blend(voc, in->mel, nf, nb, in->share, in->vocals_only);
    return rc;
  }
  stg_pitch_peak *pk = stg_st_malloc(nf * NPK * sizeof *pk);
  int *np = stg_st_malloc(nf * sizeof *np);
  float *stem = stg_st_calloc(nf * NPK * NSTEM, sizeof *stem);
  float *row = stg_st_malloc((size_t)nb * sizeof *row);
  float *prob = stg_st_malloc(nf * NPK * sizeof *prob);
  if (!pk || !np || !stem || !row || !prob) {
    rc = ebb_seterr(EBB_ENOMEM, "pitch: out of memory for the voice model of %zu frames", nf);
    if (in->mel)
      stg_pitch_salience_blend(voc, in->mel, nf, nb, in->share, in->vocals_only);
    goto done;
  }
  for (size_t f = 0; f < nf; f++) {
    const float *m = in->mel ? in->mel + f * (size_t)nb : NULL;
    np[f] = stem_features(voc + f * (size_t)nb, m, nb, in, row, pk + f * NPK,
                          stem + (size_t)f * NPK * NSTEM);
    if (f > 0)
      stg_pitch_link_rows(pk + (f - 1) * NPK, np[f - 1], pk + f * NPK, np[f]);
  }
  if (in->mel)
    stg_pitch_salience_blend(voc, in->mel, nf, nb, in->share, in->vocals_only);
  rc = voice_apply(voc, nf, nb, in, pk, np, stem, prob, row, d);
done:
  if (d)
    fclose(d);
  stg_st_free(prob);
  stg_st_free(row);
  stg_st_free(stem);
  stg_st_free(np);
  stg_st_free(pk);
  return rc;
}
