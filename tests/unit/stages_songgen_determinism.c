/* songgen: the same seed gives the same song bit for bit, another seed a
 * different one; the truth is consistent with the audio; the files it writes
 * read back. */
#include <jansson.h>
#include <math.h>
#include <sndfile.h>
#include <sys/stat.h>

#include "ebb/error.h"
#include "stages/audio/songgen.h"
#include "test.h"

static stg_song *gen(uint64_t seed, uint32_t rate) {
  stg_songgen_params p = stg_songgen_defaults();
  p.seed = seed;
  p.rate = rate;
  p.seconds = 12.0;
  stg_song *s = NULL;
  REQUIRE(stg_songgen_create(&p, &s) == 0);
  return s;
}

static void test_same_seed_same_song(void) {
  stg_song *a = gen(42, 16000), *b = gen(42, 16000), *c = gen(43, 16000);
  REQUIRE(a->frames == b->frames);
  CHECK(memcmp(a->mix, b->mix, a->frames * sizeof(float)) == 0);
  CHECK(memcmp(a->vocals, b->vocals, a->frames * sizeof(float)) == 0);
  CHECK(memcmp(a->f0_hz, b->f0_hz, a->n_f0 * sizeof(float)) == 0);
  CHECK_EQ_U64(a->n_notes, b->n_notes);
  char *ja = NULL, *jb = NULL, *jc = NULL;
  REQUIRE(stg_song_truth_json(a, &ja) == 0 && stg_song_truth_json(b, &jb) == 0 &&
          stg_song_truth_json(c, &jc) == 0);
  CHECK_EQ_STR(ja, jb);
  CHECK(strcmp(ja, jc) != 0);
  CHECK(memcmp(a->mix, c->mix, a->frames * sizeof(float)) != 0);
  free(ja);
  free(jb);
  free(jc);
  stg_song_destroy(a);
  stg_song_destroy(b);
  stg_song_destroy(c);
}

static void test_truth_consistent(void) {
  stg_song *s = gen(3, 44100);
  CHECK_EQ_U64(s->frames, 12 * 44100);
  CHECK(s->n_notes >= 8);
  double prev = 0;
  for (size_t i = 0; i < s->n_notes; i++) {
    const stg_song_note *n = &s->notes[i];
    CHECK(n->onset >= prev - 1e-9 && n->offset > n->onset + 0.1);
    CHECK(n->offset <= 12.0);
    CHECK(n->midi >= 40 && n->midi <= 90);
    prev = n->offset;
  }
  /* mix = vocals + accompaniment, peak 0.9 */
  float peak = 0;
  for (uint64_t k = 0; k < s->frames; k++) {
    CHECK_MSG(fabsf(s->mix[k] - (s->vocals[k] + s->accomp[k])) < 1e-6f, "mix != stems at %llu",
              (unsigned long long)k);
    if (fabsf(s->mix[k]) > peak)
      peak = fabsf(s->mix[k]);
    if (fabsf(s->mix[k] - (s->vocals[k] + s->accomp[k])) >= 1e-6f)
      break;
  }
  CHECK_NEAR(peak, 0.9, 1e-5);
  /* voiced truth frames are inside notes and within 1 semitone of the note;
   * the vocal stem is silent outside notes */
  size_t voiced = 0;
  for (size_t f = 0; f < s->n_f0; f++) {
    double t = f * s->f0_hop_s;
    int in_note = -1;
    for (size_t i = 0; i < s->n_notes; i++)
      if (t >= s->notes[i].onset && t <= s->notes[i].offset)
        in_note = (int)i;
    if (s->f0_hz[f] > 0) {
      voiced++;
      REQUIRE(in_note >= 0);
      double m = 69 + 12 * log2(s->f0_hz[f] / 440.0);
      CHECK(fabs(m - s->notes[in_note].midi) < 1.0);
    } else if (in_note < 0) {
      uint64_t k = (uint64_t)(t * s->rate);
      if (k < s->frames)
        CHECK(s->vocals[k] == 0.0f);
    }
  }
  CHECK(voiced > s->n_f0 / 3);
  stg_song_destroy(s);
}

static void test_files(void) {
  const char *tmp = getenv("EBB_TEST_TMP");
  char dir[512], path[700];
  snprintf(dir, sizeof dir, "%s", tmp ? tmp : "/tmp/stages_songgen_determinism");
  mkdir(dir, 0777);
  stg_song *s = gen(9, 16000);
  REQUIRE(stg_song_write(s, dir, "clip") == 0);
  const char *wavs[] = {"clip.wav", "clip.vocals.wav", "clip.accompaniment.wav"};
  const float *tracks[] = {s->mix, s->vocals, s->accomp};
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, wavs[i]);
    SF_INFO info = {0};
    SNDFILE *f = sf_open(path, SFM_READ, &info);
    REQUIRE(f != NULL);
    CHECK_EQ_INT(info.samplerate, 16000);
    CHECK_EQ_INT(info.channels, 1);
    CHECK_EQ_U64(info.frames, s->frames);
    float *x = malloc(s->frames * sizeof *x);
    CHECK_EQ_U64(sf_readf_float(f, x, (sf_count_t)s->frames), s->frames);
    double worst = 0;
    for (uint64_t k = 0; k < s->frames; k++)
      worst = fmax(worst, fabs((double)x[k] - tracks[i][k]));
    CHECK_MSG(worst < 1.0 / 32768 * 1.01, "%s: 16-bit round trip error %g", wavs[i], worst);
    free(x);
    sf_close(f);
  }
  snprintf(path, sizeof path, "%s/clip.truth.json", dir);
  json_t *j = json_load_file(path, 0, NULL);
  REQUIRE(j != NULL);
  CHECK_EQ_U64(json_array_size(json_object_get(j, "notes")), s->n_notes);
  CHECK_EQ_U64(json_array_size(json_object_get(json_object_get(j, "f0"), "hz")), s->n_f0);
  CHECK_EQ_INT(json_array_size(json_object_get(j, "phrases")), s->n_lines);
  json_decref(j);
  snprintf(path, sizeof path, "%s/clip.lyrics.txt", dir);
  FILE *f = fopen(path, "r");
  REQUIRE(f != NULL);
  int lines = 0, words = 0, c, prev = '\n';
  while ((c = fgetc(f)) != EOF) {
    lines += c == '\n';
    words += c != ' ' && c != '\n' && (prev == ' ' || prev == '\n');
    prev = c;
  }
  fclose(f);
  CHECK_EQ_INT(lines, s->n_lines);
  CHECK_EQ_U64(words, s->n_notes);
  stg_song_destroy(s);
}

/* The worded voice: the same notes and f0 truth as the vowel voice (only
 * the timbre differs), the same samples for the same seed, a sung word over
 * every note (the vocal stem carries energy inside each note and none in the
 * rests), and the truth's words are the notes' words at the notes' onsets. */
static void test_words_voice(void) {
  stg_songgen_params p = stg_songgen_defaults();
  p.seed = 7;
  p.seconds = 12.0;
  stg_song *v = NULL, *a = NULL, *b = NULL;
  REQUIRE(stg_songgen_create(&p, &v) == 0);
  p.voice = EBB_SONG_VOICE_WORDS;
  int rc = stg_songgen_create(&p, &a);
  CHECK_MSG(rc == 0, "words voice: %s (libespeak-ng installed?)", ebb_errmsg());
  if (rc) {
    stg_song_destroy(v);
    return;
  }
  REQUIRE(stg_songgen_create(&p, &b) == 0);
  CHECK(memcmp(a->vocals, b->vocals, a->frames * sizeof(float)) == 0);
  CHECK(memcmp(a->vocals, v->vocals, a->frames * sizeof(float)) != 0);
  REQUIRE(a->n_notes == v->n_notes);
  CHECK(memcmp(a->f0_hz, v->f0_hz, a->n_f0 * sizeof(float)) == 0);
  for (size_t i = 0; i < a->n_notes; i++) {
    const stg_song_note *n = &a->notes[i];
    CHECK(n->onset == v->notes[i].onset && n->midi == v->notes[i].midi);
    CHECK_EQ_STR(n->word, v->notes[i].word);
    uint64_t s0 = (uint64_t)(n->onset * a->rate), s1 = (uint64_t)(n->offset * a->rate);
    double e = 0;
    for (uint64_t k = s0; k < s1; k++)
      e += (double)a->vocals[k] * a->vocals[k];
    CHECK_MSG(sqrt(e / (double)(s1 - s0)) > 0.01, "note %zu (\"%s\") is not sung: RMS %g", i,
              n->word, sqrt(e / (double)(s1 - s0)));
    uint64_t r0 = (uint64_t)(n->offset * a->rate) + 1;
    uint64_t r1 = i + 1 < a->n_notes ? (uint64_t)(a->notes[i + 1].onset * a->rate) : a->frames;
    for (uint64_t k = r0; k < r1; k++)
      if (a->vocals[k] != 0.0f) {
        CHECK_MSG(0, "voice in the rest after note %zu at sample %llu", i, (unsigned long long)k);
        break;
      }
  }
  char *j = NULL;
  REQUIRE(stg_song_truth_json(a, &j) == 0);
  json_t *t = json_loads(j, 0, NULL);
  REQUIRE(t != NULL);
  CHECK_EQ_STR(json_string_value(json_object_get(t, "voice")), "words");
  json_t *words = json_object_get(t, "words");
  CHECK_EQ_U64(json_array_size(words), a->n_notes);
  for (size_t i = 0; i < json_array_size(words) && i < a->n_notes; i++) {
    json_t *w = json_array_get(words, i);
    CHECK_EQ_STR(json_string_value(json_object_get(w, "word")), a->notes[i].word);
    CHECK(fabs(json_number_value(json_object_get(w, "start")) - a->notes[i].onset) < 1e-3);
  }
  json_decref(t);
  free(j);
  stg_song_destroy(v);
  stg_song_destroy(a);
  stg_song_destroy(b);
}

static void test_bad_params(void) {
  stg_songgen_params p = stg_songgen_defaults();
  stg_song *s = NULL;
  p.rate = 4000;
  CHECK_EQ_INT(stg_songgen_create(&p, &s), EBB_EINVAL);
  CHECK(strstr(ebb_errmsg(), "4000") != NULL);
  p = stg_songgen_defaults();
  p.seconds = 2;
  CHECK_EQ_INT(stg_songgen_create(&p, &s), EBB_EINVAL);
  CHECK(s == NULL);
}

int main(void) {
  RUN(test_same_seed_same_song);
  RUN(test_truth_consistent);
  RUN(test_files);
  RUN(test_words_voice);
  RUN(test_bad_params);
  return TEST_END();
}
