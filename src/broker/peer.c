/* The giving side: a listener thread on DIR/PID.sock. One request per
 * connection, answered in turn (the giving itself is serialised by the
 * giver anyway: it runs on its device). Every connection's credentials are
 * checked (SO_PEERCRED) before a byte of it is read. */
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

#define READ_TIMEOUT_MS 1000 /* a connected asker that sends nothing */

struct brk_peer {
  brk_peer_opts o;
  char dir[512], what[96], path[600];
  int fd, stop_pipe[2];
  pthread_t thread;
  pthread_mutex_t lock; /* stats */
  brk_peer_stats stats;
};

/* Same user, root, or (with a group) a member of it. */
static int cred_ok(const brk_peer *p, int fd, struct ucred *cr) {
  socklen_t len = sizeof *cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cr, &len) != 0)
    return 0;
  if (cr->uid == geteuid() || cr->uid == 0)
    return 1;
  return p->o.group != (gid_t)-1 && cr->gid == p->o.group;
}

/* One line, bounded in size and time. */
static int read_line(int fd, char *buf, size_t cap) {
  size_t n = 0;
  while (n + 1 < cap) {
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, READ_TIMEOUT_MS) <= 0)
      return ebb_seterr(EBB_ETIMEDOUT, "broker: the asker sent no request within %d ms",
                        READ_TIMEOUT_MS);
    ssize_t r = read(fd, buf + n, cap - 1 - n);
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
  while (n) {
    ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
    if (w <= 0)
      return;
    s += w;
    n -= (size_t)w;
  }
}

static void set_error(brk_answer *a, int rc) {
  snprintf(a->err_code, sizeof a->err_code, "%s",
           rc == EBB_EPROTO ? "bad_request" : base_wire_name(rc));
  snprintf(a->err_msg, sizeof a->err_msg, "%s", ebb_errmsg());
}

typedef struct serve_buf {
  char line[BRK_MAX_LINE], out[BRK_MAX_LINE + 2];
  brk_answer ans;
} serve_buf;

static void serve_one(brk_peer *p, int fd, serve_buf *b) {
  char *line = b->line, *out = b->out;
  brk_answer *a = &b->ans;
  struct ucred cr = {0};
  memset(a, 0, sizeof *a);
  a->pid = getpid();
  snprintf(a->what, sizeof a->what, "%s", p->what);
  int refused = 0;
  brk_request req = {0};
  int rc = 0;
  if (!cred_ok(p, fd, &cr)) {
    rc = p->o.group == (gid_t)-1
             ? ebb_seterr(EBB_EINVAL,
                          "broker: uid %u may not ask this process: not its user "
                          "or root, and it shares its broker directory with no group "
                          "(--broker-group)",
                          (unsigned)cr.uid)
             : ebb_seterr(EBB_EINVAL,
                          "broker: uid %u (primary gid %u) may not ask this "
                          "process: not its user, root, or of its --broker-group (gid %u) "
                          "as primary group",
                          (unsigned)cr.uid, (unsigned)cr.gid, (unsigned)p->o.group);
    refused = 1;
  } else if ((rc = read_line(fd, line, sizeof b->line)) || (rc = brk_decode_request(line, &req)))
    refused = 1;
  else
    rc = p->o.give(p->o.give_arg, &req, a);
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
  int n = brk_encode_answer(req.op ? req.op : BRK_OP_INFO, a, out, sizeof b->out);
  if (n > 0)
    write_all(fd, out, (size_t)n);
}

static void *listen_thread(void *arg) {
  brk_peer *p = arg;
  serve_buf *b = malloc(sizeof *b);
  if (!b) {
    base_log(EBB_LOG_ERROR, "broker", "out of host memory: not answering peers");
    return NULL;
  }
  for (;;) {
    struct pollfd pf[2] = {{p->fd, POLLIN, 0}, {p->stop_pipe[0], POLLIN, 0}};
    if (poll(pf, 2, -1) < 0 && errno != EINTR)
      break;
    if (pf[1].revents)
      break;
    if (!(pf[0].revents & POLLIN))
      continue;
    int c = accept4(p->fd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0)
      continue;
    serve_one(p, c, b);
    close(c);
  }
  free(b);
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
  if (rc != 0 || listen(p->fd, 16) != 0)
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
  close(p->stop_pipe[0]);
  close(p->stop_pipe[1]);
  pthread_mutex_destroy(&p->lock);
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
