/* pitch: the notes of a generated melody (songgen's ground truth) come back:
 * onsets within 50 ms with the exact MIDI pitch for at least 90 % of the
 * notes, and raw pitch accuracy on the vocal stem of at least 95 %; in a mix
 * with the accompaniment at 0.25, at least 60 % of the notes and 75 % RPA. */
#include <math.h>

#include "stages/audio/pitch.h"
#include "stages/audio/songgen.h"
#include "test.h"

static void check_song(uint64_t seed, double accomp, double min_notes, double min_rpa) {
  stg_songgen_params sp = stg_songgen_defaults();
  sp.seed = seed;
  sp.seconds = 14.0;
  sp.accomp_gain = accomp;
  stg_song *s = NULL;
  REQUIRE(stg_songgen_create(&sp, &s) == 0);
  stg_pitch_params p = stg_pitch_defaults();
  float *fr = NULL;
  size_t nf = 0;
  REQUIRE(stg_pitch_analyze(accomp > 0 ? s->mix : s->vocals, s->frames, s->rate, &p,
                            EBB_PITCH_BACKEND_CPU, &fr, &nf) == 0);
  size_t tv = 0, ok = 0;
  for (size_t i = 0; i < s->n_f0 && i < nf; i++)
    if (s->f0_hz[i] > 0) {
      tv++;
      ok += fr[3 * i + 1] > 0 && fabs(1200 * log2(fr[3 * i + 1] / s->f0_hz[i])) < 50;
    }
  double rpa = (double)ok / (double)tv;
  CHECK_MSG(rpa >= min_rpa, "seed %llu: raw pitch accuracy %.3f < %.2f", (unsigned long long)seed,
            rpa, min_rpa);
  stg_pitch_note *notes = NULL;
  size_t nn = 0;
  REQUIRE(stg_pitch_notes(fr, nf, &p, &notes, &nn) == 0);
  size_t hit = 0;
  for (size_t i = 0; i < s->n_notes; i++) {
    int found = 0;
    for (size_t j = 0; j < nn && !found; j++)
      found = fabs(notes[j].onset - s->notes[i].onset) <= 0.05 && notes[j].midi == s->notes[i].midi;
    if (!found)
      fprintf(stderr, "  seed %llu: truth note %zu (%.2f s, midi %d) not recovered\n",
              (unsigned long long)seed, i, s->notes[i].onset, s->notes[i].midi);
    hit += found;
  }
  double frac = (double)hit / (double)s->n_notes;
  CHECK_MSG(s->n_notes >= 10, "seed %llu: only %zu notes generated", (unsigned long long)seed,
            s->n_notes);
  CHECK_MSG(frac >= min_notes, "seed %llu: %zu of %zu notes recovered (%.2f < %.2f)",
            (unsigned long long)seed, hit, s->n_notes, frac, min_notes);
  /* no invented notes: at most 10 % more notes than the truth */
  fprintf(stderr, "  seed %llu accomp %.2f: RPA %.3f, notes %zu/%zu, %zu estimated\n",
          (unsigned long long)seed, accomp, rpa, hit, s->n_notes, nn);
  if (accomp > 0)
    goto out; /* in a mix the pad and bass make extra notes while the voice rests */
  CHECK_MSG(nn <= s->n_notes + s->n_notes / 10, "seed %llu: %zu notes found for %zu true",
            (unsigned long long)seed, nn, s->n_notes);
out:
  free(notes);
  free(fr);
  stg_song_destroy(s);
}

static void test_melody_seed1(void) { check_song(1, 0.0, 0.9, 0.95); }
static void test_melody_seed7(void) { check_song(7, 0.0, 0.9, 0.95); }
/* In a mix (accompaniment at 0.25) the pre-emphasised tracker still follows
 * the voice most of the time (without pre-emphasis: RPA ~0.2). */
static void test_melody_in_mix(void) { check_song(1, 0.25, 0.6, 0.75); }

int main(void) {
  RUN(test_melody_seed1);
  RUN(test_melody_seed7);
  RUN(test_melody_in_mix);
  return TEST_END();
}
