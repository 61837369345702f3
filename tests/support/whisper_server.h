/* A small Whisper-compatible HTTP server for tests (libmicrohttpd). It serves
 * POST /v1/audio/transcriptions (OpenAI) and POST /inference (whisper.cpp),
 * checks that a multipart "file" part holds a sane 16-bit PCM WAV, and answers
 * a canned verbose_json whose times scale with the uploaded duration D:
 * five words "hello from whisper test server", word i at
 * [D*i/5, D*(i+0.8)/5], one segment [0, D].
 *
 * Behaviour is chosen per request by query parameters:
 *   mode=normal (default) | malformed | missing (no "text") | flaky (fails
 *        the first `fails` requests with this key, then OK) | fail (always
 *        fails) | error400 (OpenAI error JSON) | slow (sleeps `sleep` s, then
 *        OK) | hangup (closes the connection without answering) |
 *        badtimes (some words with negative or reversed times) |
 *        cpperror (whisper.cpp's 200 {"error": "..."})
 *   key=NAME     counts requests per key (see whisper_server_requests)
 *   fails=N      for flaky (default 1); status=CODE for flaky/fail (500)
 *   sleep=S      for slow (default 30)
 *   shape=words|tokens  /inference answer shape: segments[].words with
 *        start/end seconds (default) or segments[].tokens with t0/t1 cs.
 * An upload that is not acceptable (no file part, bad WAV, /inference not at
 * 16 kHz mono, missing model or response_format) gets 400 with an OpenAI error
 * JSON ({"error": {"message": ...}}) naming what was wrong.
 * GET /stats?key=NAME answers {"requests": N, "duration": D-of-last-upload}. */
#ifndef EBB_TESTS_WHISPER_SERVER_H
#define EBB_TESTS_WHISPER_SERVER_H

typedef struct whisper_server whisper_server;

/* Starts listening on 127.0.0.1:`port` (0: any free port). When api_key is
 * non-NULL, /v1 requests need "Authorization: Bearer <api_key>" (else 401).
 * Returns 0 and the server (caller stops it), or -1 with a message on stderr. */
int whisper_server_start(unsigned port, const char *api_key, whisper_server **out);
unsigned whisper_server_port(const whisper_server *s);
/* Requests received with query key=`key` (all modes, hang-ups included). */
int whisper_server_requests(whisper_server *s, const char *key);
/* Duration in seconds of the last WAV uploaded with key=`key`; -1 if none. */
double whisper_server_last_duration(whisper_server *s, const char *key);
/* Stops (slow handlers return early) and frees. NULL is a no-op. */
void whisper_server_stop(whisper_server *s);

#endif
