/* The GPU path of `separate` (ebb's kernels, run here as their host twins
 * through a shim host) agrees with the CPU path (FFTW) on a test clip:
 * spectrogram magnitudes and both separated outputs within 1e-4 relative
 * error; the GPU path's device memory goes through the stage's allocator, is
 * sized like the whole song's spectrogram, and is all freed, also when an
 * allocation fails half-way. The CPU path's two passes (the default and
 * separate's "melody" pass) sharing one harmonic factor, and the melody
 * pass's picks made from the first pass's similarity rows, give bit for bit
 * what two passes of their own give; passes whose rows differ are refused;
 * the GPU path's passes sharing those picks give bit for bit theirs too. */
#include "stages/audio/separate.h"
#include "stages_separate_mix.h"
#include "stages_separate_shim.h"
#include "test.h"

static double rel_err(const float *a, const float *b, long long n) {
  double num = 0, den = 0;
  for (long long i = 0; i < n; i++) {
    num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    den += (double)b[i] * b[i];
  }
  return sqrt(num / (den > 0 ? den : 1));
}

static sep_mix clip;

static void test_paths_agree(void) {
  stg_sep_options o;
  stg_sep_options_default(&o);
  stg_stft_shape s;
  stg_repet_params rp;
  REQUIRE(stg_sep_plan(&o, clip.rate, clip.n, &s, &rp) == 0);
  size_t cells = (size_t)s.nframes * s.nbins;
  float *mag_c = malloc(sizeof(float) * cells), *mag_g = malloc(sizeof(float) * cells);
  float *vc = malloc(sizeof(float) * clip.n), *ac = malloc(sizeof(float) * clip.n);
  float *vg = malloc(sizeof(float) * clip.n), *ag = malloc(sizeof(float) * clip.n);
  REQUIRE(mag_c && mag_g && vc && ac && vg && ag);
  int rc = stg_separate_cpu(&o, clip.rate, clip.mix, clip.n, vc, ac, mag_c);
  CHECK_MSG(rc == 0, "CPU path failed: %s", ebb_errmsg());
  shim_ctx sh;
  shim_init(&sh, EBB_DEV_KIND_CUDA);
  rc = stg_separate_gpu(&sh.base, NULL, &o, clip.rate, clip.mix, clip.n, vg, ag, mag_g);
  CHECK_MSG(rc == 0, "GPU path failed: %s", ebb_errmsg());
  double em = rel_err(mag_g, mag_c, (long long)cells);
  double ev = rel_err(vg, vc, clip.n), ea = rel_err(ag, ac, clip.n);
  fprintf(stderr,
          "  relative error twins vs FFTW: magnitudes %.3g, vocals %.3g, accompaniment %.3g\n", em,
          ev, ea);
  CHECK_MSG(em < 1e-4, "magnitudes differ: relative error %g", em);
  CHECK_MSG(ev < 1e-4, "vocals differ: relative error %g", ev);
  CHECK_MSG(ea < 1e-4, "accompaniment differs: relative error %g", ea);
  /* the outputs are not trivially equal: the vocal estimate is not the mix */
  CHECK_MSG(rel_err(vg, clip.mix, clip.n) > 0.1, "vocals equal the mixture");
  /* window, fft, magnitude; repet median, harmonic median, mask finish;
   * apply; then fft + overlap-add for each output: 11 kernels, the per-frame
   * ones in bounded launches (a cancellation is seen between them) */
  CHECK_MSG(sh.launches > 11, "launches %d", sh.launches);
  CHECK_EQ_INT(sh.live_blocks, 0);
  CHECK_EQ_U64(sh.live_bytes, 0);
  uint64_t want = stg_separate_gpu_bytes(&o, clip.rate, clip.n);
  uint64_t spectrogram = (uint64_t)s.nframes * s.n * 2 * sizeof(float);
  CHECK_MSG(sh.peak_bytes == want, "peak device bytes %llu, expected %llu",
            (unsigned long long)sh.peak_bytes, (unsigned long long)want);
  CHECK(sh.peak_bytes > 2 * spectrogram);
  free(mag_c), free(mag_g), free(vc), free(ac), free(vg), free(ag);
}

static void test_shared_hpss_same_bits(void) {
  stg_sep_options o, m;
  stg_sep_options_default(&o);
  m = o;
  m.repeats = 8; /* the melody pass: fewer picks, closer together */
  m.min_distance_s = 0.5;
  stg_stft_shape s;
  stg_repet_params rp, rm;
  REQUIRE(stg_sep_plan(&o, clip.rate, clip.n, &s, &rp) == 0 && rp.hpss);
  REQUIRE(stg_sep_plan(&m, clip.rate, clip.n, &s, &rm) == 0);
  size_t cells = (size_t)s.nframes * s.nbins, n = (size_t)clip.n;
  float *v1 = malloc(sizeof(float) * n), *a1 = malloc(sizeof(float) * n);
  float *m1 = malloc(sizeof(float) * n), *v2 = malloc(sizeof(float) * n);
  float *a2 = malloc(sizeof(float) * n), *m2 = malloc(sizeof(float) * n);
  float *hp = malloc(sizeof(float) * cells);
  int *picks = malloc(sizeof(int) * (size_t)s.nframes * (size_t)rm.k);
  int *npicks = malloc(sizeof(int) * (size_t)s.nframes);
  REQUIRE(v1 && a1 && m1 && v2 && a2 && m2 && hp && picks && npicks);
  REQUIRE(stg_separate_cpu(&o, clip.rate, clip.mix, clip.n, v1, a1, NULL) == 0);
  REQUIRE(stg_separate_cpu(&m, clip.rate, clip.mix, clip.n, m1, NULL, NULL) == 0);
  stg_repet_share sh = {.hpss = hp, .next = &rm, .picks = picks, .npicks = npicks};
  REQUIRE(stg_separate_cpu_shared(&o, clip.rate, clip.mix, clip.n, v2, a2, NULL, &sh) == 0);
  CHECK_MSG(sh.hpss_ready == 1, "the first pass did not mark the shared factor ready");
  CHECK_MSG(sh.picks_ready == 1, "the first pass did not mark the melody pass's picks ready");
  /* the melody pass's picks made alongside the first pass's are its own */
  int *own = malloc(sizeof(int) * (size_t)s.nframes * (size_t)rm.k);
  int *nown = malloc(sizeof(int) * (size_t)s.nframes);
  float *mag = malloc(sizeof(float) * cells);
  REQUIRE(own && nown && mag);
  REQUIRE(stg_separate_cpu(&m, clip.rate, clip.mix, clip.n, m2, NULL, mag) == 0);
  REQUIRE(stg_repet_picks(mag, s.nframes, s.nbins, &rm, own, nown) == 0);
  CHECK_MSG(!memcmp(own, picks, sizeof(int) * (size_t)s.nframes * (size_t)rm.k) &&
                !memcmp(nown, npicks, sizeof(int) * (size_t)s.nframes),
            "the melody pass's shared picks differ from its own");
  REQUIRE(stg_separate_cpu_shared(&m, clip.rate, clip.mix, clip.n, m2, NULL, NULL, &sh) == 0);
  CHECK_MSG(!memcmp(v1, v2, sizeof(float) * n), "vocals differ with the shared factor");
  CHECK_MSG(!memcmp(a1, a2, sizeof(float) * n), "accompaniment differs with the shared factor");
  CHECK_MSG(!memcmp(m1, m2, sizeof(float) * n), "the melody pass differs with what it shares");
  CHECK_MSG(memcmp(v1, m1, sizeof(float) * n) != 0,
            "the two passes gave the same output: the test cannot tell them apart");
  /* passes that cannot share picks are refused, not mixed up */
  stg_repet_params other = rm;
  other.max_lag = rm.max_lag > 1 ? rm.max_lag - 1 : 2;
  stg_repet_share bad = {.next = &other, .picks = picks, .npicks = npicks};
  int rc = stg_separate_cpu_shared(&o, clip.rate, clip.mix, clip.n, v2, a2, NULL, &bad);
  CHECK_MSG(rc == EBB_EINVAL && strstr(ebb_errmsg(), "max_lag"),
            "a shared pass with another max_lag: rc %d, '%s'", rc, ebb_errmsg());
  free(v1), free(a1), free(m1), free(v2), free(a2), free(m2), free(hp);
  free(picks), free(npicks), free(own), free(nown), free(mag);
}

/* The GPU path's two passes: the melody pass's picks made alongside the
 * first pass's (on the host, between the kernels) give both outputs bit for
 * bit as passes of their own. */
static void test_gpu_shared_picks_same_bits(void) {
  stg_sep_options o, m;
  stg_sep_options_default(&o);
  m = o;
  m.repeats = 8;
  m.min_distance_s = 0.5;
  stg_stft_shape s;
  stg_repet_params rm;
  REQUIRE(stg_sep_plan(&m, clip.rate, clip.n, &s, &rm) == 0);
  size_t n = (size_t)clip.n;
  float *v1 = malloc(sizeof(float) * n), *m1 = malloc(sizeof(float) * n);
  float *v2 = malloc(sizeof(float) * n), *m2 = malloc(sizeof(float) * n);
  int *picks = malloc(sizeof(int) * (size_t)s.nframes * (size_t)rm.k);
  int *npicks = malloc(sizeof(int) * (size_t)s.nframes);
  REQUIRE(v1 && m1 && v2 && m2 && picks && npicks);
  shim_ctx sh;
  shim_init(&sh, EBB_DEV_KIND_CUDA);
  REQUIRE(stg_separate_gpu(&sh.base, NULL, &o, clip.rate, clip.mix, clip.n, v1, NULL, NULL) == 0);
  REQUIRE(stg_separate_gpu(&sh.base, NULL, &m, clip.rate, clip.mix, clip.n, m1, NULL, NULL) == 0);
  stg_repet_share share = {.next = &rm, .picks = picks, .npicks = npicks};
  REQUIRE(stg_separate_gpu_shared(&sh.base, NULL, &o, clip.rate, clip.mix, clip.n, v2, NULL, NULL,
                                  &share) == 0);
  CHECK_MSG(share.picks_ready == 1, "the GPU path's first pass did not make the melody's picks");
  REQUIRE(stg_separate_gpu_shared(&sh.base, NULL, &m, clip.rate, clip.mix, clip.n, m2, NULL, NULL,
                                  &share) == 0);
  CHECK_MSG(!memcmp(v1, v2, sizeof(float) * n), "GPU path: vocals differ with shared picks");
  CHECK_MSG(!memcmp(m1, m2, sizeof(float) * n),
            "GPU path: the melody pass differs with shared picks");
  CHECK_MSG(memcmp(v1, m1, sizeof(float) * n) != 0,
            "GPU path: the two passes gave the same output");
  CHECK_EQ_INT(sh.live_blocks, 0);
  free(v1), free(m1), free(v2), free(m2), free(picks), free(npicks);
}

static void test_alloc_failure_unwinds(void) {
  stg_sep_options o;
  stg_sep_options_default(&o);
  float *v = malloc(sizeof(float) * clip.n), *a = malloc(sizeof(float) * clip.n);
  REQUIRE(v && a);
  for (int at = 1; at <= 11; at++) {
    shim_ctx sh;
    shim_init(&sh, EBB_DEV_KIND_CUDA);
    sh.fail_alloc_at = at;
    int rc = stg_separate_gpu(&sh.base, NULL, &o, clip.rate, clip.mix, 4 * clip.rate, v, a, NULL);
    CHECK_MSG(rc == EBB_EOOM, "allocation %d failing gave %d (%s)", at, rc, ebb_errmsg());
    CHECK_MSG(strstr(ebb_errmsg(), "device allocation") != NULL, "message: %s", ebb_errmsg());
    CHECK_MSG(sh.live_blocks == 0, "allocation %d failing left %d blocks", at, sh.live_blocks);
  }
  free(v), free(a);
}

static void test_no_image_no_twins_is_unsupported(void) {
  stg_sep_options o;
  stg_sep_options_default(&o);
  float *v = malloc(sizeof(float) * clip.n), *a = malloc(sizeof(float) * clip.n);
  shim_ctx sh;
  shim_init(&sh, EBB_DEV_KIND_CUDA);
  sh.no_twins = 1;
  int rc = stg_separate_gpu(&sh.base, NULL, &o, clip.rate, clip.mix, clip.n, v, a, NULL);
  CHECK_EQ_INT(rc, EBB_EUNSUPPORTED);
  CHECK_MSG(strstr(ebb_errmsg(), "ebb_stft_window") && strstr(ebb_errmsg(), "nvcc absent"),
            "message: %s", ebb_errmsg());
  CHECK_EQ_INT(sh.live_blocks, 0);
  free(v), free(a);
}

int main(void) {
  REQUIRE(sep_mix_make(&clip, 1, 16000, 8.0) == 0);
  RUN(test_paths_agree);
  RUN(test_shared_hpss_same_bits);
  RUN(test_gpu_shared_picks_same_bits);
  RUN(test_alloc_failure_unwinds);
  RUN(test_no_image_no_twins_is_unsupported);
  sep_mix_free(&clip);
  return TEST_END();
}
