/* Float PCM -> 16-bit WAV in memory, and the mono/16 kHz conversion Whisper
 * servers expect (whisper.cpp's server rejects any other rate). */
#include "stages/audio/wav_encode.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/decode.h"

static void put_u32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v & 0xff);
  p[1] = (unsigned char)((v >> 8) & 0xff);
  p[2] = (unsigned char)((v >> 16) & 0xff);
  p[3] = (unsigned char)((v >> 24) & 0xff);
}

static void put_u16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)(v & 0xff);
  p[1] = (unsigned char)((v >> 8) & 0xff);
}

static int16_t to_s16(float x) {
  if (!(x == x)) /* NaN */
    return 0;
  if (x >= 1.0f)
    return 32767;
  if (x <= -1.0f)
    return -32768;
  return (int16_t)lrintf(x * 32767.0f);
}

int stg_wav_encode_s16(const float *samples, uint64_t frames, uint32_t channels, uint32_t rate,
                       unsigned char **out, size_t *out_len) {
  if (!out || !out_len || channels == 0 || channels > 65535 || rate == 0 ||
      (frames > 0 && !samples))
    return ebb_seterr(EBB_EINVAL, "wav encode: bad arguments (channels %u, rate %u, frames %llu)",
                      channels, rate, (unsigned long long)frames);
  uint64_t data_bytes = frames * channels * 2u;
  if (frames > UINT32_MAX || data_bytes > UINT32_MAX - EBB_WAV_HEADER_BYTES)
    return ebb_seterr(EBB_EINVAL, "wav encode: %llu frames x %u channels do not fit a WAV file",
                      (unsigned long long)frames, channels);
  size_t total = EBB_WAV_HEADER_BYTES + (size_t)data_bytes;
  unsigned char *buf = malloc(total);
  if (!buf)
    return ebb_seterr(EBB_ENOMEM, "wav encode: cannot allocate %zu bytes", total);

  unsigned char *h = buf;
  memcpy(h, "RIFF", 4);
  put_u32(h + 4, (uint32_t)(total - 8));
  memcpy(h + 8, "WAVE", 4);
  memcpy(h + 12, "fmt ", 4);
  put_u32(h + 16, 16); /* fmt chunk size */
  put_u16(h + 20, 1);  /* PCM */
  put_u16(h + 22, (uint16_t)channels);
  put_u32(h + 24, rate);
  put_u32(h + 28, rate * channels * 2u);      /* byte rate */
  put_u16(h + 32, (uint16_t)(channels * 2u)); /* block align */
  put_u16(h + 34, 16);                        /* bits per sample */
  memcpy(h + 36, "data", 4);
  put_u32(h + 40, (uint32_t)data_bytes);

  unsigned char *d = buf + EBB_WAV_HEADER_BYTES;
  uint64_t n = frames * channels;
  for (uint64_t i = 0; i < n; i++)
    put_u16(d + 2 * i, (uint16_t)to_s16(samples[i]));
  *out = buf;
  *out_len = total;
  return 0;
}

int stg_pcm_to_mono_rate(const float *samples, uint64_t frames, uint32_t channels, uint32_t rate,
                         uint32_t out_rate, float **out, uint64_t *out_frames) {
  if (!out || !out_frames || channels == 0 || rate == 0 || out_rate == 0 ||
      (frames > 0 && !samples))
    return ebb_seterr(EBB_EINVAL, "pcm convert: bad arguments (channels %u, rate %u -> %u)",
                      channels, rate, out_rate);
  if (frames > (uint64_t)INT32_MAX)
    return ebb_seterr(EBB_EINVAL, "pcm convert: %llu frames is too long for one request",
                      (unsigned long long)frames);
  float *mono = malloc((frames ? frames : 1) * sizeof *mono);
  if (!mono)
    return ebb_seterr(EBB_ENOMEM, "pcm convert: cannot allocate %llu frames",
                      (unsigned long long)frames);
  for (uint64_t i = 0; i < frames; i++) {
    double s = 0;
    for (uint32_t c = 0; c < channels; c++)
      s += samples[i * channels + c];
    mono[i] = (float)(s / channels);
  }
  if (rate == out_rate || frames == 0) {
    *out = mono;
    *out_frames = rate == out_rate ? frames : 0;
    return 0;
  }

  /* decode's resampler: in blocks, each after a look at the stage's
   * deadline (st_util.h), where one src_simple call over 884 s to 384 kHz
   * ran 100 s past --job-timeout 3 */
  float *res = NULL;
  uint64_t got = 0;
  int rc = stg_audio_resample(mono, frames, rate, out_rate, &res, &got);
  free(mono);
  if (rc)
    return ebb_seterr(rc == EBB_ECANCELED || rc == EBB_ENOMEM || rc == EBB_EINVAL ? rc : EBB_EIO,
                      "pcm convert: %s", ebb_errmsg());
  *out = res;
  *out_frames = got;
  return 0;
}
