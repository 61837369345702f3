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

#include "stages/audio/st_util.h"
#include "stages/options.h"

typedef struct align_state {
  char *lyrics_path; /* NULL: none */
  double snap_s;
  ebb_vad_params vad;
} align_state;

/* The options, each written once (stages/options.h); ebb_vad_defaults takes
 * its defaults from here too. */
#define ALIGN_OPTIONS(NUM, INT, STR, BOOL, SEP, OP_NUM, OP_INT, PATH, URL, SECRET)                                                   \
  PATH(lyrics, "",                                                                                 \
      "path of a text file with the lyrics, one line per lyric line (relative to the current "    \
      "directory); empty: none") SEP                                                              \
  NUM(snap_ms, 150, 0, 5000, "word boundaries move to a voice-activity onset/offset this close")  \
  SEP                                                                                             \
  NUM(vad_range_db, 20, 1, 120, "active: within this many dB of the vocals' loud level") SEP      \
  NUM(vad_floor_db, -55, -160, 0, "active: above this level, dBFS") SEP                           \
  NUM(vad_max_aperiodicity, 0.2, 0.01, 1,                                                         \
      "active: YIN aperiodicity (min d', 5-frame median) at most this; 1: energy only") SEP       \
  NUM(min_phrase_ms, 450, 0, 60000, "shorter phrases are dropped") SEP                            \
  NUM(phrase_gap_ms, 350, 0, 60000, "activity closer than this is one phrase")
EBB_STAGE_OPTIONS(ALIGN_OPTIONS)

static void set_vad(const stage_opts *v, ebb_vad_params *vad) {
  vad->range_db = v->vad_range_db;
  vad->floor_db = v->vad_floor_db;
  vad->max_aperiodicity = v->vad_max_aperiodicity;
  vad->min_phrase_s = v->min_phrase_ms / 1000.0;
  vad->phrase_gap_s = v->phrase_gap_ms / 1000.0;
}

void ebb_vad_table_defaults(ebb_vad_params *vad) {
  stage_opts v;
  stage_opts_read("align", NULL, &v); /* no JSON: the defaults, cannot fail */
  set_vad(&v, vad);
}

static int align_load(ebb_stage_ctx *ctx, const char *options_json, void **state) {
  json_t *o = NULL;
  stage_opts v;
  int rc = stage_opts_parse("align", options_json, &o, &v);
  align_state *s = NULL;
  if (rc) {
    rc = ebb_st_fail(ctx, rc, "%s", ebb_errmsg());
    goto done;
  }
  const char *lyr = v.lyrics;
  if (!(s = calloc(1, sizeof *s))) {
    rc = ebb_st_fail(ctx, EBB_ENOMEM, "out of memory");
    goto done;
  }
  s->vad = ebb_vad_defaults();
  set_vad(&v, &s->vad);
  s->snap_s = v.snap_ms / 1000.0;
  if (*lyr && !(s->lyrics_path = strdup(lyr))) {
    rc = ebb_st_fail(ctx, EBB_ENOMEM, "out of memory");
    goto done;
  }
  *state = s;
  s = NULL;
done:
  if (s)
    free(s->lyrics_path);
  free(s);
  json_decref(o);
  return rc;
}

/* Work (the stage ABI's `work`): the voice activity frames and the text
 * spread over them, ALIGN_S per second of input whatever the options (they
 * move thresholds, not loops). Measured with `ebb run --device cpu` on
 * songgen's song repeated to 60 s, without lyrics (wall "done in", one core
 * of the 2-core development machine): defaults 0.43 s, snap_ms 5000 with
 * vad_max_aperiodicity 0.01 0.36 s: 0.0072 s/s, rounded up. */
#define ALIGN_S 0.008
static int align_work(const ebb_host_api *host, const char *options_json, double input_s,
                      ebb_work *out) {
  (void)host;
  (void)options_json;
  out->cpu_s = input_s * ALIGN_S;
  return 0;
}

static void align_unload(ebb_stage_ctx *ctx, void *state) {
  (void)ctx;
  align_state *s = state;
  if (s)
    free(s->lyrics_path);
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

/* A lyrics file is text of a song: more than this is not one. */
#define ALIGN_MAX_LYRICS_BYTES (4u << 20)

/* The lyrics file, opened non-blocking (a FIFO never holds the stage) and
 * only when it is a regular file of at most ALIGN_MAX_LYRICS_BYTES. */
static FILE *open_lyrics(ebb_stage_ctx *ctx, const char *path, int *rc) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  struct stat st;
  *rc = 0;
  if (fd < 0)
    *rc = ebb_st_fail(ctx, EBB_EINPUT, "option lyrics: cannot open %s: %s", path,
                      strerror(errno));
  else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    *rc = ebb_st_fail(ctx, EBB_EINPUT, "option lyrics: %s is not a regular file", path);
  else if ((uint64_t)st.st_size > ALIGN_MAX_LYRICS_BYTES)
    *rc = ebb_st_fail(ctx, EBB_EINPUT, "option lyrics: %s is %lld bytes, more than the %u a "
                      "lyrics file may have", path, (long long)st.st_size, ALIGN_MAX_LYRICS_BYTES);
  FILE *f = *rc ? NULL : fdopen(fd, "r");
  if (!*rc && !f)
    *rc = ebb_st_fail(ctx, EBB_ENOMEM, "option lyrics: %s: %s", path, strerror(errno));
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
      rc = ebb_st_fail(ctx, EBB_EINPUT, "option lyrics: %s is more than %u bytes", path,
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
        rc = ebb_st_fail(ctx, rc, "%s", ebb_errmsg());
        goto done;
      }
      i = j;
    }
    lineno++;
  }
  if (ferror(f))
    rc = ebb_st_fail(ctx, EBB_EIO, "option lyrics: reading %s failed", path);
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
    return rc ? ebb_st_fail(ctx, rc, "%s", ebb_errmsg()) : 0;
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
  return rc ? ebb_st_fail(ctx, rc, "%s", ebb_errmsg()) : 0;
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
static double snap(double t, const ebb_span *s, size_t n, int use_end, double win) {
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

static void snap_words(wlist *w, const ebb_span *segs, size_t nseg, double win) {
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

static char *lyrics_json(const wlist *w, int with_lines, const ebb_span *ph, size_t nph,
                         const char *source) {
  json_t *root = json_object(), *words = json_array(), *phrases = json_array();
  for (size_t i = 0; i < w->n; i++) {
    json_t *e = json_pack("{s:s,s:f,s:f,s:b}", "word", w->word[i], "start", r3(w->start[i]),
                          "end", r3(w->end[i]), "matched", w->matched[i]);
    if (with_lines)
      json_object_set_new(e, "line", json_integer(w->line[i]));
    json_array_append_new(words, e);
  }
  for (size_t i = 0; i < nph; i++)
    json_array_append_new(phrases, json_pack("{s:f,s:f}", "start", r3(ph[i].start), "end",
                                             r3(ph[i].end)));
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
    ebb_st_log(ctx, 2, "item \"transcript\" is not a JSON object; ignored");
    json_decref(j);
    return NULL;
  }
  return j;
}

/* The voice activity of the vocals (or the mix): segments for snapping, phrases for the
 * lines. No audio item is not an error: then nothing snaps and *dur stays 0. */
static int voice_activity(ebb_stage_ctx *ctx, align_state *s, const ebb_items *in, ebb_span **segs,
                          size_t *nseg, ebb_span **ph, size_t *nph, double *dur) {
  static const char *const names[] = {"vocals", "audio", NULL};
  float *mono = NULL;
  uint64_t n = 0;
  uint32_t rate = 0;
  const char *used = NULL;
  int rc = ebb_st_find_mono(ctx, in, names, &mono, &n, &rate, &used);
  if (rc == EBB_ENOTFOUND) {
    ebb_st_log(ctx, 2, "no AUDIO item \"vocals\" or \"audio\": no voice activity, no snapping");
    return 0;
  }
  if (rc)
    return rc;
  *dur = (double)n / rate;
  rc = ebb_vad(mono, n, rate, &s->vad, segs, nseg, ph, nph);
  free(mono);
  if (rc)
    return ebb_st_fail(ctx, rc, "%s", ebb_errmsg());
  return 0;
}

/* Lyric words take the times of the transcript words they match; the unmatched runs
 * between are spread evenly between their matched neighbours (or the vocal phrases). */
static int lyrics_onto_transcript(ebb_stage_ctx *ctx, const align_state *s, wlist *lyr,
                                  const wlist *tr, const ebb_span *segs, size_t nseg,
                                  const ebb_span *ph, size_t nph, double dur) {
  int *map = malloc(lyr->n * sizeof *map);
  if (!map)
    return ebb_st_fail(ctx, EBB_ENOMEM, "out of memory");
  int rc = ebb_align_words((const char *const *)lyr->word, lyr->n, (const char *const *)tr->word,
                           tr->n, map);
  if (rc) {
    free(map);
    return ebb_st_fail(ctx, rc, "%s", ebb_errmsg());
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
  ebb_st_log(ctx, 1, "%zu of %zu lyric words matched to %zu transcript words", matched, lyr->n,
             tr->n);
  return 0;
}

static int align_run(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out) {
  align_state *s = state;
  ebb_span *segs = NULL, *ph = NULL;
  size_t nseg = 0, nph = 0;
  wlist lyr = {0}, tr = {0};
  char *text = NULL;
  json_t *transcript = NULL;
  const char *source = "vad";
  double dur = 0;
  ebb_st_watch(ctx); /* the voice activity's loops see a cancellation */
  int rc = voice_activity(ctx, s, in, &segs, &nseg, &ph, &nph, &dur);
  ebb_st_unwatch();
  if (rc)
    return rc;
  if (s->lyrics_path && (rc = read_lyrics(ctx, s->lyrics_path, &lyr)))
    goto done;
  transcript = find_transcript(ctx, in);
  if (transcript && (rc = transcript_words(ctx, transcript, &tr)))
    goto done;
  const wlist *result = &lyr;
  int with_lines = 0;
  if (transcript && tr.n && lyr.n) {
    source = "transcript+lyrics";
    with_lines = 1;
    if ((rc = lyrics_onto_transcript(ctx, s, &lyr, &tr, segs, nseg, ph, nph, dur)))
      goto done;
  } else if (transcript && tr.n) {
    source = "transcript";
    for (size_t i = 0; i < tr.n; i++)
      tr.matched[i] = 1;
    snap_words(&tr, segs, nseg, s->snap_s);
    result = &tr;
    ebb_st_log(ctx, 1, "%zu transcript words%s", tr.n, s->lyrics_path ? " (lyrics file empty)" : "");
  } else {
    static const wlist none = {0};
    result = &none;
    ebb_st_log(ctx, 1, "no transcript: %zu vocal phrases from voice activity only%s", nph,
               lyr.n ? "; lyrics not aligned" : "");
  }
  text = lyrics_json(result, with_lines, ph, nph, source);
  if (!text) {
    rc = ebb_st_fail(ctx, EBB_ENOMEM, "out of memory for the lyrics JSON");
    goto done;
  }
  rc = ctx->host->add_json(out, "lyrics", text);
  if (rc)
    rc = ebb_st_fail(ctx, rc, "cannot add the JSON item \"lyrics\"");
done:
  free(text);
  free(segs);
  free(ph);
  wlist_free(&lyr);
  wlist_free(&tr);
  json_decref(transcript);
  return rc;
}

const ebb_stage ebb_stage_align = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "align",
    /* keys the result cache: bump it whenever the outputs change (2: the VAD's
     * periodicity cue and phrase length) */
    .version = 2,
    .description = "lyrics to transcript word alignment (edit distance) refined by vocal activity",
    .options_schema = stage_opts_schema,
    .needs_gpu = 0,
    .load = align_load,
    .run = align_run,
    .unload = align_unload,
    .release = NULL,
    .work = align_work,
};
