/* The transcribe stage's core: a client for Whisper-compatible HTTP servers
 * (OpenAI's POST /v1/audio/transcriptions and whisper.cpp's POST /inference)
 * and the parsers that turn their verbose_json answers into ebb's transcript
 * JSON:
 *   {"text": "...", "language": "en",
 *    "words": [{"word": "...", "start": 1.23, "end": 1.5}],
 *    "segments": [{"start": 0.0, "end": 2.0, "text": "..."}],
 *    "server": "<url>", "protocol": "openai"|"whispercpp"}
 * Times are seconds from the start of the audio, rounded to milliseconds.
 *
 * The stage (`stg_stage_transcribe`, transcribe.c) is a thin wrapper around
 * stg_transcribe_request; tests call the request and the parser directly.
 * Nothing here touches device memory. */
#ifndef EBB_STAGES_AUDIO_TRANSCRIBE_H
#define EBB_STAGES_AUDIO_TRANSCRIBE_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
  EBB_WHISPER_AUTO = 0,      /* by URL path: ".../inference" -> whispercpp, else openai */
  EBB_WHISPER_OPENAI = 1,    /* POST multipart to the URL, OpenAI's field names */
  EBB_WHISPER_WHISPERCPP = 2 /* whisper.cpp's examples/server */
} stg_whisper_protocol;

/* Parses "auto" | "openai" | "whispercpp"; EBB_ECONFIG naming the value otherwise. */
int stg_whisper_protocol_parse(const char *s, stg_whisper_protocol *out);
/* AUTO resolved against the URL's path (query and fragment ignored). */
stg_whisper_protocol stg_whisper_protocol_resolve(stg_whisper_protocol p, const char *url);

/* Options of one request. All strings are borrowed for the call. */
typedef struct stg_transcribe_opts {
  const char *url; /* full endpoint URL; required */
  stg_whisper_protocol protocol;
  const char *model;        /* openai "model" field; NULL -> "whisper-1" */
  const char *language;     /* ISO code sent as "language"; NULL -> server detects */
  const char *prompt;       /* optional "prompt" */
  const char *api_key;      /* "Authorization: Bearer ..." when non-empty */
  double timeout_s;         /* whole transfer, per attempt; <=0 -> 600 */
  double connect_timeout_s; /* <=0 -> 10 */
  int retries;              /* extra attempts after connection errors, timeouts,
                                 5xx and 429; never after another 4xx. <0 -> 0 */
  double backoff_s;         /* first retry delay, doubled each time; <=0 -> 0.5 */
  /* Polled during the transfer (at least once a second) and the backoff;
   * non-zero aborts with EBB_ECANCELED. May be NULL. */
  int (*cancelled)(void *arg);
  void *cancel_arg;
  /* Warnings and retry notes (level 0 debug .. 3 error). May be NULL. */
  void (*log)(void *arg, int level, const char *msg);
  void *log_arg;
  /* Upload progress in [0, 1]. May be NULL. */
  void (*progress)(void *arg, double fraction);
  void *progress_arg;
} stg_transcribe_opts;

/* What a request did; filled also when it fails. */
typedef struct stg_transcribe_stats {
  int attempts;        /* HTTP requests made */
  long http_status;    /* of the last attempt; 0 when no response came */
  int words_dropped;   /* words/segments with bad times left out */
  size_t upload_bytes; /* WAV bytes sent per attempt */
} stg_transcribe_stats;

/* Sends mono float PCM at `rate` (converted to 16 kHz 16-bit WAV first) to the
 * server and parses its verbose_json answer. On success *transcript_json is a
 * malloc'd NUL-terminated JSON text the caller frees with free(). On failure
 * returns EBB_EIO (cannot connect, connection lost), EBB_ETIMEDOUT, EBB_ECANCELED,
 * EBB_ECONFIG (HTTP 401/403/404, bad options), EBB_EPROTO (other HTTP errors,
 * malformed or incomplete JSON) or EBB_EINVAL/EBB_ENOMEM, with a message that
 * names the URL and what was wrong. `stats` may be NULL. */
int stg_transcribe_request(const stg_transcribe_opts *opts, const float *mono, uint64_t frames,
                           uint32_t rate, char **transcript_json, stg_transcribe_stats *stats);

/* Parses a verbose_json body (`len` bytes, need not be NUL-terminated) from a
 * server speaking `protocol` (OPENAI or WHISPERCPP) into ebb's transcript JSON
 * (malloc'd, caller frees). Accepted shapes:
 *  - top-level "words": [{"word", "start", "end"}] (OpenAI, seconds);
 *  - segments[].words: [{"word", "start", "end"}] (whisper.cpp >= 1.7, seconds);
 *  - segments[].tokens: [{"text", "t0", "t1"}] (centiseconds) or
 *    [{"text", "offsets": {"from", "to"}}] (milliseconds, whisper-cli -ojf).
 * For whispercpp, words/tokens are sub-word tokens and are merged into words
 * (a piece not starting with a space continues the previous word) and
 * "[_...]" special tokens are skipped. Words or segments with bad times
 * (negative, end < start, non-numeric, missing) are dropped, counted in
 * *dropped (may be NULL) and described through `log` (may be NULL) as one
 * warning. Fails with EBB_EPROTO naming `url` on malformed JSON (with line
 * and column), a server error object, or a missing "text" or missing both
 * "words" and "segments". */
int stg_transcribe_parse(const char *body, size_t len, stg_whisper_protocol protocol,
                         const char *url, char **transcript_json, int *dropped,
                         void (*log)(void *arg, int level, const char *msg), void *log_arg);

/* Maps Whisper's language names ("english", "English") to ISO 639-1 codes
 * ("en"); codes and unknown names pass through unchanged. Returns a static
 * string or `name` itself. */
const char *stg_whisper_language_code(const char *name);

#endif
