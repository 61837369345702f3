/* Connections: who gets one, who loses one, and their deadlines.
 *
 * libmicrohttpd accepts (one thread per connection) and closes a connection
 * idle for MHD_OPTION_CONNECTION_TIMEOUT; everything else is decided here,
 * from its accept-policy and connection-notify callbacks and a reaper
 * thread, because its own limits lock clients out: at its connection limit
 * it stops accepting (every new client waits behind idle sockets), and its
 * per-address cap counts all of 127.0.0.1 (one local process locks out the
 * page, `ebb top` and a reverse proxy). So:
 *  - the cap on connections (max_connections) is ours; libmicrohttpd's is
 *    set well above it. A connection accepted over the cap evicts the
 *    oldest connection that has not sent a whole request (first one that
 *    has sent nothing of its current request: a fresh or an idle
 *    kept-alive one; else one still sending its body); one that is being
 *    answered is never evicted. With none to evict, the new one is closed.
 *  - the per-address cap (max_per_ip) works the same way within one
 *    address, loopback included: a newcomer over it evicts that address's
 *    oldest connection with no whole request, so a process that holds its
 *    address's share of idle sockets cannot lock out the other clients of
 *    that address (the page, `ebb top`, a reverse proxy on 127.0.0.1); with
 *    none of that address's to evict, the newcomer is refused.
 *  - under pressure (3/4 of the cap taken) a kept-alive connection idle for
 *    idle_pressure_s is closed.
 *  - a connection must complete its headers within header_timeout_s of
 *    being accepted (or of its last answer), and a body must then average
 *    min_body_rate bytes/s (slow loris).
 * Closing is shutdown(2) of the socket, whose descriptor stays open until
 * libmicrohttpd's CLOSED notification removes it from the list here: its
 * connection thread sees the end of the stream and closes it itself. */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/wait.h"
#include "server/internal.h"

enum { PH_HEADERS, PH_BODY, PH_HANDLING };

typedef struct peer { /* an address and its connections */
  struct peer *next;
  unsigned char addr[16];
  unsigned n;    /* in the list */
  unsigned live; /* of those, not shut */
} peer;

typedef struct conn {
  struct conn *newer, *older;
  int fd;
  double phase_start; /* accept, headers complete, or the last answer */
  int phase;
  int served; /* answered a request: idle in PH_HEADERS means kept alive */
  uint64_t body_bytes;
  int shut;
  peer *from; /* NULL: unknown (out of memory) */
} conn;

struct srv_conns {
  srv_conn_limits l;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  conn *newest, *oldest;
  unsigned live; /* in the list and not shut */
  peer *peers;
  uint64_t evicted, refused, idle_closed, reaped;
  int stop;
  pthread_t reaper;
  int started;
};


/* --- addresses -------------------------------------------------------------------- */
/* The address as 16 bytes (IPv4 as v4-mapped). */
static void addr_key(const struct sockaddr *sa, unsigned char out[16]) {
  memset(out, 0, 16);
  if (sa->sa_family == AF_INET) {
    out[10] = out[11] = 0xff;
    memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
  } else if (sa->sa_family == AF_INET6)
    memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
}

static peer *find_peer(srv_conns *cs, const unsigned char key[16]) {
  for (peer *p = cs->peers; p; p = p->next)
    if (!memcmp(p->addr, key, 16))
      return p;
  return NULL;
}

static void drop_peer(srv_conns *cs, peer *gone) {
  for (peer **pp = &cs->peers; *pp; pp = &(*pp)->next)
    if (*pp == gone) {
      *pp = gone->next;
      free(gone);
      return;
    }
}

/* --- eviction ---------------------------------------------------------------------- */
static void shut(srv_conns *cs, conn *k) {
  shutdown(k->fd, SHUT_RDWR); /* the fd is still open: CLOSED removes k first */
  k->shut = 1;
  cs->live--;
  if (k->from)
    k->from->live--;
}

/* The oldest connection in phase ph, not shut, not `not`, from `from`
 * (NULL: any address). */
static conn *oldest_in(srv_conns *cs, int ph, const conn * not, const peer *from) {
  for (conn *k = cs->oldest; k; k = k->newer)
    if (!k->shut && k->phase == ph && k != not &&(!from || k->from == from))
      return k;
  return NULL;
}

/* The oldest connection without a whole request: one that has sent nothing
 * of its current request, else one still sending its body. */
static conn *victim(srv_conns *cs, const conn * not, const peer *from) {
  conn *v = oldest_in(cs, PH_HEADERS, not, from);
  return v ? v : oldest_in(cs, PH_BODY, not, from);
}

/* Accept policy: an address at its cap makes room by evicting its own
 * oldest connection without a whole request, or is refused. */
enum MHD_Result srv_conn_accept(void *cls, const struct sockaddr *addr, socklen_t len) {
  srv_conns *cs = cls;
  unsigned char key[16];
  if (!addr || len < sizeof(sa_family_t))
    return MHD_YES;
  addr_key(addr, key);
  pthread_mutex_lock(&cs->lock);
  peer *p = find_peer(cs, key);
  int ok = 1;
  if (p && p->live >= cs->l.max_per_ip) {
    conn *v = victim(cs, NULL, p);
    if (v) {
      shut(cs, v);
      cs->evicted++;
    } else {
      ok = 0;
      cs->refused++;
    }
  }
  pthread_mutex_unlock(&cs->lock);
  return ok ? MHD_YES : MHD_NO;
}

/* Over the cap: the oldest connection with no whole request goes; with
 * none, the newcomer. */
static void make_room(srv_conns *cs, conn *newcomer) {
  while (cs->live > cs->l.max_connections) {
    conn *v = victim(cs, newcomer, NULL);
    if (!v) {
      shut(cs, newcomer);
      cs->refused++;
      return;
    }
    shut(cs, v);
    cs->evicted++;
  }
}

/* --- deadlines --------------------------------------------------------------------- */
static int late(const srv_conns *cs, const conn *k, double now, int pressure) {
  double t = now - k->phase_start;
  if (k->phase == PH_HEADERS)
    return t > cs->l.header_timeout_s || (pressure && k->served && t > cs->l.idle_pressure_s);
  if (k->phase == PH_BODY)
    return t > cs->l.header_timeout_s &&
           (double)k->body_bytes < cs->l.min_body_rate * (t - cs->l.header_timeout_s);
  return 0;
}

static void *reaper(void *arg) {
  srv_conns *cs = arg;
  pthread_mutex_lock(&cs->lock);
  while (!cs->stop) {
    base_cond_wait_ms(&cs->cond, &cs->lock, 200);
    double now = base_now();
    int pressure = cs->live * 4 >= cs->l.max_connections * 3;
    for (conn *k = cs->oldest; k; k = k->newer)
      if (!k->shut && late(cs, k, now, pressure)) {
        if (k->phase == PH_HEADERS && k->served && now - k->phase_start <= cs->l.header_timeout_s)
          cs->idle_closed++;
        else
          cs->reaped++;
        shut(cs, k);
      }
  }
  pthread_mutex_unlock(&cs->lock);
  return NULL;
}

/* --- life ------------------------------------------------------------------------- */
int srv_conns_create(const srv_conn_limits *l, srv_conns **out) {
  srv_conns *cs = calloc(1, sizeof *cs);
  if (!cs)
    return ebb_seterr(EBB_ENOMEM, "server: out of host memory");
  cs->l = *l;
  pthread_mutex_init(&cs->lock, NULL);
  pthread_cond_init(&cs->cond, NULL);
  if (pthread_create(&cs->reaper, NULL, reaper, cs) != 0) {
    srv_conns_destroy(cs);
    return ebb_seterr(EBB_ENOMEM, "server: cannot start the connection reaper");
  }
  cs->started = 1;
  *out = cs;
  return 0;
}

void srv_conns_destroy(srv_conns *cs) {
  if (!cs)
    return;
  pthread_mutex_lock(&cs->lock);
  cs->stop = 1;
  pthread_cond_broadcast(&cs->cond);
  pthread_mutex_unlock(&cs->lock);
  if (cs->started)
    pthread_join(cs->reaper, NULL);
  for (conn *k = cs->newest, *n; k; k = n) {
    n = k->older;
    free(k);
  }
  for (peer *p = cs->peers, *n; p; p = n) {
    n = p->next;
    free(p);
  }
  pthread_cond_destroy(&cs->cond);
  pthread_mutex_destroy(&cs->lock);
  free(cs);
}

void srv_conns_stats(srv_conns *cs, srv_conn_stats *st) {
  pthread_mutex_lock(&cs->lock);
  *st = (srv_conn_stats){.open = cs->live,
                         .evicted = cs->evicted,
                         .refused = cs->refused,
                         .idle_closed = cs->idle_closed,
                         .timed_out = cs->reaped};
  pthread_mutex_unlock(&cs->lock);
}

/* The connection's address entry, counted (NULL when out of memory: that
 * connection is then not counted against its address). */
static peer *peer_of(srv_conns *cs, struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
  unsigned char key[16];
  if (!ci || !ci->client_addr)
    return NULL;
  addr_key(ci->client_addr, key);
  peer *p = find_peer(cs, key);
  if (!p && (p = calloc(1, sizeof *p))) {
    memcpy(p->addr, key, 16);
    p->next = cs->peers;
    cs->peers = p;
  }
  if (p) {
    p->n++;
    p->live++;
  }
  return p;
}

static void started(srv_conns *cs, struct MHD_Connection *c, void **socket_context) {
  conn *k = calloc(1, sizeof *k);
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (!k || !ci) {
    free(k);
    return;
  }
  k->fd = ci->connect_fd;
  k->phase_start = base_now();
  pthread_mutex_lock(&cs->lock);
  k->from = peer_of(cs, c);
  k->older = cs->newest;
  if (cs->newest)
    cs->newest->newer = k;
  else
    cs->oldest = k;
  cs->newest = k;
  cs->live++;
  make_room(cs, k);
  pthread_mutex_unlock(&cs->lock);
  *socket_context = k;
}

static void closed(srv_conns *cs, conn *k) {
  pthread_mutex_lock(&cs->lock);
  if (k->newer)
    k->newer->older = k->older;
  else
    cs->newest = k->older;
  if (k->older)
    k->older->newer = k->newer;
  else
    cs->oldest = k->newer;
  if (!k->shut) {
    cs->live--;
    if (k->from)
      k->from->live--;
  }
  if (k->from && --k->from->n == 0)
    drop_peer(cs, k->from);
  pthread_mutex_unlock(&cs->lock);
  free(k);
}

void srv_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode code) {
  srv_conns *cs = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    started(cs, c, socket_context);
    return;
  }
  if (*socket_context)
    closed(cs, *socket_context);
  *socket_context = NULL;
}

static void set_phase(srv_conns *cs, struct MHD_Connection *c, int phase, size_t bytes) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
  if (!ci || !ci->socket_context || !cs)
    return;
  conn *k = ci->socket_context;
  pthread_mutex_lock(&cs->lock);
  if (phase < 0)
    k->body_bytes += bytes;
  else {
    k->served |= phase == PH_HEADERS; /* only an answer sets it */
    k->phase = phase;
    k->phase_start = base_now();
    k->body_bytes = 0;
  }
  pthread_mutex_unlock(&cs->lock);
}

void srv_conn_headers_done(srv_conns *cs, struct MHD_Connection *c) {
  set_phase(cs, c, PH_BODY, 0);
}
void srv_conn_body_bytes(srv_conns *cs, struct MHD_Connection *c, size_t n) {
  set_phase(cs, c, -1, n);
}
void srv_conn_handling(srv_conns *cs, struct MHD_Connection *c) {
  set_phase(cs, c, PH_HANDLING, 0);
}
void srv_conn_answered(srv_conns *cs, struct MHD_Connection *c) { set_phase(cs, c, PH_HEADERS, 0); }
