/* The `align` stage (align.h). */
#include "stages/audio/align.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "stages/audio/decode.h"
#include "stages/audio/st_util.h"
#include "stages/options.h"

typedef struct align_state {
  char *lyrics_path; /* NULL: none */
  double snap_s;
  stg_vad_params vad;
  int acoustic;       /* method acoustic (else text) */
  int song;           /* scope song: lyrics aligned over the whole song (else by phrases) */
  double voice_db;    /* the acoustic alignment's audio: attenuated by up to this where no
                       * pitched voice is near (voicing_db); 0: off */
  char *model, *dict; /* pocketsphinx's acoustic model directory and dictionary */
} align_state;

/* The options, each written once (stages/options.h); stg_vad_defaults takes
 * its defaults from here too. */
#define ALIGN_OPTIONS(NUM, INT, STR, BOOL, SEP, OP_NUM, OP_INT, PATH, URL, SECRET) \
  PATH(lyrics, "",                                                                                 \
      "path of a text file with the lyrics, one line per lyric line (relative to the current "    \
      "directory); empty: none") SEP                                                              \
  STR(method, "acoustic",                                                                         \
      "acoustic: the words (lyrics, else the transcript's) aligned to the vocals with "           \
      "pocketsphinx; text: lyrics matched to the transcript's words by spelling") SEP             \
  STR(scope, "phrases",                                                                            \
      "acoustic with lyrics alone: phrases (each run of lines force-aligned inside the voice "   \
      "phrases a plan pairs it with) or song (all the lyrics over the whole song in "            \
      "overlapping windows, no phrase plan)") SEP                                                 \
  PATH(acoustic_model, "/usr/share/pocketsphinx/model/en-us/en-us",                                \
      "pocketsphinx acoustic model directory (Debian package pocketsphinx-en-us)") SEP            \
  PATH(dictionary, "/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict",                       \
      "pronunciation dictionary (Debian package pocketsphinx-en-us)") SEP                         \
  NUM(snap_ms, 150, 0, 5000, "word boundaries move to a voice-activity onset/offset this close")  \
  SEP                                                                                             \
  STR(vad_phrases, "level",                                                                       \
      "how the voice phrases are found: level (the vocals' level smoothed over 0.3 s against "    \
      "the song's own quiet and loud levels) or periodic (the segments: energy and YIN "          \
      "periodicity)") SEP                                                                         \
  NUM(vad_range_db, 20, 1, 120, "active: within this many dB of the vocals' loud level") SEP      \
  NUM(vad_floor_db, -55, -160, 0, "active: above this level, dBFS") SEP                           \
  NUM(vad_max_aperiodicity, 0.2, 0.01, 1,                                                         \
      "active: YIN aperiodicity (min d', 5-frame median) at most this; 1: energy only") SEP       \
  NUM(min_phrase_ms, 450, 0, 60000, "shorter phrases are dropped") SEP                            \
  NUM(phrase_gap_ms, 350, 0, 60000, "activity closer than this is one phrase") SEP              \
  NUM(voicing_db, 30, 0, 60,                                                                    \
      "acoustic: the vocals the words take their times from are attenuated by up to this many "  \
      "dB where no loud periodic frame (a pitched voice) is near, so rests favour silence; the " \
      "fit is judged on the vocals as they are (docs/songtrace.md); 0: off")
EBB_STAGE_OPTIONS(ALIGN_OPTIONS)

static void set_vad(const stage_opts *v, stg_vad_params *vad) {
  vad->range_db = v->vad_range_db;
  vad->floor_db = v->vad_floor_db;
  vad->max_aperiodicity = v->vad_max_aperiodicity;
  vad->min_phrase_s = v->min_phrase_ms / 1000.0;
  vad->phrase_gap_s = v->phrase_gap_ms / 1000.0;
  vad->level_phrases = strcmp(v->vad_phrases, "periodic") != 0;
}

stg_vad_params stg_vad_defaults(void) {
  stg_vad_params p = {.win_s = 0.02, .hop_s = 0.01, .fill_s = 0.03, .min_active_s = 0.05};
  stage_opts v;                       /* the rest are align options: the table's defaults */
  stage_opts_read("align", NULL, &v); /* no JSON: the defaults, cannot fail */
  set_vad(&v, &p);
  return p;
}

static int align_load(ebb_stage_ctx *ctx, const char *options_json, void **state) {
  json_t *o = NULL;
  stage_opts v;
  int rc = stage_opts_parse("align", options_json, &o, &v);
  align_state *s = NULL;
  if (rc) {
    rc = stg_st_fail(ctx, rc, "%s", ebb_errmsg());
    goto done;
  }
  const char *lyr = v.lyrics;
  if (!(s = calloc(1, sizeof *s))) {
    rc = stg_st_fail(ctx, EBB_ENOMEM, "out of memory");
    goto done;
  }
  s->vad = stg_vad_defaults();
  set_vad(&v, &s->vad);
  s->snap_s = v.snap_ms / 1000.0;
  s->voice_db = v.voicing_db;
  if (strcmp(v.method, "acoustic") && strcmp(v.method, "text")) {
    rc = stg_st_fail(ctx, EBB_ECONFIG, "align: option method=\"%s\" must be acoustic or text",
                     v.method);
    goto done;
  }
  s->acoustic = !strcmp(v.method, "acoustic");
  if (strcmp(v.scope, "phrases") && strcmp(v.scope, "song")) {
    rc = stg_st_fail(ctx, EBB_ECONFIG, "align: option scope=\"%s\" must be phrases or song",
                     v.scope);
    goto done;
  }
  s->song = !strcmp(v.scope, "song");
  if (strcmp(v.vad_phrases, "level") && strcmp(v.vad_phrases, "periodic")) {
    rc = stg_st_fail(ctx, EBB_ECONFIG, "align: option vad_phrases=\"%s\" must be level or periodic",
                     v.vad_phrases);
    goto done;
  }
  s->vad.level_phrases = !strcmp(v.vad_phrases, "level");
  if (!(s->model = strdup(v.acoustic_model)) || !(s->dict = strdup(v.dictionary)) ||
      (*lyr && !(s->lyrics_path = strdup(lyr)))) {
    rc = stg_st_fail(ctx, EBB_ENOMEM, "out of memory");
    goto done;
  }
  *state = s;
  s = NULL;
done:
  if (s) {
    free(s->lyrics_path);
    free(s->model);
    free(s->dict);
  }
  free(s);
  json_decref(o);
  return rc;
}

/* Work (the stage ABI's `work`): the voice activity frames and the text
 * spread over them, ALIGN_S per second of input whatever the options (they
 * move thresholds, not loops). Measured with `ebb run --device cpu` on
 * songgen's song repeated to 60 s, without lyrics (wall "done in", one core
 * of the 2-core development machine): defaults 0.43 s, snap_ms 5000 with
 * vad_max_aperiodicity 0.01 0.36 s: 0.0072 s/s, rounded up. The lyrics add
 * ALIGN_WORD_S a word (the acoustic method: a grammar and a search per line
 * group; the text method matches them to a transcript's words): songgen's
 * lyrics repeated to 1,008 words took 22.6 s on 60 s of input and 26.0 s
 * on 310 s, 4,000 words over 120 s on 60 s (a busy 2-core machine); 0.01 s
 * a word is below all three, so it refuses only what cannot finish. */
#define ALIGN_S 0.008
#define ALIGN_WORD_S 0.01
/* scope song decodes the whole song in overlapping windows: 32.7 s for a
 * 300 s song with 417 words on one busy core (0.109 s/s), rounded up. */
#define ALIGN_SONG_S 0.11
/* A lyrics file is text of a song: more than this is not one. */
#define ALIGN_MAX_LYRICS_BYTES (4u << 20)
static int align_work(const ebb_host_api *host, const char *options_json, double input_s,
                      ebb_work *out) {
  (void)host;
  json_t *o = json_loads(options_json ? options_json : "{}", 0, NULL);
  const char *lyr = json_string_value(json_object_get(o, "lyrics"));
  uint64_t words = lyr ? stg_st_file_words(lyr, ALIGN_MAX_LYRICS_BYTES) : 0;
  const char *scope = json_string_value(json_object_get(o, "scope"));
  out->cpu_s = input_s * (scope && !strcmp(scope, "song") && words ? ALIGN_SONG_S : ALIGN_S) +
               (double)words * ALIGN_WORD_S;
  if (words)
    snprintf(out->drivers, sizeof out->drivers, "%llu words of lyrics", (unsigned long long)words);
  json_decref(o);
  return 0;
}

static void align_unload(ebb_stage_ctx *ctx, void *state) {
  (void)ctx;
  align_state *s = state;
  if (s) {
    free(s->lyrics_path);
    free(s->model);
    free(s->dict);
  }
  free(s);
}

/* --- word lists ------------------------------------------------------------ */

typedef struct wlist {
  char **word;
  double *start, *end;
  int *line, *matched;
  size_t n, cap;
} wlist;

static void wlist_free(wlist *w) {
  for (size_t i = 0; i < w->n; i++)
    free(w->word[i]);
  free(w->word);
  free(w->start);
  free(w->end);
  free(w->line);
  free(w->matched);
  memset(w, 0, sizeof *w);
}

static int wlist_add(wlist *w, const char *word, size_t len, double start, double end, int line) {
  if (w->n == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 64;
    char **a = realloc(w->word, cap * sizeof *a);
    if (a)
      w->word = a;
    double *b = realloc(w->start, cap * sizeof *b);
    if (b)
      w->start = b;
    double *c = realloc(w->end, cap * sizeof *c);
    if (c)
      w->end = c;
    int *d = realloc(w->line, cap * sizeof *d);
    if (d)
      w->line = d;
    int *e = realloc(w->matched, cap * sizeof *e);
    if (e)
      w->matched = e;
    if (!a || !b || !c || !d || !e)
      return ebb_seterr(EBB_ENOMEM, "align: out of memory for words");
    w->cap = cap;
  }
  char *s = strndup(word, len);
  if (!s)
    return ebb_seterr(EBB_ENOMEM, "align: out of memory for words");
  w->word[w->n] = s;
  w->start[w->n] = start;
  w->end[w->n] = end;
  w->line[w->n] = line;
  w->matched[w->n] = 0;
  w->n++;
  return 0;
}

/* The lyrics file, opened non-blocking (a FIFO never holds the stage) and
 * only when it is a regular file of at most ALIGN_MAX_LYRICS_BYTES. */
static FILE *open_lyrics(ebb_stage_ctx *ctx, const char *path, int *rc) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  struct stat st;
  *rc = 0;
  if (fd < 0)
    *rc = stg_st_fail(ctx, EBB_EINPUT, "option lyrics: cannot open %s: %s", path, strerror(errno));
  else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    *rc = stg_st_fail(ctx, EBB_EINPUT, "option lyrics: %s is not a regular file", path);
  else if ((uint64_t)st.st_size > ALIGN_MAX_LYRICS_BYTES)
    *rc = stg_st_fail(ctx, EBB_EINPUT,
                      "option lyrics: %s is %lld bytes, more than the %u a "
                      "lyrics file may have",
                      path, (long long)st.st_size, ALIGN_MAX_LYRICS_BYTES);
  FILE *f = *rc ? NULL : fdopen(fd, "r");
  if (!*rc && !f)
    *rc = stg_st_fail(ctx, EBB_ENOMEM, "option lyrics: %s: %s", path, strerror(errno));
  if (!f && fd >= 0)
    close(fd);
  return f;
}

/* Lyrics: whitespace-separated words, lines numbered from 0 over non-empty
 * lines; lines that are only a [section marker] are skipped. */
static int read_lyrics(ebb_stage_ctx *ctx, const char *path, wlist *w) {
  int rc;
  FILE *f = open_lyrics(ctx, path, &rc);
  if (!f)
    return rc;
  char *line = NULL;
  size_t cap = 0, total = 0;
  int lineno = 0;
  for (ssize_t got; (got = getline(&line, &cap, f)) >= 0;) {
    if ((total += (size_t)got) > ALIGN_MAX_LYRICS_BYTES) { /* it grew while read */
      rc = stg_st_fail(ctx, EBB_EINPUT, "option lyrics: %s is more than %u bytes", path,
                       ALIGN_MAX_LYRICS_BYTES);
      goto done;
    }
    char *p = line + strspn(line, " \t\r\n");
    size_t len = strcspn(p, "\r\n");
    while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
      len--;
    if (len == 0 || (p[0] == '[' && p[len - 1] == ']'))
      continue;
    size_t i = 0;
    while (i < len) {
      while (i < len && (p[i] == ' ' || p[i] == '\t'))
        i++;
      size_t j = i;
      while (j < len && p[j] != ' ' && p[j] != '\t')
        j++;
      if (j > i && (rc = wlist_add(w, p + i, j - i, 0, 0, lineno))) {
        rc = stg_st_fail(ctx, rc, "%s", ebb_errmsg());
        goto done;
      }
      i = j;
    }
    lineno++;
  }
  if (ferror(f))
    rc = stg_st_fail(ctx, EBB_EIO, "option lyrics: reading %s failed", path);
done:
  free(line);
  fclose(f);
  return rc;
}

/* Transcript words: "words" when present, else each segment's text split on
 * spaces with times spread over the segment by length. */
static int transcript_words(ebb_stage_ctx *ctx, json_t *tr, wlist *w) {
  json_t *words = json_object_get(tr, "words");
  int rc = 0;
  if (json_array_size(words) > 0) {
    for (size_t i = 0; i < json_array_size(words) && !rc; i++) {
      json_t *e = json_array_get(words, i);
      const char *t = json_string_value(json_object_get(e, "word"));
      json_t *a = json_object_get(e, "start"), *b = json_object_get(e, "end");
      if (!t || !json_is_number(a) || !json_is_number(b))
        continue;
      while (*t == ' ')
        t++;
      size_t len = strlen(t);
      while (len && t[len - 1] == ' ')
        len--;
      if (len)
        rc = wlist_add(w, t, len, json_number_value(a), json_number_value(b), -1);
    }
    return rc ? stg_st_fail(ctx, rc, "%s", ebb_errmsg()) : 0;
  }
  json_t *segs = json_object_get(tr, "segments");
  for (size_t i = 0; i < json_array_size(segs) && !rc; i++) {
    json_t *e = json_array_get(segs, i);
    const char *t = json_string_value(json_object_get(e, "text"));
    json_t *a = json_object_get(e, "start"), *b = json_object_get(e, "end");
    if (!t || !json_is_number(a) || !json_is_number(b))
      continue;
    double s0 = json_number_value(a), s1 = json_number_value(b);
    size_t total = 0, len = strlen(t);
    for (size_t k = 0; k < len; k++)
      total += t[k] != ' ';
    double pos = 0;
    for (size_t k = 0; k < len && !rc;) {
      while (k < len && t[k] == ' ')
        k++;
      size_t j = k;
      while (j < len && t[j] != ' ')
        j++;
      if (j > k && total) {
        double a0 = s0 + (s1 - s0) * pos / total;
        pos += (double)(j - k);
        rc = wlist_add(w, t + k, j - k, a0, s0 + (s1 - s0) * pos / total, -1);
      }
      k = j;
    }
  }
  return rc ? stg_st_fail(ctx, rc, "%s", ebb_errmsg()) : 0;
}

/* --- timing ----------------------------------------------------------------- */

/* Unmatched lyric words in [a, b] share (lo, hi) by length. */
static void interpolate(wlist *w, size_t a, size_t b, double lo, double hi) {
  if (hi < lo)
    hi = lo;
  double total = 0, pos = 0;
  for (size_t i = a; i <= b; i++)
    total += (double)strlen(w->word[i]) + 1.0;
  for (size_t i = a; i <= b; i++) {
    w->start[i] = lo + (hi - lo) * pos / total;
    pos += (double)strlen(w->word[i]) + 1.0;
    w->end[i] = lo + (hi - lo) * pos / total;
  }
}

/* The nearest boundary to t within snap; t when none. */
static double snap(double t, const stg_span *s, size_t n, int use_end, double win) {
  double best = t, bd = win;
  for (size_t i = 0; i < n; i++) {
    double b = use_end ? s[i].end : s[i].start, d = fabs(b - t);
    if (d <= bd) {
      bd = d;
      best = b;
    }
  }
  return best;
}

static void snap_words(wlist *w, const stg_span *segs, size_t nseg, double win) {
  double prev_end = 0;
  for (size_t i = 0; i < w->n; i++) {
    if (!w->matched[i])
      continue;
    double s = snap(w->start[i], segs, nseg, 0, win), e = snap(w->end[i], segs, nseg, 1, win);
    if (s < prev_end)
      s = prev_end > w->start[i] ? prev_end : w->start[i];
    if (e <= s)
      e = w->end[i] > s ? w->end[i] : s + 0.01;
    w->start[i] = s;
    w->end[i] = e;
    prev_end = e;
  }
}

static double r3(double x) { return round(x * 1000.0) / 1000.0; }

static char *lyrics_json(const wlist *w, int with_lines, const stg_span *ph, size_t nph,
                         const char *source) {
  json_t *root = json_object(), *words = json_array(), *phrases = json_array();
  for (size_t i = 0; i < w->n; i++) {
    json_t *e = json_pack("{s:s,s:f,s:f,s:b}", "word", w->word[i], "start", r3(w->start[i]), "end",
                          r3(w->end[i]), "matched", w->matched[i]);
    if (with_lines)
      json_object_set_new(e, "line", json_integer(w->line[i]));
    json_array_append_new(words, e);
  }
  for (size_t i = 0; i < nph; i++)
    json_array_append_new(phrases,
                          json_pack("{s:f,s:f}", "start", r3(ph[i].start), "end", r3(ph[i].end)));
  json_object_set_new(root, "words", words);
  json_object_set_new(root, "phrases", phrases);
  json_object_set_new(root, "source", json_string(source));
  char *s = json_dumps(root, JSON_INDENT(1) | JSON_REAL_PRECISION(10));
  json_decref(root);
  return s;
}

static json_t *find_transcript(ebb_stage_ctx *ctx, const ebb_items *in) {
  ebb_item_info info;
  memset(&info, 0, sizeof info);
  info.size = sizeof info;
  if (ctx->host->item_find(in, "transcript", &info) || info.kind != EBB_ITEM_JSON || !info.text)
    return NULL;
  json_t *j = json_loads(info.text, 0, NULL);
  if (!j || !json_is_object(j)) {
    stg_st_log(ctx, 2, "item \"transcript\" is not a JSON object; ignored");
    json_decref(j);
    return NULL;
  }
  return j;
}

/* The voice activity of the vocals (or the mix): segments for snapping, phrases for the
 * lines; *mono (malloc'd, caller frees) and *rate are the audio, for the acoustic
 * alignment. No audio item is not an error: then nothing snaps, *mono is NULL and *dur
 * stays 0. */
static int voice_activity(ebb_stage_ctx *ctx, align_state *s, const ebb_items *in, stg_span **segs,
                          size_t *nseg, stg_span **ph, size_t *nph, double *dur, float **mono,
                          uint64_t *n, uint32_t *rate, double **voice, size_t *nvoice) {
  static const char *const names[] = {"vocals", "audio", NULL};
  const char *used = NULL;
  int rc = stg_st_find_mono(ctx, in, names, mono, n, rate, &used);
  if (rc == EBB_ENOTFOUND) {
    stg_st_log(ctx, 2, "no AUDIO item \"vocals\" or \"audio\": no voice activity, no snapping");
    *mono = NULL;
    return 0;
  }
  if (rc)
    return rc;
  *dur = (double)*n / *rate;
  int want = s->acoustic && s->voice_db > 0; /* the voicing weight: stg_aco_voice_gains */
  rc = stg_vad_voiced(*mono, *n, *rate, &s->vad, segs, nseg, ph, nph, want ? voice : NULL, nvoice);
  if (rc) {
    free(*mono);
    *mono = NULL;
    return stg_st_fail(ctx, rc, "%s", ebb_errmsg());
  }
  return 0;
}

/* Lyric words take the times of the transcript words they match; the unmatched runs
 * between are spread evenly between their matched neighbours (or the vocal phrases). */
static int lyrics_onto_transcript(ebb_stage_ctx *ctx, const align_state *s, wlist *lyr,
                                  const wlist *tr, const stg_span *segs, size_t nseg,
                                  const stg_span *ph, size_t nph, double dur) {
  int *map = malloc(lyr->n * sizeof *map);
  if (!map)
    return stg_st_fail(ctx, EBB_ENOMEM, "out of memory");
  int rc = stg_align_words((const char *const *)lyr->word, lyr->n, (const char *const *)tr->word,
                           tr->n, map);
  if (rc) {
    free(map);
    return stg_st_fail(ctx, rc, "%s", ebb_errmsg());
  }
  size_t matched = 0;
  for (size_t i = 0; i < lyr->n; i++)
    if (map[i] >= 0) {
      lyr->matched[i] = 1;
      lyr->start[i] = tr->start[map[i]];
      lyr->end[i] = tr->end[map[i]];
      matched++;
    }
  free(map);
  snap_words(lyr, segs, nseg, s->snap_s);
  double first = nph ? ph[0].start : tr->start[0];
  double last = nph ? ph[nph - 1].end : (dur > 0 ? dur : tr->end[tr->n - 1]);
  for (size_t i = 0; i < lyr->n;) {
    if (lyr->matched[i]) {
      i++;
      continue;
    }
    size_t j = i;
    while (j + 1 < lyr->n && !lyr->matched[j + 1])
      j++;
    double lo = i > 0 ? lyr->end[i - 1] : fmin(first, j + 1 < lyr->n ? lyr->start[j + 1] : first);
    double hi = j + 1 < lyr->n ? lyr->start[j + 1] : fmax(last, lo);
    interpolate(lyr, i, j, lo, hi);
    i = j + 1;
  }
  stg_st_log(ctx, 1, "%zu of %zu lyric words matched to %zu transcript words", matched, lyr->n,
             tr->n);
  return 0;
}

/* --- the acoustic method ------------------------------------------------------ */

static const char *placed_name(stg_placed p) {
  switch (p) {
  case EBB_PLACED_ACOUSTIC: return "acoustic";
  case EBB_PLACED_LTS: return "acoustic-lts";
  case EBB_PLACED_BETWEEN: return "between";
  case EBB_PLACED_TEXT: return "text";
  case EBB_PLACED_SPREAD: return "spread";
  default: return "none";
  }
}

static char *acoustic_json(const stg_aco_word *w, size_t nw, int with_lines, const stg_span *ph,
                           size_t nph, const char *source, const char *note) {
  json_t *root = json_object(), *words = json_array(), *phrases = json_array();
  for (size_t i = 0; i < nw; i++) {
    int matched = (w[i].placed == EBB_PLACED_ACOUSTIC || w[i].placed == EBB_PLACED_LTS) &&
                  w[i].conf >= STG_ALIGN_CONF_MATCH;
    json_t *e = json_pack("{s:s,s:f,s:f,s:b,s:f,s:s}", "word", w[i].word, "start", r3(w[i].start),
                          "end", r3(w[i].end), "matched", matched, "confidence", r3(w[i].conf),
                          "source", placed_name(w[i].placed));
    if (with_lines)
      json_object_set_new(e, "line", json_integer(w[i].line));
    json_array_append_new(words, e);
  }
  for (size_t i = 0; i < nph; i++)
    json_array_append_new(phrases,
                          json_pack("{s:f,s:f}", "start", r3(ph[i].start), "end", r3(ph[i].end)));
  json_object_set_new(root, "words", words);
  json_object_set_new(root, "phrases", phrases);
  json_object_set_new(root, "source", json_string(source));
  if (note)
    json_object_set_new(root, "note", json_string(note));
  char *s = json_dumps(root, JSON_INDENT(1) | JSON_REAL_PRECISION(10));
  json_decref(root);
  return s;
}

static int ctx_cancelled(void *u) { return ebb_cancelled(u); }

/* The whole song (lyrics alone): stg_aco_align_song, then the words it did
 * not reach. *aligned / *nunits: words placed acoustically / all words. */
static int align_song(ebb_stage_ctx *ctx, stg_aco *a, const int16_t *pcm, uint64_t m,
                      stg_aco_word *w, size_t nw, double dur, size_t *aligned, size_t *nunits) {
  size_t nwin = 0;
  int rc = stg_aco_align_song(a, pcm, m, w, nw, ctx_cancelled, ctx, &nwin);
  if (rc)
    return rc;
  size_t left = stg_align_place_unbacked(w, nw, dur);
  if (left)
    stg_st_log(ctx, 2,
               "%zu of %zu words were not heard in the vocals (%zu windows); placed evenly where "
               "their neighbours leave room, unmatched",
               left, nw, nwin);
  *aligned = nw - left;
  *nunits = nw;
  return 0;
}

/* Counts the words pronounced by letter-to-sound rules and those with no
 * pronunciation, in the log. */
static void log_unknown(ebb_stage_ctx *ctx, const char *dict, const stg_aco_word *w, size_t nw) {
  size_t oov = 0;
  size_t lts = 0;
  for (size_t i = 0; i < nw; i++) {
    oov += w[i].placed == EBB_PLACED_BETWEEN;
    lts += w[i].placed == EBB_PLACED_LTS;
  }
  if (lts)
    stg_st_log(ctx, 1,
               "%zu words not in the dictionary %s: pronounced by espeak-ng's letter-to-sound "
               "rules",
               lts, dict);
  if (oov)
    stg_st_log(ctx, 1,
               "%zu words with no pronunciation (not in the dictionary, no letter-to-sound "
               "rule): placed between their neighbours",
               oov);
}

/* The order contrast (stg_aco_contrast_every) is measured on about
 * AL_CONTRAST_CHUNKS chunks spread over the song, each a second decode:
 * the whole song's evidence for the fit check at a bounded cost. A song
 * window moves on about AL_SONG_WINDOW_STEP_S seconds. */
#define AL_CONTRAST_CHUNKS 8
#define AL_SONG_WINDOW_STEP_S 12.0
static size_t contrast_every(double units) {
  return units <= AL_CONTRAST_CHUNKS ? 1 : (size_t)ceil(units / AL_CONTRAST_CHUNKS);
}

static size_t count_placed(const stg_aco_word *w, size_t nw) {
  size_t placed = 0;
  for (size_t i = 0; i < nw; i++)
    placed += w[i].placed == EBB_PLACED_ACOUSTIC || w[i].placed == EBB_PLACED_LTS;
  return placed;
}

/* The acoustic method's log lines: the words no audio backs, the unknown words, the counts.
 * unit: 0 the whole song, 1 line groups, 2 phrases (rough times). */
static void log_acoustic(ebb_stage_ctx *ctx, const align_state *s, const stg_aco_word *w, size_t nw,
                         size_t aligned, size_t nch, int unit, double med, double gain,
                         size_t ncontrast, size_t unbacked, size_t moved) {
  static const char *const units[] = {"words over the whole song", "line groups", "phrases"};
  if (unbacked)
    stg_st_log(ctx, 2,
               "%zu words were placed where the vocals are silent (more than %.0f dB under their "
               "loud level): not aligned, unmatched",
               unbacked, STG_ALIGN_BACKED_DB);
  log_unknown(ctx, s->dict, w, nw);
  if (moved)
    stg_st_log(ctx, 1,
               "%zu of %zu %s took their times from the vocals shaped by their voicing (voicing_db "
               "%.0f)",
               moved, nch, units[unit], s->voice_db);
  stg_st_log(ctx, 1,
             "%zu of %zu words aligned acoustically in %zu of %zu %s (median confidence %.2f, "
             "order contrast %.1f per frame over %zu words)",
             count_placed(w, nw), nw, aligned, nch, units[unit], med, gain, ncontrast);
}

/* The 16 kHz samples pocketsphinx gets (stg_aco_pcm16k): *pcm plain and, with the voicing
 * weight (voice, nvoice frames; voicing_db), *shaped by it (else NULL). Both malloc'd. */
static int make_pcm(const align_state *s, const float *mono, uint64_t n, uint32_t rate,
                    const double *voice, size_t nvoice, int16_t **pcm, int16_t **shaped,
                    uint64_t *m) {
  int rc = stg_aco_pcm16k(mono, n, rate, NULL, 0, s->vad.hop_s, pcm, m);
  *shaped = NULL;
  if (rc || !voice)
    return rc;
  double *gain = malloc((nvoice ? nvoice : 1) * sizeof *gain);
  if (!gain)
    return ebb_seterr(EBB_ENOMEM, "align: out of memory for %zu gains", nvoice);
  memcpy(gain, voice, nvoice * sizeof *gain);
  stg_aco_voice_gains(gain, nvoice, s->voice_db);
  rc = stg_aco_pcm16k(mono, n, rate, gain, nvoice, s->vad.hop_s, shaped, m);
  free(gain);
  return rc;
}

/* Aligns words (rough times when have_rough) to the vocals, chunk by chunk:
 * the chunks on their phrases, the fit check on those, the times from the
 * shaped samples (voicing_db: stg_align_shaped), then a second try for the
 * chunks that did not align (stg_align_again). */
static int align_acoustic(ebb_stage_ctx *ctx, align_state *s, stg_aco_word *w, size_t nw,
                          int by_lines, const float *mono, uint64_t n, uint32_t rate,
                          const double *voice, size_t nvoice, const stg_span *ph, size_t nph,
                          double dur) {
  stg_aco *a = NULL;
  stg_aco_chunk *ch = NULL;
  size_t nch = 0, aligned = 0, ncontrast = 0, silent = 0, more = 0, moved = 0;
  char *fit = NULL;                    /* fit[i]: chunk i aligned on its own phrases */
  int16_t *pcm = NULL, *shaped = NULL; /* shaped: by the voicing weight (voicing_db) */
  uint64_t m = 0;
  int song = by_lines && s->song, rc = stg_aco_open(s->model, s->dict, &a);
  if (rc)
    return rc;
  if ((rc = make_pcm(s, mono, n, rate, voice, nvoice, &pcm, &shaped, &m)))
    goto done;
  if (song) { /* the whole song on the shaped samples; the contrast on the plain ones */
    stg_aco_contrast_audio(a, shaped ? pcm : NULL);
    stg_aco_contrast_every(a, contrast_every(dur / AL_SONG_WINDOW_STEP_S));
    if ((rc = align_song(ctx, a, shaped ? shaped : pcm, m, w, nw, dur, &aligned, &nch)))
      goto done;
  } else if ((rc = by_lines ? stg_aco_plan_lines(w, nw, ph, nph, dur, &ch, &nch)
                            : stg_aco_plan_times(w, nw, ph, nph, dur, &ch, &nch))) {
    goto done;
  }
  if (!song)
    stg_aco_contrast_every(a, contrast_every((double)nch));
  if (!(fit = calloc(nch ? nch : 1, 1))) {
    rc = ebb_seterr(EBB_ENOMEM, "align: out of memory for %zu chunks", nch);
    goto done;
  }
  if (!song && (rc = stg_align_chunks(ctx, a, pcm, m, w, ch, nch, fit, &aligned)))
    goto done;
  double gain = stg_aco_order_gain(a, &ncontrast);
  if ((rc = stg_align_unbacked(w, nw, mono, n, rate, &silent)))
    goto done;
  if (song)
    aligned = count_placed(w, nw);
  double med = stg_align_check_fit(ctx, w, nw, aligned, nch, gain, ncontrast);
  if (!song && shaped && (rc = stg_align_shaped(ctx, a, shaped, m, w, ch, nch, fit, &moved)))
    goto done;
  if (!song && (rc = stg_align_again(ctx, a, shaped ? shaped : pcm, m, w, ch, nch, fit, dur)))
    goto done;
  if ((rc = stg_align_unbacked(w, nw, mono, n, rate, &more)))
    goto done;
  log_acoustic(ctx, s, w, nw, aligned, nch,
               song       ? 0
               : by_lines ? 1
                          : 2,
               med, gain, ncontrast, silent + more, moved);
done:
  if (rc == EBB_ECANCELED)
    rc = stg_st_fail(ctx, rc, "align: cancelled");
  else if (rc)
    rc = stg_st_fail(ctx, rc, "%s", ebb_errmsg());
  stg_aco_close(a);
  free(fit);
  free(ch);
  free(pcm);
  free(shaped);
  return rc;
}

/* No time outside the audio [0, dur], whatever placed it (a plan with no
 * phrase, lyrics longer than the song); a word the clamp had to move was
 * not heard there, so it is not trusted either. */
static void clamp_words(stg_aco_word *w, size_t nw, double dur) {
  for (size_t i = 0; i < nw; i++) {
    double s0 = fmin(fmax(w[i].start, 0), dur), e0 = fmin(fmax(w[i].end, s0), dur);
    if (s0 != w[i].start || e0 != w[i].end)
      w[i].conf = 0;
    w[i].start = s0;
    w[i].end = e0;
  }
}

/* The acoustic method's words: the lyrics (rough times from the text method
 * when there is a transcript), else the transcript's words. */
static int run_acoustic(ebb_stage_ctx *ctx, align_state *s, wlist *lyr, wlist *tr,
                        const float *mono, uint64_t n, uint32_t rate, double *voice, size_t nvoice,
                        const stg_span *segs, size_t nseg, const stg_span *ph, size_t nph,
                        double dur, char **text) {
  const wlist *src = lyr->n ? lyr : tr;
  int rough = tr->n > 0, rc = 0;
  if (lyr->n && tr->n && (rc = lyrics_onto_transcript(ctx, s, lyr, tr, segs, nseg, ph, nph, dur)))
    return rc;
  stg_aco_word *w = calloc(src->n, sizeof *w);
  if (!w)
    return stg_st_fail(ctx, EBB_ENOMEM, "out of memory for %zu words", src->n);
  for (size_t i = 0; i < src->n; i++)
    w[i] = (stg_aco_word){.word = src->word[i],
                          .line = src->line[i],
                          .start = src->start[i],
                          .end = src->end[i],
                          .has_rough = rough};
  const char *source = "acoustic";
  char note[512] = "";
  if (!mono) {
    rc = ebb_seterr(EBB_EINPUT, "align: no vocals to align the words to");
  } else {
    rc = align_acoustic(ctx, s, w, src->n, lyr->n && !rough, mono, n, rate, voice, nvoice, ph, nph,
                        dur);
  }
  if (rc == EBB_ECANCELED || rc == EBB_ENOMEM)
    goto done;
  if (rc) {
    /* no model (or no audio): the rest of the pipeline still runs, the words
     * placed as the text method places them, and the output says why */
    snprintf(note, sizeof note, "%s", ebb_errmsg());
    stg_st_log(ctx, 3, "acoustic alignment unavailable: %s; words placed by the text method", note);
    stg_aco_chunk all = {0, src->n, nph ? ph[0].start : 0, nph ? ph[nph - 1].end : dur, 0};
    stg_align_fallback(w, &all);
    source = rough ? "text" : "spread";
    rc = 0;
  }
  if (mono)
    clamp_words(w, src->n, dur);
  if (!(*text = acoustic_json(w, src->n, lyr->n > 0, ph, nph, source, *note ? note : NULL)))
    rc = stg_st_fail(ctx, EBB_ENOMEM, "out of memory for the lyrics JSON");
done:
  free(w);
  return rc;
}

/* The text method (the lyrics matched to the transcript by spelling). */
static int run_text(ebb_stage_ctx *ctx, align_state *s, wlist *lyr, wlist *tr, const stg_span *segs,
                    size_t nseg, const stg_span *ph, size_t nph, double dur, char **text) {
  const char *source = "vad";
  const wlist *result = lyr;
  int with_lines = 0, rc;
  if (tr->n && lyr->n) {
    source = "transcript+lyrics";
    with_lines = 1;
    if ((rc = lyrics_onto_transcript(ctx, s, lyr, tr, segs, nseg, ph, nph, dur)))
      return rc;
  } else if (tr->n) {
    source = "transcript";
    for (size_t i = 0; i < tr->n; i++)
      tr->matched[i] = 1;
    snap_words(tr, segs, nseg, s->snap_s);
    result = tr;
    stg_st_log(ctx, 1, "%zu transcript words%s", tr->n,
               s->lyrics_path ? " (lyrics file empty)" : "");
  } else {
    static const wlist none = {0};
    result = &none;
    stg_st_log(ctx, 1, "no transcript: %zu vocal phrases from voice activity only%s", nph,
               lyr->n ? "; lyrics not aligned" : "");
  }
  if (!(*text = lyrics_json(result, with_lines, ph, nph, source)))
    return stg_st_fail(ctx, EBB_ENOMEM, "out of memory for the lyrics JSON");
  return 0;
}

static int align_run(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out) {
  align_state *s = state;
  stg_span *segs = NULL, *ph = NULL;
  size_t nseg = 0, nph = 0;
  wlist lyr = {0}, tr = {0};
  char *text = NULL;
  json_t *transcript = NULL;
  double dur = 0;
  float *mono = NULL;
  double *voice = NULL; /* the voicing weight per VAD frame (acoustic with voicing_db) */
  size_t nvoice = 0;
  uint64_t n = 0;
  uint32_t rate = 0;
  stg_st_watch(ctx); /* every loop below sees a cancellation (st_util.h), the plan's and
                      * the word matching's included (they scale with the lyrics) */
  int rc =
      voice_activity(ctx, s, in, &segs, &nseg, &ph, &nph, &dur, &mono, &n, &rate, &voice, &nvoice);
  if (rc) {
    stg_st_unwatch();
    return rc;
  }
  if (s->lyrics_path && (rc = read_lyrics(ctx, s->lyrics_path, &lyr)))
    goto done;
  if (s->lyrics_path && lyr.n == 0)
    stg_st_log(ctx, 2, "option lyrics: %s has no words; aligning without lyrics", s->lyrics_path);
  transcript = find_transcript(ctx, in);
  if (transcript && (rc = transcript_words(ctx, transcript, &tr)))
    goto done;
  if (s->acoustic && (lyr.n || tr.n))
    rc = run_acoustic(ctx, s, &lyr, &tr, mono, n, rate, voice, nvoice, segs, nseg, ph, nph, dur,
                      &text);
  else
    rc = run_text(ctx, s, &lyr, &tr, segs, nseg, ph, nph, dur, &text);
  if (rc)
    goto done;
  rc = ctx->host->add_json(out, "lyrics", text);
  if (rc)
    rc = stg_st_fail(ctx, rc, "cannot add the JSON item \"lyrics\"");
done:
  stg_st_unwatch();
  free(text);
  free(segs);
  free(ph);
  free(mono);
  free(voice);
  wlist_free(&lyr);
  wlist_free(&tr);
  json_decref(transcript);
  return rc;
}

const ebb_stage stg_stage_align = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "align",
    /* keys the result cache: bump it whenever the outputs change (2: the VAD's
     * periodicity cue and phrase length; 3: acoustic alignment; 4: times clamped to the
     * audio, the backing check, the dither, scope; 5: the order contrast in the fit check;
     * 6: phrases from the level, the contrast's second order; 7: with voicing_db the chunks
     * judged on the plain vocals, their times from the shaped ones; 8: the rests inside a
     * pairing of lines with phrases cost in the plan) */
    .version = 8,
    .description = "lyric words aligned to the vocals (pocketsphinx forced alignment), or matched "
                   "to a transcript by spelling",
    .options_schema = stage_opts_schema,
    .needs_gpu = 0,
    .load = align_load,
    .run = align_run,
    .unload = align_unload,
    .release = NULL,
    .work = align_work,
};
