/* Separation quality on a generated mix (a vibrato "voice" over a repeating
 * drum + chord loop, 0 dB): the vocal estimate's SDR beats the mixture's by
 * a clear margin, the accompaniment estimate's too, and the two outputs add
 * back up to the mixture. */
#include "stages/audio/separate.h"
#include "stages_separate_mix.h"
#include "test.h"

static void check_seed(uint64_t seed) {
  sep_mix m;
  REQUIRE(sep_mix_make(&m, seed, 16000, 12.0) == 0);
  stg_sep_options o;
  stg_sep_options_default(&o);
  float *v = malloc(sizeof(float) * m.n), *a = malloc(sizeof(float) * m.n);
  REQUIRE(v && a);
  int rc = stg_separate_cpu(&o, m.rate, m.mix, m.n, v, a, NULL);
  REQUIRE(rc == 0);
  double base_v = sep_sdr(m.voice, m.mix, m.n), est_v = sep_sdr(m.voice, v, m.n);
  double base_a = sep_sdr(m.accomp, m.mix, m.n), est_a = sep_sdr(m.accomp, a, m.n);
  fprintf(stderr,
          "  seed %llu: vocals SDR %.2f dB (mixture %.2f, +%.2f dB); accompaniment %.2f dB "
          "(mixture %.2f, +%.2f dB)\n",
          (unsigned long long)seed, est_v, base_v, est_v - base_v, est_a, base_a, est_a - base_a);
  CHECK_MSG(est_v - base_v > 3.0, "vocal SDR improvement %.2f dB <= 3 dB", est_v - base_v);
  CHECK_MSG(est_a - base_a > 3.0, "accompaniment SDR improvement %.2f dB <= 3 dB", est_a - base_a);
  /* vocals + accompaniment = mixture (the masks sum to 1; ISTFT is exact) */
  double err = 0, e = 0;
  for (long long i = 0; i < m.n; i++) {
    double d = (double)v[i] + a[i] - m.mix[i];
    err += d * d;
    e += (double)m.mix[i] * m.mix[i];
  }
  CHECK_MSG(sqrt(err / e) < 1e-4, "vocals + accompaniment differ from the mix by %g",
            sqrt(err / e));
  free(v), free(a);
  sep_mix_free(&m);
}

static void test_sdr_seed1(void) { check_seed(1); }
static void test_sdr_seed2(void) { check_seed(2); }

int main(void) {
  RUN(test_sdr_seed1);
  RUN(test_sdr_seed2);
  return TEST_END();
}
