/* decode refuses bad inputs with EBB_EINPUT and a message naming the file and
 * the reason: missing, empty (0 bytes, 0 frames), truncated WAV, garbage,
 * 0 channels, rate 0, rate > 768000, longer than max_seconds, a broken MP3. */
#include <math.h>
#include <sndfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ebb/error.h"
#include "stages/audio/decode.h"
#include "test.h"

static char dir[512];

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

static void put_le(unsigned char *b, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; i++)
    b[i] = (unsigned char)(v >> (8 * i));
}

/* A PCM16 WAV written by hand: declared channels/rate/data size, and
 * `actual` data bytes really present. */
static void write_raw_wav(const char *path, unsigned channels, uint32_t rate, uint32_t declared,
                          uint32_t actual) {
  unsigned char h[44];
  memcpy(h, "RIFF", 4);
  put_le(h + 4, 36 + declared, 4);
  memcpy(h + 8, "WAVEfmt ", 8);
  put_le(h + 16, 16, 4);
  put_le(h + 20, 1, 2);
  put_le(h + 22, channels, 2);
  put_le(h + 24, rate, 4);
  put_le(h + 28, rate * channels * 2, 4);
  put_le(h + 32, channels * 2, 2);
  put_le(h + 34, 16, 2);
  memcpy(h + 36, "data", 4);
  put_le(h + 40, declared, 4);
  FILE *f = fopen(path, "wb");
  REQUIRE(f);
  fwrite(h, 1, 44, f);
  for (uint32_t i = 0; i < actual; i++)
    fputc((int)(i * 37 % 251), f);
  fclose(f);
}

static void write_sine(const char *path, int rate, double seconds) {
  SF_INFO info = {0};
  info.samplerate = rate;
  info.channels = 1;
  info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  SNDFILE *f = sf_open(path, SFM_WRITE, &info);
  REQUIRE(f);
  int n = (int)(seconds * rate);
  for (int i = 0; i < n; i++) {
    float v = (float)(0.3 * sin(i * 0.1));
    sf_writef_float(f, &v, 1);
  }
  sf_close(f);
}

/* Decodes path; checks EINPUT and that the message has the path and `why`. */
static void expect_refused(const char *path, double max_seconds, const char *why) {
  float *pcm = (float *)1;
  uint64_t n = 99;
  int rc = stg_audio_decode(path, 16000, max_seconds, &pcm, &n, NULL);
  const char *msg = ebb_errmsg();
  fprintf(stderr, "  %s\n", msg);
  CHECK_MSG(rc == EBB_EINPUT, "%s: rc %d (%s), want EBB_EINPUT", path, rc, ebb_errname(rc));
  CHECK_MSG(strstr(msg, path) != NULL, "message does not name the file: %s", msg);
  CHECK_MSG(strstr(msg, why) != NULL, "message does not say \"%s\": %s", why, msg);
  CHECK(pcm == NULL);
  CHECK_EQ_U64(n, 0);
}

static void test_missing(void) {
  char p[600];
  path_of(p, sizeof p, "does-not-exist.wav");
  expect_refused(p, 900, "No such file");
}

static void test_zero_bytes(void) {
  char p[600];
  path_of(p, sizeof p, "zero.wav");
  FILE *f = fopen(p, "wb");
  REQUIRE(f);
  fclose(f);
  expect_refused(p, 900, "empty file");
}

static void test_zero_frames(void) {
  char p[600];
  path_of(p, sizeof p, "noframes.wav");
  write_raw_wav(p, 1, 16000, 0, 0);
  expect_refused(p, 900, "no audio frames");
}

static void test_truncated(void) {
  char p[600];
  path_of(p, sizeof p, "truncated.wav");
  write_sine(p, 16000, 1.0); /* 32000 data bytes */
  REQUIRE(truncate(p, 44 + 10000) == 0);
  expect_refused(p, 900, "truncated");
  /* and a header that claims more than was ever written */
  path_of(p, sizeof p, "short.wav");
  write_raw_wav(p, 2, 44100, 400000, 1000);
  expect_refused(p, 900, "claims 400000 bytes");
}

static void test_garbage(void) {
  char p[600];
  path_of(p, sizeof p, "garbage.wav");
  FILE *f = fopen(p, "wb");
  REQUIRE(f);
  for (int i = 0; i < 5000; i++)
    fputc((i * 7919) % 256, f);
  fclose(f);
  expect_refused(p, 900, "unreadable audio file");
}

static void test_zero_channels(void) {
  char p[600];
  path_of(p, sizeof p, "nochannels.wav");
  write_raw_wav(p, 0, 16000, 2000, 2000);
  expect_refused(p, 900, "0 audio channels");
}

static void test_rate_zero(void) {
  char p[600];
  path_of(p, sizeof p, "rate0.wav");
  write_raw_wav(p, 1, 0, 2000, 2000);
  expect_refused(p, 900, "sample rate of 0 Hz");
}

static void test_rate_absurd(void) {
  char p[600];
  path_of(p, sizeof p, "rate1m.wav");
  write_raw_wav(p, 1, 1000000, 2000, 2000);
  expect_refused(p, 900, "absurd");
}

static void test_rate_too_low_to_resample(void) {
  /* 50 Hz -> 16 kHz is beyond libsamplerate's ratio of 256 (found by fuzz_decode) */
  char p[600];
  path_of(p, sizeof p, "rate50.wav");
  write_raw_wav(p, 1, 50, 200, 200);
  expect_refused(p, 900, "cannot be resampled to the working rate 16000 Hz");
}

static void test_too_long(void) {
  char p[600];
  path_of(p, sizeof p, "long.wav");
  write_sine(p, 8000, 3.0);
  expect_refused(p, 2.5, "longer than max_seconds");
  /* exactly at the limit is fine */
  float *pcm = NULL;
  uint64_t n = 0;
  CHECK_MSG(stg_audio_decode(p, 16000, 3.0, &pcm, &n, NULL) == 0, "3 s at max_seconds 3: %s",
            ebb_errmsg());
  CHECK_EQ_U64(n, 48000);
  free(pcm);
}

static void test_broken_mp3(void) {
  char p[600];
  path_of(p, sizeof p, "broken.mp3");
  FILE *f = fopen(p, "wb");
  REQUIRE(f);
  fputs("ID3", f);
  for (int i = 0; i < 3000; i++)
    fputc(0, f);
  fclose(f);
  expect_refused(p, 900, "MP3");
  float *pcm = NULL;
  uint64_t n = 0;
  CHECK_EQ_INT(stg_audio_decode_mpg123(p, 16000, 900, &pcm, &n, NULL), EBB_EINPUT);
  CHECK(strstr(ebb_errmsg(), p) != NULL);
}

static void test_bad_arguments(void) {
  char p[600];
  path_of(p, sizeof p, "ok.wav");
  write_sine(p, 16000, 0.5);
  float *pcm = NULL;
  uint64_t n = 0;
  CHECK_EQ_INT(stg_audio_decode(p, 0, 900, &pcm, &n, NULL), EBB_EINVAL);
  CHECK_EQ_INT(stg_audio_decode(p, 16000, 0, &pcm, &n, NULL), EBB_EINVAL);
  CHECK_EQ_INT(stg_audio_decode(p, 16000, 900, &pcm, &n, NULL), 0);
  CHECK_EQ_U64(n, 8000);
  free(pcm);
}

int main(void) {
  const char *tmp = getenv("EBB_TEST_TMP");
  snprintf(dir, sizeof dir, "%s", tmp ? tmp : "/tmp/stages_decode_errors");
  mkdir(dir, 0755);
  RUN(test_missing);
  RUN(test_zero_bytes);
  RUN(test_zero_frames);
  RUN(test_truncated);
  RUN(test_garbage);
  RUN(test_zero_channels);
  RUN(test_rate_zero);
  RUN(test_rate_absurd);
  RUN(test_rate_too_low_to_resample);
  RUN(test_too_long);
  RUN(test_broken_mp3);
  RUN(test_bad_arguments);
  return TEST_END();
}
