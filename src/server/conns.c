/* Connection deadlines. libmicrohttpd closes a connection that stays idle
 * (MHD_OPTION_CONNECTION_TIMEOUT) and caps connections in all and per IP;
 * it has no deadline for a client that sends its headers one byte at a time
 * (slow loris). A reaper thread does: a connection must complete its headers
 * within header_timeout_s of being accepted (or of its last answer), and a
 * body must then average min_body_rate bytes/s. A connection past its
 * deadline is shut down (shutdown(2): libmicrohttpd sees the end of the
 * stream and closes it itself). While a handler runs there is no deadline. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/wait.h"
#include "server/internal.h"

typedef struct conn {
  struct conn *prev, *next;
  int fd;
  double phase_start; /* accept, headers complete, or the last answer */
  int phase;          /* 0 headers, 1 body, 2 handling */
  uint64_t body_bytes;
  int shut;
} conn;

struct srv_conns {
  srv_conn_limits l;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  conn *head;
  int stop;
  pthread_t reaper;
  int started;
};

static int late(const srv_conns *cs, const conn *k, double now) {
  double t = now - k->phase_start;
  if (k->phase == 0)
    return t > cs->l.header_timeout_s;
  if (k->phase == 1)
    return t > cs->l.header_timeout_s &&
           (double)k->body_bytes < cs->l.min_body_rate * (t - cs->l.header_timeout_s);
  return 0;
}

static void *reaper(void *arg) {
  srv_conns *cs = arg;
  pthread_mutex_lock(&cs->lock);
  while (!cs->stop) {
    ebb_cond_wait_ms(&cs->cond, &cs->lock, 200);
    double now = ebb_now();
    for (conn *k = cs->head; k; k = k->next)
      if (!k->shut && late(cs, k, now)) {
        shutdown(k->fd, SHUT_RDWR); /* the fd is still open: CLOSED removes k first */
        k->shut = 1;
      }
  }
  pthread_mutex_unlock(&cs->lock);
  return NULL;
}

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
  for (conn *k = cs->head, *n; k; k = n) {
    n = k->next;
    free(k);
  }
  pthread_cond_destroy(&cs->cond);
  pthread_mutex_destroy(&cs->lock);
  free(cs);
}

void srv_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode code) {
  srv_conns *cs = cls;
  if (code == MHD_CONNECTION_NOTIFY_STARTED) {
    conn *k = calloc(1, sizeof *k);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!k || !ci) {
      free(k);
      return;
    }
    k->fd = ci->connect_fd;
    k->phase_start = ebb_now();
    pthread_mutex_lock(&cs->lock);
    k->next = cs->head;
    if (cs->head)
      cs->head->prev = k;
    cs->head = k;
    pthread_mutex_unlock(&cs->lock);
    *socket_context = k;
    return;
  }
  conn *k = *socket_context;
  if (!k)
    return;
  pthread_mutex_lock(&cs->lock);
  if (k->prev)
    k->prev->next = k->next;
  else
    cs->head = k->next;
  if (k->next)
    k->next->prev = k->prev;
  pthread_mutex_unlock(&cs->lock);
  free(k);
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
    k->phase = phase;
    k->phase_start = ebb_now();
    k->body_bytes = 0;
  }
  pthread_mutex_unlock(&cs->lock);
}

void srv_conn_headers_done(srv_conns *cs, struct MHD_Connection *c) { set_phase(cs, c, 1, 0); }
void srv_conn_body_bytes(srv_conns *cs, struct MHD_Connection *c, size_t n) {
  set_phase(cs, c, -1, n);
}
void srv_conn_handling(srv_conns *cs, struct MHD_Connection *c) { set_phase(cs, c, 2, 0); }
void srv_conn_answered(srv_conns *cs, struct MHD_Connection *c) { set_phase(cs, c, 0, 0); }
