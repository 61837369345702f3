/* export: the files it writes read back: the MIDI file parses (a small SMF
 * reader below) to the same notes, LRC lines have the [mm:ss.xx] format,
 * the CSV has one row per f0 frame, and songtrace.json holds everything. */
#include <jansson.h>
#include <math.h>
#include <sndfile.h>
#include <sys/stat.h>

#include "stages/audio/export.h"
#include "stages/audio/midi.h"
#include "stages_pitch_host.h"
#include "test.h"

typedef struct rnote {
  long on, off;
  int key;
} rnote;

static uint32_t be(const unsigned char *p, int n) {
  uint32_t v = 0;
  for (int i = 0; i < n; i++)
    v = v << 8 | p[i];
  return v;
}

/* Reads a format-0 SMF: checks the header, tempo and end of track; returns
 * the number of notes paired into out (on/off in ticks), or -1. */
static int read_smf(const unsigned char *d, size_t n, rnote *out, int max, long *tempo) {
  if (n < 22 || memcmp(d, "MThd", 4) || be(d + 4, 4) != 6 || be(d + 8, 2) != 0 ||
      be(d + 10, 2) != 1 || be(d + 12, 2) != 480 || memcmp(d + 14, "MTrk", 4))
    return -1;
  size_t len = be(d + 18, 4), p = 22, end = 22 + len;
  if (end != n)
    return -1;
  long tick = 0;
  int count = 0, open[128], eot = 0;
  for (int i = 0; i < 128; i++)
    open[i] = -1;
  while (p < end && !eot) {
    uint32_t dt = 0;
    do
      dt = dt << 7 | (d[p] & 0x7F);
    while (d[p++] & 0x80);
    tick += dt;
    unsigned st = d[p++];
    if (st == 0xFF) {
      unsigned type = d[p++], l = d[p++];
      if (type == 0x51 && l == 3)
        *tempo = (long)be(d + p, 3);
      if (type == 0x2F)
        eot = 1;
      p += l;
    } else if ((st & 0xF0) == 0x90 && d[p + 1] > 0) {
      if (count >= max)
        return -1;
      open[d[p]] = count;
      out[count++] = (rnote){tick, -1, d[p]};
      p += 2;
    } else if ((st & 0xF0) == 0x80 || (st & 0xF0) == 0x90) {
      if (open[d[p]] < 0)
        return -1; /* off without on */
      out[open[d[p]]].off = tick;
      open[d[p]] = -1;
      p += 2;
    } else {
      return -1;
    }
  }
  return eot && p == end ? count : -1;
}

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  *n = fread(b, 1, (size_t)len, f);
  b[*n] = 0;
  fclose(f);
  return b;
}

static const char notes_json[] =
    "{\"notes\":[{\"onset\":2.0,\"offset\":2.44,\"midi\":60,\"hz\":261.6,\"name\":\"C4\"},"
    "{\"onset\":2.5,\"offset\":2.94,\"midi\":64,\"hz\":329.6,\"name\":\"E4\"},"
    "{\"onset\":3.0,\"offset\":3.9,\"midi\":67,\"hz\":392.0,\"name\":\"G4\"},"
    "{\"onset\":4.013,\"offset\":4.5,\"midi\":72,\"hz\":523.3,\"name\":\"C5\"}],\"count\":4}";
static const char lyrics_json[] =
    "{\"words\":[{\"word\":\"sun\",\"start\":2.0,\"end\":2.4,\"matched\":true,\"line\":0},"
    "{\"word\":\"rise\",\"start\":2.5,\"end\":2.9,\"matched\":false,\"line\":0},"
    "{\"word\":\"over\",\"start\":3.0,\"end\":3.9,\"matched\":true,\"line\":0},"
    "{\"word\":\"hill\",\"start\":64.126,\"end\":65.0,\"matched\":true,\"line\":1}],"
    "\"phrases\":[{\"start\":2.0,\"end\":3.9}],\"source\":\"transcript+lyrics\"}";

#define WORDS_LRC \
  "[00:02.00]<00:02.00>sun <00:02.50>rise <00:03.00>over\n[01:04.13]<01:04.13>hill\n"

static void setup(ebb_items *in, float *f0, size_t nf) {
  for (size_t i = 0; i < nf; i++) {
    f0[3 * i] = (float)(i * 0.01);
    f0[3 * i + 1] = i % 3 ? 220.0f : 0.0f;
    f0[3 * i + 2] = i % 3 ? 0.9f : 0.05f;
  }
  uint64_t shape[2] = {nf, 3};
  REQUIRE(th_add_tensor(in, "f0", f0, 2, shape) == 0);
  REQUIRE(th_add_json(in, "notes", notes_json) == 0);
  REQUIRE(th_add_json(in, "lyrics", lyrics_json) == 0);
  REQUIRE(th_add_json(in, "transcript", "{\"text\":\"sun rise over hill\",\"words\":[]}") == 0);
}

static void test_all_formats(void) {
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  const char *tmp = getenv("EBB_TEST_TMP");
  snprintf(t.outdir, sizeof t.outdir, "%s/out", tmp ? tmp : "/tmp/stages_export_files");
  if (tmp)
    mkdir(tmp, 0777);
  ebb_items in = {0}, out = {0};
  float f0[3 * 500];
  setup(&in, f0, 500);
  int rc = th_run_stage(&t, &stg_stage_export, "{}", &in, &out);
  REQUIRE(rc == 0);
  CHECK_EQ_INT(out.n, 5);
  ebb_item_info mid, lrc, wlrc, csv, js;
  REQUIRE(th_item_find(&out, "lyrics.words.lrc", &wlrc) == 0);
  REQUIRE(th_item_find(&out, "melody.mid", &mid) == 0);
  REQUIRE(th_item_find(&out, "lyrics.lrc", &lrc) == 0);
  REQUIRE(th_item_find(&out, "pitch.csv", &csv) == 0);
  REQUIRE(th_item_find(&out, "songtrace.json", &js) == 0);
  CHECK_EQ_INT(mid.kind, EBB_ITEM_FILE);
  CHECK(strncmp(mid.text, t.outdir, strlen(t.outdir)) == 0);

  size_t n = 0;
  unsigned char *d = slurp(mid.text, &n);
  REQUIRE(d != NULL);
  rnote r[16];
  long tempo = 0;
  int k = read_smf(d, n, r, 16, &tempo);
  CHECK_EQ_INT(k, 4);
  CHECK_EQ_INT(tempo, 500000);
  const double on[4] = {2.0, 2.5, 3.0, 4.013}, off[4] = {2.44, 2.94, 3.9, 4.5};
  const int key[4] = {60, 64, 67, 72};
  for (int i = 0; i < k && i < 4; i++) {
    CHECK_EQ_INT(r[i].key, key[i]);
    CHECK_NEAR(r[i].on / 960.0, on[i], 0.5 / 960.0 + 1e-9); /* 480 ticks = 0.5 s */
    CHECK_NEAR(r[i].off / 960.0, off[i], 0.5 / 960.0 + 1e-9);
  }
  free(d);

  d = slurp(lrc.text, &n);
  REQUIRE(d != NULL);
  CHECK_EQ_STR((char *)d, "[00:02.00]sun rise over\n[01:04.13]hill\n");
  free(d);
  /* the enhanced LRC form: the same lines, each word after its own time */
  d = slurp(wlrc.text, &n);
  REQUIRE(d != NULL);
  CHECK_EQ_STR((char *)d, WORDS_LRC);
  free(d);

  d = slurp(csv.text, &n);
  REQUIRE(d != NULL);
  int rows = 0;
  for (size_t i = 0; i < n; i++)
    rows += d[i] == '\n';
  CHECK_EQ_INT(rows, 501);
  CHECK(strncmp((char *)d, "time,f0_hz,voicing\n0.000,0.00,0.050\n0.010,220.00,0.900\n", 55) == 0);
  free(d);

  json_t *j = json_load_file(js.text, 0, NULL);
  REQUIRE(j != NULL);
  CHECK_EQ_INT(json_array_size(json_object_get(j, "notes")), 4);
  CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(j, "f0"), "frames")), 500);
  CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(j, "f0"), "voiced_frames")), 333);
  CHECK_NEAR(json_number_value(json_object_get(json_object_get(j, "f0"), "median_hz")), 220.0,
             1e-9);
  CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(j, "lyrics"), "source")),
               "transcript+lyrics");
  CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(j, "transcript"), "text")),
               "sun rise over hill");
  CHECK_EQ_INT(json_array_size(json_object_get(j, "items")), 4);
  json_decref(j);
  th_items_free(&in);
  th_items_free(&out);
}

static void test_formats_option(void) {
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  const char *tmp = getenv("EBB_TEST_TMP");
  snprintf(t.outdir, sizeof t.outdir, "%s/out2", tmp ? tmp : "/tmp/stages_export_files");
  ebb_items in = {0}, out = {0};
  /* only notes: csv asked for but no f0 -> skipped; lrc: no words -> skipped */
  th_add_json(&in, "notes", notes_json);
  CHECK_EQ_INT(th_run_stage(&t, &stg_stage_export, "{\"formats\":\"midi,csv,lrc\"}", &in, &out), 0);
  CHECK_EQ_INT(out.n, 1);
  CHECK_EQ_STR(out.name[0], "melody.mid");
  CHECK(strstr(t.log, "pitch.csv not written") != NULL);
  th_items_free(&out);
  void *s = NULL;
  CHECK_EQ_INT(stg_stage_export.load(&t.base, "{\"formats\":\"json,wav\"}", &s), EBB_ECONFIG);
  CHECK(strstr(t.err, "wav") != NULL);
  th_items_free(&in);
}

/* Reads a stem back with libsndfile: format, rate, channels, frames and the
 * samples within 16-bit rounding. */
static void check_stem(const char *path, int major, const float *x, sf_count_t frames) {
  SF_INFO si = {0};
  SNDFILE *f = sf_open(path, SFM_READ, &si);
  CHECK(f != NULL);
  if (!f)
    return;
  CHECK_EQ_INT(si.format & SF_FORMAT_TYPEMASK, major);
  CHECK_EQ_INT(si.samplerate, 16000);
  CHECK_EQ_INT(si.channels, 1);
  CHECK_EQ_INT((int)si.frames, (int)frames);
  float *y = calloc((size_t)frames, sizeof *y);
  CHECK_EQ_INT((int)sf_readf_float(f, y, frames), (int)frames);
  double worst = 0;
  for (sf_count_t i = 0; i < frames; i++)
    worst = fmax(worst, fabs((double)y[i] - x[i]));
  CHECK(worst < 1.0 / 16384);
  free(y);
  sf_close(f);
}

static void test_stems(void) {
  th_ctx t;
  th_init(&t, EBB_DEV_KIND_CPU);
  const char *tmp = getenv("EBB_TEST_TMP");
  snprintf(t.outdir, sizeof t.outdir, "%s/out3", tmp ? tmp : "/tmp/stages_export_files");
  enum { N = 8000 };
  static float v[N], a[N];
  for (int i = 0; i < N; i++) {
    v[i] = (float)(0.5 * sin(2 * M_PI * 220.0 * i / 16000.0));
    a[i] = (float)(0.25 * sin(2 * M_PI * 55.0 * i / 16000.0));
  }
  ebb_items in = {0}, out = {0};
  th_add_audio(&in, "vocals", v, N, 1, 16000);
  th_add_audio(&in, "accompaniment", a, N, 1, 16000);
  /* default: FLAC stems, each a FILE item */
  CHECK_EQ_INT(th_run_stage(&t, &stg_stage_export, "{\"formats\":\"json\"}", &in, &out), 0);
  char p1[4200], p2[4200];
  snprintf(p1, sizeof p1, "%s/vocals.flac", t.outdir);
  snprintf(p2, sizeof p2, "%s/accompaniment.flac", t.outdir);
  check_stem(p1, SF_FORMAT_FLAC, v, N);
  check_stem(p2, SF_FORMAT_FLAC, a, N);
  CHECK_EQ_INT(out.n, 3);
  CHECK_EQ_STR(out.name[0], "vocals.flac");
  CHECK_EQ_STR(out.name[1], "accompaniment.flac");
  CHECK(strstr(t.log, "vocals.flac (0.5 s, 16000 Hz, 1 channel)") != NULL);
  th_items_free(&out);
  /* WAV on request */
  CHECK_EQ_INT(th_run_stage(&t, &stg_stage_export, "{\"formats\":\"json\",\"stems\":\"wav\"}", &in,
                            &out),
               0);
  snprintf(p1, sizeof p1, "%s/vocals.wav", t.outdir);
  check_stem(p1, SF_FORMAT_WAV, v, N);
  th_items_free(&out);
  /* off: no stem files; without the items, a stale stem is removed */
  CHECK_EQ_INT(th_run_stage(&t, &stg_stage_export, "{\"formats\":\"json\",\"stems\":\"none\"}", &in,
                            &out),
               0);
  CHECK_EQ_INT(out.n, 1);
  th_items_free(&out);
  th_items_free(&in);
  th_add_json(&in, "notes", notes_json);
  CHECK_EQ_INT(th_run_stage(&t, &stg_stage_export, "{\"formats\":\"json\"}", &in, &out), 0);
  snprintf(p2, sizeof p2, "%s/vocals.flac", t.outdir);
  struct stat st;
  CHECK(stat(p2, &st) != 0);
  CHECK(strstr(t.log, "removed the one an earlier run left") != NULL);
  th_items_free(&out);
  th_items_free(&in);
  void *s = NULL;
  CHECK_EQ_INT(stg_stage_export.load(&t.base, "{\"stems\":\"mp3\"}", &s), EBB_ECONFIG);
  CHECK(strstr(t.err, "option stems: \"mp3\"") != NULL);
}

static void test_lrc_timestamp(void) {
  char b[32];
  stg_lrc_timestamp(0.0, b, sizeof b);
  CHECK_EQ_STR(b, "[00:00.00]");
  stg_lrc_timestamp(59.996, b, sizeof b);
  CHECK_EQ_STR(b, "[01:00.00]");
  stg_lrc_timestamp(754.321, b, sizeof b);
  CHECK_EQ_STR(b, "[12:34.32]");
}

static void test_midi_edge(void) {
  /* an empty melody is still a valid file; a zero-length note lasts a tick */
  unsigned char *d = NULL;
  size_t n = 0;
  rnote r[4];
  long tempo = 0;
  REQUIRE(stg_midi_encode(NULL, 0, &d, &n) == 0);
  CHECK_EQ_INT(read_smf(d, n, r, 4, &tempo), 0);
  free(d);
  stg_midi_note one = {.onset = 1.0, .offset = 1.0, .key = 200, .velocity = 0};
  REQUIRE(stg_midi_encode(&one, 1, &d, &n) == 0);
  CHECK_EQ_INT(read_smf(d, n, r, 4, &tempo), 1);
  CHECK_EQ_INT(r[0].key, 127);
  CHECK_EQ_INT(r[0].off - r[0].on, 1);
  free(d);
}

int main(void) {
  RUN(test_all_formats);
  RUN(test_formats_option);
  RUN(test_stems);
  RUN(test_lrc_timestamp);
  RUN(test_midi_edge);
  return TEST_END();
}
