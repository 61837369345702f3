/* pitch: contour character in the melody salience (option salience_vibrato,
 * stg_pitch_salience_vibrato; issue 44).
 *
 * - The rule: of two salience peaks of the same height, the one whose pitch
 *   moves from frame to frame (vibrato of 30 cents at 6 Hz, a glide) gains
 *   the frame's salience from the one that holds still (a piano partial);
 *   each row keeps its sum (the frame's voicing); two steady peaks, a gain
 *   of 0 and a contour shorter than the window change nothing.
 * - The options: out-of-range values fail to load, naming the option. */
#include <math.h>

#include "stages/audio/pitch.h"
#include "stages_pitch_host.h"
#include "test.h"

#define NB 200
#define NF 60
#define HALF 6 /* 60 ms at 10 ms frames */

/* a cos^2 lobe of half-width 10 bins centred on c, at height h */
static void add_lobe(float *row, double c, double h) {
  for (int b = 0; b < NB; b++) {
    double d = fabs(b - c) / 10.0;
    if (d < 1.0)
      row[b] += (float)(h * cos(d * M_PI / 2.0) * cos(d * M_PI / 2.0));
  }
}

/* rows of a steady peak at bin 50 and one at 130 moving by `cents` of
 * vibrato at 6 Hz (or steady when 0), each row scaled to sum to 0.8 */
static void make_rows(float *sal, double cents, size_t from) {
  for (size_t f = 0; f < NF; f++) {
    float *r = sal + f * NB;
    for (int b = 0; b < NB; b++)
      r[b] = 0.0f;
    add_lobe(r, 50.0, 1.0);
    if (f >= from)
      add_lobe(r, 130.0 + cents / 10.0 * sin(2.0 * M_PI * 6.0 * 0.01 * (double)f), 1.0);
    double s = 0.0;
    for (int b = 0; b < NB; b++)
      s += r[b];
    for (int b = 0; b < NB; b++)
      r[b] = (float)(r[b] * 0.8 / s);
  }
}

static double mass(const float *row, int lo, int hi) {
  double s = 0.0;
  for (int b = lo; b <= hi; b++)
    s += row[b];
  return s;
}

static void test_vibrato_rule(void) {
  static float sal[NF * NB], ref[NF * NB];
  make_rows(sal, 30.0, 0);
  memcpy(ref, sal, sizeof sal);
  REQUIRE(stg_pitch_salience_vibrato(sal, NF, NB, 3.0, HALF, 15.0) == 0);
  for (size_t f = HALF; f + HALF < NF; f++) {
    const float *r = sal + f * NB;
    double steady = mass(r, 38, 62), moving = mass(r, 112, 148), total = mass(r, 0, NB - 1);
    CHECK_MSG(fabs(total - 0.8) < 1e-4, "frame %zu: the row sums to %.6f, not 0.8", f, total);
    CHECK_MSG(moving > 3.0 * steady,
              "frame %zu: the moving peak holds %.3f against the steady one's %.3f", f, moving,
              steady);
  }
  /* two steady peaks: nothing moves, nothing changes */
  make_rows(sal, 0.0, 0);
  memcpy(ref, sal, sizeof sal);
  REQUIRE(stg_pitch_salience_vibrato(sal, NF, NB, 3.0, HALF, 15.0) == 0);
  CHECK_MSG(!memcmp(sal, ref, sizeof sal), "two steady peaks were weighed differently");
  /* gain 0: off */
  make_rows(sal, 30.0, 0);
  memcpy(ref, sal, sizeof sal);
  REQUIRE(stg_pitch_salience_vibrato(sal, NF, NB, 0.0, HALF, 15.0) == 0);
  CHECK_MSG(!memcmp(sal, ref, sizeof sal), "salience_vibrato 0 changed the rows");
  /* a moving peak seen for fewer than HALF + 1 frames has no contour yet */
  make_rows(sal, 30.0, NF - HALF);
  memcpy(ref, sal, sizeof sal);
  REQUIRE(stg_pitch_salience_vibrato(sal, NF, NB, 3.0, HALF, 15.0) == 0);
  for (size_t f = NF - HALF; f < NF; f++)
    CHECK_MSG(fabs(mass(sal + f * NB, 112, 148) - mass(ref + f * NB, 112, 148)) < 1e-6,
              "frame %zu: a %d-frame contour was weighed", f, HALF);
  /* determinism: the same rows give the same bytes */
  static float again[NF * NB];
  make_rows(sal, 30.0, 0);
  memcpy(again, sal, sizeof sal);
  REQUIRE(stg_pitch_salience_vibrato(sal, NF, NB, 3.0, HALF, 15.0) == 0);
  REQUIRE(stg_pitch_salience_vibrato(again, NF, NB, 3.0, HALF, 15.0) == 0);
  CHECK_MSG(!memcmp(sal, again, sizeof sal), "two runs gave different rows");
}

static void test_vibrato_options(void) {
  th_check_refused(&stg_stage_pitch, "{\"salience_vibrato\": -1}", "salience_vibrato");
  th_check_refused(&stg_stage_pitch, "{\"salience_vibrato\": \"yes\"}", "salience_vibrato");
  th_check_refused(&stg_stage_pitch, "{\"salience_vibrato_ms\": 0}", "salience_vibrato_ms");
  th_check_refused(&stg_stage_pitch, "{\"salience_vibrato_cents\": 0}", "salience_vibrato_cents");
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  void *st = NULL;
  CHECK_EQ_INT(stg_stage_pitch.load(&t.base,
                                    "{\"salience_vibrato\": 0, \"salience_vibrato_ms\": 150, "
                                    "\"salience_vibrato_cents\": 20}",
                                    &st),
               0);
  if (st)
    stg_stage_pitch.unload(&t.base, st);
  /* the defaults: on */
  stg_pitch_params p = stg_pitch_defaults();
  CHECK_MSG(p.salience_vibrato > 0.0, "salience_vibrato is off by default (%g)",
            p.salience_vibrato);
}

int main(void) {
  RUN(test_vibrato_rule);
  RUN(test_vibrato_options);
  return TEST_END();
}
