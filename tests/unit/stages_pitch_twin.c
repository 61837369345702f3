/* pitch: the kernel's host twin (the GPU's arithmetic) and the CPU loop give
 * the same d'(tau) within a relative error of 1e-4 on the test clips, and the
 * stage's device path (stage-owned device memory, one launch, everything
 * freed) gives the same f0 track as its CPU path. */
#include <math.h>

#include "stages/audio/pitch.h"
#include "stages/audio/songgen.h"
#include "stages_pitch_host.h"
#include "test.h"

static double max_rel(const float *a, const float *b, size_t n) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]), m = fmax(fabs((double)b[i]), 1e-6);
    if (d / m > worst)
      worst = d / m;
  }
  return worst;
}

static void compare(const char *what, const float *x, uint64_t n, uint32_t rate) {
  stg_pitch_params p = stg_pitch_defaults();
  stg_pitch_geom g;
  float *pad = NULL;
  REQUIRE(stg_pitch_geometry(&p, rate, n, &g) == 0);
  REQUIRE(stg_pitch_pad(x, n, &g, &pad) == 0);
  size_t cells = g.n_frames * (size_t)(g.tau_max + 1);
  float *a = malloc(cells * sizeof *a), *b = malloc(cells * sizeof *b);
  REQUIRE(a && b);
  stg_pitch_cmndf_cpu(pad, &g, a);
  stg_pitch_cmndf_twin(pad, &g, b);
  double rel = max_rel(a, b, cells);
  fprintf(stderr, "  %s: %zu frames x %d lags, max relative difference %.3g\n", what, g.n_frames,
          g.tau_max + 1, rel);
  CHECK_MSG(rel < 1e-4, "%s: twin vs CPU relative error %.3g >= 1e-4", what, rel);
  /* the rows are normalised: d'(0) = 1 and the mean of d' over 1..tau is ~1 */
  CHECK_EQ_INT(b[0] == 1.0f, 1);
  free(a);
  free(b);
  free(pad);
}

static void test_twin_matches_cpu(void) {
  stg_songgen_params sp = stg_songgen_defaults();
  sp.seconds = 8.0;
  sp.seed = 5;
  stg_song *s = NULL;
  REQUIRE(stg_songgen_create(&sp, &s) == 0);
  compare("songgen vocals", s->vocals, s->frames, s->rate);
  compare("songgen mix", s->mix, s->frames, s->rate);
  float *emph = NULL; /* what the stage feeds the kernel: the pre-emphasised signal */
  REQUIRE(stg_pitch_preemphasis(s->mix, s->frames, 0.97, &emph) == 0);
  compare("songgen mix, pre-emphasised", emph, s->frames, s->rate);
  free(emph);
  float *tone = malloc(16000 * sizeof *tone);
  for (int i = 0; i < 16000; i++)
    tone[i] = (float)(0.3 * sin(2 * M_PI * 196.0 * i / 16000.0));
  compare("196 Hz tone", tone, 16000, 16000);
  free(tone);
  stg_song_destroy(s);
}

static void run_stage(ebb_dev_kind kind, const char *opts, const float *x, uint64_t n, float **f0,
                      uint64_t *nf, th_ctx *t) {
  th_init(t, kind);
  ebb_items in = {0}, out = {0};
  REQUIRE(th_add_audio(&in, "vocals", x, n, 1, 16000) == 0);
  int rc = th_run_stage(t, &stg_stage_pitch, opts, &in, &out);
  CHECK_MSG(rc == 0, "pitch (%s) failed: %s", opts, t->err);
  ebb_item_info info;
  REQUIRE(th_item_find(&out, "f0", &info) == 0);
  *nf = info.shape[0];
  *f0 = malloc(*nf * 3 * sizeof **f0);
  memcpy(*f0, info.data, *nf * 3 * sizeof **f0);
  th_items_free(&in);
  th_items_free(&out);
}

static void test_stage_device_path(void) {
  stg_songgen_params sp = stg_songgen_defaults();
  sp.seconds = 6.0;
  stg_song *s = NULL;
  REQUIRE(stg_songgen_create(&sp, &s) == 0);
  th_ctx tc, tg, tk;
  float *cpu = NULL, *gpu = NULL, *twin = NULL;
  uint64_t n1 = 0, n2 = 0, n3 = 0;
  run_stage(EBB_DEV_KIND_CPU, "{\"backend\":\"cpu\"}", s->vocals, s->frames, &cpu, &n1, &tc);
  run_stage(EBB_DEV_KIND_CUDA, "{}", s->vocals, s->frames, &gpu, &n2, &tg);
  run_stage(EBB_DEV_KIND_CPU, "{\"backend\":\"kernel\"}", s->vocals, s->frames, &twin, &n3, &tk);
  CHECK_EQ_U64(n1, n2);
  CHECK_EQ_U64(n1, n3);
  CHECK_EQ_INT(tc.launches, 0);
  /* the difference function in bounded launches (a cancellation is seen
   * between them): as many as stg_pitch_launch_frames says, more than one
   * for 6 s at the defaults */
  stg_pitch_params pp = stg_pitch_defaults();
  stg_pitch_geom g;
  REQUIRE(stg_pitch_geometry(&pp, s->rate, s->frames, &g) == 0);
  size_t step = stg_pitch_launch_frames(&g);
  CHECK_EQ_INT(tg.launches, (int)((g.n_frames + step - 1) / step));
  CHECK(tg.launches > 1);
  CHECK_EQ_INT(tg.allocs, 2);
  CHECK_EQ_INT(tg.live_blocks, 0); /* the stage freed its device buffers */
  CHECK(strstr(tg.log, "gpu kernel") != NULL);
  CHECK(strstr(tk.log, "host twin") != NULL);
  size_t differ = 0, voiced = 0;
  for (uint64_t f = 0; f < n1 && f < n2 && f < n3; f++) {
    voiced += cpu[3 * f + 1] > 0;
    /* kernel on the "device" and twin on the host: bit-identical */
    CHECK_EQ_INT(gpu[3 * f + 1] == twin[3 * f + 1], 1);
    differ += (cpu[3 * f + 1] > 0) != (gpu[3 * f + 1] > 0) ||
              fabs((double)cpu[3 * f + 1] - gpu[3 * f + 1]) > 0.01;
  }
  CHECK_MSG(voiced > n1 / 3, "only %zu of %llu frames voiced", voiced, (unsigned long long)n1);
  CHECK_MSG(differ == 0, "%zu frames differ between the CPU and device paths", differ);
  free(cpu);
  free(gpu);
  free(twin);
  stg_song_destroy(s);
}

int main(void) {
  RUN(test_twin_matches_cpu);
  RUN(test_stage_device_path);
  return TEST_END();
}
