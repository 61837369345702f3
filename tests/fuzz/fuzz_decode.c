/* The decode stage's file reading (stg_audio_decode: its own RIFF/WAVE header
 * check, then libsndfile, libmpg123 for MP3s). Input: the file's bytes. A
 * file either decodes (mono at 16 kHz, as many samples as the source's length
 * says) or is refused with EBB_EINPUT (decode.h: "Every refusal is
 * EBB_EINPUT") and a message naming the file. */
#include <jansson.h>
#include <math.h>

#include "ebb/error.h"
#include "fuzz_util.h"
#include "stages/audio/decode.h"

#define RATE 16000u
#define MAX_SECONDS 30.0

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[700];
  snprintf(path, sizeof path, "%s/input.wav", fuzz_scratch("decode"));
  fuzz_write_file(path, data, size);
  float *pcm = NULL;
  uint64_t frames = 0;
  stg_decode_info info = {0};
  int rc = stg_audio_decode(path, RATE, MAX_SECONDS, &pcm, &frames, &info);
  if (rc) {
    FUZZ_CHECK(rc == EBB_EINPUT, "refused with %s (%d), expected EBB_EINPUT: %s", ebb_errname(rc),
               rc, ebb_errmsg());
    FUZZ_CHECK(strstr(ebb_errmsg(), path), "message does not name the file: %s", ebb_errmsg());
    FUZZ_CHECK(!pcm && frames == 0, "output set on failure");
  } else {
    /* known bug: a source shorter than one output sample decodes to 0 samples */
    if (fuzz_known() && pcm && frames == 0 && info.rate &&
        llround((double)info.frames * RATE / info.rate) == 0) {
      free(pcm);
      return 0;
    }
    FUZZ_CHECK(pcm && frames > 0, "success with %llu frames", (unsigned long long)frames);
    FUZZ_CHECK(info.channels >= 1 && info.channels <= 256 && info.rate >= 1 &&
                   info.rate <= EBB_DECODE_MAX_RATE && info.frames > 0 && info.via,
               "info: %u ch, %u Hz, %llu frames", info.channels, info.rate,
               (unsigned long long)info.frames);
    FUZZ_CHECK((double)info.frames / info.rate <= MAX_SECONDS + 1e-9,
               "%.3f s decoded with max_seconds %g", (double)info.frames / info.rate, MAX_SECONDS);
    uint64_t want = (uint64_t)llround((double)info.frames * RATE / info.rate);
    FUZZ_CHECK(frames == want, "%llu frames at %u Hz became %llu at %u Hz, expected %llu",
               (unsigned long long)info.frames, info.rate, (unsigned long long)frames, RATE,
               (unsigned long long)want);
    volatile float sink = 0;
    for (uint64_t i = 0; i < frames; i++) /* every sample readable (ASan) */
      sink += pcm[i];
    (void)sink;
    free(pcm);
  }
  return 0;
}
