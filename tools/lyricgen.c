/* lyricgen: lyric lines with known word times, for the lyrics benchmark
 * (bench/lyrics_align.py) and the align tests.
 *   lyricgen [--seed N] [--stretch S] [--accomp-db DB] [--spoken] OUTDIR NAME "LINE" ...
 * Each line is spoken by espeak-ng (which reports where each word starts),
 * stretched evenly by S (default 1.3) and re-sung on a melody (a note per
 * word, a random walk on a major scale, vibrato) by speech.h's vocoder, or
 * left spoken with --spoken; the lines follow each other with 1 s rests
 * after a 1 s intro. With --accomp-db the voice is mixed over songgen's
 * accompaniment (chords, bass, drums) whose RMS is DB relative to the
 * voice's (0: as loud, -6: half the amplitude); without it the mix is the
 * voice alone. Writes OUTDIR/NAME.wav (the mix), NAME.vocals.wav,
 * NAME.lyrics.txt (the lines) and NAME.truth.json
 * {"words":[{"word","start","end","line","estimated"}],"accomp_db":DB|null}
 * (estimated: espeak reported no start for the word, run into the one
 * before; its start is halfway between its neighbours', not a truth). */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ebb/error.h"
#include "stages/audio/songgen.h"
#include "stages/audio/speech.h"

#define LG_RATE 16000
#define LG_GAP_S 1.0

typedef struct lg_word {
  char *word;
  double start, end;
  int line;
  double hz;
  size_t at;     /* byte offset in its line */
  int estimated; /* espeak reported no start for it: between its neighbours */
} lg_word;

typedef struct lg_melody {
  const lg_word *w;
  size_t n;
  double offset; /* the line's start in the song */
} lg_melody;

/* The line's f0 at t (seconds from the line's start): its word's note with
 * 5.5 Hz vibrato of +-25 cents; before the first word, the first note. */
static double lg_f0(double t, void *u) {
  const lg_melody *m = u;
  double hz = m->n ? m->w[0].hz : 220.0, ts = m->offset + t;
  for (size_t i = 0; i < m->n; i++)
    if (m->w[i].start <= ts)
      hz = m->w[i].hz;
  return hz * pow(2.0, 25.0 * sin(2.0 * 3.14159265358979 * 5.5 * t) / 1200.0);
}

static uint64_t lg_next(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static int words_of(const char *line, int lineno, lg_word **w, size_t *n, size_t *cap) {
  const char *p = line;
  while (*p) {
    while (*p == ' ')
      p++;
    size_t len = strcspn(p, " ");
    if (!len)
      break;
    if (*n == *cap) {
      *cap = *cap ? *cap * 2 : 64;
      lg_word *x = realloc(*w, *cap * sizeof *x);
      if (!x)
        return -1;
      *w = x;
    }
    (*w)[(*n)++] = (lg_word){.word = strndup(p, len), .line = lineno, .at = (size_t)(p - line)};
    p += len;
  }
  return 0;
}

static int write_truth(const char *path, const lg_word *w, size_t n, int has_db, double db) {
  json_t *root = json_object(), *a = json_array();
  for (size_t i = 0; i < n; i++)
    json_array_append_new(a, json_pack("{s:s,s:f,s:f,s:i,s:b}", "word", w[i].word, "start",
                                       round(w[i].start * 1000) / 1000, "end",
                                       round(w[i].end * 1000) / 1000, "line", w[i].line,
                                       "estimated", w[i].estimated));
  json_object_set_new(root, "words", a);
  json_object_set_new(root, "accomp_db", has_db ? json_real(db) : json_null());
  int rc = json_dump_file(root, path, JSON_COMPACT);
  json_decref(root);
  return rc;
}

int main(int argc, char **argv) {
  uint64_t seed = 1;
  double stretch = 1.3, db = 0;
  int has_db = 0, spoken = 0, a = 1;
  for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
    if (!strcmp(argv[a], "--spoken")) {
      spoken = 1;
      continue;
    }
    if (a + 1 >= argc)
      break;
    if (!strcmp(argv[a], "--seed"))
      seed = strtoull(argv[++a], NULL, 10);
    else if (!strcmp(argv[a], "--stretch"))
      stretch = atof(argv[++a]);
    else if (!strcmp(argv[a], "--accomp-db"))
      db = atof(argv[++a]), has_db = 1;
    else
      break;
  }
  if (argc - a < 3 || !(stretch >= 0.5 && stretch <= 4)) {
    fprintf(stderr, "usage: lyricgen [--seed N] [--stretch 0.5..4] [--accomp-db DB] [--spoken] "
                    "OUTDIR NAME \"LINE\" ...\n");
    return 2;
  }
  const char *dir = argv[a], *name = argv[a + 1];
  if (mkdir(dir, 0777) && errno != EEXIST) {
    fprintf(stderr, "lyricgen: %s: %s\n", dir, strerror(errno));
    return 1;
  }
  int nlines = argc - a - 2;
  lg_word *w = NULL;
  size_t nw = 0, cap = 0;
  float *voice = NULL;
  uint64_t total = (uint64_t)(LG_GAP_S * LG_RATE), vcap = 0;
  int rc = 0;
  uint64_t rs = seed;
  int deg = 2;
  static const int major[7] = {0, 2, 4, 5, 7, 9, 11};
  for (int l = 0; l < nlines && !rc; l++) {
    float *x = NULL;
    double *ws = NULL;
    uint64_t nx = 0;
    size_t nws = 0, first = nw, *wat = NULL;
    if ((rc = stg_speech_say(argv[a + 2 + l], LG_RATE, &x, &nx, &ws, &wat, &nws)) ||
        words_of(argv[a + 2 + l], l, &w, &nw, &cap)) {
      fprintf(stderr, "lyricgen: line %d: %s\n", l + 1, rc ? ebb_errmsg() : "out of memory");
      return 1;
    }
    uint64_t ny = (uint64_t)llround((double)nx * stretch), off = total;
    double t0 = (double)off / LG_RATE;
    for (size_t i = first; i < nw; i++) {
      w[i].estimated = 1;
      for (size_t k = 0; k < nws; k++)
        if (wat[k] == w[i].at) {
          w[i].start = t0 + ws[k] * stretch;
          w[i].estimated = 0;
        }
      int step = (int)(lg_next(&rs) % 5) - 2;
      if (deg + step < 0 || deg + step > 9)
        step = -step;
      deg += step;
      w[i].hz = 440.0 * pow(2.0, (57 + 12 * (deg / 7) + major[deg % 7] - 69) / 12.0);
    }
    /* a word espeak ran into its neighbour: halfway between them (marked) */
    for (size_t i = first; i < nw; i++) {
      if (!w[i].estimated)
        continue;
      double lo = i > first ? w[i - 1].start : t0, hi = t0 + (double)ny / LG_RATE;
      for (size_t j = i + 1; j < nw; j++)
        if (!w[j].estimated) {
          hi = w[j].start;
          break;
        }
      w[i].start = 0.5 * (lo + hi);
    }
    for (size_t i = first; i < nw; i++)
      w[i].end = i + 1 < nw ? w[i + 1].start : t0 + (double)ny / LG_RATE;
    total += ny + (uint64_t)(LG_GAP_S * LG_RATE);
    if (total > vcap) {
      vcap = total * 2;
      float *v = realloc(voice, vcap * sizeof *v);
      if (!v)
        return 1;
      voice = v;
    }
    memset(voice + off, 0, (total - off) * sizeof *voice);
    if (l == 0)
      memset(voice, 0, off * sizeof *voice);
    if (spoken) {
      for (uint64_t k = 0; k < ny && k < nx; k++)
        voice[off + k] = x[k];
    } else {
      lg_melody m = {w + first, nw - first, t0};
      rc = stg_vocode(x, nx, LG_RATE, lg_f0, &m, seed * 7919 + (uint64_t)l, 1.0, 0, voice + off,
                      ny);
    }
    free(x);
    free(ws);
    free(wat);
  }
  /* the voice at RMS 0.1 (over its voiced stretches), then the accompaniment */
  double ss = 0;
  uint64_t act = 0;
  for (uint64_t k = 0; k < total; k++)
    if (fabsf(voice[k]) > 1e-4f)
      ss += (double)voice[k] * voice[k], act++;
  double g = act && ss > 0 ? 0.1 / sqrt(ss / (double)act) : 1.0;
  float *mix = malloc(total * sizeof *mix);
  if (!mix)
    return 1;
  for (uint64_t k = 0; k < total; k++)
    mix[k] = voice[k] = (float)(voice[k] * g);
  if (has_db) {
    stg_songgen_params p = stg_songgen_defaults();
    p.seed = seed;
    p.seconds = fmax(6.0, (double)total / LG_RATE);
    stg_song *s = NULL;
    if ((rc = stg_songgen_create(&p, &s))) {
      fprintf(stderr, "lyricgen: %s\n", ebb_errmsg());
      return 1;
    }
    double sa = 0;
    for (uint64_t k = 0; k < total && k < s->frames; k++)
      sa += (double)s->accomp[k] * s->accomp[k];
    double ga = sa > 0 ? 0.1 * pow(10.0, db / 20.0) / sqrt(sa / (double)total) : 0;
    for (uint64_t k = 0; k < total && k < s->frames; k++)
      mix[k] += (float)(ga * s->accomp[k]);
    stg_song_destroy(s);
  }
  float peak = 0;
  for (uint64_t k = 0; k < total; k++)
    peak = fmaxf(peak, fabsf(mix[k]));
  if (peak > 0.95f)
    for (uint64_t k = 0; k < total; k++)
      mix[k] *= 0.95f / peak, voice[k] *= 0.95f / peak;
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.wav", dir, name);
  rc = stg_wav_write_mono(path, mix, total, LG_RATE);
  snprintf(path, sizeof path, "%s/%s.vocals.wav", dir, name);
  if (!rc)
    rc = stg_wav_write_mono(path, voice, total, LG_RATE);
  snprintf(path, sizeof path, "%s/%s.truth.json", dir, name);
  if (!rc && write_truth(path, w, nw, has_db, db))
    rc = ebb_seterr(EBB_EIO, "%s: cannot write", path);
  snprintf(path, sizeof path, "%s/%s.lyrics.txt", dir, name);
  FILE *f = rc ? NULL : fopen(path, "w");
  if (!rc && !f)
    rc = ebb_seterr(EBB_EIO, "%s: cannot write", path);
  for (int l = 0; f && l < nlines; l++)
    fprintf(f, "%s\n", argv[a + 2 + l]);
  if (f && fclose(f))
    rc = ebb_seterr(EBB_EIO, "%s: cannot write", path);
  if (rc) {
    fprintf(stderr, "lyricgen: %s\n", ebb_errmsg());
    return 1;
  }
  printf("lyricgen: %s/%s.wav: %.1f s, %zu words in %d lines\n", dir, name,
         (double)total / LG_RATE, nw, nlines);
  for (size_t i = 0; i < nw; i++)
    free(w[i].word);
  free(w);
  free(voice);
  free(mix);
  return 0;
}
