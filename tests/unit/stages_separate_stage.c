/* The `separate` stage through its vtable (a shim host, no runner): "audio"
 * -> "vocals" + "accompaniment" of the same rate and length on the CPU device
 * (FFTW) and on a CUDA device (kernels as twins, every device byte freed);
 * a CUDA device that cannot launch the kernels falls back to the CPU with a
 * log line; bad options are refused at load; a missing input is EINPUT. */
#include "stages/audio/separate.h"
#include "stages_separate_mix.h"
#include "stages_separate_shim.h"
#include "test.h"

extern const ebb_stage stg_stage_separate;

static sep_mix clip;

static void run_stage(ebb_dev_kind kind, int no_twins, float **voc_out) {
  shim_ctx sh;
  shim_init(&sh, kind);
  sh.no_twins = no_twins;
  ebb_items in = {0}, out = {0};
  REQUIRE(shim_add_audio(&in, "audio", clip.mix, (uint64_t)clip.n, 1, clip.rate) == 0);
  void *state = NULL;
  REQUIRE(stg_stage_separate
              .load(&sh.base,
                    "{\"n_fft\": 1024, \"hop\": 256, \"hpss\": true, \"melody_repeats\": 0}",
                    &state) == 0);
  int rc = stg_stage_separate.run(&sh.base, state, &in, &out);
  CHECK_MSG(rc == 0, "separate failed: %s", sh.err);
  ebb_item_info v = {0}, a = {0}, m = {0};
  CHECK_MSG(shim_item_find(&out, "melody", &m) != 0, "melody_repeats 0 still added \"melody\"");
  CHECK(shim_item_find(&out, "vocals", &v) == 0);
  CHECK(shim_item_find(&out, "accompaniment", &a) == 0);
  CHECK_EQ_INT(v.kind, EBB_ITEM_AUDIO);
  CHECK_EQ_U64(v.frames, clip.n);
  CHECK_EQ_U64(a.frames, clip.n);
  CHECK_EQ_INT(v.rate, clip.rate);
  CHECK_EQ_INT(a.channels, 1);
  if (v.samples) {
    double gain = sep_sdr(clip.voice, v.samples, clip.n) - sep_sdr(clip.voice, clip.mix, clip.n);
    CHECK_MSG(gain > 3.0, "vocal SDR improvement %.2f dB", gain);
    *voc_out = malloc(sizeof(float) * clip.n);
    memcpy(*voc_out, v.samples, sizeof(float) * clip.n);
  }
  if (kind == EBB_DEV_KIND_CUDA && !no_twins) {
    /* the 11 kernels, the per-frame ones in bounded launches (a cancellation
     * is seen between them): more than 11 launches on 6 s */
    CHECK_MSG(sh.launches > 11, "launches %d", sh.launches);
    CHECK_MSG(sh.peak_bytes > 0 && sh.live_bytes == 0, "device bytes peak %llu live %llu",
              (unsigned long long)sh.peak_bytes, (unsigned long long)sh.live_bytes);
  } else {
    CHECK_EQ_INT(sh.launches, 0);
    CHECK_EQ_U64(sh.live_bytes, 0);
    if (kind == EBB_DEV_KIND_CPU)
      CHECK_EQ_U64(sh.peak_bytes, 0);
  }
  if (no_twins)
    CHECK_MSG(strstr(sh.log, "running separation on the CPU") != NULL, "log: %s", sh.log);
  stg_stage_separate.unload(&sh.base, state);
  shim_items_free(&in);
  shim_items_free(&out);
}

static void test_devices_agree(void) {
  float *cpu = NULL, *gpu = NULL, *fallback = NULL;
  run_stage(EBB_DEV_KIND_CPU, 0, &cpu);
  run_stage(EBB_DEV_KIND_CUDA, 0, &gpu);
  run_stage(EBB_DEV_KIND_CUDA, 1, &fallback);
  REQUIRE(cpu && gpu && fallback);
  double num = 0, den = 0;
  for (long long i = 0; i < clip.n; i++) {
    num += ((double)gpu[i] - cpu[i]) * ((double)gpu[i] - cpu[i]);
    den += (double)cpu[i] * cpu[i];
  }
  CHECK_MSG(sqrt(num / den) < 1e-4, "CPU and CUDA vocals differ: %g", sqrt(num / den));
  CHECK(memcmp(cpu, fallback, sizeof(float) * clip.n) == 0);
  free(cpu), free(gpu), free(fallback);
}

/* The default options add the stricter pass's "melody" item: as long as the
 * vocals and not the same signal, on both devices (on CUDA 11 launches for
 * the first pass, 9 for the second: no accompaniment inverse). */
static void test_melody_item(void) {
  for (int d = 0; d < 2; d++) {
    shim_ctx sh;
    shim_init(&sh, d ? EBB_DEV_KIND_CUDA : EBB_DEV_KIND_CPU);
    ebb_items in = {0}, out = {0};
    REQUIRE(shim_add_audio(&in, "audio", clip.mix, (uint64_t)clip.n, 1, clip.rate) == 0);
    void *state = NULL;
    REQUIRE(stg_stage_separate.load(&sh.base, "{}", &state) == 0);
    CHECK_MSG(stg_stage_separate.run(&sh.base, state, &in, &out) == 0, "separate failed: %s",
              sh.err);
    ebb_item_info v = {0}, m = {0};
    CHECK(shim_item_find(&out, "vocals", &v) == 0);
    CHECK_MSG(shim_item_find(&out, "melody", &m) == 0, "no \"melody\" item by default");
    CHECK_EQ_INT(m.kind, EBB_ITEM_AUDIO);
    CHECK_EQ_U64(m.frames, clip.n);
    CHECK_EQ_INT(m.rate, clip.rate);
    if (m.samples && v.samples) {
      double ev = 0, ed = 0;
      for (long long i = 0; i < clip.n; i++) {
        ev += (double)v.samples[i] * v.samples[i];
        ed += ((double)m.samples[i] - v.samples[i]) * ((double)m.samples[i] - v.samples[i]);
      }
      CHECK_MSG(ev > 0.0 && ed > 1e-3 * ev,
                "melody differs from vocals by %g of %g: no second pass", ed, ev);
    }
    if (d)
      CHECK_MSG(sh.launches > 20 && sh.live_bytes == 0, "launches %d, live %llu", sh.launches,
                (unsigned long long)sh.live_bytes);
    stg_stage_separate.unload(&sh.base, state);
    shim_items_free(&in);
    shim_items_free(&out);
  }
  shim_ctx sh;
  shim_init(&sh, EBB_DEV_KIND_CPU);
  void *state = NULL;
  CHECK_EQ_INT(stg_stage_separate.load(&sh.base, "{\"melody_repeats\": 101}", &state), EBB_ECONFIG);
  CHECK_MSG(strstr(sh.err, "melody_repeats") != NULL, "error: %s", sh.err);
  CHECK(state == NULL);
}

static void test_bad_options(void) {
  shim_ctx sh;
  shim_init(&sh, EBB_DEV_KIND_CPU);
  void *state = NULL;
  CHECK_EQ_INT(stg_stage_separate.load(&sh.base, "{\"n_fft\": 1000}", &state), EBB_ECONFIG);
  CHECK_MSG(strstr(sh.err, "n_fft=1000") != NULL, "error: %s", sh.err);
  CHECK_EQ_INT(stg_stage_separate.load(&sh.base, "{\"hop\": 0}", &state), EBB_ECONFIG);
  CHECK_MSG(strstr(sh.err, "hop=0") != NULL, "error: %s", sh.err);
  CHECK_EQ_INT(stg_stage_separate.load(&sh.base, "{\"outside_gain\": 2}", &state), EBB_ECONFIG);
  CHECK_MSG(strstr(sh.err, "outside_gain") != NULL, "error: %s", sh.err);
  CHECK_EQ_INT(stg_stage_separate.load(&sh.base, "{\"repeat_quantile\": 1.5}", &state),
               EBB_ECONFIG);
  CHECK_MSG(strstr(sh.err, "repeat_quantile") != NULL, "error: %s", sh.err);
  CHECK_EQ_INT(stg_stage_separate.load(&sh.base, "{\"melody_quantile\": -0.1}", &state),
               EBB_ECONFIG);
  CHECK_MSG(strstr(sh.err, "melody_quantile") != NULL, "error: %s", sh.err);
  CHECK(state == NULL);
}

static void test_missing_audio(void) {
  shim_ctx sh;
  shim_init(&sh, EBB_DEV_KIND_CPU);
  void *state = NULL;
  REQUIRE(stg_stage_separate.load(&sh.base, "{}", &state) == 0);
  ebb_items in = {0}, out = {0};
  CHECK_EQ_INT(stg_stage_separate.run(&sh.base, state, &in, &out), EBB_EINPUT);
  CHECK_MSG(strstr(sh.err, "\"audio\"") != NULL, "error: %s", sh.err);
  CHECK_EQ_INT(out.n, 0);
  stg_stage_separate.unload(&sh.base, state);
}

static void test_cancel(void) {
  for (int kind = EBB_DEV_KIND_CPU; kind <= EBB_DEV_KIND_CUDA; kind++) {
    shim_ctx sh;
    shim_init(&sh, (ebb_dev_kind)kind);
    sh.cancel = 1;
    ebb_items in = {0}, out = {0};
    REQUIRE(shim_add_audio(&in, "audio", clip.mix, (uint64_t)clip.n, 1, clip.rate) == 0);
    void *state = NULL;
    REQUIRE(stg_stage_separate.load(&sh.base, "{}", &state) == 0);
    CHECK_EQ_INT(stg_stage_separate.run(&sh.base, state, &in, &out), EBB_ECANCELED);
    CHECK_MSG(strstr(sh.err, "cancelled") != NULL, "error: %s", sh.err);
    CHECK_EQ_INT(out.n, 0);
    CHECK_EQ_INT(sh.live_blocks, 0);
    stg_stage_separate.unload(&sh.base, state);
    shim_items_free(&in);
  }
}

static void test_short_and_silent_inputs(void) {
  /* shorter than one frame, and all zeros: outputs of the same length, no NaN */
  float x[100] = {0};
  float v[100], a[100];
  stg_sep_options o;
  stg_sep_options_default(&o);
  CHECK_EQ_INT(stg_separate_cpu(&o, 16000, x, 100, v, a, NULL), 0);
  int finite = 1;
  for (int i = 0; i < 100; i++)
    finite &= isfinite(v[i]) && isfinite(a[i]) && v[i] == 0 && a[i] == 0;
  CHECK(finite);
  shim_ctx sh;
  shim_init(&sh, EBB_DEV_KIND_CUDA);
  CHECK_EQ_INT(stg_separate_gpu(&sh.base, NULL, &o, 16000, x, 100, v, a, NULL), 0);
  finite = 1;
  for (int i = 0; i < 100; i++)
    finite &= isfinite(v[i]) && isfinite(a[i]) && v[i] == 0 && a[i] == 0;
  CHECK(finite);
  CHECK_EQ_INT(sh.live_blocks, 0);
}

int main(void) {
  REQUIRE(sep_mix_make(&clip, 3, 16000, 6.0) == 0);
  RUN(test_devices_agree);
  RUN(test_melody_item);
  RUN(test_bad_options);
  RUN(test_missing_audio);
  RUN(test_cancel);
  RUN(test_short_and_silent_inputs);
  sep_mix_free(&clip);
  return TEST_END();
}
