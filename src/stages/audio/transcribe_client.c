/* The HTTP side of the transcribe stage: one multipart POST per attempt
 * through libcurl, retries with exponential backoff for failures that may
 * pass (connection errors, timeouts, 5xx, 429), cancellation through the
 * transfer's progress callback. */
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ebb/error.h"
#include "stages/audio/transcribe.h"
#include "stages/audio/wav_encode.h"

#define WHISPER_RATE 16000u
#define MAX_ANSWER_BYTES (64u << 20)

typedef struct membuf {
  char *p;
  size_t n, cap;
  int too_big;
} membuf;

typedef struct xfer {
  const stg_transcribe_opts *o;
  int cancelled;
} xfer;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud) {
  membuf *b = ud;
  size_t n = size * nmemb;
  if (b->n + n + 1 > MAX_ANSWER_BYTES) {
    b->too_big = 1;
    return 0;
  }
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n + 1)
      cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p)
      return 0;
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, ptr, n);
  b->n += n;
  b->p[b->n] = 0;
  return n;
}

static int is_cancelled(const stg_transcribe_opts *o) {
  return o->cancelled && o->cancelled(o->cancel_arg);
}

static int on_xferinfo(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
  (void)dltotal;
  (void)dlnow;
  xfer *x = ud;
  if (is_cancelled(x->o)) {
    x->cancelled = 1;
    return 1;
  }
  if (x->o->progress && ultotal > 0)
    x->o->progress(x->o->progress_arg, (double)ulnow / (double)ultotal);
  return 0;
}

static void logf_(const stg_transcribe_opts *o, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void logf_(const stg_transcribe_opts *o, int level, const char *fmt, ...) {
  if (!o->log)
    return;
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  o->log(o->log_arg, level, msg);
}

/* The URL without "user:password@", for messages and the transcript. */
static void redact_url(const char *url, char *out, size_t n) {
  const char *scheme = strstr(url, "://");
  const char *host = scheme ? scheme + 3 : url;
  size_t hostlen = strcspn(host, "/?#");
  const char *at = memchr(host, '@', hostlen);
  if (!at) {
    snprintf(out, n, "%s", url);
    return;
  }
  snprintf(out, n, "%.*s***@%s", (int)(host - url), url, at + 1);
}

static int retryable_curl(CURLcode cc) {
  switch (cc) {
  case CURLE_COULDNT_CONNECT:
  case CURLE_COULDNT_RESOLVE_HOST:
  case CURLE_COULDNT_RESOLVE_PROXY:
  case CURLE_OPERATION_TIMEDOUT:
  case CURLE_SEND_ERROR:
  case CURLE_RECV_ERROR:
  case CURLE_GOT_NOTHING:
  case CURLE_PARTIAL_FILE:
  case CURLE_HTTP2:
  case CURLE_HTTP2_STREAM: return 1;
  default: return 0;
  }
}

/* Sleeps `s` seconds in small steps; 1 when cancelled meanwhile. */
static int backoff_sleep(const stg_transcribe_opts *o, double s) {
  struct timespec t0, now;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    if (is_cancelled(o))
      return 1;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double el = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9;
    if (el >= s)
      return 0;
    double step = s - el < 0.02 ? s - el : 0.02;
    struct timespec ts = {0, (long)(step * 1e9)};
    nanosleep(&ts, NULL);
  }
}

static int add_field(curl_mime *m, const char *name, const char *value) {
  curl_mimepart *p = curl_mime_addpart(m);
  if (!p || curl_mime_name(p, name) != CURLE_OK ||
      curl_mime_data(p, value, CURL_ZERO_TERMINATED) != CURLE_OK)
    return ebb_seterr(EBB_ENOMEM, "transcribe: cannot build the form field %s", name);
  return 0;
}

static int build_form(CURL *h, const stg_transcribe_opts *o, stg_whisper_protocol proto,
                      const unsigned char *wav, size_t wav_len, curl_mime **out) {
  curl_mime *m = curl_mime_init(h);
  if (!m)
    return ebb_seterr(EBB_ENOMEM, "transcribe: cannot build the upload form");
  curl_mimepart *p = curl_mime_addpart(m);
  int rc = 0;
  if (!p || curl_mime_name(p, "file") != CURLE_OK ||
      curl_mime_data(p, (const char *)wav, wav_len) != CURLE_OK ||
      curl_mime_filename(p, "audio.wav") != CURLE_OK ||
      curl_mime_type(p, "audio/wav") != CURLE_OK) {
    rc = ebb_seterr(EBB_ENOMEM, "transcribe: cannot attach %zu bytes of WAV", wav_len);
    goto fail;
  }
  if (proto == EBB_WHISPER_OPENAI) {
    if ((rc = add_field(m, "model", o->model && *o->model ? o->model : "whisper-1")) ||
        (rc = add_field(m, "timestamp_granularities[]", "word")) ||
        (rc = add_field(m, "timestamp_granularities[]", "segment")))
      goto fail;
  }
  if ((rc = add_field(m, "response_format", "verbose_json")))
    goto fail;
  if (o->language && *o->language && (rc = add_field(m, "language", o->language)))
    goto fail;
  if (o->prompt && *o->prompt && (rc = add_field(m, "prompt", o->prompt)))
    goto fail;
  *out = m;
  return 0;
fail:
  curl_mime_free(m);
  return rc;
}

/* Fills in the language from the request when the server named none. */
static int apply_language_hint(char **json, const char *language) {
  if (!language || !*language)
    return 0;
  json_t *root = json_loads(*json, 0, NULL);
  if (!root)
    return ebb_seterr(EBB_ENOMEM, "transcribe: cannot reread the transcript");
  int rc = 0;
  if (json_is_null(json_object_get(root, "language"))) {
    char *s = NULL;
    if (json_object_set_new(root, "language", json_string(language)) ||
        !(s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(12)))) {
      rc = ebb_seterr(EBB_ENOMEM, "transcribe: cannot rewrite the transcript");
    } else {
      free(*json);
      *json = s;
    }
  }
  json_decref(root);
  return rc;
}

/* One request's state: what the attempts share and what `done` frees. */
typedef struct request {
  const stg_transcribe_opts *o;
  char url[512]; /* redacted, for messages */
  stg_whisper_protocol proto;
  double timeout, ctimeout;
  CURL *h;
  curl_mime *form;
  struct curl_slist *hdrs;
  char *auth;
  membuf body;
  xfer x;
  char errbuf[CURL_ERROR_SIZE];
} request;

static void request_free(request *r) {
  free(r->body.p);
  free(r->auth);
  curl_easy_cleanup(r->h); /* before the form and headers it points at */
  curl_mime_free(r->form);
  curl_slist_free_all(r->hdrs);
}

static int check_request(const stg_transcribe_opts *o, const float *mono, uint64_t frames,
                         uint32_t rate, char **transcript_json) {
  if (!o || !transcript_json || (frames && !mono) || rate == 0)
    return ebb_seterr(EBB_EINVAL, "transcribe: bad arguments");
  if (!o->url || !*o->url)
    return ebb_seterr(EBB_ECONFIG, "transcribe: no Whisper server URL");
  if (strncmp(o->url, "http://", 7) && strncmp(o->url, "https://", 8))
    return ebb_seterr(EBB_ECONFIG, "transcribe: url \"%s\" is not an http:// or https:// URL",
                      o->url);
  return 0;
}

/* The upload: mono 16 kHz 16-bit WAV. *wav is malloc'd (caller frees). */
static int encode_upload(const float *mono, uint64_t frames, uint32_t rate, unsigned char **wav,
                         size_t *wav_len) {
  float *pcm16k = NULL;
  uint64_t n16k = 0;
  int rc = stg_pcm_to_mono_rate(mono, frames, 1, rate, WHISPER_RATE, &pcm16k, &n16k);
  if (!rc)
    rc = stg_wav_encode_s16(pcm16k, n16k, 1, WHISPER_RATE, wav, wav_len);
  free(pcm16k);
  return rc ? ebb_errctx(rc, "transcribe: ") : 0;
}

static int build_headers(request *r) {
  const stg_transcribe_opts *o = r->o;
  struct curl_slist *hdrs = curl_slist_append(NULL, "Expect:"); /* no 1 s "100 Continue" wait */
  hdrs = hdrs ? curl_slist_append(hdrs, "Accept: application/json") : NULL;
  if (hdrs && o->api_key && *o->api_key) {
    size_t n = strlen(o->api_key) + 32;
    if ((r->auth = malloc(n))) {
      snprintf(r->auth, n, "Authorization: Bearer %s", o->api_key);
      struct curl_slist *t = curl_slist_append(hdrs, r->auth);
      if (!t)
        curl_slist_free_all(hdrs);
      hdrs = t;
    }
  }
  r->hdrs = hdrs;
  if (!hdrs || (o->api_key && *o->api_key && !r->auth))
    return ebb_seterr(EBB_ENOMEM, "transcribe: cannot build request headers");
  return 0;
}

/* A libcurl handle with the form (takes a copy of the WAV) and headers. */
static int setup_handle(request *r, const unsigned char *wav, size_t wav_len) {
  pthread_once(&curl_once, curl_init);
  if (curl_init_rc != CURLE_OK)
    return ebb_seterr(EBB_ENOLIB, "transcribe: libcurl failed to initialise: %s",
                      curl_easy_strerror(curl_init_rc));
  if (!(r->h = curl_easy_init()))
    return ebb_seterr(EBB_ENOMEM, "transcribe: cannot create a libcurl handle");
  int rc = build_form(r->h, r->o, r->proto, wav, wav_len, &r->form);
  if (rc || (rc = build_headers(r)))
    return rc;
  CURL *h = r->h;
  curl_easy_setopt(h, CURLOPT_URL, r->o->url);
  curl_easy_setopt(h, CURLOPT_MIMEPOST, r->form);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, r->hdrs);
  curl_easy_setopt(h, CURLOPT_USERAGENT, "ebb-transcribe/1");
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(r->timeout * 1000.0));
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(r->ctimeout * 1000.0));
  curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
  curl_easy_setopt(h, CURLOPT_XFERINFODATA, &r->x);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &r->body);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, r->errbuf);
#if LIBCURL_VERSION_NUM >= 0x075500
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
  return 0;
}

/* What went wrong with an attempt that got no 2xx answer: the message, the
 * error code and whether another attempt can help. */
static void classify_failure(const request *r, CURLcode cc, long status, char *what, size_t n,
                             int *code, int *retry) {
  *retry = 0;
  *code = EBB_EIO;
  if (cc == CURLE_OK) {
    /* the status only: the answer's body is the remote's, and a job that
     * chose the URL must not read an internal service through it */
    snprintf(what, n, "%s answered HTTP %ld (its body is not shown)", r->url, status);
    *retry = status >= 500 || status == 429;
    *code = (status == 401 || status == 403 || status == 404) ? EBB_ECONFIG : EBB_EPROTO;
    return;
  }
  if (r->body.too_big) {
    snprintf(what, n, "%s answered more than %u MiB", r->url, MAX_ANSWER_BYTES >> 20);
    *code = EBB_EPROTO;
    return;
  }
  const char *detail = r->errbuf[0] ? r->errbuf : curl_easy_strerror(cc);
  *retry = retryable_curl(cc);
  if (cc == CURLE_OPERATION_TIMEDOUT) {
    *code = EBB_ETIMEDOUT;
    snprintf(what, n, "%s timed out (timeout_s %.3g, connect_timeout_s %.3g): %s", r->url,
             r->timeout, r->ctimeout, detail);
  } else if (cc == CURLE_COULDNT_CONNECT) {
    snprintf(what, n, "cannot connect to %s: %s", r->url, detail);
  } else if (cc == CURLE_GOT_NOTHING) {
    snprintf(what, n, "%s closed the connection without an answer: %s", r->url, detail);
  } else {
    snprintf(what, n, "request to %s failed: %s", r->url, detail);
  }
}

/* curl_easy_perform, driven through a multi handle that wakes at least
 * every 50 ms: the easy interface calls the progress callback only about
 * once a second while the server is silent (a Whisper server thinking for
 * minutes), so a cancellation waited up to a second; here it is seen
 * within 50 ms. */
static CURLcode perform_watched(request *r) {
  CURLM *m = curl_multi_init();
  if (!m)
    return CURLE_OUT_OF_MEMORY;
  CURLcode cc = CURLE_OK;
  if (curl_multi_add_handle(m, r->h) != CURLM_OK) {
    curl_multi_cleanup(m);
    return CURLE_OUT_OF_MEMORY;
  }
  for (int running = 1; running;) {
    if (curl_multi_perform(m, &running) != CURLM_OK) {
      cc = CURLE_RECV_ERROR;
      break;
    }
    if (is_cancelled(r->o)) {
      r->x.cancelled = 1;
      cc = CURLE_ABORTED_BY_CALLBACK;
      break;
    }
    if (running && curl_multi_poll(m, NULL, 0, 50, NULL) != CURLM_OK) {
      cc = CURLE_RECV_ERROR;
      break;
    }
  }
  int left = 0;
  for (CURLMsg *msg; (msg = curl_multi_info_read(m, &left));)
    if (msg->msg == CURLMSG_DONE && msg->easy_handle == r->h && cc == CURLE_OK)
      cc = msg->data.result;
  curl_multi_remove_handle(m, r->h);
  curl_multi_cleanup(m);
  return cc;
}

/* Attempts until an answer parses, an error is final, or the retries are
 * spent (backoff doubling from backoff_s). */
static int perform(request *r, char **transcript_json, stg_transcribe_stats *st) {
  const stg_transcribe_opts *o = r->o;
  int retries = o->retries > 0 ? o->retries : 0;
  double backoff = o->backoff_s > 0 ? o->backoff_s : 0.5;
  for (int attempt = 1;; attempt++) {
    r->body.n = 0;
    r->body.too_big = 0;
    r->errbuf[0] = 0;
    st->http_status = 0;
    st->attempts = attempt;
    CURLcode cc = perform_watched(r);
    if (r->x.cancelled || cc == CURLE_ABORTED_BY_CALLBACK)
      return ebb_seterr(EBB_ECANCELED, "transcribe: cancelled while waiting for %s (attempt %d)",
                        r->url, attempt);
    long status = 0;
    if (cc == CURLE_OK) {
      curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &status);
      st->http_status = status;
    }
    if (cc == CURLE_OK && status >= 200 && status < 300) {
      int rc = stg_transcribe_parse(r->body.p, r->body.n, r->proto, r->url, transcript_json,
                                    &st->words_dropped, o->log, o->log_arg);
      return rc ? rc : apply_language_hint(transcript_json, o->language);
    }
    char what[1400];
    int retry, code;
    classify_failure(r, cc, status, what, sizeof what, &code, &retry);
    if (!retry || attempt > retries)
      return attempt > 1 ? ebb_seterr(code, "transcribe: %s (after %d attempts)", what, attempt)
                         : ebb_seterr(code, "transcribe: %s", what);
    logf_(o, 2, "attempt %d of %d failed: %s; retrying in %.2g s", attempt, retries + 1, what,
          backoff);
    if (backoff_sleep(o, backoff))
      return ebb_seterr(EBB_ECANCELED, "transcribe: cancelled while waiting to retry %s", r->url);
    backoff *= 2;
  }
}

int stg_transcribe_request(const stg_transcribe_opts *o, const float *mono, uint64_t frames,
                           uint32_t rate, char **transcript_json, stg_transcribe_stats *stats) {
  stg_transcribe_stats st_local;
  stg_transcribe_stats *st = stats ? stats : &st_local;
  memset(st, 0, sizeof *st);
  int rc = check_request(o, mono, frames, rate, transcript_json);
  if (rc)
    return rc;
  request r = {.o = o, .x = {.o = o}};
  redact_url(o->url, r.url, sizeof r.url);
  r.proto = stg_whisper_protocol_resolve(o->protocol, o->url);
  r.timeout = o->timeout_s > 0 ? o->timeout_s : 600.0;
  r.ctimeout = o->connect_timeout_s > 0 ? o->connect_timeout_s : 10.0;
  unsigned char *wav = NULL;
  size_t wav_len = 0;
  if (!(rc = encode_upload(mono, frames, rate, &wav, &wav_len))) {
    st->upload_bytes = wav_len;
    rc = setup_handle(&r, wav, wav_len);
    free(wav); /* curl_mime_data copied it */
  }
  if (!rc)
    rc = perform(&r, transcript_json, st);
  request_free(&r);
  return rc;
}
