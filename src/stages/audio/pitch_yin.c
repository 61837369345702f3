/* YIN / pYIN f0 estimation on the host: frame geometry, the CPU difference
 * function, and the step from d'(tau) to an f0 track (pitch.h).
 *
 * pYIN (Mauch & Dixon 2014), as implemented here:
 *  1. For 100 thresholds s_i = 0.01..1.00 with prior P(s_i) from a Beta(a, b)
 *     distribution (a = 2, mean = `threshold`, so 0.1 gives the paper's
 *     Beta(2, 18)), the YIN estimate is the first trough of d' below s_i;
 *     that trough collects P(s_i). When no trough is below s_i, the global
 *     minimum collects 0.01 P(s_i) (the paper's p_a). The sum over troughs is
 *     the frame's voicing probability.
 *  2. A hidden Markov model over 2 x B states (B pitch bins of 10 cents from
 *     fmin to fmax, voiced and unvoiced), pitch moves of at most 25 bins per
 *     frame with triangular weights, voicing switches with probability 0.01;
 *     voiced observation = candidate mass in the bin, unvoiced = (1 - voicing
 *     probability) / B (as in librosa.pyin). Viterbi gives the path; a voiced
 *     frame reports the strongest candidate near the chosen bin (parabolic
 *     interpolation of the trough), else the bin centre. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/pitch.h"
#include "stages/kernels/pitch_twin.h"
#include "stages/audio/st_util.h"

#define PY_NTHR 100
#define PY_CENTS_PER_BIN 10.0
#define PY_MAX_STEP 25
#define PY_SWITCH 0.01
#define PY_PW 56 /* 2 * PY_MAX_STEP + 1 target bins, padded to a multiple of 8 */
#define PY_PA 0.01
#define PY_BETA_A 2.0
#define PY_REG_SOFT 2.0 /* semitones: the register prior's fall-off (its sigma) */
#define PY_REG_MIN 20   /* voiced frames a window needs for a register centre */

int stg_pitch_geometry(const stg_pitch_params *p, uint32_t rate, uint64_t n_samples,
                       stg_pitch_geom *g) {
  if (rate < 1000)
    return ebb_seterr(EBB_EINVAL, "pitch: sample rate %u Hz is too low", rate);
  if (p->hop < 1 || p->hop > 1 << 16)
    return ebb_seterr(EBB_EINVAL, "pitch: hop %d is outside 1..65536", p->hop);
  if (p->frame < 64 || p->frame > 1 << 16)
    return ebb_seterr(EBB_EINVAL, "pitch: frame %d is outside 64..65536", p->frame);
  if (!(p->fmin > 0.0 && p->fmax > p->fmin))
    return ebb_seterr(EBB_EINVAL, "pitch: fmin %g / fmax %g: need 0 < fmin < fmax", p->fmin,
                      p->fmax);
  if (p->fmax >= rate / 2.0)
    return ebb_seterr(EBB_EINVAL, "pitch: fmax %g Hz is not below half the sample rate %u", p->fmax,
                      rate);
  if (!(p->preemphasis >= 0.0 && p->preemphasis < 1.0))
    return ebb_seterr(EBB_EINVAL, "pitch: preemphasis %g is outside [0, 1)", p->preemphasis);
  if (!(p->threshold > 0.0 && p->threshold < 1.0))
    return ebb_seterr(EBB_EINVAL, "pitch: threshold %g is outside (0, 1)", p->threshold);
  g->rate = rate;
  g->hop = p->hop;
  g->w = p->frame / 2;
  g->tau_max = (int)ceil(rate / p->fmin);
  if (g->tau_max > p->frame - g->w)
    return ebb_seterr(EBB_EINVAL,
                      "pitch: fmin %g Hz needs a lag of %d samples; frame %d allows %d "
                      "(raise frame or fmin)",
                      p->fmin, g->tau_max, p->frame, p->frame - g->w);
  g->tau_min = (int)floor(rate / p->fmax);
  if (g->tau_min < 2)
    g->tau_min = 2;
  g->n_frames = (size_t)(n_samples / (uint64_t)p->hop) + 1;
  g->pad_left = (size_t)(g->w + g->tau_max) / 2;
  g->padded_len = (g->n_frames - 1) * (size_t)p->hop + (size_t)(g->w + g->tau_max) + 1;
  return 0;
}

int stg_pitch_pad(const float *x, uint64_t n, const stg_pitch_geom *g, float **padded) {
  float *p = stg_st_calloc(g->padded_len, sizeof *p);
  if (!p)
    return ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %zu padded samples", g->padded_len);
  size_t take = n;
  if (take > g->padded_len - g->pad_left)
    take = g->padded_len - g->pad_left;
  memcpy(p + g->pad_left, x, take * sizeof *p);
  *padded = p;
  return 0;
}

int stg_pitch_preemphasis(const float *padded, size_t len, double a, float **out) {
  float *y = stg_st_malloc((len ? len : 1) * sizeof *y);
  if (!y)
    return ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %zu samples", len);
  float prev = 0.0f, fa = (float)a;
  for (size_t i = 0; i < len; i++) {
    y[i] = padded[i] - fa * prev;
    prev = padded[i];
  }
  *out = y;
  return 0;
}

static void normalise_row(float *o, int tau_max) {
  o[0] = 1.0f;
  float run = 0.0f;
  for (int tau = 1; tau <= tau_max; tau++) {
    run += o[tau];
    o[tau] = run > 0.0f ? o[tau] * (float)tau / run : 1.0f;
  }
}

/* Where the compiler can, the difference function and the Viterbi's
 * relaxation are built twice, for AVX2 (twice the lanes a vector; for the
 * Viterbi one blend a select) and for the baseline, and the CPU picks one
 * when the program loads. Both perform the same IEEE operations in the same
 * order per lane (AVX2 alone brings no fused multiply-add: the AVX2 builds
 * hold no vfmadd), so the results are the same bit for bit on either
 * (tests/unit/stages_pitch_isa.c builds this file with -DPY_CLONES=, the
 * baseline alone, and compares). */
#if !defined(PY_CLONES) && defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define PY_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef PY_CLONES
#define PY_CLONES
#endif

/* Eight independent partial sums per lag so the compiler can vectorise
 * without reassociating (a different order from the kernel's: results agree
 * to float rounding, which the tests bound). */
PY_CLONES static void cmndf_rows(const float *padded, const stg_pitch_geom *g, float *out) {
  int w = g->w, tm = g->tau_max;
  for (size_t f = 0; f < g->n_frames && !stg_st_stop(); f++) {
    const float *fr = padded + f * (size_t)g->hop;
    float *o = out + f * (size_t)(tm + 1);
    for (int tau = 1; tau <= tm; tau++) {
      float acc[8] = {0};
      const float *y = fr + tau;
      int j = 0;
      for (; j + 8 <= w; j += 8)
        for (int l = 0; l < 8; l++) {
          float d = fr[j + l] - y[j + l];
          acc[l] += d * d;
        }
      float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      for (; j < w; j++) {
        float d = fr[j] - y[j];
        s += d * d;
      }
      o[tau] = s;
    }
    normalise_row(o, tm);
  }
}

void stg_pitch_cmndf_cpu(const float *padded, const stg_pitch_geom *g, float *out) {
  cmndf_rows(padded, g, out);
}

/* In launches of stg_pitch_launch_frames(g) frames, cancellable between them. */
void stg_pitch_cmndf_twin(const float *padded, const stg_pitch_geom *g, float *out) {
  int hop = g->hop, w = g->w, tm = g->tau_max;
  size_t step = stg_pitch_launch_frames(g);
  for (size_t f0 = 0; f0 < g->n_frames && !stg_st_stop(); f0 += step) {
    int nf = (int)(g->n_frames - f0 < step ? g->n_frames - f0 : step);
    const float *x = padded + f0 * (size_t)hop;
    float *o = out + f0 * (size_t)(tm + 1);
    void *params[] = {&x, &o, &nf, &hop, &w, &tm};
    dev_launch_dims dims = {.grid = {(unsigned)nf, 1, 1}, .block = {EBB_PITCH_BLOCK, 1, 1}};
    fakegpu_twin_pitch_cmndf(&dims, params);
  }
}

/* Frames per launch of the difference function: about 2^22 multiply-adds
 * (a few ms on one CPU core, the fake's host twin; far less on a GPU), so a
 * cancellation is seen between launches within 100 ms whatever hop and frame
 * are; at least one frame. */
size_t stg_pitch_launch_frames(const stg_pitch_geom *g) {
  uint64_t per = (uint64_t)g->w * (uint64_t)(g->tau_max + 1);
  uint64_t k = per ? ((uint64_t)1 << 22) / per : g->n_frames;
  return k ? (size_t)k : 1;
}

/* --- per-frame candidates --------------------------------------------------- */

typedef struct cand {
  float hz, prob;
} cand;

typedef struct pyin_ctx {
  double prior[PY_NTHR]; /* P(s_i) */
  int nb;                /* pitch bins */
  double fmin;
} pyin_ctx;

/* Beta(a, b) mass over [i/100, (i+1)/100], by Simpson integration of the
 * density (b need not be an integer). */
static void beta_prior(double mean, double *prior) {
  double a = PY_BETA_A, b = a * (1.0 - mean) / mean, total = 0.0;
  const int sub = 64;
  for (int i = 0; i < PY_NTHR; i++) {
    double lo = i / (double)PY_NTHR, h = 1.0 / (PY_NTHR * sub), m = 0.0;
    for (int k = 0; k <= sub; k++) {
      double x = lo + k * h;
      double d = (x <= 0.0 || x >= 1.0) ? 0.0 : pow(x, a - 1.0) * pow(1.0 - x, b - 1.0);
      m += d * (k == 0 || k == sub ? 1.0 : (k % 2 ? 4.0 : 2.0));
    }
    prior[i] = m * h / 3.0;
    total += prior[i];
  }
  for (int i = 0; i < PY_NTHR; i++)
    prior[i] = total > 0.0 ? prior[i] / total : 1.0 / PY_NTHR;
}

/* The lag of the trough at tau refined by a parabola through its neighbours. */
static double refine(const float *d, int tau, int tau_max) {
  if (tau <= 0 || tau >= tau_max)
    return tau;
  double a = d[tau - 1], b = d[tau], c = d[tau + 1], den = a - 2.0 * b + c;
  if (den <= 0.0)
    return tau;
  double off = 0.5 * (a - c) / den;
  if (off > 0.5)
    off = 0.5;
  if (off < -0.5)
    off = -0.5;
  return tau + off;
}

/* Troughs of d' within [tau_min, tau_max): returns how many. */
static int troughs(const float *d, const stg_pitch_geom *g, int *tau) {
  int n = 0;
  for (int t = g->tau_min; t < g->tau_max; t++) {
    int left = t == g->tau_min ? 1 : d[t] < d[t - 1];
    if (left && d[t] <= d[t + 1])
      tau[n++] = t;
  }
  return n;
}

static int pyin_frame(const pyin_ctx *pc, const float *d, const stg_pitch_geom *g, int *tbuf,
                      double *pbuf, cand *out) {
  int nt = troughs(d, g, tbuf);
  if (nt == 0)
    return 0;
  int gmin = 0;
  for (int i = 0; i < nt; i++) {
    pbuf[i] = 0.0;
    if (d[tbuf[i]] < d[tbuf[gmin]])
      gmin = i;
  }
  for (int i = 0; i < PY_NTHR; i++) {
    float s = (float)(i + 1) / PY_NTHR;
    int first = 0; /* the first trough below s_i */
    while (first < nt && !(d[tbuf[first]] < s))
      first++;
    if (first < nt)
      pbuf[first] += pc->prior[i];
    else
      pbuf[gmin] += PY_PA * pc->prior[i];
  }
  int n = 0;
  for (int i = 0; i < nt; i++)
    if (pbuf[i] > 0.0)
      out[n++] =
          (cand){.hz = (float)(g->rate / refine(d, tbuf[i], g->tau_max)), .prob = (float)pbuf[i]};
  return n;
}

static int hz_bin(const pyin_ctx *pc, double hz) {
  int b = (int)lround(1200.0 * log2(hz / pc->fmin) / PY_CENTS_PER_BIN);
  return b < 0 ? 0 : b >= pc->nb ? pc->nb - 1 : b;
}

static double frame_db(const float *padded, const stg_pitch_geom *g, size_t f) {
  const float *x = padded + f * (size_t)g->hop;
  int n = g->w + g->tau_max;
  double e = 0.0;
  for (int j = 0; j < n; j++)
    e += (double)x[j] * x[j];
  return 10.0 * log10(e / n + 1e-20);
}

/* --- the Viterbi pass ------------------------------------------------------- */

/* The model's buffers; each frame's candidates are kept (the 8 strongest) to
 * report the exact f0 near the chosen bin after backtracking. */
typedef struct pyin_model {
  pyin_ctx pc;
  int nb, ns, row;
  size_t nf;
  const float *sal; /* optional salience, nf x nb (pitch_salience.c) */
  double sal_weight;
  const float *center; /* optional register centre per frame, in bins (< 0: none) */
  double reg_bins;     /* pitches further than this from the centre are weighed down */
  int *tbuf;
  double *pbuf, *ltp, *obs, *delta, *next;
  double *best, *arg; /* viterbi_step's 2 x (nb + PY_PW) best scores and sources */
  cand *cands, *all;
  int *ncand;
  uint16_t *back;
} pyin_model;

static void model_free(pyin_model *m) {
  stg_st_free(m->tbuf);
  stg_st_free(m->pbuf);
  stg_st_free(m->cands);
  stg_st_free(m->ncand);
  stg_st_free(m->all);
  stg_st_free(m->ltp);
  stg_st_free(m->best);
  stg_st_free(m->arg);
  stg_st_free(m->obs);
  stg_st_free(m->delta);
  stg_st_free(m->next);
  stg_st_free(m->back);
}

/* log transition weights per source bin j (rows renormalised at the
 * edges), padded: ltp[j * PY_PW + i] is the move to bin j - PY_MAX_STEP + i,
 * -inf beyond the step or the bins. */
static void transition_table(pyin_model *m) {
  for (int j = 0; j < m->nb; j++) {
    double tot = 0.0;
    for (int k = -PY_MAX_STEP; k <= PY_MAX_STEP; k++)
      if (j + k >= 0 && j + k < m->nb)
        tot += PY_MAX_STEP + 1 - abs(k);
    for (int i = 0; i < PY_PW; i++) {
      int k = i - PY_MAX_STEP;
      m->ltp[(size_t)j * PY_PW + i] = (k <= PY_MAX_STEP && j + k >= 0 && j + k < m->nb)
                                          ? log((PY_MAX_STEP + 1 - abs(k)) / tot)
                                          : -INFINITY;
    }
  }
}

static int model_init(pyin_model *m, const stg_pitch_geom *g, const stg_pitch_params *p) {
  memset(m, 0, sizeof *m);
  m->pc.fmin = p->fmin;
  beta_prior(p->threshold, m->pc.prior);
  m->pc.nb = m->nb = (int)floor(1200.0 * log2(p->fmax / p->fmin) / PY_CENTS_PER_BIN) + 1;
  m->ns = 2 * m->nb;
  m->row = g->tau_max + 1;
  m->nf = g->n_frames;
  m->tbuf = stg_st_malloc((size_t)m->row * sizeof *m->tbuf);
  m->pbuf = stg_st_malloc((size_t)m->row * sizeof *m->pbuf);
  m->cands = stg_st_malloc((size_t)m->row * sizeof *m->cands);
  m->ncand = stg_st_calloc(m->nf ? m->nf : 1, sizeof *m->ncand);
  m->all = stg_st_malloc((m->nf ? m->nf : 1) * 8 * sizeof *m->all);
  m->ltp = stg_st_malloc((size_t)m->nb * PY_PW * sizeof *m->ltp);
  m->best = stg_st_malloc(2 * (size_t)(m->nb + PY_PW) * sizeof *m->best);
  m->arg = stg_st_malloc(2 * (size_t)(m->nb + PY_PW) * sizeof *m->arg);
  m->obs = stg_st_malloc((size_t)m->ns * sizeof *m->obs);
  m->delta = stg_st_malloc((size_t)m->ns * sizeof *m->delta);
  m->next = stg_st_malloc((size_t)m->ns * sizeof *m->next);
  m->back = stg_st_malloc((m->nf ? m->nf : 1) * (size_t)m->ns * sizeof *m->back);
  if (!m->tbuf || !m->pbuf || !m->cands || !m->ncand || !m->all || !m->ltp || !m->best || !m->arg ||
      !m->obs || !m->delta || !m->next || !m->back) {
    model_free(m);
    return ebb_seterr(EBB_ENOMEM, "pitch: out of memory for the pYIN model of %zu frames", m->nf);
  }
  transition_table(m);
  return 0;
}

/* Frame f's candidates (the 8 most probable kept) and its observation
 * log-likelihoods in m->obs; returns the voicing probability. With a
 * salience, the voiced observation is a mixture of pYIN's candidate mass and
 * the salience's share of the frame (see pitch_salience.c). A replay (the
 * register's second pass) reuses the candidates the first pass kept. */
static double frame_observation(pyin_model *m, const float *cmndf, const float *padded,
                                const stg_pitch_geom *g, const stg_pitch_params *p, size_t f,
                                int replay) {
  int n = m->ncand[f];
  if (!replay) {
    const float *d = cmndf + f * (size_t)m->row;
    n = frame_db(padded, g, f) < p->silence_db
            ? 0
            : pyin_frame(&m->pc, d, g, m->tbuf, m->pbuf, m->cands);
    for (int a = 0; a < n; a++)
      for (int b = a + 1; b < n; b++)
        if (m->cands[b].prob > m->cands[a].prob) {
          cand t = m->cands[a];
          m->cands[a] = m->cands[b];
          m->cands[b] = t;
        }
    if (n > 8)
      n = 8;
    m->ncand[f] = n;
    memcpy(m->all + f * 8, m->cands, (size_t)n * sizeof *m->cands);
  }
  const cand *cs = m->all + f * 8;
  double vp = 0.0;
  for (int s = 0; s < m->ns; s++)
    m->obs[s] = 0.0;
  for (int c = 0; c < n; c++) {
    m->obs[hz_bin(&m->pc, cs[c].hz)] += cs[c].prob;
    vp += cs[c].prob;
  }
  if (vp > 1.0)
    vp = 1.0;
  if (m->sal)
    vp = stg_pitch_salience_mix(m->sal + f * (size_t)m->nb, m->nb, m->sal_weight, vp, m->obs);
  if (m->center && m->center[f] >= 0.0f)
    for (int s = 0; s < m->nb; s++) {
      double d = (fabs(s - m->center[f]) - m->reg_bins) / (PY_REG_SOFT * 100.0 / PY_CENTS_PER_BIN);
      if (d > 0.0)
        m->obs[s] *= exp(-0.5 * d * d);
    }
  for (int s = 0; s < m->nb; s++) {
    m->obs[s] = log(m->obs[s] + 1e-30);
    m->obs[m->nb + s] = log((1.0 - vp) / m->nb + 1e-30);
  }
  return vp;
}

/* Every source bin's moves into its PY_PW target bins from j - PY_MAX_STEP
 * (ltp: the padded transition rows; b0/a0, b1/a1: the best scores and
 * sources of the unvoiced-0/voiced-1 targets, offset by PY_MAX_STEP): for
 * each target, its candidates from source j (the same voicing, then the
 * other) replace the best so far when strictly better, exactly as a scan of
 * each target's sources in order would. Eight lanes a step: the compiler
 * makes vector adds, compares and selects of it (the sources are doubles so
 * that every lane is 64-bit). */
PY_CLONES static void viterbi_relax(const double *restrict ltp, const double *restrict delta,
                                    int nb, double lstay, double lswitch, double *restrict b0,
                                    double *restrict b1, double *restrict a0, double *restrict a1) {
  for (int j = 0; j < nb; j++) {
    const double *lt = ltp + (size_t)j * PY_PW;
    double d0 = delta[j], d1 = delta[nb + j], j0 = j, j1 = nb + j;
    double *p0 = b0 + j, *p1 = b1 + j, *q0 = a0 + j, *q1 = a1 + j;
    for (int l = 0; l < PY_PW; l += 8)
      for (int u = 0; u < 8; u++) {
        double t0 = d0 + lt[l + u], t1 = d1 + lt[l + u];
        double s0 = t0 + lstay, o0 = t1 + lswitch, s1 = t1 + lstay, o1 = t0 + lswitch;
        double b = p0[l + u], a = q0[l + u];
        a = s0 > b ? j0 : a;
        b = s0 > b ? s0 : b;
        a = o0 > b ? j1 : a;
        b = o0 > b ? o0 : b;
        p0[l + u] = b;
        q0[l + u] = a;
        b = p1[l + u];
        a = q1[l + u];
        a = s1 > b ? j1 : a;
        b = s1 > b ? s1 : b;
        a = o1 > b ? j0 : a;
        b = o1 > b ? o1 : b;
        p1[l + u] = b;
        q1[l + u] = a;
      }
  }
}

/* delta(f) from delta(f - 1): the best predecessor of every state. Source
 * by source, each into its window of targets (viterbi_relax); padding
 * targets and transitions are -inf, which never wins. */
static void viterbi_step(pyin_model *m, size_t f) {
  const double lstay = log(1.0 - PY_SWITCH), lswitch = log(PY_SWITCH);
  int nb = m->nb, len = nb + PY_PW;
  uint16_t *bk = m->back + f * (size_t)m->ns;
  double *b0 = m->best, *b1 = b0 + len, *a0 = m->arg, *a1 = a0 + len;
  for (int i = 0; i < len; i++) {
    int k = i - PY_MAX_STEP;
    b0[i] = b1[i] = -INFINITY;
    a0[i] = k;
    a1[i] = nb + k;
  }
  viterbi_relax(m->ltp, m->delta, nb, lstay, lswitch, b0, b1, a0, a1);
  for (int k = 0; k < nb; k++) {
    m->next[k] = b0[PY_MAX_STEP + k] + m->obs[k];
    m->next[nb + k] = b1[PY_MAX_STEP + k] + m->obs[nb + k];
    bk[k] = (uint16_t)a0[PY_MAX_STEP + k];
    bk[nb + k] = (uint16_t)a1[PY_MAX_STEP + k];
  }
  double *t = m->delta;
  m->delta = m->next;
  m->next = t;
}

/* The best path back from the end: a voiced frame reports the strongest
 * candidate within 2 bins of its state, else the bin centre. */
static void backtrack(const pyin_model *m, const stg_pitch_params *p, float *frames) {
  int s = 0;
  for (int k = 1; k < m->ns; k++)
    if (m->delta[k] > m->delta[s])
      s = k;
  for (size_t f = m->nf; f-- > 0;) {
    float hz = 0.0f;
    if (s < m->nb) {
      hz = (float)(p->fmin * pow(2.0, s * PY_CENTS_PER_BIN / 1200.0));
      float bestp = 0.0f;
      for (int c = 0; c < m->ncand[f]; c++) {
        const cand *cc = &m->all[f * 8 + c];
        if (abs(hz_bin(&m->pc, cc->hz) - s) <= 2 && cc->prob > bestp) {
          bestp = cc->prob;
          hz = cc->hz;
        }
      }
    }
    frames[3 * f + 1] = hz;
    s = m->back[f * (size_t)m->ns + s];
  }
}

/* One Viterbi pass over the model's frames into frames (replay: see
 * frame_observation). */
static void pyin_pass(pyin_model *m, const float *cmndf, const float *padded,
                      const stg_pitch_geom *g, const stg_pitch_params *p, int replay,
                      float *frames) {
  for (size_t f = 0; f < m->nf; f++) {
    if (stg_st_stop())
      return; /* the caller sees stg_st_stop() too */
    double vp = frame_observation(m, cmndf, padded, g, p, f, replay);
    frames[3 * f + 0] = (float)((double)f * g->hop / g->rate);
    frames[3 * f + 2] = (float)vp;
    if (f > 0) {
      viterbi_step(m, f);
      continue;
    }
    for (int s = 0; s < m->ns; s++) {
      m->delta[s] = -log((double)m->ns) + m->obs[s];
      m->back[s] = (uint16_t)s;
    }
  }
  if (m->nf)
    backtrack(m, p, frames);
}

/* The register centre of every frame: the median bin of the voiced frames
 * of track within +-w frames (-1 where fewer than PY_REG_MIN are voiced), by
 * a sliding histogram of the bins. Returns whether any voiced frame lies
 * further than reg_bins from its centre (else a second pass changes
 * nothing). */
static int register_centre(const float *frames, size_t nf, const pyin_ctx *pc, size_t w,
                           double reg_bins, int *hist, int *bin, float *center) {
  int out = 0;
  size_t count = 0;
  memset(hist, 0, (size_t)pc->nb * sizeof *hist);
  for (size_t f = 0; f < nf; f++)
    bin[f] = frames[3 * f + 1] > 0.0f ? hz_bin(pc, frames[3 * f + 1]) : -1;
  for (size_t f = 0; f < nf && f < w; f++)
    if (bin[f] >= 0) {
      hist[bin[f]]++;
      count++;
    }
  for (size_t f = 0; f < nf; f++) {
    if (f + w < nf && bin[f + w] >= 0) {
      hist[bin[f + w]]++;
      count++;
    }
    if (f > w && bin[f - w - 1] >= 0) {
      hist[bin[f - w - 1]]--;
      count--;
    }
    center[f] = -1.0f;
    if (count < PY_REG_MIN)
      continue;
    size_t half = (count + 1) / 2, run = 0;
    int b = 0;
    while (b < pc->nb - 1 && (run += (size_t)hist[b]) < half)
      b++;
    center[f] = (float)b;
    if (bin[f] >= 0 && fabs(bin[f] - (double)b) > reg_bins)
      out = 1;
  }
  return out;
}

/* pYIN, and with register_semitones a second pass held to the register of
 * the first pass's track (a melody contour's pitch mean in Salamon and
 * Gomez's contour selection, which drops contours an octave or more from it). */
static int pyin_track(const float *cmndf, const float *padded, const stg_pitch_geom *g,
                      const stg_pitch_params *p, const float *sal, float *frames) {
  pyin_model m;
  int rc = model_init(&m, g, p);
  if (rc)
    return rc;
  m.sal = sal;
  m.sal_weight = p->salience_weight;
  pyin_pass(&m, cmndf, padded, g, p, 0, frames);
  if (p->register_semitones > 0.0 && m.nf && !stg_st_stop()) {
    size_t w = (size_t)ceil(p->register_window_s * g->rate / g->hop);
    int *hist = stg_st_malloc((size_t)m.nb * sizeof *hist),
        *bin = stg_st_malloc(m.nf * sizeof *bin);
    float *center = stg_st_malloc(m.nf * sizeof *center);
    m.reg_bins = p->register_semitones * 100.0 / PY_CENTS_PER_BIN;
    if (!hist || !bin || !center)
      rc = ebb_seterr(EBB_ENOMEM, "pitch: out of memory for the register of %zu frames", m.nf);
    else if (register_centre(frames, m.nf, &m.pc, w, m.reg_bins, hist, bin, center)) {
      m.center = center;
      pyin_pass(&m, cmndf, padded, g, p, 1, frames);
    }
    stg_st_free(hist);
    stg_st_free(bin);
    stg_st_free(center);
  }
  model_free(&m);
  return rc;
}

/* Plain YIN (steps 4-5 of the paper): the first trough below the threshold,
 * else unvoiced; voicing probability 1 - d'. */
static int yin_track(const float *cmndf, const float *padded, const stg_pitch_geom *g,
                     const stg_pitch_params *p, float *frames) {
  int row = g->tau_max + 1;
  int *tbuf = stg_st_malloc((size_t)row * sizeof *tbuf);
  if (!tbuf)
    return ebb_seterr(EBB_ENOMEM, "pitch: out of memory");
  for (size_t f = 0; f < g->n_frames && !stg_st_stop(); f++) {
    const float *d = cmndf + f * (size_t)row;
    frames[3 * f + 0] = (float)((double)f * g->hop / g->rate);
    frames[3 * f + 1] = 0.0f;
    frames[3 * f + 2] = 0.0f;
    if (frame_db(padded, g, f) < p->silence_db)
      continue;
    int nt = troughs(d, g, tbuf);
    for (int i = 0; i < nt; i++)
      if (d[tbuf[i]] < p->threshold) {
        frames[3 * f + 1] = (float)(g->rate / refine(d, tbuf[i], g->tau_max));
        frames[3 * f + 2] = 1.0f - d[tbuf[i]];
        break;
      }
  }
  stg_st_free(tbuf);
  return 0;
}

/* From d' to the f0 track: frames[3*f + 0..2] = time s, f0 Hz (0 unvoiced),
 * voicing probability. frames holds g->n_frames * 3 floats. padded is the
 * unfiltered padded signal (for the silence gate). */
static int stg_pitch_track(const float *cmndf, const float *padded, const stg_pitch_geom *g,
                           const stg_pitch_params *p, float *frames) {
  return stg_pitch_track_salience(cmndf, padded, g, p, NULL, NULL, frames);
}

void stg_pitch_frame_levels(const float *padded, const stg_pitch_geom *g, float *db) {
  for (size_t f = 0; f < g->n_frames; f++)
    db[f] = stg_st_stop() ? 0.0f : (float)frame_db(padded, g, f);
}

/* The note gate (pitch_notes.c) with each frame's level (gate_db, else
 * padded's). */
static int gate_track(const float *padded, const stg_pitch_geom *g, const stg_pitch_params *p,
                      const float *gate_db, float *frames) {
  if (gate_db)
    return stg_pitch_gate(frames, g->n_frames, gate_db, p);
  float *db = stg_st_malloc((g->n_frames ? g->n_frames : 1) * sizeof *db);
  if (!db)
    return ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %zu frame levels", g->n_frames);
  stg_pitch_frame_levels(padded, g, db);
  int rc = stg_pitch_gate(frames, g->n_frames, db, p);
  stg_st_free(db);
  return rc;
}

int stg_pitch_track_salience(const float *cmndf, const float *padded, const stg_pitch_geom *g,
                             const stg_pitch_params *p, const float *sal, const float *gate_db,
                             float *frames) {
  int rc;
  if (p->method == EBB_PITCH_YIN) {
    rc = yin_track(cmndf, padded, g, p, frames);
    goto done;
  }
  if (2 * (1200.0 * log2(p->fmax / p->fmin) / PY_CENTS_PER_BIN + 1) > 65535)
    return ebb_seterr(EBB_EINVAL, "pitch: fmin..fmax spans too many octaves for pYIN");
  rc = pyin_track(cmndf, padded, g, p, sal, frames);
  if (!rc && !stg_st_stop() && (p->gate_voicing > 0.0 || p->gate_range_db > 0.0))
    rc = gate_track(padded, g, p, gate_db, frames);
done:
  if (!rc && stg_st_stop()) /* a loop broke out (st_util.h) */
    rc = ebb_seterr(EBB_ECANCELED, "pitch: cancelled while tracking %zu frames", g->n_frames);
  return rc;
}

int stg_pitch_analyze(const float *mono, uint64_t n, uint32_t rate, const stg_pitch_params *p,
                      stg_pitch_backend backend, float **frames, size_t *n_frames) {
  stg_pitch_geom g;
  float *padded = NULL, *emph = NULL, *cm = NULL, *fr = NULL;
  int rc = stg_pitch_geometry(p, rate, n, &g);
  if (rc)
    return rc;
  if ((rc = stg_pitch_pad(mono, n, &g, &padded)) ||
      (rc = stg_pitch_preemphasis(padded, g.padded_len, p->preemphasis, &emph)))
    goto fail;
  cm = stg_st_malloc(g.n_frames * (size_t)(g.tau_max + 1) * sizeof *cm);
  fr = stg_st_malloc(g.n_frames * 3 * sizeof *fr);
  if (!cm || !fr) {
    rc = ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %zu frames", g.n_frames);
    goto fail;
  }
  if (backend == EBB_PITCH_BACKEND_TWIN)
    stg_pitch_cmndf_twin(emph, &g, cm);
  else
    stg_pitch_cmndf_cpu(emph, &g, cm);
  if ((rc = stg_pitch_track(cm, padded, &g, p, fr)))
    goto fail;
  stg_st_free(padded);
  stg_st_free(emph);
  stg_st_free(cm);
  *frames = fr;
  *n_frames = g.n_frames;
  return 0;
fail:
  stg_st_free(padded);
  stg_st_free(emph);
  stg_st_free(cm);
  stg_st_free(fr);
  return rc;
}
