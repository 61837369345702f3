/* verbose_json (OpenAI and whisper.cpp shapes) -> ebb's transcript JSON. */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/transcribe.h"

/* Bad-time examples kept for the one warning a parse logs. */
#define NOTE_MAX 3

typedef struct parse_acc {
  json_t *words;    /* output array, owned */
  json_t *segments; /* output array, owned */
  int dropped;
  int nnotes;
  char notes[NOTE_MAX][160];
} parse_acc;

typedef struct word_buf { /* a word being merged from sub-word pieces */
  char *text;
  size_t len, cap;
  double start, end;
  int has_time;
  int open;
} word_buf;

/* "openai" / "whispercpp" / "auto". */
static const char *stg_whisper_protocol_name(stg_whisper_protocol p) {
  switch (p) {
  case EBB_WHISPER_OPENAI: return "openai";
  case EBB_WHISPER_WHISPERCPP: return "whispercpp";
  default: return "auto";
  }
}

int stg_whisper_protocol_parse(const char *s, stg_whisper_protocol *out) {
  if (!s || !strcmp(s, "auto"))
    *out = EBB_WHISPER_AUTO;
  else if (!strcmp(s, "openai"))
    *out = EBB_WHISPER_OPENAI;
  else if (!strcmp(s, "whispercpp") || !strcmp(s, "whisper.cpp"))
    *out = EBB_WHISPER_WHISPERCPP;
  else
    return ebb_seterr(EBB_ECONFIG,
                      "option protocol: \"%s\" is not one of \"auto\", \"openai\", \"whispercpp\"",
                      s);
  return 0;
}

stg_whisper_protocol stg_whisper_protocol_resolve(stg_whisper_protocol p, const char *url) {
  if (p != EBB_WHISPER_AUTO)
    return p;
  if (!url)
    return EBB_WHISPER_OPENAI;
  size_t n = strcspn(url, "?#");
  while (n > 0 && url[n - 1] == '/')
    n--;
  static const char tail[] = "/inference";
  size_t t = sizeof tail - 1;
  if (n >= t && !strncmp(url + n - t, tail, t))
    return EBB_WHISPER_WHISPERCPP;
  return EBB_WHISPER_OPENAI;
}

const char *stg_whisper_language_code(const char *name) {
  static const char *const map[][2] = {
      {"english", "en"},    {"chinese", "zh"},   {"german", "de"},     {"spanish", "es"},
      {"russian", "ru"},    {"korean", "ko"},    {"french", "fr"},     {"japanese", "ja"},
      {"portuguese", "pt"}, {"turkish", "tr"},   {"polish", "pl"},     {"catalan", "ca"},
      {"dutch", "nl"},      {"arabic", "ar"},    {"swedish", "sv"},    {"italian", "it"},
      {"indonesian", "id"}, {"hindi", "hi"},     {"finnish", "fi"},    {"vietnamese", "vi"},
      {"hebrew", "he"},     {"ukrainian", "uk"}, {"greek", "el"},      {"malay", "ms"},
      {"czech", "cs"},      {"romanian", "ro"},  {"danish", "da"},     {"hungarian", "hu"},
      {"tamil", "ta"},      {"norwegian", "no"}, {"thai", "th"},       {"urdu", "ur"},
      {"croatian", "hr"},   {"bulgarian", "bg"}, {"lithuanian", "lt"}, {"latin", "la"},
      {"welsh", "cy"},      {"slovak", "sk"},    {"persian", "fa"},    {"latvian", "lv"},
      {"bengali", "bn"},    {"serbian", "sr"},   {"slovenian", "sl"},  {"estonian", "et"},
      {"icelandic", "is"},  {"irish", "ga"},     {"cantonese", "yue"},
  };
  if (!name)
    return NULL;
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (!strcasecmp(name, map[i][0]))
      return map[i][1];
  return name;
}

static void note(parse_acc *acc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(parse_acc *acc, const char *fmt, ...) {
  acc->dropped++;
  if (acc->nnotes >= NOTE_MAX)
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(acc->notes[acc->nnotes++], sizeof acc->notes[0], fmt, ap);
  va_end(ap);
}

static double round_ms(double t) { return round(t * 1000.0) / 1000.0; }

/* Reads an item's time pair: start/end (s), t0/t1 (cs) or offsets.from/to
 * (ms). Returns 1 when sane, 0 with `why` filled when not. */
static int read_times(json_t *o, double *start, double *end, char *why, size_t whysz) {
  json_t *a = json_object_get(o, "start"), *b = json_object_get(o, "end");
  double scale = 1.0;
  if (!a && !b) {
    a = json_object_get(o, "t0");
    b = json_object_get(o, "t1");
    scale = 0.01;
  }
  if (!a && !b) {
    json_t *off = json_object_get(o, "offsets");
    a = json_object_get(off, "from");
    b = json_object_get(off, "to");
    scale = 0.001;
  }
  if (!json_is_number(a) || !json_is_number(b)) {
    snprintf(why, whysz, "missing or non-numeric start/end");
    return 0;
  }
  double s = json_number_value(a) * scale, e = json_number_value(b) * scale;
  if (!isfinite(round_ms(s)) || !isfinite(round_ms(e))) { /* ms overflow: json_real(inf) fails */
    snprintf(why, whysz, "time is not a finite number");
    return 0;
  }
  if (s < 0) {
    snprintf(why, whysz, "start %.3f s is negative", s);
    return 0;
  }
  if (e < s) {
    snprintf(why, whysz, "end %.3f s is before start %.3f s", e, s);
    return 0;
  }
  *start = s;
  *end = e;
  return 1;
}

static const char *item_text(json_t *o) {
  json_t *t = json_object_get(o, "word");
  if (!json_is_string(t))
    t = json_object_get(o, "text");
  return json_is_string(t) ? json_string_value(t) : NULL;
}

/* Copies s without leading/trailing white space into a new JSON string. */
static json_t *trimmed_string(const char *s) {
  while (*s && isspace((unsigned char)*s))
    s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1]))
    n--;
  return json_stringn_nocheck(s, n);
}

static int add_word(parse_acc *acc, const char *text, double start, double end) {
  json_t *w = json_object();
  json_t *t = trimmed_string(text);
  if (!w || !t || json_object_set_new(w, "word", t) ||
      json_object_set_new(w, "start", json_real(round_ms(start))) ||
      json_object_set_new(w, "end", json_real(round_ms(end))) ||
      json_array_append_new(acc->words, w)) {
    if (!w)
      json_decref(t);
    json_decref(w);
    return ebb_seterr(EBB_ENOMEM, "transcript: out of memory building words");
  }
  return 0;
}

static int is_special_token(const char *t) {
  size_t n = strlen(t);
  return n >= 3 && t[0] == '[' && t[1] == '_' && t[n - 1] == ']';
}

static int wb_append(word_buf *wb, const char *s) {
  size_t n = strlen(s);
  if (wb->len + n + 1 > wb->cap) {
    size_t cap = (wb->len + n + 1) * 2;
    char *p = realloc(wb->text, cap);
    if (!p)
      return ebb_seterr(EBB_ENOMEM, "transcript: out of memory merging tokens");
    wb->text = p;
    wb->cap = cap;
  }
  memcpy(wb->text + wb->len, s, n + 1);
  wb->len += n;
  return 0;
}

/* Emits the word being merged (if it has text and a time). */
static int wb_flush(parse_acc *acc, word_buf *wb) {
  int rc = 0;
  if (wb->open) {
    const char *t = wb->text ? wb->text : "";
    while (*t && isspace((unsigned char)*t))
      t++;
    if (*t && wb->has_time)
      rc = add_word(acc, t, wb->start, wb->end);
    else if (*t)
      note(acc, "word \"%.40s\": none of its tokens had usable times", t);
  }
  wb->len = 0;
  if (wb->text)
    wb->text[0] = 0;
  wb->open = 0;
  wb->has_time = 0;
  return rc;
}

/* One piece (a word, or with merge a sub-word token) at index i. */
static int take_piece(parse_acc *acc, word_buf *wb, json_t *o, int merge, size_t seg, size_t i) {
  char why[96];
  double s = 0, e = 0;
  if (!json_is_object(o)) {
    if (json_is_integer(o)) /* whisper.cpp's "tokens": [ids] carry no text */
      return 0;
    note(acc, "segment %zu word %zu is not an object", seg, i);
    return 0;
  }
  const char *text = item_text(o);
  if (!text) {
    note(acc, "segment %zu word %zu has no \"word\"/\"text\" string", seg, i);
    return 0;
  }
  int ok = read_times(o, &s, &e, why, sizeof why);
  if (!merge) {
    if (!ok) {
      note(acc, "word %zu \"%.40s\": %s", i, text, why);
      return 0;
    }
    return add_word(acc, text, s, e);
  }
  if (is_special_token(text))
    return 0;
  if (!ok)
    note(acc, "segment %zu token %zu \"%.40s\": %s", seg, i, text, why);
  if (!wb->open || isspace((unsigned char)text[0])) {
    int rc = wb_flush(acc, wb);
    if (rc)
      return rc;
    wb->open = 1;
  }
  int rc = wb_append(wb, text);
  if (rc)
    return rc;
  if (ok) {
    if (!wb->has_time) {
      wb->start = s;
      wb->end = e;
      wb->has_time = 1;
    } else {
      wb->start = s < wb->start ? s : wb->start;
      wb->end = e > wb->end ? e : wb->end;
    }
  }
  return 0;
}

static int take_pieces(parse_acc *acc, word_buf *wb, json_t *arr, int merge, size_t seg) {
  size_t i;
  json_t *o;
  json_array_foreach(arr, i, o) {
    int rc = take_piece(acc, wb, o, merge, seg, i);
    if (rc)
      return rc;
  }
  return 0;
}

static int take_segment(parse_acc *acc, json_t *seg, size_t i) {
  char why[96];
  double s, e;
  if (!json_is_object(seg)) {
    note(acc, "segment %zu is not an object", i);
    return 0;
  }
  json_t *t = json_object_get(seg, "text");
  if (!read_times(seg, &s, &e, why, sizeof why)) {
    note(acc, "segment %zu: %s", i, why);
    return 0;
  }
  json_t *o = json_object();
  if (!o || json_object_set_new(o, "start", json_real(round_ms(s))) ||
      json_object_set_new(o, "end", json_real(round_ms(e))) ||
      json_object_set_new(o, "text",
                          trimmed_string(json_is_string(t) ? json_string_value(t) : "")) ||
      json_array_append_new(acc->segments, o)) {
    json_decref(o);
    return ebb_seterr(EBB_ENOMEM, "transcript: out of memory building segments");
  }
  return 0;
}

/* The server's own error text, if the body is an error object. */
static const char *error_text(json_t *root) {
  json_t *err = json_object_get(root, "error");
  if (json_is_string(err))
    return json_string_value(err);
  if (json_is_object(err)) {
    json_t *m = json_object_get(err, "message");
    return json_is_string(m) ? json_string_value(m) : "(error object without a message)";
  }
  return NULL;
}

/* Collects words per the rules in transcribe.h. */
static int collect_words(parse_acc *acc, json_t *root, json_t *segs, stg_whisper_protocol proto) {
  json_t *top = json_object_get(root, "words");
  int merge = proto == EBB_WHISPER_WHISPERCPP;
  if (json_is_array(top) && (!merge || !json_is_array(segs)))
    return take_pieces(acc, NULL, top, 0, 0);
  if (!json_is_array(segs))
    return 0;
  word_buf wb = {0};
  int rc = 0;
  size_t i;
  json_t *seg;
  json_array_foreach(segs, i, seg) {
    json_t *pieces = json_object_get(seg, "words");
    if (!json_is_array(pieces))
      pieces = json_object_get(seg, "tokens");
    if (!json_is_array(pieces))
      continue;
    rc = merge ? take_pieces(acc, &wb, pieces, 1, i) : take_pieces(acc, NULL, pieces, 0, i);
    if (rc)
      break;
    if (merge && (rc = wb_flush(acc, &wb))) /* a word never spans segments */
      break;
  }
  free(wb.text);
  return rc;
}

static void log_drops(const parse_acc *acc, const char *url, void (*log)(void *, int, const char *),
                      void *log_arg) {
  if (!acc->dropped || !log)
    return;
  char msg[800];
  int n = snprintf(msg, sizeof msg,
                   "dropped %d word(s)/segment(s) with bad times from %s:", acc->dropped,
                   url ? url : "the server");
  for (int i = 0; i < acc->nnotes && n > 0 && (size_t)n < sizeof msg; i++)
    n += snprintf(msg + n, sizeof msg - (size_t)n, "%s %s", i ? ";" : "", acc->notes[i]);
  if (acc->dropped > acc->nnotes && n > 0 && (size_t)n < sizeof msg)
    snprintf(msg + n, sizeof msg - (size_t)n, "; ...");
  log(log_arg, 2, msg);
}

/* The server's answer must be an object with a "text" string and an array of "words" or of
 * "segments" (or both), and no error; answers those three (borrowed from root). */
static int check_answer(json_t *root, const char *where, json_t **text, json_t **segs,
                        json_t **words) {
  if (!json_is_object(root))
    return ebb_seterr(EBB_EPROTO, "%s answered JSON that is not an object", where);
  const char *err = error_text(root);
  if (err)
    return ebb_seterr(EBB_EPROTO, "%s answered an error: %s", where, err);
  *text = json_object_get(root, "text");
  *segs = json_object_get(root, "segments");
  *words = json_object_get(root, "words");
  if (!json_is_string(*text))
    return ebb_seterr(EBB_EPROTO, "%s answered JSON without a \"text\" string", where);
  if ((*segs && !json_is_array(*segs)) || (*words && !json_is_array(*words)))
    return ebb_seterr(EBB_EPROTO, "%s answered \"%s\" that is not an array", where,
                      *segs && !json_is_array(*segs) ? "segments" : "words");
  if (!*segs && !*words)
    return ebb_seterr(EBB_EPROTO,
                      "%s answered JSON with neither \"words\" nor \"segments\" (did it ignore "
                      "response_format=verbose_json?)",
                      where);
  return 0;
}

int stg_transcribe_parse(const char *body, size_t len, stg_whisper_protocol protocol,
                         const char *url, char **transcript_json, int *dropped,
                         void (*log)(void *arg, int level, const char *msg), void *log_arg) {
  const char *where = url ? url : "the server";
  if (dropped)
    *dropped = 0;
  if (!transcript_json || (!body && len))
    return ebb_seterr(EBB_EINVAL, "transcript parse: bad arguments");
  if (protocol == EBB_WHISPER_AUTO)
    protocol = stg_whisper_protocol_resolve(protocol, url);

  json_error_t jerr;
  json_t *root = json_loadb(body ? body : "", len, 0, &jerr);
  if (!root)
    return ebb_seterr(EBB_EPROTO, "%s answered malformed JSON at line %d column %d: %s", where,
                      jerr.line, jerr.column, jerr.text);
  int rc = 0;
  parse_acc acc = {0};
  json_t *out = NULL;
  json_t *text = NULL, *segs = NULL, *words = NULL;
  if ((rc = check_answer(root, where, &text, &segs, &words)))
    goto done;

  acc.words = json_array();
  acc.segments = json_array();
  out = json_object();
  if (!acc.words || !acc.segments || !out) {
    rc = ebb_seterr(EBB_ENOMEM, "transcript: out of memory");
    goto done;
  }
  if ((rc = collect_words(&acc, root, segs, protocol)))
    goto done;
  size_t i;
  json_t *seg;
  json_array_foreach(segs, i, seg) {
    if ((rc = take_segment(&acc, seg, i)))
      goto done;
  }

  json_t *lang = json_object_get(root, "language");
  const char *code = json_is_string(lang) ? stg_whisper_language_code(json_string_value(lang))
                                          : NULL;
  if (json_object_set_new(out, "text", trimmed_string(json_string_value(text))) ||
      json_object_set_new(out, "language", code && *code ? json_string(code) : json_null()) ||
      json_object_set(out, "words", acc.words) || json_object_set(out, "segments", acc.segments) ||
      json_object_set_new(out, "server", json_string(url ? url : "")) ||
      json_object_set_new(out, "protocol", json_string(stg_whisper_protocol_name(protocol)))) {
    rc = ebb_seterr(EBB_ENOMEM, "transcript: out of memory");
    goto done;
  }
  char *s = json_dumps(out, JSON_COMPACT | JSON_REAL_PRECISION(12));
  if (!s) {
    rc = ebb_seterr(EBB_ENOMEM, "transcript: cannot serialise the result");
    goto done;
  }
  log_drops(&acc, where, log, log_arg);
  if (dropped)
    *dropped = acc.dropped;
  *transcript_json = s;
done:
  json_decref(out);
  json_decref(acc.words);
  json_decref(acc.segments);
  json_decref(root);
  return rc;
}
