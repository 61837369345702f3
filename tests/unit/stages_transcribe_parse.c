/* The transcribe stage's verbose_json parsers on fixed answers: OpenAI's
 * top-level words, whisper.cpp's segments[].words and segments[].tokens
 * (sub-word pieces merged into words), bad times dropped, and the errors for
 * malformed or incomplete answers. */
#include <jansson.h>

#include "ebb/error.h"
#include "stages/audio/transcribe.h"
#include "test.h"

static char logbuf[4096];
static int nlogs;
static void cap_log(void *arg, int level, const char *msg) {
  (void)arg;
  nlogs++;
  snprintf(logbuf, sizeof logbuf, "%d %s", level, msg);
}

/* Parses body; returns the transcript object (caller decrefs) or NULL. */
static json_t *parse(const char *body, stg_whisper_protocol p, int *rc_out, int *dropped) {
  char *out = NULL;
  nlogs = 0;
  logbuf[0] = 0;
  int rc =
      stg_transcribe_parse(body, strlen(body), p, "http://srv/x", &out, dropped, cap_log, NULL);
  *rc_out = rc;
  if (rc)
    return NULL;
  json_error_t e;
  json_t *j = json_loads(out, 0, &e);
  free(out);
  return j;
}

static const char *word_at(json_t *t, size_t i, double *s, double *e) {
  json_t *w = json_array_get(json_object_get(t, "words"), i);
  *s = json_real_value(json_object_get(w, "start"));
  *e = json_real_value(json_object_get(w, "end"));
  return json_string_value(json_object_get(w, "word"));
}

static void test_openai_words(void) {
  const char *body =
      "{\"task\":\"transcribe\",\"language\":\"english\",\"duration\":3.0,"
      "\"text\":\" Hello world \",\"words\":[{\"word\":\"Hello\",\"start\":0.5,\"end\":0.9},"
      "{\"word\":\" world\",\"start\":1.0,\"end\":1.4567}],"
      "\"segments\":[{\"id\":0,\"start\":0.0,\"end\":3.0,\"text\":\" Hello "
      "world\",\"tokens\":[1,2]}]}";
  int rc, dropped = -1;
  json_t *t = parse(body, EBB_WHISPER_OPENAI, &rc, &dropped);
  REQUIRE(rc == 0 && t);
  CHECK_EQ_INT(dropped, 0);
  CHECK_EQ_STR(json_string_value(json_object_get(t, "text")), "Hello world");
  CHECK_EQ_STR(json_string_value(json_object_get(t, "language")), "en");
  CHECK_EQ_STR(json_string_value(json_object_get(t, "protocol")), "openai");
  CHECK_EQ_STR(json_string_value(json_object_get(t, "server")), "http://srv/x");
  CHECK_EQ_INT(json_array_size(json_object_get(t, "words")), 2);
  double s, e;
  CHECK_EQ_STR(word_at(t, 0, &s, &e), "Hello");
  CHECK_NEAR(s, 0.5, 1e-9);
  CHECK_NEAR(e, 0.9, 1e-9);
  CHECK_EQ_STR(word_at(t, 1, &s, &e), "world");
  CHECK_NEAR(e, 1.457, 1e-9); /* rounded to ms */
  json_t *seg = json_array_get(json_object_get(t, "segments"), 0);
  CHECK_EQ_INT(json_array_size(json_object_get(t, "segments")), 1);
  CHECK_NEAR(json_real_value(json_object_get(seg, "end")), 3.0, 1e-9);
  CHECK_EQ_STR(json_string_value(json_object_get(seg, "text")), "Hello world");
  CHECK_EQ_INT(nlogs, 0);
  json_decref(t);
}

/* OpenAI-compatible servers (faster-whisper) put words inside segments. */
static void test_openai_segment_words(void) {
  const char *body = "{\"text\":\"a b\",\"language\":\"de\",\"segments\":[{\"start\":0,\"end\":2,"
                     "\"text\":\"a b\",\"words\":[{\"word\":\" a\",\"start\":0.1,\"end\":0.2},"
                     "{\"word\":\"b\",\"start\":0.3,\"end\":0.4}]}]}";
  int rc, dropped;
  json_t *t = parse(body, EBB_WHISPER_OPENAI, &rc, &dropped);
  REQUIRE(rc == 0 && t);
  double s, e;
  CHECK_EQ_INT(json_array_size(json_object_get(t, "words")), 2);
  CHECK_EQ_STR(word_at(t, 0, &s, &e), "a");
  CHECK_EQ_STR(word_at(t, 1, &s, &e), "b"); /* not merged: OpenAI words are words */
  CHECK_EQ_STR(json_string_value(json_object_get(t, "language")), "de");
  json_decref(t);
}

/* whisper.cpp >= 1.7: segments[].words are tokens; pieces without a leading
 * space continue the previous word; the words of two segments never merge. */
static void test_whispercpp_words_shape(void) {
  const char *body =
      "{\"task\":\"transcribe\",\"language\":\"english\",\"duration\":4.0,"
      "\"text\":\" And so my fellow Americans.\",\"segments\":["
      "{\"id\":0,\"text\":\" And so my\",\"start\":0.0,\"end\":1.5,\"tokens\":[50364,400,370],"
      "\"words\":[{\"word\":\" And\",\"start\":0.32,\"end\":0.5,\"t_dtw\":-1,\"probability\":0.9},"
      "{\"word\":\" so\",\"start\":0.5,\"end\":0.7,\"t_dtw\":-1,\"probability\":0.9},"
      "{\"word\":\" my\",\"start\":0.8,\"end\":1.1,\"t_dtw\":-1,\"probability\":0.9}]},"
      "{\"id\":1,\"text\":\" fellow Americans.\",\"start\":1.5,\"end\":4.0,\"tokens\":[1,2,3],"
      "\"words\":[{\"word\":\"fel\",\"start\":1.5,\"end\":1.7,\"probability\":0.9},"
      "{\"word\":\"low\",\"start\":1.7,\"end\":2.0,\"probability\":0.9},"
      "{\"word\":\" Americ\",\"start\":2.1,\"end\":2.6,\"probability\":0.9},"
      "{\"word\":\"ans\",\"start\":2.6,\"end\":3.1,\"probability\":0.9},"
      "{\"word\":\".\",\"start\":3.1,\"end\":3.1,\"probability\":0.9}]}]}";
  int rc, dropped;
  json_t *t = parse(body, EBB_WHISPER_WHISPERCPP, &rc, &dropped);
  REQUIRE(rc == 0 && t);
  CHECK_EQ_INT(dropped, 0);
  CHECK_EQ_STR(json_string_value(json_object_get(t, "protocol")), "whispercpp");
  CHECK_EQ_STR(json_string_value(json_object_get(t, "language")), "en");
  REQUIRE(json_array_size(json_object_get(t, "words")) == 5);
  double s, e;
  CHECK_EQ_STR(word_at(t, 0, &s, &e), "And");
  CHECK_NEAR(s, 0.32, 1e-9);
  CHECK_EQ_STR(word_at(t, 2, &s, &e), "my");
  /* "fel" starts segment 1 without a space: a new word, not part of "my" */
  CHECK_EQ_STR(word_at(t, 3, &s, &e), "fellow");
  CHECK_NEAR(s, 1.5, 1e-9);
  CHECK_NEAR(e, 2.0, 1e-9);
  CHECK_EQ_STR(word_at(t, 4, &s, &e), "Americans.");
  CHECK_NEAR(s, 2.1, 1e-9);
  CHECK_NEAR(e, 3.1, 1e-9);
  CHECK_EQ_INT(json_array_size(json_object_get(t, "segments")), 2);
  json_decref(t);
}

/* Older whisper.cpp / whisper-cli -ojf: tokens with t0/t1 (centiseconds) or
 * offsets (ms), special tokens included. */
static void test_whispercpp_tokens_shape(void) {
  const char *body =
      "{\"text\":\" Hi there\",\"language\":\"en\",\"segments\":[{\"t0\":0,\"t1\":250,"
      "\"text\":\" Hi there\",\"tokens\":[{\"text\":\"[_BEG_]\",\"t0\":0,\"t1\":0},"
      "{\"text\":\" Hi\",\"t0\":12,\"t1\":40},{\"text\":\" the\",\"t0\":50,\"t1\":80},"
      "{\"text\":\"re\",\"t0\":80,\"t1\":120},{\"text\":\"[_TT_125]\",\"t0\":125,\"t1\":125}]},"
      "{\"offsets\":{\"from\":2500,\"to\":3000},\"text\":\" ok\",\"tokens\":["
      "{\"text\":\" ok\",\"offsets\":{\"from\":2600,\"to\":2900}}]}]}";
  int rc, dropped;
  json_t *t = parse(body, EBB_WHISPER_WHISPERCPP, &rc, &dropped);
  REQUIRE(rc == 0 && t);
  CHECK_EQ_INT(dropped, 0);
  REQUIRE(json_array_size(json_object_get(t, "words")) == 3);
  double s, e;
  CHECK_EQ_STR(word_at(t, 0, &s, &e), "Hi");
  CHECK_NEAR(s, 0.12, 1e-9);
  CHECK_NEAR(e, 0.40, 1e-9);
  CHECK_EQ_STR(word_at(t, 1, &s, &e), "there");
  CHECK_NEAR(s, 0.50, 1e-9);
  CHECK_NEAR(e, 1.20, 1e-9);
  CHECK_EQ_STR(word_at(t, 2, &s, &e), "ok");
  CHECK_NEAR(s, 2.6, 1e-9);
  CHECK_NEAR(e, 2.9, 1e-9);
  json_t *seg = json_array_get(json_object_get(t, "segments"), 0);
  CHECK_NEAR(json_real_value(json_object_get(seg, "end")), 2.5, 1e-9);
  seg = json_array_get(json_object_get(t, "segments"), 1);
  CHECK_NEAR(json_real_value(json_object_get(seg, "start")), 2.5, 1e-9);
  json_decref(t);
}

static void test_bad_times_dropped(void) {
  const char *body =
      "{\"text\":\"a b c d e\",\"words\":[{\"word\":\"a\",\"start\":0,\"end\":0.1},"
      "{\"word\":\"b\",\"start\":-1,\"end\":0.2},{\"word\":\"c\",\"start\":0.5,\"end\":0.3},"
      "{\"word\":\"d\",\"start\":\"x\",\"end\":0.9},{\"word\":\"e\",\"start\":1,\"end\":1.1}],"
      "\"segments\":[{\"start\":2,\"end\":1,\"text\":\"bad\"}]}";
  int rc, dropped;
  json_t *t = parse(body, EBB_WHISPER_OPENAI, &rc, &dropped);
  REQUIRE(rc == 0 && t);
  CHECK_EQ_INT(dropped, 4);
  CHECK_EQ_INT(json_array_size(json_object_get(t, "words")), 2);
  CHECK_EQ_INT(json_array_size(json_object_get(t, "segments")), 0);
  CHECK_EQ_INT(nlogs, 1);
  CHECK_MSG(strstr(logbuf, "2 dropped 4 word(s)/segment(s) with bad times from http://srv/x") &&
                strstr(logbuf, "word 1 \"b\": start -1.000 s is negative") &&
                strstr(logbuf, "word 2 \"c\": end 0.300 s is before start 0.500 s"),
            "warning says what was dropped and why: %s", logbuf);
  json_decref(t);
}

static void expect_error(const char *body, int code, const char *needle) {
  int rc, dropped;
  json_t *t = parse(body, EBB_WHISPER_OPENAI, &rc, &dropped);
  CHECK_EQ_INT(rc, code);
  CHECK(t == NULL);
  CHECK_MSG(strstr(ebb_errmsg(), needle) != NULL, "message \"%s\" lacks \"%s\"", ebb_errmsg(),
            needle);
  json_decref(t);
}

static void test_errors(void) {
  expect_error("{\"text\": \"hi\",\n  \"words\": [", EBB_EPROTO,
               "http://srv/x answered malformed JSON at line 2 column");
  expect_error("", EBB_EPROTO, "malformed JSON at line");
  expect_error("{\"text\": NaN}", EBB_EPROTO, "malformed JSON");
  expect_error("[1,2]", EBB_EPROTO, "not an object");
  expect_error("{\"segments\": []}", EBB_EPROTO, "without a \"text\" string");
  expect_error("{\"text\": \"hi\"}", EBB_EPROTO, "neither \"words\" nor \"segments\"");
  expect_error("{\"text\": \"hi\", \"segments\": 3}", EBB_EPROTO,
               "\"segments\" that is not an array");
  expect_error("{\"error\": \"failed to read WAV file\"}", EBB_EPROTO,
               "answered an error: failed to read WAV file");
  expect_error("{\"error\": {\"message\": \"bad model\"}}", EBB_EPROTO,
               "answered an error: bad model");
}

static void test_protocol_helpers(void) {
  CHECK_EQ_INT(stg_whisper_protocol_resolve(EBB_WHISPER_AUTO, "http://h:8080/inference"),
               EBB_WHISPER_WHISPERCPP);
  CHECK_EQ_INT(stg_whisper_protocol_resolve(EBB_WHISPER_AUTO, "http://h/inference/?mode=x"),
               EBB_WHISPER_WHISPERCPP);
  CHECK_EQ_INT(stg_whisper_protocol_resolve(EBB_WHISPER_AUTO, "http://h/v1/audio/transcriptions"),
               EBB_WHISPER_OPENAI);
  CHECK_EQ_INT(stg_whisper_protocol_resolve(EBB_WHISPER_AUTO, "http://h/x?p=/inference"),
               EBB_WHISPER_OPENAI);
  CHECK_EQ_INT(stg_whisper_protocol_resolve(EBB_WHISPER_OPENAI, "http://h/inference"),
               EBB_WHISPER_OPENAI);
  stg_whisper_protocol p;
  CHECK_EQ_INT(stg_whisper_protocol_parse("whispercpp", &p), 0);
  CHECK_EQ_INT(p, EBB_WHISPER_WHISPERCPP);
  CHECK_EQ_INT(stg_whisper_protocol_parse("grpc", &p), EBB_ECONFIG);
  CHECK(strstr(ebb_errmsg(), "\"grpc\"") != NULL);
  CHECK_EQ_STR(stg_whisper_language_code("English"), "en");
  CHECK_EQ_STR(stg_whisper_language_code("ja"), "ja");
  CHECK_EQ_STR(stg_whisper_language_code("klingon"), "klingon");
}

/* Every truncation and single-byte corruption of a valid answer either
 * parses or fails with EBB_EPROTO; never anything else (run under ASan). */
static void test_truncated_and_corrupted(void) {
  const char *body =
      "{\"text\":\" Hi there\",\"language\":\"english\",\"segments\":[{\"start\":0,\"end\":2.5,"
      "\"text\":\" Hi there\",\"words\":[{\"word\":\" Hi\",\"start\":0.12,\"end\":0.4},"
      "{\"word\":\" "
      "the\",\"start\":0.5,\"end\":0.8},{\"word\":\"re\",\"start\":0.8,\"end\":1.2}]}]}";
  size_t n = strlen(body);
  int bad = 0, ok = 0;
  char *buf = malloc(n + 1);
  REQUIRE(buf != NULL);
  for (size_t len = 0; len <= n; len++) {
    char *out = NULL;
    int rc = stg_transcribe_parse(body, len, EBB_WHISPER_WHISPERCPP, "u", &out, NULL, NULL, NULL);
    if (rc != 0 && rc != EBB_EPROTO)
      bad++;
    ok += rc == 0;
    free(out);
  }
  CHECK_EQ_INT(ok, 1); /* only the whole answer parses */
  const char subst[] = "\"{}[],:-0 x";
  for (size_t i = 0; i < n; i++) {
    for (size_t k = 0; k < sizeof subst - 1; k++) {
      memcpy(buf, body, n + 1);
      buf[i] = subst[k];
      char *out = NULL;
      int rc = stg_transcribe_parse(buf, n, EBB_WHISPER_WHISPERCPP, "u", &out, NULL, NULL, NULL);
      if (rc != 0 && rc != EBB_EPROTO)
        bad++;
      free(out);
    }
  }
  free(buf);
  CHECK_EQ_INT(bad, 0);
}

int main(void) {
  RUN(test_openai_words);
  RUN(test_openai_segment_words);
  RUN(test_whispercpp_words_shape);
  RUN(test_whispercpp_tokens_shape);
  RUN(test_bad_times_dropped);
  RUN(test_errors);
  RUN(test_protocol_helpers);
  RUN(test_truncated_and_corrupted);
  return TEST_END();
}
