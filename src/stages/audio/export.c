/* See export.h. Inputs (all optional): TENSOR "f0", JSON "notes", "lyrics",
 * "transcript". A format whose input is missing is skipped with a log line
 * (the MIDI file is still written, with no notes, when "notes" is absent:
 * an empty melody is a result too). */
#include "stages/audio/export.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "stages/audio/midi.h"
#include "stages/audio/st_util.h"
#include "stages/options.h"

enum { FMT_JSON = 1, FMT_MIDI = 2, FMT_LRC = 4, FMT_CSV = 8 };

typedef struct export_state {
  unsigned formats;
  int stems; /* EBB_STEMS_* (export_stems.c) */
} export_state;

/* The options, written once (stages/options.h). */
#define EXPORT_OPTIONS(NUM, INT, STR, BOOL, SEP, ...) \
  STR(formats, "json,midi,lrc,csv",                                                               \
      "comma-separated: json (songtrace.json), midi (melody.mid), lrc (lyrics.lrc and "           \
      "lyrics.words.lrc), csv (pitch.csv)") SEP                                                   \
  STR(stems, "flac",                                                                              \
      "the separated vocals and accompaniment: flac (vocals.flac, accompaniment.flac), wav, or "  \
      "none")
EBB_STAGE_OPTIONS(EXPORT_OPTIONS)

static int parse_formats(ebb_stage_ctx *ctx, const char *s, unsigned *out) {
  unsigned f = 0;
  const char *p = s;
  while (*p) {
    while (*p == ',' || *p == ' ')
      p++;
    if (!*p)
      break;
    size_t n = strcspn(p, ", ");
    if (n == 4 && !strncmp(p, "json", 4))
      f |= FMT_JSON;
    else if (n == 4 && !strncmp(p, "midi", 4))
      f |= FMT_MIDI;
    else if (n == 3 && !strncmp(p, "lrc", 3))
      f |= FMT_LRC;
    else if (n == 3 && !strncmp(p, "csv", 3))
      f |= FMT_CSV;
    else
      return stg_st_fail(ctx, EBB_ECONFIG,
                         "option formats: \"%.*s\" is not one of json, midi, lrc, csv", (int)n, p);
    p += n;
  }
  *out = f;
  return 0;
}

static int export_load(ebb_stage_ctx *ctx, const char *options_json, void **state) {
  json_t *o = NULL;
  stage_opts v;
  int rc = stage_opts_parse("export", options_json, &o, &v);
  export_state *s = rc ? NULL : calloc(1, sizeof *s);
  if (rc)
    rc = stg_st_fail(ctx, rc, "%s", ebb_errmsg());
  else if (!s)
    rc = stg_st_fail(ctx, EBB_ENOMEM, "out of memory");
  else if (!(rc = parse_formats(ctx, v.formats, &s->formats)))
    rc = stg_export_stems_parse(ctx, v.stems, &s->stems);
  json_decref(o);
  if (rc) {
    free(s);
    return rc;
  }
  *state = s;
  return 0;
}

/* Work (the stage ABI's `work`): the small files (JSON, MIDI, LRC, CSV)
 * EXPORT_S per second of input, and each stem (vocals, accompaniment) as
 * FLAC or WAV EXPORT_STEM_S per second at the 16 kHz working rate.
 * Measured with `ebb run --device cpu` (decode, separate, export) on
 * songgen's song repeated to 60 s (one core of the 2-core development
 * machine, wall "done in"): the defaults (two FLAC stems) 0.08 to 0.12 s,
 * 0.002 s/s in all. */
#define EXPORT_S 0.0004
#define EXPORT_STEM_S 0.0008
static int export_work(const ebb_host_api *host, const char *options_json, double input_s,
                       ebb_work *out) {
  (void)host;
  json_t *o = NULL;
  stage_opts v;
  int rc = stage_opts_parse("export", options_json, &o, &v);
  if (!rc) { /* v.stems points into o */
    int stems = strcmp(v.stems, "none") ? 2 : 0;
    out->cpu_s = input_s * (EXPORT_S + stems * EXPORT_STEM_S);
    snprintf(out->drivers, sizeof out->drivers, "stems %s", v.stems);
  }
  json_decref(o);
  return rc;
}

static void export_unload(ebb_stage_ctx *ctx, void *state) {
  (void)ctx;
  free(state);
}

void stg_lrc_timestamp(double t, char *buf, size_t n) {
  long cs = t > 0 ? lround(t * 100.0) : 0;
  snprintf(buf, n, "[%02ld:%02ld.%02ld]", cs / 6000, (cs % 6000) / 100, cs % 100);
}

/* The parsed JSON item `name`, or NULL (absent or not JSON). */
static json_t *item_json(ebb_stage_ctx *ctx, const ebb_items *in, const char *name) {
  ebb_item_info info;
  memset(&info, 0, sizeof info);
  info.size = sizeof info;
  if (ctx->host->item_find(in, name, &info) || info.kind != EBB_ITEM_JSON || !info.text)
    return NULL;
  json_t *j = json_loads(info.text, 0, NULL);
  if (!j)
    stg_st_log(ctx, 2, "item \"%s\" is not valid JSON; left out", name);
  return j;
}

typedef struct f0_track {
  const float *data; /* [n][3] */
  size_t n;
} f0_track;

static int find_f0(ebb_stage_ctx *ctx, const ebb_items *in, f0_track *t) {
  ebb_item_info info;
  memset(&info, 0, sizeof info);
  info.size = sizeof info;
  t->data = NULL;
  t->n = 0;
  if (ctx->host->item_find(in, "f0", &info))
    return 0;
  if (info.kind != EBB_ITEM_TENSOR || info.ndim != 2 || info.shape[1] != 3 || !info.data)
    return stg_st_fail(ctx, EBB_EINPUT, "item \"f0\" is not a host TENSOR of shape [frames, 3]");
  t->data = info.data;
  t->n = (size_t)info.shape[0];
  return 0;
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static json_t *f0_summary(const f0_track *t) {
  if (!t->data)
    return json_null();
  size_t nv = 0;
  float *v = malloc((t->n ? t->n : 1) * sizeof *v);
  if (!v)
    return json_null();
  for (size_t i = 0; i < t->n; i++)
    if (t->data[3 * i + 1] > 0.0f)
      v[nv++] = t->data[3 * i + 1];
  qsort(v, nv, sizeof *v, cmp_float);
  double hop = t->n > 1 ? t->data[3] - t->data[0] : 0.0;
  json_t *j = json_pack("{s:I,s:f,s:I,s:f}", "frames", (json_int_t)t->n, "hop_s",
                        round(hop * 1e6) / 1e6, "voiced_frames", (json_int_t)nv, "voiced_fraction",
                        t->n ? round(1000.0 * nv / t->n) / 1000.0 : 0.0);
  if (nv) {
    json_object_set_new(j, "median_hz", json_real(round(v[nv / 2] * 100.0) / 100.0));
    json_object_set_new(j, "min_hz", json_real(round(v[0] * 100.0) / 100.0));
    json_object_set_new(j, "max_hz", json_real(round(v[nv - 1] * 100.0) / 100.0));
  }
  free(v);
  return j;
}

static int join_path(ebb_stage_ctx *ctx, const char *dir, const char *file, char *out, size_t n) {
  if ((size_t)snprintf(out, n, "%s/%s", dir, file) >= n)
    return stg_st_fail(ctx, EBB_EINVAL, "output path %s/%s is too long", dir, file);
  return 0;
}

static int add_file(ebb_stage_ctx *ctx, ebb_items *out, const char *name, const char *path) {
  int rc = ctx->host->add_file(out, name, path);
  return rc ? stg_st_fail(ctx, rc, "cannot add FILE item %s", name) : 0;
}

static const char *kind_name(ebb_item_kind k) {
  switch (k) {
  case EBB_ITEM_AUDIO: return "audio";
  case EBB_ITEM_TENSOR: return "tensor";
  case EBB_ITEM_JSON: return "json";
  case EBB_ITEM_FILE: return "file";
  }
  return "unknown";
}

static int write_json(ebb_stage_ctx *ctx, const ebb_items *in, const char *path, json_t *notes,
                      json_t *lyrics, json_t *transcript, const f0_track *f0, unsigned formats) {
  json_t *root = json_object(), *items = json_array(), *fmts = json_array();
  int n = ctx->host->item_count(in);
  for (int i = 0; i < n; i++) {
    ebb_item_info info;
    memset(&info, 0, sizeof info);
    info.size = sizeof info;
    if (ctx->host->item_get(in, i, &info) == 0)
      json_array_append_new(items, json_pack("{s:s,s:s}", "name", info.name ? info.name : "",
                                             "kind", kind_name(info.kind)));
  }
  static const char *const names[] = {"json", "midi", "lrc", "csv"};
  for (int b = 0; b < 4; b++)
    if (formats & (1u << b))
      json_array_append_new(fmts, json_string(names[b]));
  const char *stage = ctx->host->stage_name ? ctx->host->stage_name(ctx) : "export";
  json_object_set_new(root, "generator", json_string("ebb songtrace"));
  json_object_set_new(root, "notes",
                      notes ? json_incref(json_object_get(notes, "notes")) : json_array());
  if (!json_object_get(root, "notes"))
    json_object_set_new(root, "notes", json_array());
  json_object_set_new(root, "f0", f0_summary(f0));
  json_object_set_new(root, "lyrics", lyrics ? json_incref(lyrics) : json_null());
  json_object_set_new(root, "transcript", transcript ? json_incref(transcript) : json_null());
  json_object_set_new(root, "items", items);
  json_object_set_new(root, "stage",
                      json_pack("{s:s,s:i,s:o}", "name", stage ? stage : "export", "version",
                                (int)stg_stage_export.version, "formats", fmts));
  int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
  json_decref(root);
  return rc ? stg_st_fail(ctx, EBB_EIO, "%s: cannot write", path) : 0;
}

static int write_midi(ebb_stage_ctx *ctx, const char *path, json_t *notes, size_t *count) {
  json_t *arr = notes ? json_object_get(notes, "notes") : NULL;
  size_t n = json_is_array(arr) ? json_array_size(arr) : 0, k = 0;
  stg_midi_note *v = malloc((n ? n : 1) * sizeof *v);
  if (!v)
    return stg_st_fail(ctx, EBB_ENOMEM, "out of memory");
  for (size_t i = 0; i < n; i++) {
    json_t *e = json_array_get(arr, i);
    json_t *on = json_object_get(e, "onset"), *off = json_object_get(e, "offset");
    json_t *m = json_object_get(e, "midi");
    if (!json_is_number(on) || !json_is_number(off) || !json_is_integer(m))
      continue;
    v[k++] = (stg_midi_note){.onset = json_number_value(on),
                             .offset = json_number_value(off),
                             .key = (int)json_integer_value(m),
                             .velocity = 96};
  }
  int rc = stg_midi_write(path, v, k);
  free(v);
  *count = k;
  return rc ? stg_st_fail(ctx, rc, "%s", ebb_errmsg()) : 0;
}

/* The line a word belongs to: its "line" key, else the phrase holding its
 * start, else -1 (the caller breaks lines at gaps). */
static long word_line(json_t *w, json_t *phrases) {
  json_t *l = json_object_get(w, "line");
  if (json_is_integer(l))
    return (long)json_integer_value(l);
  double t = json_number_value(json_object_get(w, "start"));
  for (size_t i = 0; i < json_array_size(phrases); i++) {
    json_t *p = json_array_get(phrases, i);
    if (t >= json_number_value(json_object_get(p, "start")) - 0.25 &&
        t < json_number_value(json_object_get(p, "end")) + 0.25)
      return 1000000L + (long)i;
  }
  return -1;
}

/* The line form ([mm:ss.xx] per line), or with `enhanced` the enhanced LRC
 * form: each word also after its own <mm:ss.xx>. */
static int write_lrc(ebb_stage_ctx *ctx, const char *path, json_t *words, json_t *phrases,
                     int enhanced, size_t *lines) {
  FILE *f = fopen(path, "w");
  if (!f)
    return stg_st_fail(ctx, EBB_EIO, "%s: cannot write: %s", path, strerror(errno));
  long cur = -2;
  double prev_end = -1e9;
  *lines = 0;
  for (size_t i = 0; i < json_array_size(words); i++) {
    json_t *w = json_array_get(words, i);
    const char *text = json_string_value(json_object_get(w, "word"));
    double start = json_number_value(json_object_get(w, "start"));
    if (!text)
      continue;
    long line = word_line(w, phrases);
    int brk = line != cur || (line == -1 && start - prev_end > 1.0);
    if (brk) {
      char ts[32];
      stg_lrc_timestamp(start, ts, sizeof ts);
      fprintf(f, "%s%s", *lines ? "\n" : "", ts);
      (*lines)++;
      cur = line;
    } else {
      fputc(' ', f);
    }
    if (enhanced) {
      char ts[32];
      stg_lrc_timestamp(start, ts, sizeof ts);
      ts[0] = '<';
      ts[strlen(ts) - 1] = '>';
      fputs(ts, f);
    }
    fputs(text, f);
    prev_end = json_number_value(json_object_get(w, "end"));
  }
  if (*lines)
    fputc('\n', f);
  return fclose(f) ? stg_st_fail(ctx, EBB_EIO, "%s: write failed", path) : 0;
}

static int write_csv(ebb_stage_ctx *ctx, const char *path, const f0_track *t) {
  FILE *f = fopen(path, "w");
  if (!f)
    return stg_st_fail(ctx, EBB_EIO, "%s: cannot write: %s", path, strerror(errno));
  fputs("time,f0_hz,voicing\n", f);
  for (size_t i = 0; i < t->n; i++)
    fprintf(f, "%.3f,%.2f,%.3f\n", t->data[3 * i], t->data[3 * i + 1], t->data[3 * i + 2]);
  return fclose(f) ? stg_st_fail(ctx, EBB_EIO, "%s: write failed", path) : 0;
}

static int export_run(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out) {
  export_state *s = state;
  const char *dir = ctx->host->output_dir ? ctx->host->output_dir(ctx) : NULL;
  if (!dir || !*dir)
    return stg_st_fail(ctx, EBB_ESTATE, "the job has no output directory");
  if (mkdir(dir, 0777) && errno != EEXIST)
    return stg_st_fail(ctx, EBB_EIO, "output directory %s: %s", dir, strerror(errno));
  f0_track f0;
  int rc = find_f0(ctx, in, &f0);
  if (rc)
    return rc;
  json_t *notes = item_json(ctx, in, "notes"), *lyrics = item_json(ctx, in, "lyrics");
  json_t *transcript = item_json(ctx, in, "transcript");
  json_t *words = lyrics ? json_object_get(lyrics, "words") : NULL;
  char path[4096];
  if (s->formats & FMT_MIDI) {
    size_t k = 0;
    if ((rc = join_path(ctx, dir, "melody.mid", path, sizeof path)) ||
        (rc = write_midi(ctx, path, notes, &k)) || (rc = add_file(ctx, out, "melody.mid", path)))
      goto done;
    stg_st_log(ctx, 1, "wrote %s (%zu notes)", path, k);
  }
  if (s->formats & FMT_LRC) {
    static const char *const lrc[2] = {"lyrics.lrc", "lyrics.words.lrc"};
    for (int e = 0; e < 2; e++) {
      if (json_array_size(words) == 0) {
        /* an earlier run's lyrics in the same directory would pass for this
         * song's */
        int stale = join_path(ctx, dir, lrc[e], path, sizeof path) == 0 && unlink(path) == 0;
        if (e == 0 || stale)
          stg_st_log(ctx, 1, "no lyric words: %s not written%s", lrc[e],
                     stale ? " (removed the one an earlier run left in the output directory)" : "");
        continue;
      }
      size_t lines = 0;
      if ((rc = join_path(ctx, dir, lrc[e], path, sizeof path)) ||
          (rc = write_lrc(ctx, path, words, json_object_get(lyrics, "phrases"), e, &lines)) ||
          (rc = add_file(ctx, out, lrc[e], path)))
        goto done;
      stg_st_log(ctx, 1, "wrote %s (%zu lines%s)", path, lines, e ? ", word times" : "");
    }
  }
  if (s->formats & FMT_CSV) {
    if (!f0.data) {
      stg_st_log(ctx, 1, "no f0 item: pitch.csv not written");
    } else {
      if ((rc = join_path(ctx, dir, "pitch.csv", path, sizeof path)) ||
          (rc = write_csv(ctx, path, &f0)) || (rc = add_file(ctx, out, "pitch.csv", path)))
        goto done;
      stg_st_log(ctx, 1, "wrote %s (%zu frames)", path, f0.n);
    }
  }
  if (s->stems != EBB_STEMS_NONE && (rc = stg_export_stems(ctx, in, out, dir, s->stems)))
    goto done;
  if (s->formats & FMT_JSON) {
    if ((rc = join_path(ctx, dir, "songtrace.json", path, sizeof path)) ||
        (rc = write_json(ctx, in, path, notes, lyrics, transcript, &f0, s->formats)) ||
        (rc = add_file(ctx, out, "songtrace.json", path)))
      goto done;
    stg_st_log(ctx, 1, "wrote %s", path);
  }
done:
  json_decref(notes);
  json_decref(lyrics);
  json_decref(transcript);
  return rc;
}

const ebb_stage stg_stage_export = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "export",
    /* keys the result cache: bump it whenever the outputs change (2: the stems;
     * 3: lyrics.words.lrc) */
    .version = 3,
    .description = "writes songtrace.json, melody.mid, lyrics.lrc (+ lyrics.words.lrc), "
                   "pitch.csv and the stems",
    .options_schema = stage_opts_schema,
    .needs_gpu = 0,
    .load = export_load,
    .run = export_run,
    .unload = export_unload,
    .release = NULL,
    .work = export_work,
};
