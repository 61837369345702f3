/* separate's harmonic/percussive medians: ebb_dsp_sliding_median gives, bit
 * for bit, what ebb_dsp_median gives over each clipped window, on random
 * magnitudes with ties and zeros, along a contiguous run and along a strided
 * column, with even windows at the edges, a window wider than the run, and
 * runs of 1 and 2 elements. */
#include <stdlib.h>
#include <string.h>

#include "stages/audio/dsp_repet.h"
#include "test.h"

/* the reference: ebb_dsp_median of each clipped window, gathered */
static float ref_median(const float *x, long long stride, int n, int half, int i) {
  float w[512];
  int m = 0;
  for (int j = i - half; j <= i + half; j++)
    if (j >= 0 && j < n)
      w[m++] = x[(long long)j * stride];
  return ebb_dsp_median(w, m);
}

static int check_case(const float *x, long long stride, int n, int half) {
  float *out = malloc(sizeof(float) * (size_t)n * (size_t)stride);
  float *win = malloc(sizeof(float) * (size_t)(2 * half + 2));
  REQUIRE(out && win);
  ebb_dsp_sliding_median(x, stride, n, half, out, stride, win);
  int bad = 0;
  for (int i = 0; i < n && !bad; i++) {
    float want = ref_median(x, stride, n, half, i), got = out[(long long)i * stride];
    if (memcmp(&want, &got, sizeof want)) {
      printf("  n %d, half %d, stride %lld, i %d: sliding %.9g, median %.9g\n", n, half, stride,
             i, got, want);
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

int main(void) {
  RUN(test_sliding_equals_median);
  return TEST_END();
}
