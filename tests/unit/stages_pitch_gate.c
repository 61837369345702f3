/* pitch: the note gate (stg_pitch_gate) drops voiced runs with a low mean
 * voicing probability or a level far below the track's loud level, keeps the
 * others, and does nothing when both gates are off. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stages/audio/pitch.h"
#include "test.h"

#define NF 400

/* runs (frames [a, b)): A 220 Hz vp 0.8 -10 dB; B 110 Hz vp 0.05 -12 dB;
 * C 330 Hz vp 0.8 -40 dB; D 262 Hz vp 0.6 -14 dB; unvoiced elsewhere at -60 dB */
static const struct {
  int a, b;
  float hz, vp, db;
} runs[] = {{20, 100, 220.0f, 0.8f, -10.0f},
            {120, 180, 110.0f, 0.05f, -12.0f},
            {200, 260, 330.0f, 0.8f, -40.0f},
            {280, 390, 262.0f, 0.6f, -14.0f}};

static void fill(float *fr, float *db) {
  for (int f = 0; f < NF; f++) {
    fr[3 * f] = f * 0.01f;
    fr[3 * f + 1] = 0.0f;
    fr[3 * f + 2] = 0.01f;
    db[f] = -60.0f;
  }
  for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++)
    for (int f = runs[r].a; f < runs[r].b; f++) {
      fr[3 * f + 1] = runs[r].hz;
      fr[3 * f + 2] = runs[r].vp;
      db[f] = runs[r].db;
    }
}

static int voiced(const float *fr, int a, int b) {
  int n = 0;
  for (int f = a; f < b; f++)
    n += fr[3 * f + 1] > 0.0f;
  return n;
}

static void test_gate(void) {
  float fr[3 * NF], db[NF];
  fill(fr, db);
  stg_pitch_params p = stg_pitch_defaults();
  CHECK(p.gate_voicing > 0.0 && p.gate_range_db > 0.0);
  REQUIRE(stg_pitch_gate(fr, NF, db, &p) == 0);
  CHECK_EQ_INT(voiced(fr, 20, 100), 80);   /* kept */
  CHECK_EQ_INT(voiced(fr, 120, 180), 0);   /* low voicing probability */
  CHECK_EQ_INT(voiced(fr, 200, 260), 0);   /* 30 dB below the loud level */
  CHECK_EQ_INT(voiced(fr, 280, 390), 110); /* 4 dB below, vp 0.6: kept */
  CHECK_NEAR(fr[3 * 150 + 2], 0.05, 1e-6); /* probabilities are left as they are */
  stg_pitch_note *notes = NULL;
  size_t n = 0;
  REQUIRE(stg_pitch_notes(fr, NF, &p, &notes, &n) == 0);
  CHECK_EQ_INT(n, 2);
  if (n == 2) {
    CHECK_EQ_INT(notes[0].midi, 57);
    CHECK_EQ_INT(notes[1].midi, 60);
  }
  free(notes);
  /* only the voicing gate: C stays */
  fill(fr, db);
  p.gate_range_db = 0.0;
  REQUIRE(stg_pitch_gate(fr, NF, db, &p) == 0);
  CHECK_EQ_INT(voiced(fr, 120, 180), 0);
  CHECK_EQ_INT(voiced(fr, 200, 260), 60);
  /* both off: nothing changes */
  fill(fr, db);
  float ref[3 * NF];
  memcpy(ref, fr, sizeof ref);
  p.gate_voicing = 0.0;
  REQUIRE(stg_pitch_gate(fr, NF, db, &p) == 0);
  CHECK(memcmp(ref, fr, sizeof ref) == 0);
  /* no frames */
  CHECK_EQ_INT(stg_pitch_gate(fr, 0, db, &p), 0);
}

int main(void) {
  RUN(test_gate);
  return TEST_END();
}
