/* align: voice-activity phrases on clips with known silences, and the
 * stage's "vad" result when there is no transcript. */
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "stages/audio/align.h"
#include "stages/audio/decode.h"
#include "stages/audio/songgen.h"
#include "stages_pitch_host.h"
#include "test.h"

static void test_bursts(void) {
  const uint32_t rate = 16000;
  /* three phrases; the second has a 100 ms breath inside (joined: < 350 ms),
   * and a 30 ms click (dropped: shorter than min activity) at 6.0 s */
  const double spans[][2] = {{0.50, 1.50}, {2.20, 2.80}, {2.90, 3.60}, {4.40, 5.10}, {6.0, 6.03}};
  uint64_t n = 7 * rate;
  float *x = calloc(n, sizeof *x);
  for (int k = 0; k < 5; k++)
    for (uint64_t i = (uint64_t)(spans[k][0] * rate); i < (uint64_t)(spans[k][1] * rate); i++)
      x[i] = (float)(0.25 * sin(2 * M_PI * 330.0 * i / rate));
  /* a noise floor 50 dB down */
  uint32_t r = 1;
  for (uint64_t i = 0; i < n; i++) {
    r = r * 1664525u + 1013904223u;
    x[i] += (float)(((double)(r >> 8) / 16777216.0 - 0.5) * 0.0016);
  }
  stg_vad_params p = stg_vad_defaults();
  stg_span *seg = NULL, *ph = NULL;
  size_t ns = 0, np = 0;
  REQUIRE(stg_vad(x, n, rate, &p, &seg, &ns, &ph, &np) == 0);
  CHECK_EQ_INT(ns, 4);
  REQUIRE(np == 3);
  const double want[3][2] = {{0.50, 1.50}, {2.20, 3.60}, {4.40, 5.10}};
  for (size_t i = 0; i < np; i++) {
    CHECK_NEAR(ph[i].start, want[i][0], 0.02);
    CHECK_NEAR(ph[i].end, want[i][1], 0.02);
  }
  free(seg);
  free(ph);
  /* silence: nothing */
  memset(x, 0, n * sizeof *x);
  REQUIRE(stg_vad(x, n, rate, &p, &seg, &ns, &ph, &np) == 0);
  CHECK_EQ_INT(ns, 0);
  CHECK_EQ_INT(np, 0);
  free(x);
}

/* stg_vad on x finds exactly the want phrases of spans (each end within tol s). */
static void check_phrases(const float *x, uint64_t n, uint32_t rate, const stg_vad_params *p,
                          const double spans[][2], size_t want, double tol) {
  stg_span *seg = NULL, *ph = NULL;
  size_t ns = 0, np = 0;
  REQUIRE(stg_vad(x, n, rate, p, &seg, &ns, &ph, &np) == 0);
  CHECK_EQ_INT(np, want);
  for (size_t i = 0; i < np && i < want; i++) {
    CHECK_NEAR(ph[i].start, spans[i][0], tol);
    CHECK_NEAR(ph[i].end, spans[i][1], tol);
  }
  free(seg);
  free(ph);
}

/* Harmonic bursts with loud noise (10 dB below them, like a separator's
 * residue of drums and smeared pad) in the gaps: the energy cue alone sees
 * one phrase; with the aperiodicity cue the three bursts are three phrases. */
static void test_noisy_rests(void) {
  const uint32_t rate = 16000;
  const double spans[][2] = {{0.5, 1.7}, {2.4, 3.6}, {4.3, 5.5}};
  uint64_t n = 6 * rate;
  float *x = calloc(n, sizeof *x);
  uint32_t r = 7;
  for (uint64_t i = 0; i < n; i++) {
    r = r * 1664525u + 1013904223u;
    x[i] = (float)(((double)(r >> 8) / 16777216.0 - 0.5) * 0.2); /* RMS ~0.058 */
  }
  for (int k = 0; k < 3; k++)
    for (uint64_t i = (uint64_t)(spans[k][0] * rate); i < (uint64_t)(spans[k][1] * rate); i++) {
      double t = (double)i / rate, v = 0;
      for (int h = 1; h <= 4; h++)
        v += sin(2 * M_PI * 220.0 * h * t) / h;
      x[i] = (float)(0.2 * v); /* RMS ~0.18: 10 dB above the noise */
    }
  stg_vad_params p = stg_vad_defaults();
  stg_span *seg = NULL, *ph = NULL;
  size_t ns = 0, np = 0;
  check_phrases(x, n, rate, &p, spans, 3, 0.04);
  p.max_aperiodicity = 1.0; /* energy only, phrases from the segments: one */
  p.level_phrases = 0;
  REQUIRE(stg_vad(x, n, rate, &p, &seg, &ns, &ph, &np) == 0);
  CHECK_EQ_INT(np, 1);
  free(seg);
  free(ph);
  /* energy only, phrases from the level against the clip's own quiet level: the rests are
   * 10 dB under the bursts, so three */
  p.level_phrases = 1;
  check_phrases(x, n, rate, &p, spans, 3, 0.04);
  /* the cue also works at another input rate (resampled to 16 kHz) */
  float *y = NULL;
  uint64_t ny = 0;
  REQUIRE(stg_audio_resample(x, n, rate, 44100, &y, &ny) == 0);
  p = stg_vad_defaults();
  check_phrases(y, ny, 44100, &p, spans, 3, 0.04);
  free(y);
  free(x);
}

static void test_song_phrases(void) {
  stg_songgen_params sp = stg_songgen_defaults();
  sp.seconds = 18.0;
  sp.seed = 11;
  stg_song *s = NULL;
  REQUIRE(stg_songgen_create(&sp, &s) == 0);
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  ebb_items in = {0}, out = {0};
  REQUIRE(th_add_audio(&in, "vocals", s->vocals, s->frames, 1, s->rate) == 0);
  CHECK_EQ_INT(th_run_stage(&t, &stg_stage_align, "{}", &in, &out), 0);
  ebb_item_info info;
  REQUIRE(th_item_find(&out, "lyrics", &info) == 0);
  json_t *j = json_loads(info.text, 0, NULL);
  REQUIRE(j != NULL);
  CHECK_EQ_STR(json_string_value(json_object_get(j, "source")), "vad");
  CHECK_EQ_INT(json_array_size(json_object_get(j, "words")), 0);
  json_t *ph = json_object_get(j, "phrases");
  CHECK_EQ_INT(json_array_size(ph), s->n_lines);
  for (int line = 0; line < s->n_lines && (size_t)line < json_array_size(ph); line++) {
    double a = 1e9, b = 0;
    for (size_t i = 0; i < s->n_notes; i++)
      if (s->notes[i].line == line) {
        a = fmin(a, s->notes[i].onset);
        b = fmax(b, s->notes[i].offset);
      }
    json_t *p = json_array_get(ph, (size_t)line);
    CHECK_NEAR(json_number_value(json_object_get(p, "start")), a, 0.05);
    CHECK_NEAR(json_number_value(json_object_get(p, "end")), b, 0.08);
  }
  json_decref(j);
  th_items_free(&in);
  th_items_free(&out);
  stg_song_destroy(s);
}

/* Breathy sung lines (issue 43): a harmonic voice with vibrato, each 0.6 s note breathy (as
 * much noise as voice) for its first 0.42 s, over a bed of noise 10 dB under the breath in the
 * rests. The periodicity gate hears only the clear ends of the notes, 0.18 s each, 0.42 s
 * apart, too short for phrases; the level phrases give the two lines. */
static void test_breathy_lines(void) {
  const uint32_t rate = 16000;
  const double spans[][2] = {{1.0, 4.0}, {5.5, 8.5}};
  uint64_t n = 10 * rate;
  float *x = calloc(n, sizeof *x);
  uint32_t r = 3;
  double ph = 0;
  for (uint64_t i = 0; i < n; i++) {
    double t = (double)i / rate, v = 0, noise;
    r = r * 1664525u + 1013904223u;
    noise = ((double)(r >> 8) / 16777216.0 - 0.5) * 2.0; /* RMS ~0.58 */
    int k = t >= spans[1][0] && t < spans[1][1] ? 1 : t >= spans[0][0] && t < spans[0][1] ? 0 : -1;
    if (k >= 0) {
      double in_note = fmod(t - spans[k][0], 0.6);
      ph += 2 * M_PI * 196.0 * pow(2.0, 0.5 / 12 * sin(2 * M_PI * 5.5 * t)) / rate;
      for (int h = 1; h <= 4; h++)
        v += sin(h * ph) / h;
      x[i] = (float)(0.1 * v + (in_note < 0.42 ? 0.03 : 0.002) * noise);
    } else
      x[i] = (float)(0.01 * noise);
  }
  stg_vad_params p = stg_vad_defaults();
  stg_span *seg = NULL, *phr = NULL;
  size_t ns = 0, np = 0;
  p.level_phrases = 0;
  REQUIRE(stg_vad(x, n, rate, &p, &seg, &ns, &phr, &np) == 0);
  size_t gate = np;
  free(seg);
  free(phr);
  CHECK(gate != 2); /* the case this is for: the gate alone gets the lines wrong */
  p = stg_vad_defaults();
  check_phrases(x, n, rate, &p, spans, 2, 0.05);
  free(x);
}

/* The voicing weight (stg_vad_voiced, option voicing_db): a pitched tone is voiced through,
 * and 0.15 s before and 0.1 s after it; white noise as loud as the tone (a separator's residue
 * in a rest) and near-silence are not. */
static void test_voicing(void) {
  const uint32_t rate = 16000;
  uint64_t n = 6 * rate;
  float *x = calloc(n, sizeof *x);
  REQUIRE(x != NULL);
  uint32_t r = 7;
  for (uint64_t i = 0; i < n; i++) {
    double t = (double)i / rate, noise;
    r = r * 1664525u + 1013904223u;
    noise = (double)(r >> 8) / 16777216.0 - 0.5;
    if (t >= 1.0 && t < 2.5) /* a sung note: 220 Hz with harmonics */
      x[i] = (float)(0.2 * (sin(2 * M_PI * 220.0 * t) + 0.5 * sin(2 * M_PI * 440.0 * t)));
    else if (t >= 3.5 && t < 5.0) /* residue: noise of the same RMS */
      x[i] = (float)(0.5 * noise);
    else
      x[i] = (float)(0.0005 * noise);
  }
  stg_vad_params p = stg_vad_defaults();
  stg_span *seg = NULL, *ph = NULL;
  double *v = NULL;
  size_t ns = 0, np = 0, nv = 0;
  REQUIRE(stg_vad_voiced(x, n, rate, &p, &seg, &ns, &ph, &np, &v, &nv) == 0);
  REQUIRE(v != NULL);
  CHECK_EQ_INT(nv, (size_t)(n / 160) + 1);
  double in_note = 1, in_noise = 0, quiet = 0;
  for (size_t f = 105; f < 245; f++) /* the note, its edges aside */
    in_note = fmin(in_note, v[f]);
  for (size_t f = 355; f < 495; f++)
    in_noise = fmax(in_noise, v[f]);
  for (size_t f = 290; f < 340; f++) /* after the note's tail, before the noise */
    quiet = fmax(quiet, v[f]);
  CHECK(in_note > 0.9);
  CHECK(in_noise < 0.1);
  CHECK(quiet < 0.1);
  CHECK(v[88] > 0.9);  /* 0.12 s before the note: its consonants */
  CHECK(v[258] > 0.9); /* 0.08 s after it: its release */
  CHECK(v[80] < 0.1);  /* 0.2 s before: no voice near */
  free(seg);
  free(ph);
  free(v);
  /* without the out-parameter it is stg_vad: the same phrases */
  stg_span *ph2 = NULL;
  size_t np2 = 0;
  REQUIRE(stg_vad(x, n, rate, &p, &seg, &ns, &ph2, &np2) == 0);
  CHECK_EQ_INT(np2, np);
  free(seg);
  free(ph2);
  free(x);
}

/* vad_phrases takes level or periodic and nothing else. */
static void test_option(void) {
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  ebb_items in = {0}, out = {0};
  float x[1600] = {0};
  REQUIRE(th_add_audio(&in, "vocals", x, 1600, 1, 16000) == 0);
  CHECK(th_run_stage(&t, &stg_stage_align, "{\"vad_phrases\":\"energy\"}", &in, &out) != 0);
  CHECK(strstr(t.err, "vad_phrases=\"energy\" must be level or periodic") != NULL);
  CHECK_EQ_INT(th_run_stage(&t, &stg_stage_align, "{\"vad_phrases\":\"periodic\"}", &in, &out), 0);
  /* voicing_db: 0..60 dB, a number */
  CHECK(th_run_stage(&t, &stg_stage_align, "{\"voicing_db\":61}", &in, &out) != 0);
  CHECK(strstr(t.err, "voicing_db=61 must be in 0..60") != NULL);
  CHECK(th_run_stage(&t, &stg_stage_align, "{\"voicing_db\":\"loud\"}", &in, &out) != 0);
  CHECK(strstr(t.err, "option 'voicing_db' must be a number") != NULL);
  CHECK_EQ_INT(th_run_stage(&t, &stg_stage_align, "{\"voicing_db\":0}", &in, &out), 0);
  th_items_free(&in);
  th_items_free(&out);
}

int main(void) {
  RUN(test_bursts);
  RUN(test_noisy_rests);
  RUN(test_song_phrases);
  RUN(test_breathy_lines);
  RUN(test_voicing);
  RUN(test_option);
  return TEST_END();
}
