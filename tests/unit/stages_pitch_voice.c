/* pitch: the voice model over the melody salience (option salience_model,
 * stg_pitch_voice_weigh, pitch_voice.c; issue 44).
 *
 * - The model: its C evaluation gives bench/train_salience.py's log-odds for
 *   the check vector stored with the weights (a real model, not zeros).
 * - The rule: with gain 0 the rows are the plain blend, byte for byte; with
 *   a gain each row keeps its maximum (its sum, the voicing, does not rise)
 *   and the peak the model finds likelier to be the voice gains share
 *   against the other; the features written for
 *   the trainer (EBB_PITCH_SALIENCE_FEATURES) are the ones weighed, and a
 *   bad path is named.
 * - The candidates and the weight (session 25): a peak at 3.5 % of the
 *   row's maximum, under the contour step's 5 % floor, is a candidate; the
 *   weight's power makes the two peaks' gains the cube of their ratio.
 * - The stage: a voice under a louder steady tone runs with the model on,
 *   the same f0 bytes twice; the option's range is checked, naming it, and
 *   it is on by default. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "ebb/error.h"
#include "stages/audio/pitch.h"
#include "stages_pitch_host.h"
#include "test.h"

#define NB 300
#define NF 80
#define RATE 16000

static void test_voice_check(void) {
  double got, want;
  stg_pitch_voice_check(&got, &want);
  printf("  the model's check vector: %.9f log-odds, the trainer's %.9f\n", got, want);
  CHECK_MSG(fabs(got - want) <= 1e-6 * fmax(1.0, fabs(want)),
            "the voice model gives %.9f for its check vector, bench/train_salience.py %.9f: the "
            "weights or the evaluation disagree",
            got, want);
  CHECK_MSG(want != 0.0, "the voice model's check log-odds is 0: a placeholder, not a model");
}

static void add_lobe(float *row, double c, double h) {
  for (int b = 0; b < NB; b++) {
    double d = fabs(b - c) / 10.0;
    if (d < 1.0)
      row[b] += (float)(h * cos(d * M_PI / 2.0) * cos(d * M_PI / 2.0));
  }
}

/* vocals: a steady peak at bin 60 (h 1) and one at 200 with 30 cents of
 * vibrato (h hv); melody: the moving one (h hm) and the steady one at 0.2;
 * each row sums to 0.8 */
static void make_rows_h(float *voc, float *mel, double hv, double hm) {
  for (size_t f = 0; f < NF; f++) {
    float *v = voc + f * NB, *m = mel + f * NB;
    memset(v, 0, NB * sizeof *v);
    memset(m, 0, NB * sizeof *m);
    double c = 200.0 + 3.0 * sin(2.0 * M_PI * 6.0 * 0.01 * (double)f);
    add_lobe(v, 60.0, 1.0);
    add_lobe(v, c, hv);
    add_lobe(m, c, hm);
    add_lobe(m, 60.0, 0.2);
    double sv = 0.0, sm = 0.0;
    for (int b = 0; b < NB; b++) {
      sv += v[b];
      sm += m[b];
    }
    for (int b = 0; b < NB; b++) {
      v[b] = (float)(v[b] * 0.8 / sv);
      m[b] = (float)(m[b] * 0.8 / sm);
    }
  }
}

static void make_rows(float *voc, float *mel) { make_rows_h(voc, mel, 0.7, 1.0); }

static double peak_of(const float *row) {
  double m = 0.0;
  for (int b = 0; b < NB; b++)
    m = row[b] > m ? row[b] : m;
  return m;
}

static double mass(const float *row, int lo, int hi) {
  double s = 0.0;
  for (int b = lo; b <= hi; b++)
    s += row[b];
  return s;
}

static stg_pitch_voice_in voice_in(const float *mel, const stg_pitch_geom *g, double gain) {
  return (stg_pitch_voice_in){.mel = mel,
                              .cm = NULL,
                              .g = g,
                              .share = 0.5,
                              .vocals_only = 0.6,
                              .fmin = 65.0,
                              .gain = gain,
                              .half = 6};
}

/* the dump's lines for frame f: each peak's bin and the model's log-odds */
static int read_dump(const char *path, size_t f, double *bin, double *lg) {
  FILE *fp = fopen(path, "r");
  int n = 0;
  if (!fp)
    return -1;
  size_t fr;
  double hz;
  while (fscanf(fp, "%zu %lf", &fr, &hz) == 2) {
    float x[EBB_PITCH_VOICE_NFEAT];
    for (int k = 0; k < EBB_PITCH_VOICE_NFEAT; k++)
      if (fscanf(fp, "%f", &x[k]) != 1) {
        fclose(fp);
        return -1;
      }
    if (fr == f && n < EBB_PITCH_VOICE_PEAKS) {
      bin[n] = 120.0 * log2(hz / 65.0);
      lg[n++] = stg_pitch_voice_logit(x);
    }
  }
  fclose(fp);
  return n;
}

static void test_voice_rule(void) {
  static float voc[NF * NB], mel[NF * NB], plain[NF * NB], again[NF * NB];
  stg_pitch_geom g = {.rate = RATE, .hop = 160, .tau_min = 16, .tau_max = 246, .n_frames = NF};
  make_rows(voc, mel);
  memcpy(plain, voc, sizeof voc);
  stg_pitch_salience_blend(plain, mel, NF, NB, 0.5, 0.6);
  /* gain 0, no dump: the plain blend */
  unsetenv(EBB_PITCH_SALIENCE_FEATURES_ENV);
  stg_pitch_voice_in in = voice_in(mel, &g, 0.0);
  REQUIRE(stg_pitch_voice_weigh(voc, NF, NB, &in) == 0);
  CHECK_MSG(!memcmp(voc, plain, sizeof voc), "salience_model 0 changed the blended rows");
  /* gain 4 with the trainer's dump */
  char path[] = "/tmp/ebb-voice-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  setenv(EBB_PITCH_SALIENCE_FEATURES_ENV, path, 1);
  make_rows(voc, mel);
  in = voice_in(mel, &g, 4.0);
  REQUIRE(stg_pitch_voice_weigh(voc, NF, NB, &in) == 0);
  unsetenv(EBB_PITCH_SALIENCE_FEATURES_ENV);
  int checked = 0;
  for (size_t f = 10; f + 10 < NF; f += 7) {
    double bin[EBB_PITCH_VOICE_PEAKS], lg[EBB_PITCH_VOICE_PEAKS];
    int n = read_dump(path, f, bin, lg);
    CHECK_MSG(n == 2, "frame %zu: %d peaks in the dump, want 2", f, n);
    const float *r = voc + f * NB, *p = plain + f * NB;
    CHECK_MSG(fabs(peak_of(r) - peak_of(p)) < 1e-6 * peak_of(p),
              "frame %zu: the row's maximum is %.6f, the blend's %.6f", f, peak_of(r), peak_of(p));
    CHECK_MSG(mass(r, 0, NB - 1) <= mass(p, 0, NB - 1) + 1e-6,
              "frame %zu: the row sums to %.6f, more than the blend's %.6f", f, mass(r, 0, NB - 1),
              mass(p, 0, NB - 1));
    if (n != 2 || fabs(1.0 / (1.0 + exp(-lg[0])) - 1.0 / (1.0 + exp(-lg[1]))) < 0.05)
      continue;
    int hi = lg[0] > lg[1] ? 0 : 1, lo = 1 - hi;
    double gh = mass(r, (int)bin[hi] - 8, (int)bin[hi] + 8) /
                mass(p, (int)bin[hi] - 8, (int)bin[hi] + 8),
           gl = mass(r, (int)bin[lo] - 8, (int)bin[lo] + 8) /
                mass(p, (int)bin[lo] - 8, (int)bin[lo] + 8);
    CHECK_MSG(gh > gl,
              "frame %zu: the likelier peak (bin %.0f, %.2f log-odds) gained %.3f, "
              "the other (bin %.0f, %.2f) %.3f",
              f, bin[hi], lg[hi], gh, bin[lo], lg[lo], gl);
    checked++;
  }
  printf("  %d frames where the model prefers a peak: it gained share\n", checked);
  CHECK_MSG(checked > 0, "the model found no peak likelier than the other in any frame");
  unlink(path);
  /* determinism */
  make_rows(voc, mel);
  memcpy(again, voc, sizeof voc);
  REQUIRE(stg_pitch_voice_weigh(voc, NF, NB, &in) == 0);
  REQUIRE(stg_pitch_voice_weigh(again, NF, NB, &in) == 0);
  CHECK_MSG(!memcmp(voc, again, sizeof voc), "two runs gave different rows");
  /* a dump that cannot be opened is named */
  setenv(EBB_PITCH_SALIENCE_FEATURES_ENV, "/nonexistent-dir/f.txt", 1);
  make_rows(voc, mel);
  CHECK_EQ_INT(stg_pitch_voice_weigh(voc, NF, NB, &in), EBB_EIO);
  CHECK_MSG(strstr(ebb_errmsg(), EBB_PITCH_SALIENCE_FEATURES_ENV) != NULL,
            "the error does not name the variable: %s", ebb_errmsg());
  unsetenv(EBB_PITCH_SALIENCE_FEATURES_ENV);
}

/* The candidates and the weight's power (session 25): a peak at 2 % of the
 * blended row's maximum (under the contour step's 5 % floor) is still one
 * of the model's candidates; and the weight 1 + gain x p is raised to
 * in->power, so the two peaks' gains stand in the ratio of their weights
 * to that power (power 3 against 1: the log of the ratio three times). */
static double gain_ratio(double power) {
  static float voc[NF * NB], mel[NF * NB], plain[NF * NB];
  stg_pitch_geom g = {.rate = RATE, .hop = 160, .tau_min = 16, .tau_max = 246, .n_frames = NF};
  make_rows(voc, mel);
  memcpy(plain, voc, sizeof voc);
  stg_pitch_salience_blend(plain, mel, NF, NB, 0.5, 0.6);
  stg_pitch_voice_in in = voice_in(mel, &g, 4.0);
  in.power = power;
  REQUIRE(stg_pitch_voice_weigh(voc, NF, NB, &in) == 0);
  size_t f = 40;
  const float *r = voc + f * NB, *p = plain + f * NB;
  return (mass(r, 52, 68) / mass(p, 52, 68)) / (mass(r, 192, 208) / mass(p, 192, 208));
}

static void test_voice_candidates_power(void) {
  static float voc[NF * NB], mel[NF * NB], plain[NF * NB];
  stg_pitch_geom g = {.rate = RATE, .hop = 160, .tau_min = 16, .tau_max = 246, .n_frames = NF};
  make_rows_h(voc, mel, 0.012, 0.012);
  memcpy(plain, voc, sizeof voc);
  stg_pitch_salience_blend(plain, mel, NF, NB, 0.5, 0.6);
  size_t f = 40;
  double weak = 0.0;
  for (int b = 150; b < NB; b++)
    weak = plain[f * NB + b] > weak ? plain[f * NB + b] : weak;
  weak /= peak_of(plain + f * NB);
  REQUIRE(weak < EBB_PITCH_VIBRATO_PEAK && weak > EBB_PITCH_VOICE_FLOOR);
  char path[] = "/tmp/ebb-voice-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  setenv(EBB_PITCH_SALIENCE_FEATURES_ENV, path, 1);
  stg_pitch_voice_in in = voice_in(mel, &g, 4.0);
  REQUIRE(stg_pitch_voice_weigh(voc, NF, NB, &in) == 0);
  unsetenv(EBB_PITCH_SALIENCE_FEATURES_ENV);
  double bin[EBB_PITCH_VOICE_PEAKS], lg[EBB_PITCH_VOICE_PEAKS];
  int n = read_dump(path, f, bin, lg);
  unlink(path);
  printf("  a peak at %.3f of the row's maximum: %d candidates in frame %zu\n", weak, n, f);
  CHECK_MSG(n == 2,
            "frame %zu: %d candidates, want 2 (the weak peak at %.3f of the maximum "
            "is one)",
            f, n, weak);
  double r1 = gain_ratio(1.0), r3 = gain_ratio(3.0);
  printf("  gain ratio of the two peaks: %.4f at power 1, %.4f at power 3\n", r1, r3);
  CHECK_MSG(fabs(r1 - 1.0) > 0.01, "the model gave both peaks the same weight (%.4f)", r1);
  CHECK_MSG(fabs(log(r3) - 3.0 * log(r1)) < 1e-3,
            "power 3: the gain ratio is %.5f, want %.5f (power 1's %.5f cubed)", r3, r1 * r1 * r1,
            r1);
}

/* a 220 Hz voice with vibrato under a steady 330 Hz tone twice as loud */
static void make_audio(float *voice, float *mix, uint64_t n) {
  double ph = 0.0;
  for (uint64_t i = 0; i < n; i++) {
    double t = (double)i / RATE, f = 220.0 * pow(2.0, 0.3 / 12.0 * sin(2.0 * M_PI * 5.5 * t));
    ph += 2.0 * M_PI * f / RATE;
    double v = 0.0, a = 0.0;
    for (int h = 1; h <= 4; h++) {
      v += sin(h * ph) / h;
      a += sin(2.0 * M_PI * 330.0 * h * t) / h;
    }
    voice[i] = (float)(0.1 * v);
    mix[i] = (float)(0.1 * v + 0.2 * a);
  }
}

static int run_f0(const char *opts, const float *voice, const float *mix, uint64_t n, float *f0,
                  size_t cap, size_t *nf) {
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  ebb_items in = {0}, out = {0};
  REQUIRE(th_add_audio(&in, "vocals", mix, n, 1, RATE) == 0);
  REQUIRE(th_add_audio(&in, "melody", voice, n, 1, RATE) == 0);
  REQUIRE(th_add_audio(&in, "audio", mix, n, 1, RATE) == 0);
  int rc = th_run_stage(&t, &stg_stage_pitch, opts, &in, &out);
  ebb_item_info it;
  *nf = 0;
  if (rc == 0 && th_item_find(&out, "f0", &it) == 0) {
    *nf = (size_t)it.shape[0] < cap ? (size_t)it.shape[0] : cap;
    memcpy(f0, it.data, *nf * 3 * sizeof *f0);
  }
  th_items_free(&in);
  th_items_free(&out);
  return rc;
}

static void test_voice_stage(void) {
  uint64_t n = 2 * RATE;
  float *voice = calloc(n, sizeof *voice), *mix = calloc(n, sizeof *mix);
  static float a[3 * 300], b[3 * 300];
  size_t na = 0, nb = 0;
  REQUIRE(voice && mix);
  make_audio(voice, mix, n);
  CHECK_EQ_INT(run_f0("{\"salience_model\": 8}", voice, mix, n, a, 300, &na), 0);
  CHECK_EQ_INT(run_f0("{\"salience_model\": 8}", voice, mix, n, b, 300, &nb), 0);
  CHECK_MSG(na > 150 && na == nb && !memcmp(a, b, na * 3 * sizeof *a),
            "two runs with salience_model 8 gave different f0 tracks (%zu, %zu frames)", na, nb);
  free(voice);
  free(mix);
}

static void test_voice_options(void) {
  th_check_refused(&stg_stage_pitch, "{\"salience_model\": -1}", "salience_model");
  th_check_refused(&stg_stage_pitch, "{\"salience_model\": 101}", "salience_model");
  th_check_refused(&stg_stage_pitch, "{\"salience_model\": \"yes\"}", "salience_model");
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  void *st = NULL;
  CHECK_EQ_INT(stg_stage_pitch.load(&t.base, "{\"salience_model\": 100}", &st), 0);
  if (st)
    stg_stage_pitch.unload(&t.base, st);
  stg_pitch_params p = stg_pitch_defaults();
  CHECK_MSG(p.salience_model > 0.0, "salience_model is off by default (%g)", p.salience_model);
}

int main(void) {
  RUN(test_voice_check);
  RUN(test_voice_rule);
  RUN(test_voice_candidates_power);
  RUN(test_voice_stage);
  RUN(test_voice_options);
  return TEST_END();
}
