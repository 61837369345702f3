/* songgen: writes a synthetic song with ground truth (songgen.h).
 *   songgen [--seed N] [--rate HZ] [--seconds S] [--accomp GAIN] [--voice words|vowels]
 *           OUTDIR [NAME]
 * writes OUTDIR/NAME.wav (mix), NAME.vocals.wav, NAME.accompaniment.wav,
 * NAME.truth.json and NAME.lyrics.txt (NAME defaults to "demo"). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ebb/error.h"
#include "stages/audio/songgen.h"

static int usage(FILE *to) {
  fprintf(to, "usage: songgen [--seed N] [--rate HZ] [--seconds S] [--accomp GAIN] "
                  "[--voice words|vowels] OUTDIR [NAME]\n"
                  "  --voice: words (default) sings each note's word as espeak-ng speaks it;\n"
                  "           vowels sings one vowel per note (the pitch benchmark's songs)\n");
  return 2;
}

static int number(const char *s, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || !end || *end || end == s)
    return -1;
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  stg_songgen_params p = stg_songgen_defaults();
  p.voice = EBB_SONG_VOICE_WORDS;
  const char *dir = NULL, *name = "demo";
  for (int i = 1; i < argc; i++) {
    double v = 0;
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
      return usage(stdout), 0;
    if (!strcmp(argv[i], "--voice")) {
      const char *v = i + 1 < argc ? argv[++i] : "";
      if (strcmp(v, "words") && strcmp(v, "vowels")) {
        fprintf(stderr, "songgen: --voice needs words or vowels, not \"%s\"\n", v);
        return 2;
      }
      p.voice = strcmp(v, "words") ? EBB_SONG_VOICE_VOWELS : EBB_SONG_VOICE_WORDS;
      continue;
    }
    if (!strncmp(argv[i], "--", 2)) {
      if (i + 1 >= argc || number(argv[i + 1], &v)) {
        fprintf(stderr, "songgen: %s needs a number\n", argv[i]);
        return 2;
      }
      if (!strcmp(argv[i], "--seed"))
        p.seed = (uint64_t)v;
      else if (!strcmp(argv[i], "--rate"))
        p.rate = (uint32_t)v;
      else if (!strcmp(argv[i], "--seconds"))
        p.seconds = v;
      else if (!strcmp(argv[i], "--accomp"))
        p.accomp_gain = v;
      else {
        fprintf(stderr, "songgen: unknown option %s\n", argv[i]);
        return 2;
      }
      i++;
    } else if (!dir) {
      dir = argv[i];
    } else {
      name = argv[i];
    }
  }
  if (!dir)
    return usage(stderr);
  if (mkdir(dir, 0777) && errno != EEXIST) {
    fprintf(stderr, "songgen: %s: %s\n", dir, strerror(errno));
    return 1;
  }
  stg_song *s = NULL;
  int rc = stg_songgen_create(&p, &s);
  if (!rc)
    rc = stg_song_write(s, dir, name);
  if (rc) {
    fprintf(stderr, "songgen: %s\n", ebb_errmsg());
    stg_song_destroy(s);
    return rc == EBB_EINVAL ? 2 : 1;
  }
  printf("songgen: %s/%s.wav: %.1f s at %u Hz, %zu notes in %d phrases (seed %llu, %s)\n", dir,
         name, (double)s->frames / s->rate, s->rate, s->n_notes, s->n_lines,
         (unsigned long long)s->seed, s->voice == EBB_SONG_VOICE_WORDS ? "words" : "vowels");
  stg_song_destroy(s);
  return 0;
}
