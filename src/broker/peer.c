/* The giving side: a listener thread on DIR/PID.sock that hands each
 * connection to a thread of its own (BRK_MAX_CONNS at once), so a slow or
 * trickling asker holds only its own connection. One request per
 * connection; a reclaim is answered in two lines: at once what the peer
 * will give and how long it expects (brk_commit), then what it gave. Every
 * connection's credentials are checked (SO_PEERCRED) before a byte of it
 * is read, and the whole request must come within BRK_READ_MS. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "broker/broker.h"
#include "ebb/error.h"

#define WRITE_MS 2000 /* an asker that does not read its answer */

struct brk_peer {
  brk_peer_opts o;
  char dir[512], what[96], path[600];
  int fd, stop_pipe[2];
  pthread_t thread;
  pthread_mutex_t lock; /* stats, conns */
  pthread_cond_t drained;
  int conns;                 /* connection threads running */
  pthread_mutex_t give_lock; /* one reclaim at a time; another is told at once */
  brk_peer_stats stats;
};

typedef struct serve_buf {
  char line[BRK_MAX_LINE], out[BRK_MAX_LINE + 2];
  brk_answer ans;
} serve_buf;

struct brk_giving {
  int fd, sent;
  serve_buf *b;
};

static int ms_until(double until) {
  double l = (until - brk_now()) * 1000.0;
  return l <= 0 ? 0 : (int)l + 1;
}

/* Same user, root, or (with a group) a member of it. */
static int cred_ok(const brk_peer *p, int fd, struct ucred *cr) {
  socklen_t len = sizeof *cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &len) != 0)
    return 0;
  if (cr->uid == geteuid() || cr->uid == 0)
    return 1;
  return p->o.group != (gid_t)-1 && cr->gid == p->o.group;
}

/* One line, bounded in size and, in all, in time (a trickling asker). */
static int read_line(int fd, char *buf, size_t cap) {
  size_t n = 0;
  double until = brk_now() + BRK_READ_MS / 1000.0;
  while (n + 1 < cap) {
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, ms_until(until)) <= 0)
      return ebb_seterr(EBB_ETIMEDOUT, "broker: the asker sent no whole request within %d ms",
                        BRK_READ_MS);
    ssize_t r = recv(fd, buf + n, cap - 1 - n, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (r <= 0)
      return ebb_seterr(EBB_EPROTO, "broker: the asker closed before a whole request");
    n += (size_t)r;
    buf[n] = '\0';
    if (memchr(buf, '\n', n))
      return 0;
  }
  return ebb_seterr(EBB_EPROTO, "broker request: over the %d-byte limit", BRK_MAX_LINE);
}

static void write_all(int fd, const char *s, size_t n) {
  double until = brk_now() + WRITE_MS / 1000.0;
  while (n) {
    struct pollfd pf = {fd, POLLOUT, 0};
    if (poll(&pf, 1, ms_until(until)) <= 0)
      return;
    ssize_t w = send(fd, s, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (w <= 0)
      return;
    s += w;
    n -= (size_t)w;
  }
}

void brk_commit(brk_giving *g, const brk_answer *ans, uint64_t bytes, double eta_ms) {
  if (!g || g->sent)
    return;
  g->sent = 1;
  brk_answer c = {.pid = ans->pid, .commit = 1, .commit_bytes = bytes, .eta_ms = eta_ms};
  snprintf(c.what, sizeof c.what, "%s", ans->what);
  snprintf(c.device, sizeof c.device, "%s", ans->device);
  snprintf(c.label, sizeof c.label, "%s", ans->label);
  int n = brk_encode_commit(&c, g->b->out, sizeof g->b->out);
  if (n > 0)
    write_all(g->fd, g->b->out, (size_t)n);
}

static void set_error(brk_answer *a, int rc) {
  if (!a->err_code[0])
    snprintf(a->err_code, sizeof a->err_code, "%s",
             rc == EBB_EPROTO ? "bad_request" : base_wire_name(rc));
  snprintf(a->err_msg, sizeof a->err_msg, "%s", ebb_errmsg());
}

static int refuse_cred(const brk_peer *p, const struct ucred *cr) {
  return p->o.group == (gid_t)-1
             ? ebb_seterr(EBB_EINVAL,
                          "broker: uid %u may not ask this process: not its user "
                          "or root, and it shares its broker directory with no group "
                          "(--broker-group)",
                          (unsigned)cr->uid)
             : ebb_seterr(EBB_EINVAL,
                          "broker: uid %u (primary gid %u) may not ask this "
                          "process: not its user, root, or of its --broker-group (gid %u) "
                          "as primary group",
                          (unsigned)cr->uid, (unsigned)cr->gid, (unsigned)p->o.group);
}

/* A reclaim while another is being given: answered at once, nothing given
 * (the other giving frees what it frees; the asker watches the driver). */
static int give_one(brk_peer *p, const brk_request *req, brk_answer *a, brk_giving *g) {
  if (req->op != BRK_OP_RECLAIM)
    return p->o.give(p->o.give_arg, req, a, NULL);
  if (pthread_mutex_trylock(&p->give_lock) != 0) {
    snprintf(a->device, sizeof a->device, "%s", req->device);
    snprintf(a->reason, sizeof a->reason, "nothing: giving to another asker already");
    a->busy = 1;
    return 0;
  }
  int rc = p->o.give(p->o.give_arg, req, a, g);
  pthread_mutex_unlock(&p->give_lock);
  return rc;
}

static void serve_one(brk_peer *p, int fd, serve_buf *b) {
  brk_answer *a = &b->ans;
  struct ucred cr = {0};
  memset(a, 0, sizeof *a);
  a->pid = getpid();
  snprintf(a->what, sizeof a->what, "%s", p->what);
  int refused = 0, rc;
  brk_request req = {0};
  brk_giving g = {fd, 0, b};
  if (!cred_ok(p, fd, &cr)) {
    rc = refuse_cred(p, &cr);
    refused = 1;
  } else if ((rc = read_line(fd, b->line, sizeof b->line)) ||
             (rc = brk_decode_request(b->line, &req)))
    refused = 1;
  else {
    req.cred_uid = cr.uid;
    req.cred_gid = cr.gid;
    req.cred_pid = cr.pid;
    rc = give_one(p, &req, a, &g);
    refused = rc && a->err_code[0]; /* the giver's refusal (whose authority) */
  }
  if (rc)
    set_error(a, rc);
  pthread_mutex_lock(&p->lock); /* counted before the asker hears the answer */
  p->stats.requests++;
  p->stats.refused += (uint64_t)refused;
  if (!rc && req.op == BRK_OP_RECLAIM)
    p->stats.given_bytes += a->given_bytes;
  pthread_mutex_unlock(&p->lock);
  if (refused && p->o.refused)
    p->o.refused(p->o.give_arg, (long)cr.pid, a->err_msg);
  int n = brk_encode_answer(req.op ? req.op : BRK_OP_INFO, a, b->out, sizeof b->out);
  if (n > 0)
    write_all(fd, b->out, (size_t)n);
}

typedef struct conn_arg {
  brk_peer *p;
  int fd;
} conn_arg;

static void conn_done(brk_peer *p) {
  pthread_mutex_lock(&p->lock);
  if (--p->conns == 0)
    pthread_cond_broadcast(&p->drained);
  pthread_mutex_unlock(&p->lock);
}

static void *conn_thread(void *arg) {
  conn_arg c = *(conn_arg *)arg;
  free(arg);
  serve_buf *b = malloc(sizeof *b);
  if (b)
    serve_one(c.p, c.fd, b);
  else
    base_log(EBB_LOG_ERROR, "broker", "out of host memory: a request not answered");
  free(b);
  close(c.fd);
  conn_done(c.p);
  return NULL;
}

/* A connection over BRK_MAX_CONNS: told so at once, never read. */
static void too_many(brk_peer *p, int fd) {
  char out[512];
  brk_answer a = {.pid = getpid()};
  snprintf(a.what, sizeof a.what, "%s", p->what);
  snprintf(a.err_code, sizeof a.err_code, "busy");
  snprintf(a.err_msg, sizeof a.err_msg, "broker: %d requests in progress here already",
           BRK_MAX_CONNS);
  int n = brk_encode_answer(BRK_OP_INFO, &a, out, sizeof out);
  if (n > 0)
    (void)send(fd, out, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
  close(fd);
}

static void spawn_conn(brk_peer *p, int fd) {
  pthread_mutex_lock(&p->lock);
  int full = p->conns >= BRK_MAX_CONNS;
  if (!full)
    p->conns++;
  pthread_mutex_unlock(&p->lock);
  if (full) {
    too_many(p, fd);
    return;
  }
  conn_arg *c = malloc(sizeof *c);
  pthread_t t;
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  if (c)
    *c = (conn_arg){p, fd};
  if (!c || pthread_create(&t, &at, conn_thread, c) != 0) {
    free(c);
    close(fd);
    conn_done(p);
  }
  pthread_attr_destroy(&at);
}

static void *listen_thread(void *arg) {
  brk_peer *p = arg;
  for (;;) {
    struct pollfd pf[2] = {{p->fd, POLLIN, 0}, {p->stop_pipe[0], POLLIN, 0}};
    if (poll(pf, 2, -1) < 0 && errno != EINTR)
      break;
    if (pf[1].revents)
      break;
    if (!(pf[0].revents & POLLIN))
      continue;
    int c = accept4(p->fd, NULL, NULL, SOCK_CLOEXEC);
    if (c >= 0)
      spawn_conn(p, c);
  }
  return NULL;
}

static int bind_socket(brk_peer *p) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  brk_sock_path(p->dir, getpid(), p->path, sizeof p->path);
  if (strlen(p->path) >= sizeof sa.sun_path)
    return ebb_seterr(EBB_EINVAL, "broker socket %s: path over %zu bytes", p->path,
                      sizeof sa.sun_path - 1);
  memcpy(sa.sun_path, p->path, strlen(p->path) + 1);
  p->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (p->fd < 0)
    return ebb_seterr(EBB_EIO, "broker socket: %s", strerror(errno));
  unlink(p->path); /* a stale one of a dead process with our pid */
  mode_t old = umask(p->o.group != (gid_t)-1 ? 0117 : 0177);
  int rc = bind(p->fd, (struct sockaddr *)&sa, sizeof sa);
  umask(old);
  if (rc != 0 || listen(p->fd, 64) != 0)
    return ebb_seterr(EBB_EIO, "broker socket %s: %s", p->path, strerror(errno));
  return 0;
}

int brk_peer_start(const brk_peer_opts *o, brk_peer **out) {
  *out = NULL;
  brk_peer *p = calloc(1, sizeof *p);
  if (!p)
    return ebb_seterr(EBB_ENOMEM, "broker: out of host memory");
  p->o = *o;
  p->fd = p->stop_pipe[0] = p->stop_pipe[1] = -1;
  snprintf(p->dir, sizeof p->dir, "%s", o->dir);
  snprintf(p->what, sizeof p->what, "%s", o->what ? o->what : "ebb");
  pthread_mutex_init(&p->lock, NULL);
  pthread_mutex_init(&p->give_lock, NULL);
  pthread_cond_init(&p->drained, NULL);
  int rc = bind_socket(p);
  if (!rc && pipe2(p->stop_pipe, O_CLOEXEC) != 0)
    rc = ebb_seterr(EBB_EIO, "broker: pipe: %s", strerror(errno));
  if (!rc && pthread_create(&p->thread, NULL, listen_thread, p) != 0)
    rc = ebb_seterr(EBB_EIO, "broker: cannot start the listener thread");
  if (rc)
    goto fail;
  *out = p;
  base_log(EBB_LOG_DEBUG, "broker", "listening on %s", p->path);
  return 0;
fail:
  if (p->fd >= 0) {
    close(p->fd);
    unlink(p->path);
  }
  if (p->stop_pipe[0] >= 0) {
    close(p->stop_pipe[0]);
    close(p->stop_pipe[1]);
  }
  pthread_mutex_destroy(&p->lock);
  pthread_mutex_destroy(&p->give_lock);
  pthread_cond_destroy(&p->drained);
  free(p);
  return rc;
}

void brk_peer_stop(brk_peer *p) {
  if (!p)
    return;
  if (write(p->stop_pipe[1], "x", 1) != 1) { /* the thread then never wakes: leave it */
  }
  pthread_join(p->thread, NULL);
  close(p->fd);
  unlink(p->path);
  pthread_mutex_lock(&p->lock); /* the connections being served end first */
  while (p->conns > 0)
    pthread_cond_wait(&p->drained, &p->lock);
  pthread_mutex_unlock(&p->lock);
  close(p->stop_pipe[0]);
  close(p->stop_pipe[1]);
  pthread_mutex_destroy(&p->lock);
  pthread_mutex_destroy(&p->give_lock);
  pthread_cond_destroy(&p->drained);
  free(p);
}

void brk_peer_stats_get(brk_peer *p, brk_peer_stats *out) {
  memset(out, 0, sizeof *out);
  if (!p)
    return;
  pthread_mutex_lock(&p->lock);
  *out = p->stats;
  pthread_mutex_unlock(&p->lock);
}
