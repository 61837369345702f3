/* pitch: note onsets and the melody salience.
 *  - two equal notes whose gap is filled by the first one's release (20 dB
 *    down, still periodic) are one note by pitch alone and two after the
 *    onset refinement, the second starting within 30 ms of its attack (the
 *    onset shift off: these tones sound from their first 10 ms); with the
 *    default shift every onset is onset_shift_s earlier;
 *  - two such notes at 440 Hz with a chord (two other tones) struck in the gap,
 *    tracked on the melody and refined on the mix: two notes by default;
 *    the chord fills the whole spectrum's dip between them (at least 6 dB
 *    shallower) but not the dip at the melody's harmonics (6 dB or more);
 *  - a re-attack comes no sooner than reattack_min_s after the note starts;
 *  - durations in ms are whole frames at the track's float frame times: a
 *    7-frame run is a note with min_note_s 0.07 (not with 0.08), and a
 *    re-attack exactly reattack_min_s (0.13) in splits the note;
 *  - of two onset peaks within reattack_min_s that both score as re-attacks,
 *    the better one splits the note, even when the other comes first; none
 *    does when reattack_score is above both;
 *  - a slow re-attack (the level climbing 2 dB a frame from its dip, the
 *    onset strength peaking 60 ms later) starts where the level is
 *    reattack_rise_db above the dip, at the peak with the option 0;
 *  - the frames from a note's onset that still hold the previous note's
 *    pitch take the note's pitch, up to the first frame that does not;
 *  - a steady note with a 3 dB tremolo is not split;
 *  - a note after an unvoiced gap starts at an onset up to onset_lead_s
 *    before its first voiced frame when the level holds from there, not
 *    across a dip, not with the option 0 (test_lead_onset);
 *  - after a pitch change whose track turns late the note starts at the
 *    attack;
 *  - the salience's height weight: a tone's subharmonic an octave below
 *    holds less of its row with salience_height 0.3 than with 0, by about
 *    2^(-0.3 * 3) (the weight, then the row's 3rd power, salience_sharpen);
 *  - the sharpening (salience_sharpen, 3 by default): the subharmonic's
 *    share of the f0's is the raw ratio to that power, so its logarithm at
 *    4 is 4/3 of that at 3, and at 1 a third;
 *  - the salience of a harmonic tone peaks at its f0 (within 20 cents), its
 *    loud frames carry voicing near 1 and silent frames none; blending with
 *    the melody pass keeps a clearly voiced row where the melody row is
 *    empty;
 *  - the register: a melody at 440 Hz whose salience, for one second, puts
 *    80 % of its mass an octave below (a chord tone louder than the melody)
 *    is tracked at 220 Hz there without the register prior and at 440 Hz with
 *    it; the frames around keep 440 Hz either way;
 *  - the re-attack model: its C evaluation gives the trainer's log-odds for
 *    the check vector stored with its weights; it splits two equal notes by
 *    default, and not with reattack_logit 50 or reattack_score_min 100
 *    (reattack_model false: the linear score does); the trainer's feature
 *    file has a line of 73 fields per candidate, and a path that cannot be
 *    opened fails naming EBB_PITCH_REATTACK_FEATURES. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ebb/error.h"
#include "stages/audio/pitch.h"
#include "test.h"

#define RATE 16000u

/* a harmonic tone (5 harmonics, 1/k) from t0 to t1 with a 10 ms attack,
 * then an exponential release of `release_s` per 20 dB */
static void add_note(float *x, uint64_t n, double hz, double t0, double t1, double release_s,
                     double amp) {
  for (uint64_t i = (uint64_t)(t0 * RATE); i < n; i++) {
    double t = (double)i / RATE, a = amp;
    if (t - t0 < 0.01)
      a *= (t - t0) / 0.01;
    if (t > t1)
      a *= pow(10.0, -(t - t1) / release_s);
    if (t > t1 && a < 1e-5)
      break;
    double s = 0;
    for (int k = 1; k <= 5; k++)
      s += sin(2.0 * M_PI * k * hz * (t - t0)) / k;
    x[i] += (float)(a * s);
  }
}

typedef struct result {
  stg_pitch_note *notes;
  size_t n_pitch; /* notes by pitch alone */
  size_t n;       /* after the onsets */
} result;

static result analyse_shift(const float *x, uint64_t n, int default_shift) {
  stg_pitch_params p = stg_pitch_defaults();
  if (!default_shift)
    p.onset_shift_s = 0.0;
  float *fr = NULL;
  size_t nf = 0;
  result r = {0};
  REQUIRE(stg_pitch_analyze(x, n, RATE, &p, EBB_PITCH_BACKEND_CPU, &fr, &nf) == 0);
  REQUIRE(stg_pitch_notes(fr, nf, &p, &r.notes, &r.n) == 0);
  r.n_pitch = r.n;
  float *odf = malloc(nf * sizeof *odf), *db = malloc(nf * sizeof *db);
  REQUIRE(stg_pitch_onset_strength(x, n, RATE, p.hop, nf, odf, db) == 0);
  REQUIRE(stg_pitch_notes_onsets(fr, nf, odf, db, &p, &r.notes, &r.n) == 0);
  for (size_t i = 0; i < r.n; i++)
    printf("  note %zu: %.3f-%.3f s MIDI %d\n", i, r.notes[i].onset, r.notes[i].offset,
           r.notes[i].midi);
  free(odf);
  free(db);
  free(fr);
  return r;
}

static result analyse(const float *x, uint64_t n) { return analyse_shift(x, n, 0); }

static void test_repeated_note(void) {
  uint64_t n = RATE * 2;
  float *x = calloc(n, sizeof *x);
  add_note(x, n, 220.0, 0.30, 0.80, 0.06, 0.3); /* released under the next attack */
  add_note(x, n, 220.0, 0.86, 1.50, 0.05, 0.3);
  result r = analyse(x, n);
  CHECK_MSG(r.n_pitch == 1, "by pitch alone %zu notes (expected the two to merge)", r.n_pitch);
  CHECK_MSG(r.n == 2, "%zu notes after the onsets, expected 2", r.n);
  if (r.n == 2) {
    CHECK_EQ_INT(r.notes[0].midi, 57);
    CHECK_EQ_INT(r.notes[1].midi, 57);
    CHECK_MSG(fabs(r.notes[1].onset - 0.86) <= 0.03, "second onset %.3f s, attack at 0.86 s",
              r.notes[1].onset);
    CHECK(fabs(r.notes[0].onset - 0.30) <= 0.03);
    stg_pitch_params d = stg_pitch_defaults();
    CHECK_MSG(d.onset_shift_s > 0.0, "default onset shift %.3f s", d.onset_shift_s);
    result s = analyse_shift(x, n, 1);
    CHECK_MSG(s.n == 2, "%zu notes with the default shift, expected 2", s.n);
    for (size_t i = 0; i < s.n && i < 2; i++)
      CHECK_MSG(fabs(s.notes[i].onset - (r.notes[i].onset - d.onset_shift_s)) < 1e-6,
                "note %zu onset %.3f s with the shift, %.3f s without it", i, s.notes[i].onset,
                r.notes[i].onset);
    free(s.notes);
  }
  free(r.notes);
  free(x);
}

/* notes of the f0 track of mel, refined on mix by the stage's refinement */
static size_t refined_count(const float *mel, const float *mix, uint64_t n, stg_pitch_params p,
                            double *second_onset) {
  float *fr = NULL;
  size_t nf = 0, nn = 0;
  stg_pitch_note *notes = NULL;
  REQUIRE(stg_pitch_analyze(mel, n, RATE, &p, EBB_PITCH_BACKEND_CPU, &fr, &nf) == 0);
  REQUIRE(stg_pitch_notes(fr, nf, &p, &notes, &nn) == 0);
  REQUIRE(stg_pitch_refine_notes(mix, n, RATE, &p, fr, nf, &notes, &nn) == 0);
  for (size_t i = 0; i < nn; i++)
    printf("  harmonics %d: note %zu: %.3f-%.3f s MIDI %d\n", p.onset_harmonics, i, notes[i].onset,
           notes[i].offset, notes[i].midi);
  *second_onset = nn > 1 ? notes[1].onset : -1.0;
  free(notes);
  free(fr);
  return nn;
}

/* How deep x's level (at `harmonics` harmonics of 440 Hz, 0: the whole
 * spectrum) dips between the notes: from the lower of its highest frame in
 * 0.70-0.80 s and its highest in the 150 ms after the dip to its lowest frame
 * in 0.80-0.88 s (60 ms before the re-attack at 0.86 s to 20 ms after, as the
 * re-attack score takes it). */
static double gap_rise(const float *x, uint64_t n, int harmonics) {
  enum { HOP = 160 };
  size_t nf = n / HOP + 1;
  float *db = calloc(nf, sizeof *db), *ref = calloc(nf, sizeof *ref);
  for (size_t f = 0; f < nf; f++) /* 0 Hz: the whole spectrum */
    ref[f] = harmonics ? 440.0f : 0.0f;
  REQUIRE(stg_pitch_harmonic_level(x, n, RATE, HOP, nf, ref, harmonics ? harmonics : 1, db) == 0);
  size_t dip = 80;
  for (size_t f = 80; f <= 88; f++)
    if (db[f] < db[dip])
      dip = f;
  float hi = db[dip];
  for (size_t f = dip; f <= dip + 15 && f < nf; f++)
    hi = fmaxf(hi, db[f]);
  float before = -INFINITY;
  for (size_t f = 70; f < 80; f++)
    before = fmaxf(before, db[f]);
  double rise = fmin(hi, before) - db[dip];
  free(db);
  free(ref);
  return rise;
}

static void test_reattack_under_chord(void) {
  uint64_t n = RATE * 2;
  float *mel = calloc(n, sizeof *mel), *mix = calloc(n, sizeof *mix);
  add_note(mel, n, 440.0, 0.30, 0.80, 0.06, 0.3);
  add_note(mel, n, 440.0, 0.86, 1.50, 0.05, 0.3);
  memcpy(mix, mel, n * sizeof *mix);
  add_note(mix, n, 311.13, 0.80, 1.50, 0.05, 0.4); /* D#4 and F#4 struck in the gap */
  add_note(mix, n, 369.99, 0.80, 1.50, 0.05, 0.4);
  stg_pitch_params p = stg_pitch_defaults();
  p.onset_shift_s = 0.0;
  double on = 0.0;
  CHECK_MSG(p.onset_harmonics > 0, "onset_harmonics defaults to %d", p.onset_harmonics);
  size_t k = refined_count(mel, mix, n, p, &on);
  CHECK_MSG(k == 2, "%zu notes on the harmonics' level under the chord, expected 2", k);
  CHECK_MSG(k < 2 || fabs(on - 0.86) <= 0.03, "second onset %.3f s, attack at 0.86 s", on);
  /* why: the chord fills the whole spectrum's dip, not the one at the
   * melody's harmonics */
  double rise_h = gap_rise(mix, n, 12), rise_all = gap_rise(mix, n, 0);
  printf("  the dip between the notes: %.1f dB at 12 harmonics, %.1f dB in the whole spectrum\n",
         rise_h, rise_all);
  CHECK_MSG(rise_h >= 6.0 && rise_all <= rise_h - 6.0,
            "a dip of %.1f dB at the harmonics, %.1f dB in the whole spectrum: the chord should "
            "fill only the latter",
            rise_h, rise_all);
  /* a re-attack 100 ms into a note is not one with the default 130 ms */
  memset(mel, 0, n * sizeof *mel);
  add_note(mel, n, 220.0, 0.30, 0.36, 0.02, 0.3);
  add_note(mel, n, 220.0, 0.40, 1.20, 0.05, 0.3);
  p = stg_pitch_defaults();
  CHECK_MSG(p.reattack_min_s >= 0.1, "reattack_min_s defaults to %.3f s", p.reattack_min_s);
  k = refined_count(mel, mel, n, p, &on);
  CHECK_MSG(k == 1, "%zu notes from a re-attack 100 ms after the start, expected 1", k);
  /* the linear score: the model never saw a peak this close to a note's
   * start (it was trained with the default 130 ms) */
  p.reattack_model = 0;
  p.reattack_min_s = 0.0;
  k = refined_count(mel, mel, n, p, &on);
  CHECK_MSG(k == 2, "%zu notes with reattack_min_s 0, expected the re-attack at 0.40 s", k);
  free(mel);
  free(mix);
}

static void test_track_to_notes(void) {
  /* 220 Hz until frame 55 (its release reaches past the next note's onset
   * at frame 50), then 262 Hz; frame 60 unvoiced; a re-attack of 262 Hz at
   * frame 80 whose frames hold 262 Hz */
  enum { NF = 100 };
  float fr[3 * NF];
  for (int f = 0; f < NF; f++) {
    fr[3 * f] = 0.01f * (float)f;
    fr[3 * f + 1] = f < 55 ? 220.0f : f == 60 ? 0.0f : 262.0f;
    fr[3 * f + 2] = 0.9f;
  }
  stg_pitch_note notes[3] = {{0.0, 0.5, 220.0, 57}, {0.5, 0.8, 261.63, 60}, {0.8, 1.0, 262.0, 60}};
  stg_pitch_track_to_notes(fr, NF, notes, 3);
  int bad = 0;
  for (int f = 0; f < NF; f++) {
    float want = f < 50 ? 220.0f : f == 60 ? 0.0f : f < 55 ? 261.63f : 262.0f;
    if (fabsf(fr[3 * f + 1] - want) > 1e-3f) {
      printf("  frame %d: %.2f Hz, expected %.2f\n", f, fr[3 * f + 1], want);
      bad++;
    }
  }
  CHECK_MSG(bad == 0, "%d frames wrong after aligning the track to the notes", bad);
  /* a frame off both notes stops the correction */
  for (int f = 0; f < NF; f++)
    fr[3 * f + 1] = f < 50 ? 220.0f : f < 52 ? 300.0f : f < 55 ? 220.0f : 262.0f;
  stg_pitch_track_to_notes(fr, NF, notes, 2);
  CHECK_MSG(fr[3 * 53 + 1] == 220.0f, "frame 53 after a frame off both notes: %.2f Hz",
            fr[3 * 53 + 1]);
}

/* The notes in[0..n_in) refined by their onsets on nf frames of fr / odf /
 * db (stg_pitch_notes_onsets), printed after `label`. Returns how many
 * (in *out, malloc'd). */
static size_t refine(const float *fr, size_t nf, const float *odf, const float *db,
                     const stg_pitch_params *p, const stg_pitch_note *in, size_t n_in,
                     const char *label, stg_pitch_note **out) {
  stg_pitch_note *notes = malloc(n_in * sizeof *notes);
  REQUIRE(notes);
  memcpy(notes, in, n_in * sizeof *notes);
  size_t n = n_in;
  REQUIRE(stg_pitch_notes_onsets(fr, nf, odf, db, p, &notes, &n) == 0);
  for (size_t k = 0; k < n; k++)
    printf("  %s: note %zu: %.2f-%.2f s, midi %d\n", label, k, notes[k].onset, notes[k].offset,
           notes[k].midi);
  *out = notes;
  return n;
}

/* One 1.5 s note at 220 Hz (MIDI 57) split by its onsets (refine). */
static size_t split_one_note(const float *fr, size_t nf, const float *odf, const float *db,
                             const stg_pitch_params *p, const char *label, stg_pitch_note **out) {
  stg_pitch_note one = {.onset = 0.0, .offset = 1.5, .hz = 220.0, .midi = 57};
  return refine(fr, nf, odf, db, p, &one, 1, label, out);
}

/* One 1.5 s note at 220 Hz whose level falls from frame 70 into a dip at
 * 75-79 and rises again at the re-attack, frame 80 (onset strength 2); a
 * weaker onset peak (0.5) at frame 72, on the way down, also scores above
 * the threshold. The best-scoring peak splits the note, whichever comes
 * first: a left-to-right rule would split at 72 and then skip the 130 ms
 * that hold the re-attack. */
static void test_reattack_best_peak(void) {
  enum { NF = 150 };
  float fr[3 * NF], odf[NF], db[NF];
  for (int f = 0; f < NF; f++) {
    fr[3 * f] = 0.01f * (float)f;
    fr[3 * f + 1] = 220.0f;
    fr[3 * f + 2] = f >= 70 && f < 80 ? 0.3f : 0.9f;
    odf[f] = f == 72 ? 0.5f : f == 80 ? 2.0f : 0.0f;
    db[f] = f < 70 || f >= 80 ? -20.0f : f < 75 ? -20.0f - 3.0f * (float)(f - 70) : -35.0f;
  }
  stg_pitch_params p = stg_pitch_defaults();
  p.onset_shift_s = 0.0;
  p.reattack_model = 0;         /* the linear score's order (the model's is the same code) */
  double want[] = {0.80, -1.0}; /* by default: the split at frame 80 */
  double scores[] = {p.reattack_score, 40.0};
  for (int i = 0; i < 2; i++) {
    p.reattack_score = scores[i];
    char label[64];
    snprintf(label, sizeof label, "reattack_score %.0f", scores[i]);
    stg_pitch_note *notes;
    size_t n = split_one_note(fr, NF, odf, db, &p, label, &notes);
    if (want[i] < 0)
      CHECK_MSG(n == 1, "%zu notes with reattack_score %.0f (no peak scores that high)", n,
                scores[i]);
    else
      CHECK_MSG(n == 2 && fabs(notes[1].onset - want[i]) < 0.005,
                "%zu notes, second at %.2f s: expected the split at the best peak, %.2f s", n,
                n > 1 ? notes[1].onset : -1.0, want[i]);
    free(notes);
  }
}

/* Frame times as the track stores them: floats, 10 ms = 0.0099999998 s. */
static void fill_track(float *fr, int nf) {
  for (int f = 0; f < nf; f++) {
    fr[3 * f] = (float)((double)f * 160.0 / RATE);
    fr[3 * f + 1] = 0.0f;
    fr[3 * f + 2] = 0.0f;
  }
}

/* A re-attack at 0.50 s whose pitch turns (220 -> 247 Hz) 80 ms later: the
 * attack was the new note's, so the new note starts there and the 80 ms of
 * the old pitch between them are not a note of their own. With the turn
 * 150 ms after it (longer than onset_lookback_ms) the re-attack stays a
 * repeated note of the old pitch. */
static void test_reattack_then_turn(void) {
  enum { NF = 150 };
  float fr[3 * NF], odf[NF], db[NF];
  int turns[] = {58, 65};
  size_t want[] = {2, 3};
  for (int i = 0; i < 2; i++) {
    fill_track(fr, NF);
    for (int f = 0; f < NF; f++) {
      fr[3 * f + 1] = f < turns[i] ? 220.0f : 246.94f;
      fr[3 * f + 2] = f >= 47 && f < 50 ? 0.3f : 0.9f;
      odf[f] = f == 50 ? 2.0f : 0.0f;
      db[f] = f >= 47 && f < 50 ? -35.0f : -20.0f;
    }
    stg_pitch_params p = stg_pitch_defaults();
    p.onset_shift_s = 0.0;
    double turn = turns[i] * 0.01;
    stg_pitch_note in[] = {{.onset = 0.0, .offset = turn, .hz = 220.0, .midi = 57},
                           {.onset = turn, .offset = 1.5, .hz = 246.94, .midi = 59}};
    char label[64];
    snprintf(label, sizeof label, "turn at %.2f s", turn);
    stg_pitch_note *notes;
    size_t n = refine(fr, NF, odf, db, &p, in, 2, label, &notes);
    CHECK_MSG(n == want[i], "turn %.2f s after the re-attack at 0.50 s: %zu notes, expected %zu",
              turn - 0.5, n, want[i]);
    if (n == want[i]) {
      CHECK_MSG(fabs(notes[1].onset - 0.50) < 0.005 && notes[1].midi == (i ? 57 : 59),
                "second note at %.2f s, midi %d: expected 0.50 s, midi %d", notes[1].onset,
                notes[1].midi, i ? 57 : 59);
      CHECK_MSG(fabs(notes[n - 1].onset - (i ? turn : 0.5)) < 0.005 && notes[n - 1].midi == 59,
                "last note at %.2f s, midi %d", notes[n - 1].onset, notes[n - 1].midi);
    }
    free(notes);
  }
}

/* A slow re-attack: the level dips to -35 dB at 0.44 s and climbs 2 dB a
 * frame from there, the onset strength peaking at 0.50 s, where the attack
 * is steepest. The new note starts where the level is reattack_rise_db (4)
 * above the dip, 0.46 s; with the option 0, at the peak. */
static void test_reattack_slow_attack(void) {
  enum { NF = 150 };
  float fr[3 * NF], odf[NF], db[NF];
  double rise[] = {4.0, 0.0}, want[] = {0.46, 0.50};
  fill_track(fr, NF);
  for (int f = 0; f < NF; f++) {
    fr[3 * f + 1] = 220.0f;
    fr[3 * f + 2] = f >= 42 && f < 47 ? 0.3f : 0.9f;
    odf[f] = f == 50 ? 2.0f : f == 49 || f == 51 ? 1.0f : 0.0f;
    db[f] = f < 40    ? -20.0f
            : f <= 44 ? -20.0f - 3.75f * (float)(f - 40)
                      : fminf(-35.0f + 2.0f * (float)(f - 44), -20.0f);
  }
  for (int i = 0; i < 2; i++) {
    stg_pitch_params p = stg_pitch_defaults();
    p.onset_shift_s = 0.0;
    p.reattack_rise_db = rise[i];
    char label[64];
    snprintf(label, sizeof label, "reattack_rise_db %.0f", rise[i]);
    stg_pitch_note *notes;
    size_t n = split_one_note(fr, NF, odf, db, &p, label, &notes);
    CHECK_MSG(n == 2 && fabs(notes[1].onset - want[i]) < 0.005 &&
                  fabs(notes[0].offset - want[i]) < 0.005,
              "reattack_rise_db %.0f: %zu notes, second at %.2f s: expected the split at %.2f s",
              rise[i], n, n > 1 ? notes[1].onset : -1.0, want[i]);
    free(notes);
  }
}

/* An attack at 0.50 s whose first 80 ms hold a scoop (233 Hz) before the
 * pitch turns to 247 Hz at 0.58 s, with no onset where it turns: the scoop
 * is the 247 Hz note's start, not a note of its own. With an onset at the
 * turn as well, the 80 ms note stays. */
static void test_scoop_joins(void) {
  enum { NF = 150 };
  float fr[3 * NF], odf[NF], db[NF];
  float turn_odf[] = {0.0f, 2.0f};
  size_t want[] = {2, 3};
  for (int i = 0; i < 2; i++) {
    fill_track(fr, NF);
    for (int f = 0; f < NF; f++) {
      fr[3 * f + 1] = f < 50 ? 220.0f : f < 58 ? 233.08f : 246.94f;
      fr[3 * f + 2] = 0.9f;
      odf[f] = f == 50 ? 2.0f : f == 58 ? turn_odf[i] : 0.0f;
      db[f] = -20.0f;
    }
    stg_pitch_params p = stg_pitch_defaults();
    p.onset_shift_s = 0.0;
    stg_pitch_note in[] = {{.onset = 0.0, .offset = 0.50, .hz = 220.0, .midi = 57},
                           {.onset = 0.50, .offset = 0.58, .hz = 233.08, .midi = 58},
                           {.onset = 0.58, .offset = 1.5, .hz = 246.94, .midi = 59}};
    char label[64];
    snprintf(label, sizeof label, "onset %.0f at the turn", turn_odf[i]);
    stg_pitch_note *notes;
    size_t n = refine(fr, NF, odf, db, &p, in, 3, label, &notes);
    CHECK_MSG(n == want[i], "onset %.0f at the turn: %zu notes, expected %zu", turn_odf[i], n,
              want[i]);
    if (n == 2)
      CHECK_MSG(fabs(notes[1].onset - 0.50) < 0.005 && notes[1].midi == 59,
                "second note at %.2f s, midi %d: expected the scoop's start, 0.50 s, midi 59",
                notes[1].onset, notes[1].midi);
    free(notes);
  }
}

/* Durations given in ms are whole frames, not one more: a 7-frame run is a
 * note with min_note_ms 70 (and none with 80), and a re-attack exactly
 * reattack_min_ms 130 after the note's start splits it (13 frames; with the
 * frame times' float step, 0.13 s / 0.0099999998 s rounded up was 14). */
static void test_frame_counts(void) {
  enum { NF = 100 };
  float fr[3 * NF], odf[NF], db[NF];
  stg_pitch_params p = stg_pitch_defaults();
  double mins[] = {0.07, 0.08};
  size_t want[] = {1, 0};
  for (int i = 0; i < 2; i++) {
    fill_track(fr, NF);
    for (int f = 20; f < 27; f++) {
      fr[3 * f + 1] = 220.0f;
      fr[3 * f + 2] = 0.9f;
    }
    p.min_note_s = mins[i];
    stg_pitch_note *notes = NULL;
    size_t n = 0;
    REQUIRE(stg_pitch_notes(fr, NF, &p, &notes, &n) == 0);
    CHECK_MSG(n == want[i], "a 7-frame run gave %zu notes with min_note_s %.2f, expected %zu", n,
              mins[i], want[i]);
    free(notes);
  }
  /* one note over frames 0-99; a re-attack (dip, voicing dip, strong peak) at 13 */
  fill_track(fr, NF);
  for (int f = 0; f < NF; f++) {
    fr[3 * f + 1] = 220.0f;
    fr[3 * f + 2] = f >= 10 && f < 13 ? 0.3f : 0.9f;
    odf[f] = f == 13 ? 2.0f : 0.0f;
    db[f] = f >= 10 && f < 13 ? -35.0f : -20.0f;
  }
  p = stg_pitch_defaults();
  p.onset_shift_s = 0.0;
  p.reattack_min_s = 0.13;
  stg_pitch_note *notes = malloc(sizeof *notes);
  REQUIRE(notes);
  notes[0] = (stg_pitch_note){.onset = 0.0, .offset = 1.0, .hz = 220.0, .midi = 57};
  size_t n = 1;
  REQUIRE(stg_pitch_notes_onsets(fr, NF, odf, db, &p, &notes, &n) == 0);
  CHECK_MSG(n == 2 && fabs(notes[1].onset - 0.13) < 0.005,
            "%zu notes, second at %.3f s: a re-attack 130 ms in, with reattack_min_s 0.13, "
            "should split the note there",
            n, n > 1 ? notes[1].onset : -1.0);
  free(notes);
}

/* The onset of a note after an unvoiced gap (onset_lead_s): frames 0-29
 * unvoiced, 30-99 voiced at 220 Hz, an onset peak at frame `peak` with the
 * level held from there on (or dipping 40 dB over frames 24-26). Returns
 * the note's onset. */
static double lead_onset_at(int peak, int dip, double lead_s) {
  enum { NF = 100 };
  float fr[3 * NF], odf[NF], db[NF];
  fill_track(fr, NF);
  for (int f = 0; f < NF; f++) {
    fr[3 * f + 1] = f >= 30 ? 220.0f : 0.0f;
    fr[3 * f + 2] = f >= 30 ? 0.9f : 0.0f;
    odf[f] = f == peak ? 2.0f : 0.0f;
    db[f] = f < peak - 2 || (dip && f >= 24 && f <= 26) ? -60.0f : -20.0f;
  }
  stg_pitch_params p = stg_pitch_defaults();
  p.onset_lead_s = lead_s;
  stg_pitch_note *notes = malloc(sizeof *notes);
  REQUIRE(notes);
  notes[0] = (stg_pitch_note){.onset = 0.30, .offset = 1.0, .hz = 220.0, .midi = 57};
  size_t n = 1;
  REQUIRE(stg_pitch_notes_onsets(fr, NF, odf, db, &p, &notes, &n) == 0);
  REQUIRE(n == 1);
  double on = notes[0].onset;
  free(notes);
  return on;
}

/* A sung word's first consonant: the note starts at the onset up to
 * onset_lead_s before its first voiced frame when the sound goes on from
 * there into the note; else, with the option 0, for a peak the onset
 * shift already covers, or across a dip, onset_shift_s before the first
 * voiced frame. */
static void test_lead_onset(void) {
  stg_pitch_params d = stg_pitch_defaults();
  double shifted = 0.30 - d.onset_shift_s;
  CHECK_MSG(d.onset_lead_s >= 0.1, "default onset_lead_s %.3f s", d.onset_lead_s);
  struct {
    const char *what;
    int peak, dip;
    double lead_s, want;
  } cases[] = {{"a consonant 100 ms before the voice", 20, 0, d.onset_lead_s, 0.20},
               {"the option 0", 20, 0, 0.0, shifted},
               {"a dip between the peak and the voice", 20, 1, d.onset_lead_s, shifted},
               {"a peak within the onset shift", 28, 0, d.onset_lead_s, shifted},
               {"a peak before onset_lead_s", 20, 0, 0.05, shifted}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    double on = lead_onset_at(cases[i].peak, cases[i].dip, cases[i].lead_s);
    printf("  %s: onset %.3f s\n", cases[i].what, on);
    CHECK_MSG(fabs(on - cases[i].want) < 0.005, "%s: the note starts at %.3f s, expected %.3f s",
              cases[i].what, on, cases[i].want);
  }
}

static void test_tremolo_not_split(void) {
  uint64_t n = RATE * 2;
  float *x = calloc(n, sizeof *x);
  add_note(x, n, 330.0, 0.20, 1.60, 0.05, 0.3);
  for (uint64_t i = 0; i < n; i++) /* 3 dB deep, 6 Hz */
    x[i] *= (float)(0.85 + 0.15 * sin(2.0 * M_PI * 6.0 * (double)i / RATE));
  result r = analyse(x, n);
  CHECK_MSG(r.n == 1, "a tremolo note became %zu notes", r.n);
  free(r.notes);
  free(x);
}

/* notes of x with params p (no shift), by pitch and the onsets */
static size_t notes_with(const float *x, uint64_t n, stg_pitch_params p, stg_pitch_note **out,
                         int *rc) {
  float *fr = NULL;
  size_t nf = 0, nn = 0;
  p.onset_shift_s = 0.0;
  REQUIRE(stg_pitch_analyze(x, n, RATE, &p, EBB_PITCH_BACKEND_CPU, &fr, &nf) == 0);
  REQUIRE(stg_pitch_notes(fr, nf, &p, out, &nn) == 0);
  float *odf = malloc(nf * sizeof *odf), *db = malloc(nf * sizeof *db);
  REQUIRE(odf && db);
  REQUIRE(stg_pitch_onset_strength(x, n, RATE, p.hop, nf, odf, db) == 0);
  *rc = stg_pitch_notes_onsets(fr, nf, odf, db, &p, out, &nn);
  free(odf);
  free(db);
  free(fr);
  return nn;
}

/* The re-attack model (pitch_reattack.c): its C evaluation gives the
 * trainer's figure, it decides the split by default, its two options
 * and the linear score's switch do what they say, and the feature file
 * for the trainer is written (or its bad path named). */
static void test_reattack_model(void) {
  double got, want;
  stg_pitch_reattack_check(&got, &want);
  printf("  the model's check vector: %.9f log-odds, the trainer's %.9f\n", got, want);
  CHECK_MSG(fabs(got - want) <= 1e-6 * fmax(1.0, fabs(want)),
            "the model gives %.9f for its check vector, bench/train_reattack.py %.9f: the "
            "weights or the evaluation disagree",
            got, want);
  uint64_t n = RATE * 2;
  float *x = calloc(n, sizeof *x);
  REQUIRE(x);
  add_note(x, n, 220.0, 0.30, 0.80, 0.06, 0.3); /* released under the next attack */
  add_note(x, n, 220.0, 0.86, 1.50, 0.05, 0.3);
  stg_pitch_params d = stg_pitch_defaults();
  CHECK_MSG(d.reattack_model == 1 && d.reattack_logit > 0.0 && d.reattack_score_min > 0.0,
            "defaults: reattack_model %d, reattack_logit %.2f, reattack_score_min %.2f",
            d.reattack_model, d.reattack_logit, d.reattack_score_min);
  struct {
    const char *what;
    int model;
    double logit, score_min;
    size_t want;
  } cases[] = {{"the defaults", 1, d.reattack_logit, d.reattack_score_min, 2},
               {"reattack_logit 50", 1, 50.0, d.reattack_score_min, 1},
               {"reattack_score_min 100", 1, d.reattack_logit, 100.0, 1},
               {"reattack_model false", 0, 50.0, 100.0, 2}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    stg_pitch_params p = d;
    p.reattack_model = cases[i].model;
    p.reattack_logit = cases[i].logit;
    p.reattack_score_min = cases[i].score_min;
    stg_pitch_note *notes = NULL;
    int rc = 0;
    size_t k = notes_with(x, n, p, &notes, &rc);
    CHECK_MSG(rc == 0 && k == cases[i].want,
              "two equal notes with %s: %zu notes (rc %d), expected %zu", cases[i].what, k, rc,
              cases[i].want);
    if (rc == 0 && k == 2)
      CHECK_MSG(fabs(notes[1].onset - 0.86) <= 0.03,
                "with %s the second note at %.3f s, "
                "its attack at 0.86 s",
                cases[i].what, notes[1].onset);
    free(notes);
  }
  /* the features for the trainer: one line per candidate peak */
  char path[] = "/tmp/ebb-reattack-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  REQUIRE(setenv(EBB_PITCH_REATTACK_FEATURES_ENV, path, 1) == 0);
  stg_pitch_note *notes = NULL;
  int rc = 0;
  notes_with(x, n, d, &notes, &rc);
  free(notes);
  CHECK_MSG(rc == 0, "with %s set the stage failed: %s", EBB_PITCH_REATTACK_FEATURES_ENV,
            ebb_errmsg());
  FILE *f = fopen(path, "r");
  REQUIRE(f);
  char line[4096];
  int lines = 0, near = 0, bad = 0;
  while (fgets(line, sizeof line, f)) {
    int fields = 0;
    double t = -1.0;
    for (char *tok = strtok(line, " \n"); tok; tok = strtok(NULL, " \n"), fields++)
      if (fields == 0)
        t = atof(tok);
    lines++;
    bad += fields != 3 + EBB_PITCH_REATTACK_NFEAT;
    near += fabs(t - 0.86) <= 0.05;
  }
  fclose(f);
  unlink(path);
  CHECK_MSG(lines > 0 && bad == 0 && near > 0,
            "the feature file: %d lines, %d of the wrong width (want %d fields), %d at the "
            "re-attack",
            lines, bad, 3 + EBB_PITCH_REATTACK_NFEAT, near);
  REQUIRE(setenv(EBB_PITCH_REATTACK_FEATURES_ENV, "/nonexistent-ebb-dir/features", 1) == 0);
  notes_with(x, n, d, &notes, &rc);
  free(notes);
  CHECK_MSG(rc != 0 && strstr(ebb_errmsg(), EBB_PITCH_REATTACK_FEATURES_ENV),
            "a feature file that cannot be opened: rc %d, \"%s\" (should fail naming %s)", rc,
            rc ? ebb_errmsg() : "", EBB_PITCH_REATTACK_FEATURES_ENV);
  unsetenv(EBB_PITCH_REATTACK_FEATURES_ENV);
  free(x);
}

static void test_pitch_change_onset(void) {
  /* 220 Hz released slowly under a soft 262 Hz attack: the track turns late */
  uint64_t n = RATE * 2;
  float *x = calloc(n, sizeof *x);
  add_note(x, n, 220.0, 0.20, 0.70, 0.15, 0.3);
  add_note(x, n, 261.63, 0.70, 1.50, 0.05, 0.3);
  result r = analyse(x, n);
  CHECK_MSG(r.n == 2, "%zu notes, expected 2", r.n);
  if (r.n == 2) {
    CHECK_EQ_INT(r.notes[1].midi, 60);
    CHECK_MSG(fabs(r.notes[1].onset - 0.70) <= 0.03, "second onset %.3f s, attack at 0.70 s",
              r.notes[1].onset);
  }
  free(r.notes);
  free(x);
}

/* the salience at b_sub over the salience at b_f0, frames 0.4-0.8 s */
static double sub_ratio(const float *x, uint64_t n, stg_pitch_params p, double f0) {
  size_t nf = n / (uint64_t)p.hop + 1;
  int nb = (int)floor(1200.0 * log2(p.fmax / p.fmin) / 10.0) + 1;
  int b0 = (int)lround(120.0 * log2(f0 / p.fmin)), bs = b0 - 120;
  float *sal = NULL;
  REQUIRE(stg_pitch_salience(x, n, RATE, &p, nf, &sal) == 0);
  double top = 0, sub = 0;
  for (size_t f = 40; f < 80 && f < nf; f++) {
    top += sal[f * (size_t)nb + (size_t)b0];
    sub += sal[f * (size_t)nb + (size_t)bs];
  }
  free(sal);
  return top > 0 ? sub / top : 1.0;
}

static void test_salience_height(void) {
  uint64_t n = RATE;
  float *x = calloc(n, sizeof *x);
  add_note(x, n, 440.0, 0.30, 0.90, 0.02, 0.3);
  stg_pitch_params p = stg_pitch_defaults();
  CHECK_MSG(p.salience_height > 0.0, "salience_height defaults to %g", p.salience_height);
  p.salience_height = 0.0;
  double flat = sub_ratio(x, n, p, 440.0);
  p.salience_height = 0.3;
  double high = sub_ratio(x, n, p, 440.0);
  double want = pow(2.0, -0.3 * p.salience_sharpen);
  printf("  octave-below / f0 salience: %.4f flat, %.4f with height 0.3 (expected x%.3f)\n", flat,
         high, want);
  CHECK_MSG(flat > 0.0, "no salience an octave below a harmonic tone (%g): the test proves nothing",
            flat);
  CHECK_MSG(fabs(high / flat - want) < 0.05 * want,
            "height 0.3 scaled the octave-below salience by %.3f, expected %.3f", high / flat,
            want);
  free(x);
}

static void test_salience_sharpen(void) {
  uint64_t n = RATE;
  float *x = calloc(n, sizeof *x);
  add_note(x, n, 440.0, 0.30, 0.90, 0.02, 0.3);
  stg_pitch_params p = stg_pitch_defaults();
  CHECK_MSG(p.salience_sharpen == 3.0, "salience_sharpen defaults to %g, want 3",
            p.salience_sharpen);
  p.salience_height = 0.0;
  double r3 = sub_ratio(x, n, p, 440.0);
  p.salience_sharpen = 4.0;
  double r4 = sub_ratio(x, n, p, 440.0);
  p.salience_sharpen = 1.0;
  double r1 = sub_ratio(x, n, p, 440.0);
  printf("  octave-below / f0 salience: %.4f at the power 1, %.4f at 3, %.4f at 4\n", r1, r3, r4);
  CHECK_MSG(r1 > 0.0 && r1 < 1.0,
            "octave-below / f0 salience %g at the power 1: the test proves nothing", r1);
  if (r1 > 0.0 && r1 < 1.0 && r3 > 0.0 && r4 > 0.0) {
    CHECK_MSG(fabs(log(r4) / log(r3) - 4.0 / 3.0) < 0.05,
              "log ratio at 4 / at 3 = %.3f, expected 4/3", log(r4) / log(r3));
    CHECK_MSG(fabs(log(r1) / log(r3) - 1.0 / 3.0) < 0.05,
              "log ratio at 1 / at 3 = %.3f, expected 1/3", log(r1) / log(r3));
  }
  free(x);
}

static void test_salience(void) {
  uint64_t n = RATE;
  float *x = calloc(n, sizeof *x);
  add_note(x, n, 196.0, 0.30, 0.90, 0.02, 0.3);
  stg_pitch_params p = stg_pitch_defaults();
  size_t nf = n / (uint64_t)p.hop + 1;
  int nb = (int)floor(1200.0 * log2(p.fmax / p.fmin) / 10.0) + 1;
  float *sal = NULL;
  REQUIRE(stg_pitch_salience(x, n, RATE, &p, nf, &sal) == 0);
  int bad = 0;
  for (size_t f = 0; f < nf; f++) {
    const float *row = sal + f * (size_t)nb;
    double sum = 0;
    int arg = 0;
    for (int b = 0; b < nb; b++) {
      sum += row[b];
      if (row[b] > row[arg])
        arg = b;
    }
    double t = f * 0.01, hz = p.fmin * pow(2.0, arg / 120.0);
    if (t > 0.4 && t < 0.8) {
      if (fabs(1200.0 * log2(hz / 196.0)) > 20.0 || sum < 0.9)
        bad++;
    } else if (t < 0.2 && sum > 0.0) {
      bad++;
    }
  }
  CHECK_MSG(bad == 0, "%d frames with the salience peak off 196 Hz or wrong voicing", bad);
  /* the mixture keeps pYIN's voicing where the salience agrees */
  double obs[4] = {0.5, 0.0, 0.0, 0.0};
  float row[4] = {0.9f, 0.1f, 0.0f, 0.0f};
  CHECK_NEAR(stg_pitch_salience_mix(row, 4, 0.5, 0.5, obs), 0.75, 1e-6);
  CHECK_NEAR(obs[0], 0.7, 1e-6);
  CHECK_NEAR(obs[1], 0.05, 1e-6);
  /* blending with the melody pass: a voiced vocals row over an empty melody
   * row stays; a weakly voiced one, or one the melody row holds, is mixed */
  float v3[3 * 2] = {0.8f, 0.1f, 0.3f, 0.1f, 0.8f, 0.1f};
  float m3[3 * 2] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.6f};
  stg_pitch_salience_blend(v3, m3, 3, 2, 0.75, 0.6);
  CHECK_MSG(v3[0] == 0.8f && v3[1] == 0.1f, "a voiced row over an empty melody row changed: %g %g",
            v3[0], v3[1]);
  CHECK_NEAR(v3[2], 0.075, 1e-6); /* sum 0.4: not voiced enough to stand alone */
  CHECK_NEAR(v3[4], 0.2, 1e-6);
  CHECK_NEAR(v3[5], 0.475, 1e-6);
  free(sal);
  free(x);
}

/* The frames of 0..nf-1 whose f0 is within 5 Hz of hz, in [a, b). */
static size_t frames_at(const float *fr, size_t a, size_t b, double hz) {
  size_t k = 0;
  for (size_t f = a; f < b; f++)
    k += fabs(fr[3 * f + 1] - hz) < 5.0;
  return k;
}

static void test_register(void) {
  stg_pitch_params p = stg_pitch_defaults();
  CHECK_MSG(p.register_semitones > 0.0, "register_semitones defaults to %g", p.register_semitones);
  p.gate_voicing = p.gate_range_db = 0.0; /* the test's signal is silence: only the salience */
  uint64_t n = 7 * RATE;
  stg_pitch_geom g;
  REQUIRE(stg_pitch_geometry(&p, RATE, n, &g) == 0);
  size_t nf = g.n_frames, row = (size_t)g.tau_max + 1;
  int nb = (int)floor(1200.0 * log2(p.fmax / p.fmin) / 10.0) + 1;
  int b440 = (int)lround(120.0 * log2(440.0 / p.fmin)), b220 = b440 - 120;
  float *cm = malloc(nf * row * sizeof *cm), *sal = calloc(nf * (size_t)nb, sizeof *sal);
  float *padded = calloc(g.padded_len, sizeof *padded), *fr = malloc(nf * 3 * sizeof *fr);
  REQUIRE(cm && sal && padded && fr);
  for (size_t i = 0; i < nf * row; i++)
    cm[i] = 1.0f;
  for (size_t f = 0; f < nf; f++) {
    int mid = f >= 300 && f < 400;
    sal[f * (size_t)nb + (size_t)b440] = mid ? 0.18f : 0.9f;
    sal[f * (size_t)nb + (size_t)b220] = mid ? 0.72f : 0.0f;
  }
  double hz440 = p.fmin * pow(2.0, b440 / 120.0), hz220 = p.fmin * pow(2.0, b220 / 120.0);
  double reg = p.register_semitones;
  p.register_semitones = 0.0;
  REQUIRE(stg_pitch_track_salience(cm, padded, &g, &p, sal, NULL, fr) == 0);
  size_t off_low = frames_at(fr, 300, 400, hz220), off_out = frames_at(fr, 0, 300, hz440);
  p.register_semitones = reg;
  REQUIRE(stg_pitch_track_salience(cm, padded, &g, &p, sal, NULL, fr) == 0);
  size_t on_high = frames_at(fr, 300, 400, hz440), on_out = frames_at(fr, 0, 300, hz440);
  printf("  the louder octave below, 100 frames: %zu at 220 Hz without the register, %zu at "
         "440 Hz with it\n",
         off_low, on_high);
  CHECK_MSG(off_low >= 80,
            "without the register only %zu of 100 frames took the stronger 220 Hz: "
            "the test proves nothing",
            off_low);
  CHECK_MSG(on_high >= 95, "with register_semitones %g only %zu of 100 frames stayed at 440 Hz",
            reg, on_high);
  CHECK_MSG(off_out >= 295 && on_out >= 295,
            "frames outside the octave: %zu / %zu of 300 at 440 Hz", off_out, on_out);
  free(cm);
  free(sal);
  free(padded);
  free(fr);
}

int main(void) {
  RUN(test_repeated_note);
  RUN(test_reattack_under_chord);
  RUN(test_reattack_best_peak);
  RUN(test_frame_counts);
  RUN(test_reattack_then_turn);
  RUN(test_reattack_slow_attack);
  RUN(test_scoop_joins);
  RUN(test_track_to_notes);
  RUN(test_tremolo_not_split);
  RUN(test_lead_onset);
  RUN(test_reattack_model);
  RUN(test_pitch_change_onset);
  RUN(test_salience);
  RUN(test_salience_height);
  RUN(test_salience_sharpen);
  RUN(test_register);
  return TEST_END();
}
