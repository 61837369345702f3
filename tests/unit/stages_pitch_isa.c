/* pitch: the baseline build of pitch_yin.c (what a CPU without AVX2 runs)
 * gives the same bits as the build this machine's CPU picks. pitch_yin.c
 * builds its difference function and pYIN's Viterbi twice (target_clones:
 * AVX2 and the baseline) and says both give the same results bit for bit;
 * on an AVX2 machine the baseline clone never runs, so this test builds
 * pitch_yin.c a second time without clones (-DPY_CLONES=, the executable
 * stages_pitch_isa_baseline, tests/unit/stages_pitch_isa.cmake), has it dump
 * the same results, and compares the two dumps byte for byte: d'(tau) on a
 * song's mix, and the whole stage's f0 track and notes, YIN and pYIN, on a
 * song sung with words over its accompaniment.
 *   stages_pitch_isa              the test
 *   stages_pitch_isa --dump FILE  writes this build's results to FILE */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "stages/audio/pitch.h"
#include "stages/audio/songgen.h"
#include "stages_pitch_host.h"
#include "test.h"

#ifndef EBB_PITCH_ISA_BASELINE
#error "EBB_PITCH_ISA_BASELINE: the baseline executable's path (stages_pitch_isa.cmake)"
#endif

/* Which clones this CPU runs (the resolver's choice). */
static const char *clones(void) {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx2") ? "AVX2" : "baseline";
#else
  return "only the baseline's";
#endif
}

/* One section of the dump: its name, its length, its bytes. */
static void put(FILE *f, const char *what, const void *p, size_t n) {
  uint64_t len = n;
  fprintf(f, "%s\n", what);
  REQUIRE(fwrite(&len, sizeof len, 1, f) == 1);
  REQUIRE(n == 0 || fwrite(p, 1, n, f) == n);
}

static void dump_cmndf(FILE *f, const stg_song *s) {
  stg_pitch_params p = stg_pitch_defaults();
  stg_pitch_geom g;
  float *pad = NULL;
  REQUIRE(stg_pitch_geometry(&p, s->rate, s->frames, &g) == 0);
  REQUIRE(stg_pitch_pad(s->mix, s->frames, &g, &pad) == 0);
  size_t cells = g.n_frames * (size_t)(g.tau_max + 1);
  float *d = malloc(cells * sizeof *d);
  REQUIRE(d);
  stg_pitch_cmndf_cpu(pad, &g, d);
  put(f, "cmndf of the mix", d, cells * sizeof *d);
  free(d);
  free(pad);
}

static void dump_stage(FILE *f, const stg_song *s, const char *opts) {
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  ebb_items in = {0}, out = {0};
  REQUIRE(th_add_audio(&in, "vocals", s->vocals, s->frames, 1, s->rate) == 0);
  REQUIRE(th_add_audio(&in, "melody", s->mix, s->frames, 1, s->rate) == 0);
  int rc = th_run_stage(&t, &stg_stage_pitch, opts, &in, &out);
  REQUIRE(rc == 0 || (fprintf(stderr, "pitch %s: %s\n", opts, t.err), 0));
  ebb_item_info f0, notes;
  REQUIRE(th_item_find(&out, "f0", &f0) == 0 && th_item_find(&out, "notes", &notes) == 0);
  char what[160];
  snprintf(what, sizeof what, "f0 of %s", opts);
  put(f, what, f0.data, f0.shape[0] * 3 * sizeof(float));
  snprintf(what, sizeof what, "notes of %s", opts);
  put(f, what, notes.text, strlen(notes.text));
  th_items_free(&in);
  th_items_free(&out);
}

static void dump(const char *path) {
  stg_songgen_params sp = stg_songgen_defaults();
  sp.seconds = 8.0;
  sp.seed = 7;
  sp.voice = EBB_SONG_VOICE_WORDS; /* vowels where ebb was built without espeak-ng */
  stg_song *s = NULL;
  if (stg_songgen_create(&sp, &s) == EBB_ENOLIB) {
    sp.voice = EBB_SONG_VOICE_VOWELS;
    REQUIRE(stg_songgen_create(&sp, &s) == 0);
  }
  REQUIRE(s);
  FILE *f = fopen(path, "wb");
  REQUIRE(f);
  dump_cmndf(f, s);
  dump_stage(f, s, "{\"backend\":\"cpu\",\"method\":\"yin\"}");
  dump_stage(f, s, "{\"backend\":\"cpu\",\"method\":\"pyin\"}");
  REQUIRE(fclose(f) == 0);
  stg_song_destroy(s);
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  REQUIRE(f);
  REQUIRE(fseek(f, 0, SEEK_END) == 0);
  long len = ftell(f);
  REQUIRE(len > 0 && fseek(f, 0, SEEK_SET) == 0);
  char *b = malloc((size_t)len);
  REQUIRE(b && fread(b, 1, (size_t)len, f) == (size_t)len);
  fclose(f);
  *n = (size_t)len;
  return b;
}

/* The section holding byte off of a dump, for the failure message. */
static const char *section_at(const char *b, size_t n, size_t off, char *name, size_t cap) {
  size_t i = 0;
  snprintf(name, cap, "(header)");
  while (i < n) {
    const char *nl = memchr(b + i, '\n', n - i);
    uint64_t len;
    if (!nl || (size_t)(nl - b) + 1 + sizeof len > n)
      break;
    snprintf(name, cap, "%.*s", (int)(nl - (b + i)), b + i);
    memcpy(&len, nl + 1, sizeof len);
    i = (size_t)(nl - b) + 1 + sizeof len + len;
    if (off < i)
      break;
  }
  return name;
}

static void test_baseline_matches(void) {
  char dir[] = "/tmp/ebb-pitch-isa-XXXXXX", mine[64], base[64], cmd[256];
  REQUIRE(mkdtemp(dir));
  snprintf(mine, sizeof mine, "%s/clones", dir);
  snprintf(base, sizeof base, "%s/baseline", dir);
  dump(mine);
  snprintf(cmd, sizeof cmd, "'%s' --dump '%s'", EBB_PITCH_ISA_BASELINE, base);
  CHECK_MSG(system(cmd) == 0, "the baseline build failed: %s", cmd);
  size_t na = 0, nb = 0;
  char *a = slurp(mine, &na), *b = slurp(base, &nb);
  size_t off = 0;
  while (off < na && off < nb && a[off] == b[off])
    off++;
  char name[160];
  CHECK_MSG(off == na && na == nb,
            "the baseline build differs from this CPU's (%s clones) at byte %zu of %zu, in \"%s\"",
            clones(), off, na, section_at(a, na, off, name, sizeof name));
  fprintf(stderr, "  %zu bytes the same; this CPU ran the %s clones\n", na, clones());
  free(a);
  free(b);
  remove(mine);
  remove(base);
  rmdir(dir);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--dump") == 0) {
    dump(argv[2]);
    return TEST_END();
  }
  RUN(test_baseline_matches);
  return TEST_END();
}
