/* decode reads WAV, FLAC, OGG and MP3 (libsndfile, and MP3 also through the
 * libmpg123 path), mixes down to mono and resamples to the working rate: a
 * 440 Hz stereo tone at 44.1 kHz comes out at 16 kHz as a 440 Hz tone of the
 * right length; the stage turns the FILE item "input" into AUDIO "audio". */
#include <math.h>
#include <sndfile.h>
#include <sys/stat.h>

#include "stages/audio/decode.h"
#include "stages_separate_shim.h"
#include "test.h"

extern const ebb_stage stg_stage_decode;

static char dir[512];
#define SRC_RATE 44100
#define SECONDS 1.5

static int write_tone(const char *path, int format, int channels) {
  SF_INFO info = {0};
  info.samplerate = SRC_RATE;
  info.channels = channels;
  info.format = format;
  if (!sf_format_check(&info))
    return -1;
  SNDFILE *f = sf_open(path, SFM_WRITE, &info);
  if (!f)
    return -1;
  int n = (int)(SECONDS * SRC_RATE);
  float *buf = malloc(sizeof(float) * n * channels);
  for (int i = 0; i < n; i++)
    for (int c = 0; c < channels; c++) /* the right channel in antiphase at half level:
                                          the mono mix (L+R)/2 is a 440 Hz tone of 0.125 */
      buf[i * channels + c] =
          (float)((c == 0 ? 0.5 : -0.25) * sin(2 * M_PI * 440.0 * i / SRC_RATE));
  sf_count_t w = sf_writef_float(f, buf, n);
  free(buf);
  sf_close(f);
  return w == n ? 0 : -1;
}

/* frequency from zero crossings over the middle of the signal */
static double tone_hz(const float *x, uint64_t n, unsigned rate, double *rms) {
  uint64_t a = n / 5, b = n - n / 5;
  int crossings = 0;
  double e = 0;
  uint64_t first = 0, last = 0;
  for (uint64_t i = a + 1; i < b; i++) {
    e += (double)x[i] * x[i];
    if ((x[i - 1] < 0) != (x[i] < 0)) {
      if (!crossings)
        first = i;
      last = i;
      crossings++;
    }
  }
  *rms = sqrt(e / (double)(b - a));
  if (crossings < 2)
    return 0;
  return (crossings - 1) / 2.0 / ((double)(last - first) / rate);
}

static void check_file(const char *name, int format, int lossless, int via_mpg123) {
  char path[600];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  REQUIRE(write_tone(path, format, 2) == 0);
  float *pcm = NULL;
  uint64_t n = 0;
  stg_decode_info info = {0};
  int rc = via_mpg123 ? stg_audio_decode_mpg123(path, 16000, 900, &pcm, &n, &info)
                      : stg_audio_decode(path, 16000, 900, &pcm, &n, &info);
  CHECK_MSG(rc == 0, "%s: decode failed: %s", name, ebb_errmsg());
  if (rc)
    return;
  double want = SECONDS * 16000, rms;
  double hz = tone_hz(pcm, n, 16000, &rms);
  fprintf(stderr, "  %s via %s: %" PRIu64 " samples (want %.0f), %.2f Hz, rms %.4f\n", name,
          info.via, n, want, hz, rms);
  CHECK_EQ_INT(info.channels, 2);
  CHECK_EQ_INT(info.rate, SRC_RATE);
  if (lossless)
    CHECK_MSG(fabs((double)n - want) <= 1, "%s: %" PRIu64 " samples, want %.0f +- 1", name, n,
              want);
  else /* lossy codecs add encoder delay / padding: within 0.1 s */
    CHECK_MSG(fabs((double)n - want) <= 1600, "%s: %" PRIu64 " samples, want %.0f +- 1600", name, n,
              want);
  CHECK_MSG(fabs(hz - 440.0) < 1.0, "%s: tone at %.2f Hz, want 440", name, hz);
  /* mono mixdown (0.5 - 0.25) / 2 = 0.125 amplitude, rms 0.0884 */
  CHECK_MSG(fabs(rms - 0.125 / sqrt(2)) < 0.005, "%s: rms %.4f, want %.4f", name, rms,
            0.125 / sqrt(2));
  free(pcm);
}

static void test_wav(void) { check_file("tone.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 1, 0); }
static void test_wav_float(void) { check_file("tonef.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 1, 0); }
static void test_flac(void) { check_file("tone.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 1, 0); }
static void test_ogg(void) { check_file("tone.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 0, 0); }
static void test_mp3(void) {
  check_file("tone.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 0, 0);
}
static void test_mp3_mpg123(void) {
  check_file("tone2.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, 0, 1);
}

static void test_same_rate_is_exact(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/same.wav", dir);
  SF_INFO info = {0};
  info.samplerate = 16000;
  info.channels = 1;
  info.format = SF_FORMAT_WAV | SF_FORMAT_FLOAT;
  SNDFILE *f = sf_open(path, SFM_WRITE, &info);
  REQUIRE(f);
  float x[1000];
  for (int i = 0; i < 1000; i++)
    x[i] = (float)i / 1000.0f;
  sf_writef_float(f, x, 1000);
  sf_close(f);
  float *pcm = NULL;
  uint64_t n = 0;
  REQUIRE(stg_audio_decode(path, 16000, 900, &pcm, &n, NULL) == 0);
  CHECK_EQ_U64(n, 1000);
  CHECK(memcmp(pcm, x, sizeof x) == 0);
  free(pcm);
}

static void test_stage(void) {
  char path[600];
  snprintf(path, sizeof path, "%s/stage.flac", dir);
  REQUIRE(write_tone(path, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 2) == 0);
  shim_ctx sh;
  shim_init(&sh, EBB_DEV_KIND_CPU);
  ebb_items in = {0}, out = {0};
  REQUIRE(shim_add_file(&in, "input", path) == 0);
  void *state = NULL;
  REQUIRE(stg_stage_decode.load(&sh.base, "{\"rate\": 22050, \"max_seconds\": 10}", &state) == 0);
  int rc = stg_stage_decode.run(&sh.base, state, &in, &out);
  CHECK_MSG(rc == 0, "decode stage failed: %s", sh.err);
  ebb_item_info it = {0};
  CHECK(shim_item_find(&out, "audio", &it) == 0);
  CHECK_EQ_INT(it.kind, EBB_ITEM_AUDIO);
  CHECK_EQ_INT(it.channels, 1);
  CHECK_EQ_INT(it.rate, 22050);
  CHECK_MSG(fabs((double)it.frames - SECONDS * 22050) <= 1, "frames %" PRIu64, it.frames);
  CHECK(strstr(sh.log, "44100 Hz x 2 ch") != NULL);
  stg_stage_decode.unload(&sh.base, state);
  /* the same file with max_seconds 1: refused, with the reason */
  REQUIRE(stg_stage_decode.load(&sh.base, "{\"max_seconds\": 1}", &state) == 0);
  shim_items_free(&out);
  rc = stg_stage_decode.run(&sh.base, state, &in, &out);
  CHECK_EQ_INT(rc, EBB_EINPUT);
  CHECK_MSG(strstr(sh.err, "max_seconds") && strstr(sh.err, path), "error: %s", sh.err);
  CHECK_EQ_INT(out.n, 0);
  stg_stage_decode.unload(&sh.base, state);
  /* bad options are refused at load */
  state = NULL;
  CHECK_EQ_INT(stg_stage_decode.load(&sh.base, "{\"rate\": 0}", &state), EBB_ECONFIG);
  CHECK(strstr(sh.err, "rate") != NULL);
  CHECK(state == NULL);
  /* no input item */
  ebb_items none = {0};
  REQUIRE(stg_stage_decode.load(&sh.base, "{}", &state) == 0);
  CHECK_EQ_INT(stg_stage_decode.run(&sh.base, state, &none, &out), EBB_EINPUT);
  CHECK(strstr(sh.err, "input") != NULL);
  stg_stage_decode.unload(&sh.base, state);
  shim_items_free(&in);
  shim_items_free(&out);
}

int main(void) {
  const char *tmp = getenv("EBB_TEST_TMP");
  snprintf(dir, sizeof dir, "%s", tmp ? tmp : "/tmp/stages_decode_formats");
  mkdir(dir, 0755);
  RUN(test_wav);
  RUN(test_wav_float);
  RUN(test_flac);
  RUN(test_ogg);
  RUN(test_mp3);
  RUN(test_mp3_mpg123);
  RUN(test_same_rate_is_exact);
  RUN(test_stage);
  return TEST_END();
}
