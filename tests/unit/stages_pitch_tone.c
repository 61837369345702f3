/* pitch: pure tones come out within 10 cents (pYIN and YIN), silence is
 * unvoiced, and the stage's items have the documented shapes. */
#include <jansson.h>
#include <math.h>

#include "stages/audio/pitch.h"
#include "stages_pitch_host.h"
#include "test.h"

#define RATE 16000u

static float *tone(double hz, double seconds, double lead_silence) {
  uint64_t n = (uint64_t)(seconds * RATE);
  float *x = calloc(n, sizeof *x);
  for (uint64_t i = (uint64_t)(lead_silence * RATE); i < n; i++)
    x[i] = (float)(0.5 * sin(2.0 * M_PI * hz * (double)i / RATE));
  return x;
}

static double cents(double a, double b) { return 1200.0 * log2(a / b); }

static void check_tone(double hz, stg_pitch_method m) {
  stg_pitch_params p = stg_pitch_defaults();
  p.method = m;
  float *x = tone(hz, 1.0, 0.3), *fr = NULL;
  size_t nf = 0;
  REQUIRE(stg_pitch_analyze(x, RATE, RATE, &p, EBB_PITCH_BACKEND_CPU, &fr, &nf) == 0);
  CHECK_EQ_U64(nf, RATE / 160 + 1);
  int voiced = 0, off = 0, early = 0;
  double worst = 0;
  for (size_t f = 0; f < nf; f++) {
    double t = fr[3 * f], f0 = fr[3 * f + 1];
    CHECK_NEAR(t, f * 0.01, 1e-6);
    if (t < 0.25 && f0 > 0)
      early++; /* silence before the tone */
    if (t > 0.35 && t < 0.95) {
      if (f0 > 0) {
        voiced++;
        double c = fabs(cents(f0, hz));
        if (c > worst)
          worst = c;
        off += c > 10.0;
      }
    }
  }
  CHECK_MSG(voiced >= 58, "%g Hz method %d: only %d of 60 steady frames voiced", hz, m, voiced);
  CHECK_MSG(off == 0, "%g Hz method %d: %d frames more than 10 cents off (worst %.2f)", hz, m, off,
            worst);
  CHECK_MSG(early == 0, "%g Hz method %d: %d voiced frames in leading silence", hz, m, early);
  free(x);
  free(fr);
}

static void test_tones_pyin(void) {
  const double hz[] = {82.41, 110.0, 220.0, 311.13, 440.0, 659.26, 880.0};
  for (size_t i = 0; i < sizeof hz / sizeof hz[0]; i++)
    check_tone(hz[i], EBB_PITCH_PYIN);
}

static void test_tones_yin(void) {
  const double hz[] = {110.0, 261.63, 493.88};
  for (size_t i = 0; i < sizeof hz / sizeof hz[0]; i++)
    check_tone(hz[i], EBB_PITCH_YIN);
}

static void test_stage_items(void) {
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  ebb_items in = {0}, out = {0};
  float *x = tone(220.0, 1.0, 0.3);
  /* a stereo "audio" item: the stage mixes down */
  float *st = malloc(2 * RATE * sizeof *st);
  for (uint32_t i = 0; i < RATE; i++)
    st[2 * i] = st[2 * i + 1] = x[i];
  REQUIRE(th_add_audio(&in, "audio", st, RATE, 2, RATE) == 0);
  int rc = th_run_stage(&t, &stg_stage_pitch, "{}", &in, &out);
  CHECK_MSG(rc == 0, "pitch run failed: %d %s", rc, t.err);
  ebb_item_info f0, notes;
  REQUIRE(th_item_find(&out, "f0", &f0) == 0);
  CHECK_EQ_INT(f0.kind, EBB_ITEM_TENSOR);
  CHECK_EQ_INT(f0.ndim, 2);
  CHECK_EQ_U64(f0.shape[0], RATE / 160 + 1);
  CHECK_EQ_U64(f0.shape[1], 3);
  REQUIRE(th_item_find(&out, "notes", &notes) == 0);
  json_t *j = json_loads(notes.text, 0, NULL);
  REQUIRE(j != NULL);
  json_t *arr = json_object_get(j, "notes");
  CHECK_EQ_INT(json_array_size(arr), 1);
  json_t *n0 = json_array_get(arr, 0);
  CHECK_EQ_INT(json_integer_value(json_object_get(n0, "midi")), 57);
  CHECK_EQ_STR(json_string_value(json_object_get(n0, "name")), "A3");
  CHECK_NEAR(json_number_value(json_object_get(n0, "onset")), 0.3, 0.03);
  CHECK_NEAR(json_number_value(json_object_get(n0, "offset")), 1.0, 0.03);
  CHECK_EQ_INT(t.allocs, 0); /* CPU device: no device memory */
  json_decref(j);
  th_items_free(&in);
  th_items_free(&out);
  free(x);
  free(st);
}

/* Other input rates are resampled to the analysis rate (16 kHz): hop and
 * frame keep their meaning, times stay in seconds. rate 0 analyses at the
 * input's rate, where the default frame is too short for fmin 65 Hz. */
static void test_other_rates(void) {
  const uint32_t r = 44100;
  float *x = malloc(r * sizeof *x);
  for (uint32_t i = 0; i < r; i++)
    x[i] = (float)(0.4 * sin(2.0 * M_PI * 246.94 * i / r));
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  ebb_items in = {0}, out = {0};
  REQUIRE(th_add_audio(&in, "vocals", x, r, 1, r) == 0);
  int rc = th_run_stage(&t, &stg_stage_pitch, "{}", &in, &out);
  CHECK_MSG(rc == 0, "pitch at 44.1 kHz failed: %s", t.err);
  ebb_item_info f0;
  REQUIRE(th_item_find(&out, "f0", &f0) == 0);
  /* 1 s at 100 frames/s, give or take the resampler's last sample */
  CHECK_MSG(f0.shape[0] == 100 || f0.shape[0] == 101, "%llu frames for 1 s",
            (unsigned long long)f0.shape[0]);
  CHECK_NEAR(f0.data[3 * 99], 0.99, 1e-6);
  int off = 0, voiced = 0;
  for (uint64_t f = 5; f < 95 && f < f0.shape[0]; f++) {
    double hz = f0.data[3 * f + 1];
    voiced += hz > 0;
    off += !(hz > 0 && fabs(cents(hz, 246.94)) <= 10.0);
  }
  CHECK_MSG(off == 0 && voiced == 90, "44.1 kHz B3: %d of 90 frames off or unvoiced", off);
  th_items_free(&out);
  CHECK_EQ_INT(th_run_stage(&t, &stg_stage_pitch, "{\"rate\":0}", &in, &out), EBB_EINVAL);
  CHECK(strstr(t.err, "frame 1024") != NULL);
  CHECK_EQ_INT(th_run_stage(&t, &stg_stage_pitch, "{\"rate\":0,\"frame\":2048,\"hop\":441}", &in,
                            &out),
               0);
  REQUIRE(th_item_find(&out, "f0", &f0) == 0);
  CHECK_EQ_U64(f0.shape[0], 101);
  CHECK(fabs(cents(f0.data[3 * 50 + 1], 246.94)) <= 10.0);
  th_items_free(&in);
  th_items_free(&out);
  free(x);
}

static void test_bad_options(void) {
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  void *s = NULL;
  CHECK_EQ_INT(stg_stage_pitch.load(&t.base, "{\"method\":\"crepe\"}", &s), EBB_ECONFIG);
  CHECK(strstr(t.err, "method") != NULL);
  CHECK_EQ_INT(stg_stage_pitch.load(&t.base, "{\"fmin\":500,\"fmax\":400}", &s), EBB_ECONFIG);
  CHECK(strstr(t.err, "fmin") != NULL);
  /* the salience's power: 1 (none) to 8 */
  CHECK_EQ_INT(stg_stage_pitch.load(&t.base, "{\"salience_sharpen\":0.5}", &s), EBB_ECONFIG);
  CHECK(strstr(t.err, "salience_sharpen") != NULL);
  CHECK_EQ_INT(stg_stage_pitch.load(&t.base, "{\"salience_sharpen\":\"high\"}", &s), EBB_ECONFIG);
  CHECK(strstr(t.err, "salience_sharpen") != NULL);
  /* fmin too low for the frame: caught at run time with the numbers */
  REQUIRE(stg_stage_pitch.load(&t.base, "{\"fmin\":20,\"frame\":512}", &s) == 0);
  ebb_items in = {0}, out = {0};
  float *x = tone(220.0, 0.5, 0.0);
  th_add_audio(&in, "vocals", x, RATE / 2, 1, RATE);
  CHECK_EQ_INT(stg_stage_pitch.run(&t.base, s, &in, &out), EBB_EINVAL);
  CHECK(strstr(t.err, "frame") != NULL);
  stg_stage_pitch.unload(&t.base, s);
  /* no audio at all */
  ebb_items empty = {0};
  REQUIRE(stg_stage_pitch.load(&t.base, NULL, &s) == 0);
  CHECK_EQ_INT(stg_stage_pitch.run(&t.base, s, &empty, &out), EBB_EINPUT);
  stg_stage_pitch.unload(&t.base, s);
  th_items_free(&in);
  th_items_free(&out);
  free(x);
}

int main(void) {
  RUN(test_tones_pyin);
  RUN(test_tones_yin);
  RUN(test_stage_items);
  RUN(test_other_rates);
  RUN(test_bad_options);
  return TEST_END();
}
