/* pitch: the consonant fill (stg_pitch_voicing_fill, issue 44). A noise-like
 * stretch next to a voiced run (a sung word's first or last consonant) takes
 * the run's pitch; one between two runs takes the next run's; a release as
 * tonal as its note, a stretch longer than consonant_ms and quiet frames stay
 * unvoiced; a leading fill leaves out the onset shift; consonant_ms 0
 * changes nothing. */
#include <string.h>

#include "stages/audio/pitch.h"
#include "test.h"

#define NF 450

/* segments [a, b): f0 (0: unvoiced), level on the pre-emphasised and on the
 * plain signal; quiet (-70 dB) elsewhere */
static const struct {
  int a, b;
  float hz, emph, plain;
} segs[] = {
    {30, 50, 0.0f, -25.0f, -35.0f},     /* a consonant: tilt +10 dB */
    {50, 100, 220.0f, -20.0f, -15.0f},  /* run A: tilt -5 dB */
    {150, 200, 330.0f, -20.0f, -15.0f}, /* run B */
    {200, 215, 0.0f, -22.0f, -17.0f},   /* B's release: tilt -5, as tonal as B */
    {260, 300, 262.0f, -20.0f, -15.0f}, /* run C */
    {300, 340, 0.0f, -24.0f, -34.0f},   /* noise for 400 ms after C: not a consonant */
    {350, 380, 196.0f, -20.0f, -15.0f}, /* run D */
    {380, 390, 0.0f, -26.0f, -36.0f},   /* a consonant between D and E */
    {390, 420, 247.0f, -20.0f, -15.0f}, /* run E */
};

static void make(float *fr, float *emph, float *plain) {
  for (int f = 0; f < NF; f++) {
    fr[3 * f] = f * 0.01f;
    fr[3 * f + 1] = 0.0f;
    fr[3 * f + 2] = 0.5f;
    emph[f] = plain[f] = -70.0f;
  }
  for (size_t s = 0; s < sizeof segs / sizeof segs[0]; s++)
    for (int f = segs[s].a; f < segs[s].b; f++) {
      fr[3 * f + 1] = segs[s].hz;
      emph[f] = segs[s].emph;
      plain[f] = segs[s].plain;
    }
}

static int count_hz(const float *fr, int a, int b, float hz) {
  int n = 0;
  for (int f = a; f < b; f++)
    n += fr[3 * f + 1] == hz;
  return n;
}

static stg_pitch_params params(void) {
  stg_pitch_params p = stg_pitch_defaults();
  p.consonant_s = 0.25;
  p.consonant_db = 15.0;
  p.consonant_tilt_db = 3.0;
  p.onset_shift_s = 0.0;
  return p;
}

static void test_fill(void) {
  float fr[3 * NF], emph[NF], plain[NF];
  make(fr, emph, plain);
  stg_pitch_params p = params();
  size_t n = stg_pitch_voicing_fill(fr, NF, emph, plain, &p, 0.01);
  CHECK_EQ_INT(count_hz(fr, 30, 50, 220.0f), 20);   /* the leading consonant: A's pitch */
  CHECK_EQ_INT(count_hz(fr, 0, 30, 0.0f), 30);      /* silence before it stays unvoiced */
  CHECK_EQ_INT(count_hz(fr, 200, 215, 0.0f), 15);   /* a tonal release stays unvoiced */
  CHECK_EQ_INT(count_hz(fr, 300, 340, 0.0f), 40);   /* 400 ms of noise: not a consonant */
  CHECK_EQ_INT(count_hz(fr, 380, 390, 247.0f), 10); /* between D and E: E's pitch */
  CHECK_EQ_INT(count_hz(fr, 50, 100, 220.0f), 50);  /* the runs themselves unchanged */
  CHECK_EQ_INT((int)n, 30);
  CHECK_NEAR(fr[3 * 40 + 2], 0.5, 1e-6); /* voicing probabilities are left as they are */
}

static void test_tilt_off_takes_tonal_release(void) {
  float fr[3 * NF], emph[NF], plain[NF];
  make(fr, emph, plain);
  stg_pitch_params p = params();
  p.consonant_tilt_db = -100.0; /* any frame within consonant_db */
  stg_pitch_voicing_fill(fr, NF, emph, plain, &p, 0.01);
  CHECK_EQ_INT(count_hz(fr, 200, 215, 330.0f), 15);
  CHECK_EQ_INT(count_hz(fr, 300, 340, 0.0f), 40); /* still longer than consonant_ms */
}

static void test_short_limit(void) {
  float fr[3 * NF], emph[NF], plain[NF];
  make(fr, emph, plain);
  stg_pitch_params p = params();
  p.consonant_s = 0.15; /* 15 frames: the 20-frame consonant before A is too long */
  stg_pitch_voicing_fill(fr, NF, emph, plain, &p, 0.01);
  CHECK_EQ_INT(count_hz(fr, 30, 50, 0.0f), 20);
  CHECK_EQ_INT(count_hz(fr, 380, 390, 247.0f), 10);
}

/* the notes' onsets move onset_shift_s earlier later, so a leading fill
 * leaves that much of its stretch unvoiced; a trailing one does not */
static void test_lead_skip(void) {
  float fr[3 * NF], emph[NF], plain[NF];
  make(fr, emph, plain);
  stg_pitch_params p = params();
  p.onset_shift_s = 0.03;
  stg_pitch_voicing_fill(fr, NF, emph, plain, &p, 0.01);
  CHECK_EQ_INT(count_hz(fr, 30, 33, 0.0f), 3);
  CHECK_EQ_INT(count_hz(fr, 33, 50, 220.0f), 17);
  p.onset_threshold = 0.0; /* no onsets: no shift, nothing left out */
  make(fr, emph, plain);
  stg_pitch_voicing_fill(fr, NF, emph, plain, &p, 0.01);
  CHECK_EQ_INT(count_hz(fr, 30, 50, 220.0f), 20);
}

static void test_off(void) {
  float fr[3 * NF], emph[NF], plain[NF], before[3 * NF];
  make(fr, emph, plain);
  memcpy(before, fr, sizeof fr);
  stg_pitch_params p = params();
  p.consonant_s = 0.0;
  CHECK_EQ_INT((int)stg_pitch_voicing_fill(fr, NF, emph, plain, &p, 0.01), 0);
  CHECK(memcmp(before, fr, sizeof fr) == 0);
}

int main(void) {
  RUN(test_fill);
  RUN(test_tilt_off_takes_tonal_release);
  RUN(test_short_limit);
  RUN(test_lead_skip);
  RUN(test_off);
  return TEST_END();
}
