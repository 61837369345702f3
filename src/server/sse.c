/* Server-Sent Events (sse.h): the bounded buffer of recent events, the
 * per-client queues, Last-Event-ID and the streams. */
#include "server/sse.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/clock.h"
#include "ebb/error.h"

#define KEEPALIVE_S 15
#define BACKLOG_MAX (512u * 1024) /* buffered events a client is sent at its start, at most */

typedef struct client {
  struct client *prev, *next;
  srv_sse *s;
  pthread_cond_t cv;
  char *buf; /* queued bytes: [off, len) */
  size_t off, len, cap, limit;
  int dropped; /* the `dropped` event is queued; the stream ends after it */
} client;

typedef struct entry {
  uint64_t id, t_ns;
  char *text; /* the whole event, "id: ...\nevent: ...\ndata: ...\n\n" */
  size_t n;
  int replay;
} entry;

struct srv_sse {
  srv_sse_opts o;
  pthread_mutex_t mu; /* everything below */
  int stop;
  client *clients;
  int nclients;
  uint64_t seq; /* the last id given */
  entry *ring;
  size_t cap, n, head; /* ring[head] is the oldest of n */
};

static int env_int(const char *name, int dflt, int lo, int hi) {
  const char *v = getenv(name);
  if (!v || !*v)
    return dflt;
  char *end;
  long x = strtol(v, &end, 10);
  return *end || x < lo || x > hi ? dflt : (int)x;
}

static void cond_init_mono(pthread_cond_t *c) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(c, &ca);
  pthread_condattr_destroy(&ca);
}

int srv_sse_create(const srv_sse_opts *o, srv_sse **out) {
  srv_sse *s = calloc(1, sizeof *s);
  if (!s)
    return ebb_seterr(EBB_ENOMEM, "events: out of host memory");
  s->o = *o;
  if (s->o.max_clients <= 0)
    s->o.max_clients = env_int("EBB_EVENTS_MAX_CLIENTS", 256, 1, 1 << 20);
  if (!s->o.client_buffer)
    s->o.client_buffer = (size_t)env_int("EBB_EVENTS_CLIENT_BUFFER", 256 * 1024, 1, 1 << 30);
  if (!s->o.buffer_events)
    s->o.buffer_events = (size_t)env_int("EBB_EVENTS_BUFFER", 4096, 16, 65536);
  if (s->o.history_s <= 0)
    s->o.history_s = 300;
  s->cap = s->o.buffer_events;
  s->ring = calloc(s->cap, sizeof *s->ring);
  if (!s->ring) {
    size_t cap = s->cap;
    free(s);
    return ebb_seterr(EBB_ENOMEM, "events: out of host memory for %zu buffered events", cap);
  }
  /* ids grow across restarts: an id from an earlier server is older than
   * every one of this one's (it gets a fresh hello) */
  s->seq = (uint64_t)(base_wall_s() * 1e6);
  pthread_mutex_init(&s->mu, NULL);
  *out = s;
  return 0;
}

void srv_sse_stop(srv_sse *s) {
  if (!s)
    return;
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  for (client *cl = s->clients; cl; cl = cl->next)
    pthread_cond_signal(&cl->cv);
  pthread_mutex_unlock(&s->mu);
}

void srv_sse_destroy(srv_sse *s) {
  if (!s)
    return;
  srv_sse_stop(s);
  for (size_t i = 0; i < s->n; i++)
    free(s->ring[(s->head + i) % s->cap].text);
  free(s->ring);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* --- clients -------------------------------------------------------------------- */
/* Appends n bytes; 0, or -1 when the client's limit would be passed. Under mu. */
static int client_put(client *cl, const char *t, size_t n) {
  if (cl->off && cl->off == cl->len)
    cl->off = cl->len = 0;
  if (cl->len - cl->off + n > cl->limit)
    return -1;
  if (cl->len + n > cl->cap && cl->off) {
    memmove(cl->buf, cl->buf + cl->off, cl->len - cl->off);
    cl->len -= cl->off;
    cl->off = 0;
  }
  if (cl->len + n > cl->cap) {
    size_t cap = cl->cap ? cl->cap : 4096;
    while (cap < cl->len + n)
      cap *= 2;
    char *b = realloc(cl->buf, cap);
    if (!b)
      return -1;
    cl->buf = b;
    cl->cap = cap;
  }
  memcpy(cl->buf + cl->len, t, n);
  cl->len += n;
  return 0;
}

/* A reader too slow for the events: forget what it has not read, queue one
 * last event, end its stream once that is read. Under mu. */
static void client_drop(srv_sse *s, client *cl) {
  free(cl->buf);
  cl->buf = NULL;
  cl->off = cl->len = cl->cap = 0;
  char msg[400];
  int n = snprintf(msg, sizeof msg,
                   "event: dropped\ndata: {\"reason\":\"this client read the events slower "
                   "than they came: more than %zu bytes were waiting; reconnect\"}\n\n",
                   s->o.client_buffer);
  cl->limit = (size_t)n;
  client_put(cl, msg, (size_t)n);
  cl->dropped = 1;
  pthread_cond_signal(&cl->cv);
}

/* --- the buffer ------------------------------------------------------------------ */
static entry *at(srv_sse *s, size_t i) { return &s->ring[(s->head + i) % s->cap]; }

static void drop_oldest(srv_sse *s) {
  free(at(s, 0)->text);
  s->head = (s->head + 1) % s->cap;
  s->n--;
}

/* Keeps e (its text taken); forgets the oldest beyond the count or age. Under mu. */
static void keep(srv_sse *s, entry e) {
  if (s->n == s->cap)
    drop_oldest(s);
  *at(s, s->n++) = e;
  uint64_t horizon = (uint64_t)s->o.history_s * 1000000000ull;
  while (s->n && e.t_ns > horizon && at(s, 0)->t_ns < e.t_ns - horizon)
    drop_oldest(s);
}

void srv_sse_send(srv_sse *s, const char *name, json_t *o, int replay) {
  char *data = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!data)
    return;
  pthread_mutex_lock(&s->mu);
  if (s->stop) {
    pthread_mutex_unlock(&s->mu);
    free(data);
    return;
  }
  uint64_t id = ++s->seq;
  char *text = NULL;
  int n = asprintf(&text, "id: %" PRIu64 "\nevent: %s\ndata: %s\n\n", id, name, data);
  free(data);
  if (n < 0) {
    pthread_mutex_unlock(&s->mu);
    return;
  }
  for (client *cl = s->clients; cl; cl = cl->next) {
    if (cl->dropped)
      continue;
    if (client_put(cl, text, (size_t)n) != 0)
      client_drop(s, cl);
    else
      pthread_cond_signal(&cl->cv);
  }
  keep(s, (entry){id, base_mono_ns(), text, (size_t)n, replay});
  pthread_mutex_unlock(&s->mu);
}

/* --- a client's start ---------------------------------------------------------------- */
/* The Last-Event-ID header as a number; 0 when absent or unreadable. */
static uint64_t last_event_id(struct MHD_Connection *c) {
  const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Last-Event-ID");
  if (!v || *v < '0' || *v > '9')
    return 0;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  return errno || *end ? 0 : (uint64_t)x;
}

/* A client resuming after id `last`: every buffered event after it, when
 * none it missed is gone and they fit; 0, or -1 for a fresh start. Under mu. */
static int start_resumed(srv_sse *s, client *cl, uint64_t last) {
  uint64_t first = s->n ? at(s, 0)->id : s->seq + 1;
  if (!last || last + 1 < first || last > s->seq)
    return -1;
  size_t from = s->n, need = 0;
  while (from > 0 && at(s, from - 1)->id > last) {
    need += at(s, from - 1)->n;
    from--;
  }
  if (need > BACKLOG_MAX)
    return -1;
  cl->limit = need + s->o.client_buffer; /* the backlog is allowed on top */
  for (size_t i = from; i < s->n; i++)
    if (client_put(cl, at(s, i)->text, at(s, i)->n) != 0)
      return -1;
  return 0;
}

/* hello (data, its id seq0) and the buffered events: the replayed ones up to
 * seq0 that fit in BACKLOG_MAX, then all after seq0 (they came while the
 * hello was made). 0, or -1 out of memory. Under mu. */
static int start_fresh(srv_sse *s, client *cl, const char *data, uint64_t seq0) {
  char *text = NULL;
  int n = asprintf(&text, "retry: 2000\nid: %" PRIu64 "\nevent: hello\ndata: %s\n\n", seq0, data);
  if (n < 0)
    return -1;
  size_t need = (size_t)n, from = s->n;
  while (from > 0) {
    const entry *e = at(s, from - 1);
    if ((e->replay || e->id > seq0) && need + e->n > BACKLOG_MAX && e->id <= seq0)
      break;
    if (e->replay || e->id > seq0)
      need += e->n;
    from--;
  }
  cl->limit = need + s->o.client_buffer;
  int rc = client_put(cl, text, (size_t)n);
  free(text);
  for (size_t i = from; !rc && i < s->n; i++)
    if (at(s, i)->replay || at(s, i)->id > seq0)
      rc = client_put(cl, at(s, i)->text, at(s, i)->n);
  return rc;
}

/* --- the stream ------------------------------------------------------------------------ */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  client *cl = cls;
  srv_sse *s = cl->s;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    if (cl->len > cl->off) {
      size_t n = cl->len - cl->off < max ? cl->len - cl->off : max;
      memcpy(buf, cl->buf + cl->off, n);
      cl->off += n;
      pthread_mutex_unlock(&s->mu);
      return (ssize_t)n;
    }
    if (cl->dropped || s->stop) {
      int dropped = cl->dropped;
      pthread_mutex_unlock(&s->mu);
      return dropped ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += KEEPALIVE_S;
    if (pthread_cond_timedwait(&cl->cv, &s->mu, &ts) == ETIMEDOUT && cl->len == cl->off &&
        !cl->dropped && !s->stop) {
      pthread_mutex_unlock(&s->mu);
      static const char ka[] = ": keepalive\n\n";
      size_t n = sizeof ka - 1 < max ? sizeof ka - 1 : max;
      memcpy(buf, ka, n);
      return (ssize_t)n;
    }
  }
}

static void stream_free(void *cls) {
  client *cl = cls;
  srv_sse *s = cl->s;
  pthread_mutex_lock(&s->mu);
  if (cl->prev)
    cl->prev->next = cl->next;
  else if (s->clients == cl)
    s->clients = cl->next;
  if (cl->next)
    cl->next->prev = cl->prev;
  s->nclients--;
  pthread_mutex_unlock(&s->mu);
  pthread_cond_destroy(&cl->cv);
  free(cl->buf);
  free(cl);
}

static enum MHD_Result refuse(struct MHD_Connection *c, unsigned status, const char *code,
                              const char *msg) {
  json_t *o = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
  char *t = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!t)
    return MHD_NO;
  struct MHD_Response *r = MHD_create_response_from_buffer(strlen(t), t, MHD_RESPMEM_MUST_FREE);
  MHD_add_response_header(r, "Content-Type", "application/json");
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

static void client_free(client *cl) {
  pthread_cond_destroy(&cl->cv);
  free(cl->buf);
  free(cl);
}

/* The client's first bytes, registered; NULL and *why when it cannot be. */
static client *client_start(srv_sse *s, struct MHD_Connection *c, const char **why) {
  uint64_t last = last_event_id(c);
  pthread_mutex_lock(&s->mu);
  uint64_t seq0 = s->seq;
  pthread_mutex_unlock(&s->mu);
  json_t *h = s->o.hello(s->o.hello_ctx); /* no lock: it reads the store */
  char *data = h ? json_dumps(h, JSON_COMPACT) : NULL;
  json_decref(h);
  client *cl = calloc(1, sizeof *cl);
  *why = "internal";
  if (!cl || !data) {
    free(cl);
    free(data);
    return NULL;
  }
  cl->s = s;
  cond_init_mono(&cl->cv);
  pthread_mutex_lock(&s->mu);
  int rc = 0;
  if (s->stop || s->nclients >= s->o.max_clients) {
    *why = s->stop ? "stopping" : "full";
    rc = -1;
  } else if (start_resumed(s, cl, last) != 0) {
    cl->off = cl->len = 0;
    rc = start_fresh(s, cl, data, seq0);
  }
  if (!rc) {
    cl->next = s->clients;
    if (s->clients)
      s->clients->prev = cl;
    s->clients = cl;
    s->nclients++;
  }
  pthread_mutex_unlock(&s->mu);
  free(data);
  if (rc) {
    client_free(cl);
    return NULL;
  }
  return cl;
}

enum MHD_Result srv_sse_serve(srv_sse *s, struct MHD_Connection *c) {
  const char *why = NULL;
  client *cl = client_start(s, c, &why);
  if (!cl && !strcmp(why, "internal"))
    return refuse(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "out of host memory");
  if (!cl) {
    char msg[200];
    snprintf(msg, sizeof msg,
             !strcmp(why, "stopping") ? "the server is stopping"
                                      : "%d clients are reading /v1/events already, the most "
                                        "this server takes (EBB_EVENTS_MAX_CLIENTS)",
             s->o.max_clients);
    return refuse(c, MHD_HTTP_SERVICE_UNAVAILABLE, "too_many_clients", msg);
  }
  /* the kernel's send buffer is part of what a client may hold: keep it
   * to the client's buffer so 256 streams cannot pin gigabytes of it */
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (ci) {
    size_t b = s->o.client_buffer;
    int sb = b < 4096 ? 4096 : b > (1u << 20) ? (1 << 20) : (int)b;
    setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb);
  }
  struct MHD_Response *r =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, cl, stream_free);
  if (!r) {
    stream_free(cl);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", "text/event-stream; charset=utf-8");
  MHD_add_response_header(r, "Cache-Control", "no-cache");
  MHD_add_response_header(r, "X-Accel-Buffering", "no");
  /* a reader that stops reading altogether is closed after a minute without
   * progress (the keepalive comments keep a healthy idle stream going) */
  MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 4 * KEEPALIVE_S);
  enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return ret;
}
