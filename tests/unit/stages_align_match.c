/* align: the edit-distance alignment of lyric words to a transcript with
 * substitutions, insertions and deletions gives the right pairs, and the
 * stage turns it into timed words (matched: transcript times snapped to voice
 * activity; unmatched: interpolated between neighbours). */
#include <jansson.h>
#include <math.h>
#include <sys/stat.h>

#include "stages/audio/align.h"
#include "stages_pitch_host.h"
#include "test.h"

static void test_normalise_distance(void) {
  char b[64];
  stg_align_normalise("Don't!", b, sizeof b);
  CHECK_EQ_STR(b, "dont");
  stg_align_normalise("  HeLLo,", b, sizeof b);
  CHECK_EQ_STR(b, "hello");
  CHECK_NEAR(stg_align_word_distance("Light", "light."), 0.0, 1e-12);
  CHECK_NEAR(stg_align_word_distance("colour", "color"), 1.0 / 6.0, 1e-12);
  CHECK_NEAR(stg_align_word_distance("sun", "moon"), 3.0 / 4.0, 1e-12);
  CHECK_NEAR(stg_align_word_distance("", "a"), 1.0, 1e-12);
}

static void test_alignment(void) {
  /* lyrics:     the sun will rise over the  quiet hill  and light my face
   * transcript: the son will rise over a   the   hill  and      my face today
   * sun~son (0.33: match), "a" inserted, "quiet" deleted, "light" deleted,
   * "today" inserted. */
  const char *lyr[] = {"The",   "sun",  "will", "rise",  "over", "the",
                       "quiet", "hill", "and",  "light", "my",   "face"};
  const char *tr[] = {"the", "son",  "will", "rise", "over", "a",
                      "the", "hill", "and",  "my",   "face", "today"};
  int map[12];
  REQUIRE(stg_align_words(lyr, 12, tr, 12, map) == 0);
  const int want[12] = {0, 1, 2, 3, 4, 6, -1, 7, 8, -1, 9, 10};
  for (int i = 0; i < 12; i++)
    CHECK_MSG(map[i] == want[i], "lyric word %d (%s): matched %d, expected %d", i, lyr[i], map[i],
              want[i]);
  /* a real substitution (distance > 0.5) is not a match */
  const char *l2[] = {"we", "walk", "through", "fields"};
  const char *t2[] = {"we", "talked", "through", "fields"};
  REQUIRE(stg_align_words(l2, 4, t2, 4, map) == 0);
  CHECK_EQ_INT(map[0], 0);
  CHECK_EQ_INT(map[1], -1);
  CHECK_EQ_INT(map[2], 2);
  CHECK_EQ_INT(map[3], 3);
  /* nothing to align against */
  REQUIRE(stg_align_words(l2, 4, t2, 0, map) == 0);
  CHECK_EQ_INT(map[0], -1);
}

#define RATE 16000u

/* Vocals: tone bursts at known spans (the voice activity), silence between. */
static float *bursts(const double (*span)[2], int n, double seconds) {
  uint64_t len = (uint64_t)(seconds * RATE);
  float *x = calloc(len, sizeof *x);
  for (int k = 0; k < n; k++)
    for (uint64_t i = (uint64_t)(span[k][0] * RATE); i < (uint64_t)(span[k][1] * RATE); i++)
      x[i] = (float)(0.3 * sin(2 * M_PI * 220.0 * i / RATE));
  return x;
}

static json_t *word_at(json_t *lyrics, size_t i) {
  return json_array_get(json_object_get(lyrics, "words"), i);
}

static void test_stage_transcript_lyrics(void) {
  const char *tmp = getenv("EBB_TEST_TMP");
  char dir[512], path[600];
  snprintf(dir, sizeof dir, "%s", tmp ? tmp : "/tmp/stages_align_match");
  mkdir(dir, 0777);
  snprintf(path, sizeof path, "%s/lyrics.txt", dir);
  FILE *f = fopen(path, "w");
  REQUIRE(f != NULL);
  fputs("[Verse]\nSun rise, over the hill\n\nlight falls on my face\n", f);
  fclose(f);
  /* activity: 1.00-2.50 (line 1), 3.50-5.00 (line 2) */
  const double act[2][2] = {{1.0, 2.5}, {3.5, 5.0}};
  float *x = bursts(act, 2, 6.0);
  /* the transcript is ~0.1 s late on phrase starts and misses "falls" */
  const char *tr =
      "{\"text\":\"sun rise over the hill light on my face\",\"language\":\"en\",\"words\":["
      "{\"word\":\"sun\",\"start\":1.1,\"end\":1.4},{\"word\":\" rise\",\"start\":1.4,\"end\":1.7},"
      "{\"word\":\"over\",\"start\":1.7,\"end\":1.95},{\"word\":\"the\",\"start\":1.95,\"end\":2.1}"
      ","
      "{\"word\":\"hill\",\"start\":2.1,\"end\":2.42},{\"word\":\"light\",\"start\":3.62,\"end\":3."
      "9},"
      "{\"word\":\"on\",\"start\":4.3,\"end\":4.45},{\"word\":\"my\",\"start\":4.45,\"end\":4.7},"
      "{\"word\":\"face\",\"start\":4.7,\"end\":4.93}],\"segments\":[]}";
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  ebb_items in = {0}, out = {0};
  REQUIRE(th_add_audio(&in, "vocals", x, 6 * RATE, 1, RATE) == 0);
  REQUIRE(th_add_json(&in, "transcript", tr) == 0);
  char opts[800];
  /* the text method (method acoustic, the default, has its own tests) */
  snprintf(opts, sizeof opts, "{\"lyrics\":\"%s\",\"method\":\"text\"}", path);
  int rc = th_run_stage(&t, &stg_stage_align, opts, &in, &out);
  CHECK_MSG(rc == 0, "align failed: %s", t.err);
  ebb_item_info info;
  REQUIRE(th_item_find(&out, "lyrics", &info) == 0);
  json_t *j = json_loads(info.text, 0, NULL);
  REQUIRE(j != NULL);
  CHECK_EQ_STR(json_string_value(json_object_get(j, "source")), "transcript+lyrics");
  json_t *words = json_object_get(j, "words");
  REQUIRE(json_array_size(words) == 10);
  static const char *const want[10] = {"Sun",   "rise,", "over", "the", "hill",
                                       "light", "falls", "on",   "my",  "face"};
  static const int matched[10] = {1, 1, 1, 1, 1, 1, 0, 1, 1, 1};
  static const int line[10] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
  for (size_t i = 0; i < 10; i++) {
    json_t *w = word_at(j, i);
    CHECK_EQ_STR(json_string_value(json_object_get(w, "word")), want[i]);
    CHECK_MSG(json_is_true(json_object_get(w, "matched")) == matched[i], "word %zu matched flag",
              i);
    CHECK_EQ_INT(json_integer_value(json_object_get(w, "line")), line[i]);
  }
  /* "Sun" starts at the activity onset (1.0, snapped from 1.1); "light" at
   * 3.5 (from 3.62); "hill" ends at the offset 2.5 */
  CHECK_NEAR(json_number_value(json_object_get(word_at(j, 0), "start")), 1.0, 0.011);
  CHECK_NEAR(json_number_value(json_object_get(word_at(j, 5), "start")), 3.5, 0.011);
  CHECK_NEAR(json_number_value(json_object_get(word_at(j, 4), "end")), 2.5, 0.011);
  /* mid-phrase words keep their transcript times */
  CHECK_NEAR(json_number_value(json_object_get(word_at(j, 2), "start")), 1.7, 1e-6);
  /* "falls" fills the gap between "light" (ends 3.9) and "on" (starts 4.3) */
  CHECK_NEAR(json_number_value(json_object_get(word_at(j, 6), "start")), 3.9, 1e-6);
  CHECK_NEAR(json_number_value(json_object_get(word_at(j, 6), "end")), 4.3, 1e-6);
  json_t *ph = json_object_get(j, "phrases");
  CHECK_EQ_INT(json_array_size(ph), 2);
  for (size_t i = 1; i < 10; i++)
    CHECK(json_number_value(json_object_get(word_at(j, i), "start")) >=
          json_number_value(json_object_get(word_at(j, i - 1), "end")) - 1e-9);
  json_decref(j);
  th_items_free(&in);
  th_items_free(&out);
  /* the transcript alone */
  ebb_items in2 = {0}, out2 = {0};
  th_add_audio(&in2, "vocals", x, 6 * RATE, 1, RATE);
  th_add_json(&in2, "transcript", tr);
  CHECK_EQ_INT(th_run_stage(&t, &stg_stage_align, "{\"method\":\"text\"}", &in2, &out2), 0);
  REQUIRE(th_item_find(&out2, "lyrics", &info) == 0);
  j = json_loads(info.text, 0, NULL);
  CHECK_EQ_STR(json_string_value(json_object_get(j, "source")), "transcript");
  CHECK_EQ_INT(json_array_size(json_object_get(j, "words")), 9);
  CHECK(json_object_get(word_at(j, 0), "line") == NULL);
  json_decref(j);
  th_items_free(&in2);
  th_items_free(&out2);
  /* a lyrics file that does not exist is an input error naming it */
  ebb_items in3 = {0}, out3 = {0};
  th_add_json(&in3, "transcript", tr);
  CHECK_EQ_INT(th_run_stage(&t, &stg_stage_align, "{\"lyrics\":\"/nonexistent/l.txt\"}", &in3,
                            &out3),
               EBB_EINPUT);
  CHECK(strstr(t.err, "/nonexistent/l.txt") != NULL);
  th_items_free(&in3);
  th_items_free(&out3);
  free(x);
}

int main(void) {
  RUN(test_normalise_distance);
  RUN(test_alignment);
  RUN(test_stage_transcript_lyrics);
  return TEST_END();
}
