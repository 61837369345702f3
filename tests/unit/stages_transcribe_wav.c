/* The WAV encoder and mono/16 kHz conversion the transcribe stage uploads
 * with: header fields, sample values (rounding, clipping, NaN), downmix and
 * resampled length. */
#include <math.h>

#include "ebb/error.h"
#include "stages/audio/wav_encode.h"
#include "test.h"

static unsigned rd16(const unsigned char *p) { return (unsigned)p[0] | (unsigned)p[1] << 8; }
static uint32_t rd32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static int16_t s16(const unsigned char *p) { return (int16_t)rd16(p); }

static void test_header_and_samples(void) {
  const float pcm[] = {0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 2.0f, -3.0f, NAN};
  unsigned char *w = NULL;
  size_t n = 0;
  REQUIRE(stg_wav_encode_s16(pcm, 4, 2, 22050, &w, &n) == 0);
  CHECK_EQ_U64(n, 44 + 8 * 2);
  CHECK(!memcmp(w, "RIFF", 4) && !memcmp(w + 8, "WAVE", 4) && !memcmp(w + 12, "fmt ", 4) &&
        !memcmp(w + 36, "data", 4));
  CHECK_EQ_U64(rd32(w + 4), n - 8);
  CHECK_EQ_INT(rd32(w + 16), 16);
  CHECK_EQ_INT(rd16(w + 20), 1);
  CHECK_EQ_INT(rd16(w + 22), 2);
  CHECK_EQ_INT(rd32(w + 24), 22050);
  CHECK_EQ_INT(rd32(w + 28), 22050 * 4);
  CHECK_EQ_INT(rd16(w + 32), 4);
  CHECK_EQ_INT(rd16(w + 34), 16);
  CHECK_EQ_INT(rd32(w + 40), 16);
  const int16_t want[] = {0, 16384, -16384, 32767, -32768, 32767, -32768, 0};
  for (int i = 0; i < 8; i++)
    CHECK_MSG(s16(w + 44 + 2 * i) == want[i], "sample %d: %d != %d", i, s16(w + 44 + 2 * i),
              want[i]);
  free(w);
}

static void test_empty_and_bad(void) {
  unsigned char *w = NULL;
  size_t n = 0;
  REQUIRE(stg_wav_encode_s16(NULL, 0, 1, 16000, &w, &n) == 0);
  CHECK_EQ_U64(n, 44);
  CHECK_EQ_INT(rd32(w + 40), 0);
  free(w);
  CHECK_EQ_INT(stg_wav_encode_s16(NULL, 0, 0, 16000, &w, &n), EBB_EINVAL);
  CHECK_EQ_INT(stg_wav_encode_s16(NULL, 0, 1, 0, &w, &n), EBB_EINVAL);
  float x = 0;
  CHECK_EQ_INT(stg_wav_encode_s16(&x, (uint64_t)1 << 32, 1, 16000, &w, &n), EBB_EINVAL);
  CHECK(strstr(ebb_errmsg(), "do not fit a WAV") != NULL);
}

static void test_downmix_and_resample(void) {
  float st[] = {1.0f, 0.0f, 0.5f, 0.5f, -1.0f, 1.0f};
  float *m = NULL;
  uint64_t n = 0;
  REQUIRE(stg_pcm_to_mono_rate(st, 3, 2, 16000, 16000, &m, &n) == 0);
  CHECK_EQ_U64(n, 3);
  CHECK_NEAR(m[0], 0.5, 1e-7);
  CHECK_NEAR(m[1], 0.5, 1e-7);
  CHECK_NEAR(m[2], 0.0, 1e-7);
  free(m);

  uint64_t frames = 44100 * 2;
  float *in = malloc(frames * sizeof *in);
  REQUIRE(in != NULL);
  for (uint64_t i = 0; i < frames; i++)
    in[i] = 0.5f * (float)sin(2 * M_PI * 440.0 * (double)i / 44100.0);
  REQUIRE(stg_pcm_to_mono_rate(in, frames, 1, 44100, 16000, &m, &n) == 0);
  CHECK_MSG(n >= 31990 && n <= 32010, "2 s at 44.1 kHz -> %llu frames at 16 kHz",
            (unsigned long long)n);
  double peak = 0;
  for (uint64_t i = 1000; i + 1000 < n; i++)
    peak = fabs(m[i]) > peak ? fabs(m[i]) : peak;
  CHECK_NEAR(peak, 0.5, 0.02); /* a 440 Hz tone survives with its amplitude */
  free(m);
  free(in);
}

int main(void) {
  RUN(test_header_and_samples);
  RUN(test_empty_and_bad);
  RUN(test_downmix_and_resample);
  return TEST_END();
}
