/* stg_transcribe_parse on verbose_json bodies, OpenAI and whisper.cpp shapes.
 * Input: byte 0 picks the protocol (0: openai, 1: whispercpp, 2: auto with an
 * /inference URL, 3: auto with an OpenAI URL), the rest is the body. A body
 * either parses into ebb's transcript JSON (valid JSON: text string, words
 * and segments arrays whose times are finite, >= 0 and end >= start) or
 * fails with EBB_EPROTO. */
#include <jansson.h>
#include <math.h>

#include "ebb/error.h"
#include "fuzz_util.h"
#include "stages/audio/transcribe.h"

static void check_timed(json_t *arr, const char *what, const char *textkey) {
  FUZZ_CHECK(json_is_array(arr), "\"%s\" is not an array", what);
  size_t i;
  json_t *o;
  json_array_foreach(arr, i, o) {
    FUZZ_CHECK(json_is_object(o), "%s[%zu] is not an object", what, i);
    json_t *s = json_object_get(o, "start"), *e = json_object_get(o, "end");
    FUZZ_CHECK(json_is_number(s) && json_is_number(e), "%s[%zu]: start/end not numbers", what, i);
    double a = json_number_value(s), b = json_number_value(e);
    FUZZ_CHECK(isfinite(a) && isfinite(b) && a >= 0 && b >= a, "%s[%zu]: start %g end %g", what, i,
               a, b);
    FUZZ_CHECK(json_is_string(json_object_get(o, textkey)), "%s[%zu]: no \"%s\" string", what, i,
               textkey);
  }
}

static int nlogs;
static void on_log(void *arg, int level, const char *msg) {
  (void)arg;
  FUZZ_CHECK(msg && level >= 0 && level <= 3, "log level %d", level);
  nlogs++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  static const stg_whisper_protocol protos[] = {EBB_WHISPER_OPENAI, EBB_WHISPER_WHISPERCPP,
                                                EBB_WHISPER_AUTO, EBB_WHISPER_AUTO};
  static const char *const urls[] = {"http://127.0.0.1:9/v1/audio/transcriptions",
                                     "http://127.0.0.1:9/inference",
                                     "http://127.0.0.1:9/inference/?x=1",
                                     "http://127.0.0.1:9/v1/audio/transcriptions#inference"};
  int sel = data[0] & 3;
  /* the body without a terminating NUL: the parser must respect len */
  char *body = malloc(size - 1 ? size - 1 : 1);
  if (!body)
    abort();
  memcpy(body, data + 1, size - 1);
  char *out = NULL;
  int dropped = -1;
  nlogs = 0;
  int rc =
      stg_transcribe_parse(body, size - 1, protos[sel], urls[sel], &out, &dropped, on_log, NULL);
  if (rc) {
    FUZZ_CHECK(rc == EBB_EPROTO, "rc %d (%s), expected EBB_EPROTO: %s", rc, ebb_errname(rc),
               ebb_errmsg());
    FUZZ_CHECK(strstr(ebb_errmsg(), urls[sel]), "message does not name the URL: %s", ebb_errmsg());
    FUZZ_CHECK(!out, "output set on failure");
  } else {
    FUZZ_CHECK(out, "success without output");
    json_error_t e;
    json_t *t = json_loads(out, 0, &e);
    FUZZ_CHECK(t, "the transcript is not JSON (%s): %s", e.text, out);
    FUZZ_CHECK(json_is_string(json_object_get(t, "text")), "no \"text\" string: %s", out);
    check_timed(json_object_get(t, "words"), "words", "word");
    check_timed(json_object_get(t, "segments"), "segments", "text");
    const char *proto = json_string_value(json_object_get(t, "protocol"));
    FUZZ_CHECK(proto && (!strcmp(proto, "openai") || !strcmp(proto, "whispercpp")), "protocol %s",
               proto ? proto : "(none)");
    FUZZ_CHECK(dropped >= 0 && (dropped == 0) == (nlogs == 0), "dropped %d but %d warnings logged",
               dropped, nlogs);
    json_decref(t);
    free(out);
  }
  free(body);
  return 0;
}
