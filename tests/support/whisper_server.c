/* A Whisper-compatible test server (see whisper_server.h). Built twice by
 * tests/unit/stages_transcribe.cmake: as a library for unit tests and, with
 * WHISPER_SERVER_MAIN, as the `whisper_server` program (prints "PORT n"). */
#include "whisper_server.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define MAX_UPLOAD (64u << 20)
#define MAX_KEYS 128
#define MAX_PARTS 16

typedef struct key_stat {
  char key[64];
  int requests;
  double duration;
} key_stat;

struct whisper_server {
  struct MHD_Daemon *d;
  unsigned port;
  char *api_key;
  atomic_int stopping;
  pthread_mutex_t mu;
  key_stat keys[MAX_KEYS];
  int nkeys;
};

typedef struct upload {
  char *p;
  size_t n, cap;
  int too_big;
} upload;

typedef struct part {
  char name[64];
  char filename[128];
  char ctype[64];
  const char *data;
  size_t len;
} part;

/* ---- bookkeeping ---------------------------------------------------------- */
static key_stat *key_get(whisper_server *s, const char *key) {
  for (int i = 0; i < s->nkeys; i++)
    if (!strcmp(s->keys[i].key, key))
      return &s->keys[i];
  if (s->nkeys == MAX_KEYS)
    return NULL;
  key_stat *k = &s->keys[s->nkeys++];
  snprintf(k->key, sizeof k->key, "%s", key);
  k->duration = -1;
  return k;
}

/* Counts this request; returns its number for the key (1-based). */
static int key_count(whisper_server *s, const char *key) {
  pthread_mutex_lock(&s->mu);
  key_stat *k = key_get(s, key);
  int n = k ? ++k->requests : 0;
  pthread_mutex_unlock(&s->mu);
  return n;
}

static void key_duration(whisper_server *s, const char *key, double d) {
  pthread_mutex_lock(&s->mu);
  key_stat *k = key_get(s, key);
  if (k)
    k->duration = d;
  pthread_mutex_unlock(&s->mu);
}

int whisper_server_requests(whisper_server *s, const char *key) {
  pthread_mutex_lock(&s->mu);
  int n = 0;
  for (int i = 0; i < s->nkeys; i++)
    if (!strcmp(s->keys[i].key, key))
      n = s->keys[i].requests;
  pthread_mutex_unlock(&s->mu);
  return n;
}

double whisper_server_last_duration(whisper_server *s, const char *key) {
  pthread_mutex_lock(&s->mu);
  double d = -1;
  for (int i = 0; i < s->nkeys; i++)
    if (!strcmp(s->keys[i].key, key))
      d = s->keys[i].duration;
  pthread_mutex_unlock(&s->mu);
  return d;
}

unsigned whisper_server_port(const whisper_server *s) { return s->port; }

/* ---- parsing the upload --------------------------------------------------- */
static uint32_t rd32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static unsigned rd16(const unsigned char *p) { return (unsigned)p[0] | (unsigned)p[1] << 8; }

/* Checks a 16-bit PCM WAV; fills channels, rate and duration, or err. */
static int wav_check(const char *data, size_t n, unsigned *ch, unsigned *rate, double *dur,
                     char *err, size_t es) {
  const unsigned char *p = (const unsigned char *)data;
  if (n < 12 || memcmp(p, "RIFF", 4) || memcmp(p + 8, "WAVE", 4)) {
    snprintf(err, es, "file is not a RIFF/WAVE file (%zu bytes)", n);
    return -1;
  }
  unsigned fmt_ok = 0, bits = 0;
  *ch = *rate = 0;
  for (size_t off = 12; off + 8 <= n;) {
    uint32_t sz = rd32(p + off + 4);
    const unsigned char *c = p + off + 8;
    if (!memcmp(p + off, "fmt ", 4)) {
      if (sz < 16 || off + 8 + sz > n) {
        snprintf(err, es, "WAV fmt chunk is truncated");
        return -1;
      }
      if (rd16(c) != 1) {
        snprintf(err, es, "WAV format %u is not PCM", rd16(c));
        return -1;
      }
      *ch = rd16(c + 2);
      *rate = rd32(c + 4);
      bits = rd16(c + 14);
      fmt_ok = 1;
    } else if (!memcmp(p + off, "data", 4)) {
      if (!fmt_ok) {
        snprintf(err, es, "WAV data chunk before fmt chunk");
        return -1;
      }
      if (bits != 16 || *ch == 0 || *rate < 1000) {
        snprintf(err, es, "WAV is %u-bit, %u channels, %u Hz; want 16-bit PCM", bits, *ch, *rate);
        return -1;
      }
      if (off + 8 + sz > n) {
        snprintf(err, es, "WAV data chunk claims %u bytes but only %zu arrived", sz, n - off - 8);
        return -1;
      }
      *dur = (double)(sz / (2u * *ch)) / (double)*rate;
      return 0;
    }
    off += 8 + (size_t)sz + (sz & 1u);
  }
  snprintf(err, es, "WAV has no %s chunk", fmt_ok ? "data" : "fmt");
  return -1;
}

static void header_param(const char *hdrs, const char *key, char *out, size_t n) {
  out[0] = 0;
  const char *p = strcasestr(hdrs, key);
  if (!p)
    return;
  p += strlen(key);
  size_t k = 0;
  while (*p && *p != '"' && *p != '\r' && k + 1 < n)
    out[k++] = *p++;
  out[k] = 0;
}

/* Splits a multipart/form-data body into parts (pointing into body). */
static int multipart(const char *ctype, const char *body, size_t n, part *parts, int *nparts,
                     char *err, size_t es) {
  const char *b = ctype ? strcasestr(ctype, "boundary=") : NULL;
  if (!ctype || strncasecmp(ctype, "multipart/form-data", 19) || !b) {
    snprintf(err, es, "Content-Type is not multipart/form-data with a boundary (got %s)",
             ctype ? ctype : "none");
    return -1;
  }
  b += 9;
  char delim[200] = "--";
  size_t k = 2;
  if (*b == '"')
    b++;
  while (*b && *b != '"' && *b != ';' && k + 1 < sizeof delim)
    delim[k++] = *b++;
  delim[k] = 0;
  const char *end = body + n;
  const char *p = memmem(body, n, delim, k);
  *nparts = 0;
  while (p) {
    p += k;
    if (end - p >= 2 && !memcmp(p, "--", 2))
      return 0;
    if (end - p < 2 || memcmp(p, "\r\n", 2))
      break;
    p += 2;
    const char *he = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
    if (!he)
      break;
    char hdrs[1024];
    size_t hl = (size_t)(he - p) < sizeof hdrs - 1 ? (size_t)(he - p) : sizeof hdrs - 1;
    memcpy(hdrs, p, hl);
    hdrs[hl] = 0;
    const char *data = he + 4;
    char close[210];
    int cl = snprintf(close, sizeof close, "\r\n%s", delim);
    const char *next = memmem(data, (size_t)(end - data), close, (size_t)cl);
    if (!next)
      break;
    if (*nparts < MAX_PARTS) {
      part *pt = &parts[(*nparts)++];
      header_param(hdrs, " name=\"", pt->name, sizeof pt->name);
      header_param(hdrs, "filename=\"", pt->filename, sizeof pt->filename);
      header_param(hdrs, "content-type: ", pt->ctype, sizeof pt->ctype);
      pt->data = data;
      pt->len = (size_t)(next - data);
    }
    p = next + 2;
  }
  snprintf(err, es, "multipart body is truncated or has no closing boundary");
  return -1;
}

static const part *find_part(const part *parts, int n, const char *name, const char *value) {
  for (int i = 0; i < n; i++)
    if (!strcmp(parts[i].name, name) &&
        (!value || (parts[i].len == strlen(value) && !memcmp(parts[i].data, value, parts[i].len))))
      return &parts[i];
  return NULL;
}

/* ---- answers -------------------------------------------------------------- */
static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *body) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!r)
    return MHD_NO;
  MHD_add_response_header(r, "Content-Type", "application/json");
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned status, const char *msg) {
  char body[1024];
  snprintf(body, sizeof body,
           "{\"error\":{\"message\":\"%s\",\"type\":\"invalid_request_error\",\"param\":null,"
           "\"code\":null}}",
           msg);
  return reply(c, status, body);
}

static const char *const kWords[5] = {"hello", "from", "whisper", "test", "server"};
/* whisper.cpp-style sub-word pieces: (word index, text) */
static const struct {
  int w;
  const char *t;
} kPieces[] = {{0, " hel"}, {0, "lo"},    {1, " from"},   {2, " whis"},
               {2, "per"},  {3, " test"}, {4, " server"}, {4, "."}};

static double wstart(double d, int i) { return d * i / 5.0; }
static double wend(double d, int i) { return d * (i + 0.8) / 5.0; }

static size_t openai_answer(char *b, size_t n, double d, int badtimes) {
  size_t k = (size_t)snprintf(b, n,
                              "{\"task\":\"transcribe\",\"language\":\"english\",\"duration\":%.4f,"
                              "\"text\":\"hello from whisper test server\",\"words\":[",
                              d);
  for (int i = 0; i < 5 && k < n; i++) {
    double s = wstart(d, i), e = wend(d, i);
    if (badtimes && i == 1)
      s = -0.5;
    if (badtimes && i == 3) {
      double t = s;
      s = e;
      e = t - 0.1;
    }
    k += (size_t)snprintf(b + k, n - k, "%s{\"word\":\"%s\",\"start\":%.4f,\"end\":%.4f}",
                          i ? "," : "", kWords[i], s, e);
  }
  if (k < n)
    k += (size_t)snprintf(b + k, n - k,
                          "],\"segments\":[{\"id\":0,\"seek\":0,\"start\":0.0,\"end\":%.4f,"
                          "\"text\":\" hello from whisper test server\",\"tokens\":[50364,1,2],"
                          "\"temperature\":0.0,\"avg_logprob\":-0.2,\"compression_ratio\":1.0,"
                          "\"no_speech_prob\":0.01}]}",
                          d);
  return k;
}

static size_t cpp_answer(char *b, size_t n, double d, int tokens) {
  size_t k =
      (size_t)snprintf(b, n,
                       "{\"task\":\"transcribe\",\"language\":\"english\",\"duration\":%.4f,"
                       "\"text\":\" hello from whisper test server.\",\"segments\":[{\"id\":0,"
                       "\"text\":\" hello from whisper test server.\",\"start\":0.0,"
                       "\"end\":%.4f,%s",
                       d, d,
                       tokens ? "\"tokens\":[{\"text\":\"[_BEG_]\",\"t0\":0,\"t1\":0}"
                              : "\"tokens\":[50364,1,2,3],\"words\":[");
  int nw = (int)(sizeof kPieces / sizeof kPieces[0]);
  for (int i = 0; i < nw && k < n; i++) {
    int w = kPieces[i].w;
    double s = wstart(d, w), e = wend(d, w);
    int first = i == 0 || kPieces[i - 1].w != w, last = i == nw - 1 || kPieces[i + 1].w != w;
    double mid = (s + e) / 2;
    if (!(first && last)) { /* split words: the pieces share the span */
      if (first)
        e = mid;
      else if (last && kPieces[i].t[0] == '.')
        s = e;
      else
        s = mid;
    }
    if (tokens)
      k += (size_t)snprintf(b + k, n - k, ",{\"text\":\"%s\",\"t0\":%ld,\"t1\":%ld,\"p\":0.9}",
                            kPieces[i].t, (long)(s * 100 + 0.5), (long)(e * 100 + 0.5));
    else
      k += (size_t)snprintf(b + k, n - k,
                            "%s{\"word\":\"%s\",\"start\":%.2f,\"end\":%.2f,\"t_dtw\":-1,"
                            "\"probability\":0.9}",
                            i ? "," : "", kPieces[i].t, s, e);
  }
  if (k < n)
    k += (size_t)snprintf(b + k, n - k,
                          "],\"temperature\":0.0,\"avg_logprob\":-0.3,\"no_speech_prob\":0.01}]}");
  return k;
}

static const char *arg(struct MHD_Connection *c, const char *name, const char *def) {
  const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
  return v ? v : def;
}

static void sleep_unless_stopping(whisper_server *s, double secs) {
  struct timespec step = {0, 20 * 1000 * 1000};
  for (double t = 0; t < secs && !atomic_load(&s->stopping); t += 0.02)
    nanosleep(&step, NULL);
}

static enum MHD_Result answer(whisper_server *s, struct MHD_Connection *c, const char *url,
                              upload *up) {
  const char *key = arg(c, "key", "");
  const char *mode = arg(c, "mode", "normal");
  int nth = key_count(s, key);
  if (!strcmp(mode, "hangup"))
    return MHD_NO; /* MHD closes the connection without a response */

  int cpp = !strcmp(url, "/inference");
  char err[300];
  if (!cpp && s->api_key) {
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    char want[300];
    snprintf(want, sizeof want, "Bearer %s", s->api_key);
    if (!auth || strcmp(auth, want)) {
      snprintf(err, sizeof err, "Incorrect API key provided (test server%s)",
               auth ? "" : ", no Authorization header");
      return reply_error(c, 401, err);
    }
  }
  if (up->too_big)
    return reply_error(c, 413, "upload too large for the test server");
  part parts[MAX_PARTS];
  int np = 0;
  const char *ctype = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
  if (multipart(ctype, up->p ? up->p : "", up->n, parts, &np, err, sizeof err))
    return reply_error(c, 400, err);
  const part *file = find_part(parts, np, "file", NULL);
  if (!file)
    return reply_error(c, 400, "no multipart part named file");
  if (!file->filename[0] || strcmp(file->ctype, "audio/wav"))
    return reply_error(c, 400, "file part needs a filename and Content-Type audio/wav");
  unsigned ch, rate;
  double dur = 0;
  if (wav_check(file->data, file->len, &ch, &rate, &dur, err, sizeof err))
    return reply_error(c, 400, err);
  if (cpp && (rate != 16000 || ch != 1)) {
    snprintf(err, sizeof err, "whisper.cpp wants 16 kHz mono WAV, got %u Hz %u channels", rate, ch);
    return reply_error(c, 400, err);
  }
  if (!find_part(parts, np, "response_format", "verbose_json"))
    return reply_error(c, 400, "response_format=verbose_json was not requested");
  if (!cpp && !find_part(parts, np, "model", NULL))
    return reply_error(c, 400, "you must provide a model parameter");
  if (!cpp && !find_part(parts, np, "timestamp_granularities[]", "word"))
    return reply_error(c, 400, "timestamp_granularities[]=word was not requested");
  key_duration(s, key, dur);

  int status = atoi(arg(c, "status", "500"));
  if (status < 100 || status > 599)
    status = 500;
  if (!strcmp(mode, "fail") || (!strcmp(mode, "flaky") && nth <= atoi(arg(c, "fails", "1")))) {
    snprintf(err, sizeof err, "test server: failing on purpose (mode=%s, request %d)", mode, nth);
    return reply_error(c, (unsigned)status, err);
  }
  if (!strcmp(mode, "error400"))
    return reply_error(c, 400, "test server: rejected on purpose (mode=error400)");
  if (!strcmp(mode, "malformed"))
    return reply(c, 200, "{\"text\": \"hello\",\n \"words\": [{\"word\": \"hel");
  if (!strcmp(mode, "missing"))
    return reply(c, 200, "{\"language\":\"english\",\"segments\":[]}");
  if (!strcmp(mode, "cpperror"))
    return reply(c, 200, "{\"error\":\"failed to read WAV file\"}");
  if (!strcmp(mode, "slow"))
    sleep_unless_stopping(s, atof(arg(c, "sleep", "30")));

  char body[8192];
  if (cpp)
    cpp_answer(body, sizeof body, dur, !strcmp(arg(c, "shape", "words"), "tokens"));
  else
    openai_answer(body, sizeof body, dur, !strcmp(mode, "badtimes"));
  return reply(c, 200, body);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  (void)version;
  whisper_server *s = cls;
  if (!*con_cls) {
    upload *up = calloc(1, sizeof *up);
    if (!up)
      return MHD_NO;
    *con_cls = up;
    return MHD_YES;
  }
  upload *up = *con_cls;
  if (*upload_data_size) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    if (up->too_big || up->n + n > MAX_UPLOAD) {
      up->too_big = 1;
      return MHD_YES;
    }
    if (up->n + n > up->cap) {
      size_t cap = up->cap ? up->cap : 65536;
      while (cap < up->n + n)
        cap *= 2;
      char *p = realloc(up->p, cap);
      if (!p)
        return MHD_NO;
      up->p = p;
      up->cap = cap;
    }
    memcpy(up->p + up->n, upload_data, n);
    up->n += n;
    return MHD_YES;
  }
  if (!strcmp(method, "GET") && !strcmp(url, "/stats")) {
    const char *key = arg(c, "key", "");
    char body[128];
    snprintf(body, sizeof body, "{\"requests\":%d,\"duration\":%.4f}",
             whisper_server_requests(s, key), whisper_server_last_duration(s, key));
    return reply(c, 200, body);
  }
  if (strcmp(url, "/v1/audio/transcriptions") && strcmp(url, "/inference"))
    return reply_error(c, 404, "no such endpoint on the test server");
  if (strcmp(method, "POST"))
    return reply_error(c, 405, "use POST");
  return answer(s, c, url, up);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  upload *up = *con_cls;
  if (up) {
    free(up->p);
    free(up);
  }
  *con_cls = NULL;
}

int whisper_server_start(unsigned port, const char *api_key, whisper_server **out) {
  whisper_server *s = calloc(1, sizeof *s);
  if (!s)
    return -1;
  pthread_mutex_init(&s->mu, NULL);
  atomic_init(&s->stopping, 0);
  if (api_key && !(s->api_key = strdup(api_key)))
    goto fail;
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  s->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                              MHD_USE_ERROR_LOG,
                          (uint16_t)port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, &sa,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
  if (!s->d) {
    fprintf(stderr, "whisper_server: cannot listen on 127.0.0.1:%u\n", port);
    goto fail;
  }
  const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
  s->port = info ? info->port : port;
  *out = s;
  return 0;
fail:
  free(s->api_key);
  pthread_mutex_destroy(&s->mu);
  free(s);
  return -1;
}

void whisper_server_stop(whisper_server *s) {
  if (!s)
    return;
  atomic_store(&s->stopping, 1);
  if (s->d)
    MHD_stop_daemon(s->d);
  pthread_mutex_destroy(&s->mu);
  free(s->api_key);
  free(s);
}

#ifdef WHISPER_SERVER_MAIN
#include <signal.h>

/* whisper_server [--port N] [--api-key KEY]: prints "PORT n" and serves until
 * SIGTERM or SIGINT. */
int main(int argc, char **argv) {
  unsigned port = 0;
  const char *key = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--port") && i + 1 < argc)
      port = (unsigned)atoi(argv[++i]);
    else if (!strcmp(argv[i], "--api-key") && i + 1 < argc)
      key = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--port N] [--api-key KEY]\n", argv[0]);
      return 2;
    }
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, NULL); /* before the server's threads exist */
  whisper_server *s;
  if (whisper_server_start(port, key, &s))
    return 1;
  printf("PORT %u\n", whisper_server_port(s));
  fflush(stdout);
  int sig;
  sigwait(&set, &sig);
  whisper_server_stop(s);
  return 0;
}
#endif
