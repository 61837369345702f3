/* separate's harmonic/percussive medians: stg_dsp_sliding_median gives, bit
 * for bit, what stg_dsp_median gives over each clipped window, on random
 * magnitudes with ties and zeros, along a contiguous run and along a strided
 * column, with even windows at the edges, a window wider than the run, and
 * runs of 1 and 2 elements.
 * The repeating model's quantile (stg_dsp_quantile): at 0.5 bit for bit
 * stg_dsp_median, at 0 the least and at 1 the greatest value, in between
 * the linear interpolation between the order statistics around q (n - 1)
 * (within float rounding of the same in double on a sorted copy), and bit
 * for bit the kernels' stg_k_quantile (sorting, where the host selects),
 * on random magnitudes with ties and zeros; 8 values 1..8 at 0.3 give 3.1.
 * The vocal mask (stg_repet_vocal_mask sorts 64 bins side by side through a
 * comparator network) is bit for bit 1 - min(W, V) / V with W the
 * stg_dsp_quantile of the picks' magnitudes in each bin, for 1 to 100
 * picks a frame (more than 32 with k 100), a last block of bins shorter than 64, ties and zeros.
 * The picks (stg_repet_picks, whose candidates a radix sort orders) are a
 * comparison sort's by (similarity, frame) on a spectrogram of repeated
 * frames, whose similarities tie exactly. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stages/audio/dsp_repet.h"
#include "stages/kernels/sep_kernels.h"
#include "test.h"

/* the reference: stg_dsp_median of each clipped window, gathered */
static float ref_median(const float *x, long long stride, int n, int half, int i) {
  float w[512];
  int m = 0;
  for (int j = i - half; j <= i + half; j++)
    if (j >= 0 && j < n)
      w[m++] = x[(long long)j * stride];
  return stg_dsp_median(w, m);
}

static int check_case(const float *x, long long stride, int n, int half) {
  float *out = malloc(sizeof(float) * (size_t)n * (size_t)stride);
  float *win = malloc(sizeof(float) * (size_t)(2 * half + 2));
  REQUIRE(out && win);
  stg_dsp_sliding_median(x, stride, n, half, out, stride, win);
  int bad = 0;
  for (int i = 0; i < n && !bad; i++) {
    float want = ref_median(x, stride, n, half, i), got = out[(long long)i * stride];
    if (memcmp(&want, &got, sizeof want)) {
      printf("  n %d, half %d, stride %lld, i %d: sliding %.9g, median %.9g\n", n, half, stride, i,
             got, want);
      bad = 1;
    }
  }
  free(out);
  free(win);
  return !bad;
}

static void test_sliding_equals_median(void) {
  srand(7);
  enum { N = 300, STRIDE = 5 };
  float *x = malloc(sizeof(float) * N * STRIDE);
  REQUIRE(x);
  for (int i = 0; i < N * STRIDE; i++) {
    int r = rand() % 100;
    /* ties and zeros are common in magnitudes (silence, clipped spectra) */
    x[i] = r < 10 ? 0.0f : r < 30 ? (float)(r % 4) : (float)rand() / (float)RAND_MAX;
  }
  int halves[] = {0, 1, 2, 8, 15, 16, 149, 150, 200};
  int ns[] = {1, 2, 3, 17, N};
  int cases = 0, ok = 0;
  for (size_t h = 0; h < sizeof halves / sizeof *halves; h++)
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
      ok += check_case(x, 1, ns[k], halves[h]);
      ok += check_case(x + 2, STRIDE, ns[k], halves[h]);
      cases += 2;
    }
  printf("  %d of %d cases bit for bit the same as ebb_dsp_median\n", ok, cases);
  CHECK_MSG(ok == cases, "%d of %d cases differ from ebb_dsp_median", cases - ok, cases);
  free(x);
}

static int cmp_f(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static void test_quantile(void) {
  srand(11);
  int ns[] = {1, 2, 3, 8, 16, 29, 30, 100};
  float qs[] = {0.0f, 0.3f, 0.4f, 0.5f, 0.77f, 1.0f};
  float x[100], a[100], b[100], s[100];
  int cases = 0, bad = 0;
  for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
    for (int rep = 0; rep < 20; rep++) {
      int n = ns[i];
      for (int j = 0; j < n; j++) {
        int r = rand() % 100;
        x[j] = r < 10 ? 0.0f : r < 30 ? (float)(r % 4) : (float)rand() / (float)RAND_MAX;
      }
      memcpy(s, x, sizeof(float) * (size_t)n);
      qsort(s, (size_t)n, sizeof *s, cmp_f);
      for (size_t k = 0; k < sizeof qs / sizeof *qs; k++) {
        float q = qs[k];
        memcpy(a, x, sizeof(float) * (size_t)n);
        memcpy(b, x, sizeof(float) * (size_t)n);
        float host = stg_dsp_quantile(a, n, q), dev = stg_k_quantile(b, n, q);
        double pos = (double)q * (n - 1), lo = s[(int)floor(pos)];
        double hi = s[(int)ceil(pos) < n ? (int)ceil(pos) : n - 1];
        double want = lo + (pos - floor(pos)) * (hi - lo);
        int ok = !memcmp(&host, &dev, sizeof host) && fabs(host - want) <= 1e-6 * (1 + fabs(want));
        if (q == 0.5f) {
          memcpy(a, x, sizeof(float) * (size_t)n);
          float med = stg_dsp_median(a, n);
          ok = ok && !memcmp(&med, &host, sizeof med);
        }
        if (q == 0.0f || q == 1.0f)
          ok = ok && host == s[q == 0.0f ? 0 : n - 1];
        if (!ok && bad++ < 5)
          printf("  n %d, q %g: host %.9g, kernel %.9g, interpolated %.9g\n", n, (double)q,
                 (double)host, (double)dev, want);
        cases++;
      }
    }
  printf("  %d of %d quantiles as they should be\n", cases - bad, cases);
  CHECK_MSG(bad == 0, "%d of %d quantiles wrong (see above)", bad, cases);
  float v[8] = {5, 2, 8, 1, 7, 3, 6, 4};
  float got = stg_dsp_quantile(v, 8, 0.3f);
  CHECK_MSG(fabsf(got - 3.1f) < 1e-5f, "0.3-quantile of 1..8: %g, expected 3.1", (double)got);
}

/* The mask the reference way: frame j's picks' magnitudes, bin by bin,
 * through stg_dsp_quantile. */
static int mask_case(int nframes, int nbins, int k, float q) {
  stg_repet_params p = {.k = k,
                        .min_dist = 1,
                        .max_lag = nframes,
                        .pool = 3,
                        .quantile = q,
                        .band_lo = 0,
                        .band_hi = nbins - 1,
                        .outside_gain = 1.0f};
  size_t cells = (size_t)nframes * (size_t)nbins;
  float *mag = malloc(sizeof(float) * cells), *mask = malloc(sizeof(float) * cells);
  int *picks = malloc(sizeof(int) * (size_t)nframes * (size_t)k);
  int *np = malloc(sizeof(int) * (size_t)nframes);
  float vals[EBB_REPET_MAX_K];
  REQUIRE(mag && mask && picks && np);
  for (size_t c = 0; c < cells; c++) {
    int r = rand() % 100;
    mag[c] = r < 10 ? 0.0f : r < 30 ? (float)(r % 4) : (float)rand() / (float)RAND_MAX;
  }
  REQUIRE(stg_repet_vocal_mask(mag, nframes, nbins, &p, mask) == 0);
  REQUIRE(stg_repet_picks(mag, nframes, nbins, &p, picks, np) == 0);
  int bad = 0, most = 0;
  for (int j = 0; j < nframes; j++) {
    most = np[j] > most ? np[j] : most;
    for (int b = 0; b < nbins && !bad; b++) {
      for (int r = 0; r < np[j]; r++)
        vals[r] = mag[(size_t)picks[(size_t)j * k + r] * nbins + b];
      float v = mag[(size_t)j * nbins + b], w = stg_dsp_quantile(vals, np[j], q);
      w = w > v ? v : w;
      float want = v > 0 ? 1.0f - w / v : 0.0f;
      if (memcmp(&want, &mask[(size_t)j * nbins + b], sizeof want)) {
        printf("  %d frames, %d bins, k %d, q %g: frame %d (%d picks) bin %d: mask %.9g, want "
               "%.9g\n",
               nframes, nbins, k, (double)q, j, np[j], b, (double)mask[(size_t)j * nbins + b],
               (double)want);
        bad = 1;
      }
    }
  }
  free(mag);
  free(mask);
  free(picks);
  free(np);
  /* random frames are rarely local maxima of their rows: 100 picks give about 40 */
  return !bad && most >= (k < 33 ? k : 33);
}

typedef struct ref_cand {
  float sim;
  int frame;
} ref_cand;

static int ref_cmp(const void *a, const void *b) {
  const ref_cand *x = a, *y = b;
  if (x->sim != y->sim)
    return x->sim > y->sim ? -1 : 1;
  return (x->frame > y->frame) - (x->frame < y->frame);
}

/* dsp_repet.c's picks the way it made them before its radix sort: features
 * and rows with the same float operations, candidates through qsort. */
static int ref_picks(const float *mag, int nf, int nbins, const stg_repet_params *p, int j,
                     float *feat, ref_cand *c, int *picks) {
  int nfeat = (nbins + p->pool - 1) / p->pool, n = 0, np = 0;
  for (int f = 0; f < nf; f++) {
    double norm = 0;
    for (int b = 0; b < nfeat; b++) {
      float s = 0;
      for (int k = b * p->pool; k < (b + 1) * p->pool && k < nbins; k++)
        s += mag[(size_t)f * nbins + k];
      feat[(size_t)b * nf + f] = s;
      norm += (double)s * s;
    }
    float inv = norm > 0 ? (float)(1.0 / sqrt(norm)) : 0.0f;
    for (int b = 0; b < nfeat; b++)
      feat[(size_t)b * nf + f] *= inv;
  }
  float row[256] = {0};
  for (int b = 0; b < nfeat; b++)
    for (int i = 0; i < nf; i++)
      row[i] += feat[(size_t)b * nf + j] * feat[(size_t)b * nf + i];
  for (int i = 0; i < nf; i++)
    if (row[i] > 0 && abs(i - j) >= p->min_dist && !(i > 0 && row[i - 1] > row[i]) &&
        !(i < nf - 1 && row[i + 1] >= row[i]))
      c[n++] = (ref_cand){row[i], i};
  qsort(c, (size_t)n, sizeof *c, ref_cmp);
  picks[np++] = j;
  for (int i = 0; i < n && np < p->k; i++) {
    int near = 0;
    for (int q = 1; q < np; q++)
      near |= abs(picks[q] - c[i].frame) < p->min_dist;
    if (!near)
      picks[np++] = c[i].frame;
  }
  return np;
}

static void test_picks_tie_order(void) {
  enum { NF = 200, NB = 40 };
  stg_repet_params p = {.k = 30,
                        .min_dist = 3,
                        .max_lag = NF,
                        .pool = 4,
                        .quantile = 0.5f,
                        .band_lo = 0,
                        .band_hi = NB - 1,
                        .outside_gain = 1.0f};
  static float mag[NF * NB], feat[NF * NB];
  static int picks[NF * 30], np[NF], want[30];
  static ref_cand c[NF];
  srand(3);
  for (int f = 0; f < NF; f++) /* 7 distinct frames, repeated out of order: exact ties */
    for (int b = 0; b < NB; b++)
      mag[f * NB + b] = (float)(((f * 5 % 7) * 13 + b * 7) % 11);
  REQUIRE(stg_repet_picks(mag, NF, NB, &p, picks, np) == 0);
  int bad = 0;
  for (int j = 0; j < NF && !bad; j++) {
    int n = ref_picks(mag, NF, NB, &p, j, feat, c, want);
    bad = n != np[j] || memcmp(want, picks + j * 30, sizeof(int) * (size_t)n);
    if (bad)
      printf("  frame %d: %d picks, want %d (first %d, want %d)\n", j, np[j], n, picks[j * 30 + 1],
             want[1]);
  }
  CHECK_MSG(!bad, "the picks differ from a comparison sort's (see above)");
}

static void test_mask_equals_quantile(void) {
  srand(5);
  int ks[] = {1, 2, 8, 30, 33, 100};
  int ok = 0, n = 0;
  for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
    ok += mask_case(120, 150, ks[i], 0.4f);
    ok += mask_case(120, 64, ks[i], 0.5f);
    n += 2;
  }
  CHECK_MSG(ok == n, "%d of %d masks differ from the quantiles' (see above) or had too few picks",
            n - ok, n);
}

int main(void) {
  RUN(test_sliding_equals_median);
  RUN(test_quantile);
  RUN(test_mask_equals_quantile);
  RUN(test_picks_tie_order);
  return TEST_END();
}
