/* Encoding float PCM as a 16-bit PCM WAV file in memory, for uploading audio
 * to servers that want a file (the transcribe stage's Whisper client). */
#ifndef EBB_STAGES_AUDIO_WAV_ENCODE_H
#define EBB_STAGES_AUDIO_WAV_ENCODE_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of the canonical 44-byte RIFF/WAVE header this encoder writes. */
#define EBB_WAV_HEADER_BYTES 44u

/* Encodes `frames` frames of interleaved float PCM (`channels` per frame,
 * nominal range [-1, 1]; values outside are clipped, NaN becomes 0) as a
 * 16-bit little-endian PCM WAV. On success *out is a malloc'd buffer the
 * caller owns (free()) of *out_len bytes. Fails with EBB_EINVAL on a zero
 * channel count or rate or a size that does not fit a WAV (4 GiB), or
 * EBB_ENOMEM. */
int stg_wav_encode_s16(const float *samples, uint64_t frames, uint32_t channels, uint32_t rate,
                       unsigned char **out, size_t *out_len);

/* Converts interleaved float PCM to mono at `out_rate` (averaging channels,
 * then resampling with decode's stg_audio_resample when the rates differ:
 * libsamplerate in blocks, cancelled between them under a stage's watch,
 * st_util.h). On success *out is a malloc'd buffer of *out_frames floats
 * the caller owns (free()). Fails with EBB_EINVAL, EBB_ENOMEM, EBB_ECANCELED
 * or EBB_EIO (libsamplerate's message). */
int stg_pcm_to_mono_rate(const float *samples, uint64_t frames, uint32_t channels, uint32_t rate,
                         uint32_t out_rate, float **out, uint64_t *out_frames);

#endif
