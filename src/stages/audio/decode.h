/* The `decode` stage: the job's FILE item "input" -> AUDIO item "audio",
 * mono float PCM at option `rate` (integer, default 16000); option
 * `max_seconds` (number, default 900) rejects longer inputs.
 *
 * WAV, FLAC, OGG (and MP3 where libsndfile reads it, as Debian 12's 1.2 does)
 * through libsndfile; MP3 through libmpg123 when libsndfile cannot open it.
 * Channels are averaged to mono and the result resampled with libsamplerate
 * (SRC_SINC_MEDIUM_QUALITY). Every refusal is EBB_EINPUT with a message that
 * names the file and the reason (unreadable, empty, truncated, absurd header,
 * too long). */
#ifndef EBB_STAGES_AUDIO_DECODE_H
#define EBB_STAGES_AUDIO_DECODE_H

#include <stdint.h>

/* What the file held before mixdown and resampling. */
typedef struct stg_decode_info {
  uint32_t rate;     /* source sample rate */
  uint32_t channels; /* source channels */
  uint64_t frames;   /* source frames read */
  const char *via;   /* "libsndfile" or "libmpg123" (static string) */
} stg_decode_info;

#define EBB_DECODE_MAX_RATE 768000u

/* Decodes path to mono at `rate` Hz (1000..768000). On success *out is a
 * malloc'd buffer of *frames samples that the caller frees with free();
 * info (may be NULL) describes the source. max_seconds > 0. */
int stg_audio_decode(const char *path, uint32_t rate, double max_seconds, float **out,
                     uint64_t *frames, stg_decode_info *info);

/* The length of path in seconds from its header alone (libsndfile: frames
 * / rate), without decoding: 0, *seconds and *rate (the file's), or EBB_EINPUT when libsndfile
 * cannot read its header (an MP3 it does not open, not audio). */
int stg_audio_probe_seconds(const char *path, double *seconds, uint32_t *rate);

/* The stage's work estimate (its `work` hook): CPU seconds on the
 * reference core to decode input_s seconds (at most max_seconds) of a file
 * at src_rate Hz (0: unknown) to rate. */
double stg_decode_work_s(double input_s, uint32_t src_rate, uint32_t rate, double max_seconds);
/* Its resampling share, for any stage that resamples input_s seconds of
 * audio from `from` Hz (0: unknown, counted as 48 kHz) to `to` Hz with
 * stg_audio_resample: 0 when the rates are equal. */
double stg_audio_resample_work_s(double input_s, uint32_t from, uint32_t to);

/* The libmpg123 path alone (what stg_audio_decode falls back to for an MP3
 * libsndfile cannot open); same contract. */
int stg_audio_decode_mpg123(const char *path, uint32_t rate, double max_seconds, float **out,
                            uint64_t *frames, stg_decode_info *info);

/* Resamples n mono samples from `from` Hz to `to` Hz with libsamplerate
 * (SRC_SINC_MEDIUM_QUALITY); the result has round(n * to / from) samples,
 * malloc'd into *out (caller frees). */
int stg_audio_resample(const float *in, uint64_t n, uint32_t from, uint32_t to, float **out,
                       uint64_t *nout);

#endif
