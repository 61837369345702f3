/* The asking side's conversations: many peers asked at once, each on a
 * non-blocking socket driven by one poll loop. A conversation connects,
 * checks the peer's credentials, sends its request and reads answer
 * lines: the first (an info answer, or a reclaim's commit: what the peer
 * will give and how long it expects) by its own deadline (--broker-timeout),
 * a reclaim's final answer by the asker's own deadline. A silent peer costs
 * its timeout once, side by side with the others, never in turn. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "broker/broker.h"
#include "ebb/error.h"

enum { C_CONNECT, C_SEND, C_FIRST, C_FINAL, C_DONE };

struct brk_conv {
  char dir[512], path[600];
  pid_t pid;
  int fd, phase, op;
  double first_until, timeout_s;
  char *buf; /* the request, then the answer lines */
  size_t len, off;
  brk_result_peer *out;
};

double brk_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void finish(brk_conv *c, int status) {
  if (c->fd >= 0)
    close(c->fd);
  c->fd = -1;
  c->phase = C_DONE;
  c->out->status = status;
  if (status)
    snprintf(c->out->ans.err_msg, sizeof c->out->ans.err_msg, "%s", ebb_errmsg());
}

brk_conv *brk_conv_new(const char *dir, pid_t pid, const brk_request *req, double first_s,
                       brk_result_peer *out) {
  brk_conv *c = calloc(1, sizeof *c);
  char *buf = malloc(BRK_MAX_LINE + 2);
  if (!c || !buf) {
    free(c);
    free(buf);
    return NULL;
  }
  memset(out, 0, sizeof *out);
  out->pid = pid;
  snprintf(c->dir, sizeof c->dir, "%s", dir);
  brk_sock_path(dir, pid, c->path, sizeof c->path);
  c->pid = pid;
  c->fd = -1;
  c->op = req->op;
  c->buf = buf;
  c->out = out;
  c->timeout_s = first_s > 0 ? first_s : 2;
  c->first_until = brk_now() + c->timeout_s;
  int n = brk_encode_request(req, buf, BRK_MAX_LINE + 2);
  if (n < 0)
    finish(c, n);
  else
    c->len = (size_t)n;
  return c;
}

void brk_conv_free(brk_conv *c) {
  if (!c)
    return;
  if (c->fd >= 0)
    close(c->fd);
  free(c->buf);
  free(c);
}

int brk_conv_open(const brk_conv *c) { return c && c->phase != C_DONE; }

void brk_conv_cut(brk_conv *c, int status, const char *why) {
  if (!brk_conv_open(c))
    return;
  int committed = c->phase == C_FINAL;
  ebb_seterr(status ? status : EBB_ETIMEDOUT, "%s", why);
  finish(c, status);
  if (!status && committed)
    snprintf(c->out->ans.reason, sizeof c->out->ans.reason, "committed %llu MiB, %s",
             (unsigned long long)(c->out->commit >> 20), why);
  else if (!status)
    snprintf(c->out->ans.reason, sizeof c->out->ans.reason, "no answer yet, not waited for");
}

/* The asker checks the peer too: the process listening on DIR/PID.sock must
 * be PID (a socket left by a dead process and bound again by another is not
 * that peer), and this user, root, or of the directory's group when the
 * directory is shared (group-writable, --broker-group). */
static int peer_cred_ok(const brk_conv *c) {
  struct ucred cr = {0};
  socklen_t len = sizeof cr;
  long pid = (long)c->pid;
  if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
    return ebb_seterr(EBB_EIO, "broker: peer pid %ld: its credentials: %s", pid, strerror(errno));
  if (cr.pid != c->pid)
    return ebb_seterr(EBB_EINVAL, "broker: %s is served by pid %ld, not %ld: not asked", c->path,
                      (long)cr.pid, pid);
  struct stat st;
  int shared = stat(c->dir, &st) == 0 && (st.st_mode & S_IWGRP);
  if (cr.uid == geteuid() || cr.uid == 0 || (shared && cr.gid == st.st_gid))
    return 0;
  return ebb_seterr(EBB_EINVAL,
                    "broker: peer pid %ld runs as uid %u (gid %u): not this user, "
                    "root or the broker directory's group%s: not asked",
                    pid, (unsigned)cr.uid, (unsigned)cr.gid,
                    shared ? "" : " (the directory is not shared)");
}

/* Non-blocking: a listener whose backlog is full (EAGAIN) is tried again
 * until the first deadline; a refusing socket is a dead peer (its entry
 * goes); anything but a socket there is not a peer. */
static void step_connect(brk_conv *c) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  struct stat st;
  if (lstat(c->path, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    ebb_seterr(EBB_EIO, "broker: %s is %s: not a peer", c->path,
               errno == ENOENT ? "gone" : "not a socket");
    return finish(c, EBB_EIO);
  }
  if (strlen(c->path) >= sizeof sa.sun_path) {
    ebb_seterr(EBB_EINVAL, "broker socket %s: path too long", c->path);
    return finish(c, EBB_EINVAL);
  }
  memcpy(sa.sun_path, c->path, strlen(c->path) + 1);
  if (c->fd < 0 && (c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)) < 0) {
    ebb_seterr(EBB_EIO, "broker: socket: %s", strerror(errno));
    return finish(c, EBB_EIO);
  }
  if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    int e = errno;
    if (e == EAGAIN || e == EINPROGRESS || e == EINTR)
      return; /* tried again on the next turn */
    if (e == ECONNREFUSED)
      unlink(c->path);
    ebb_seterr(EBB_EIO, "broker: peer pid %ld refuses (%s): its entry is removed", (long)c->pid,
               strerror(e));
    return finish(c, EBB_EIO);
  }
  int rc = peer_cred_ok(c);
  if (rc)
    return finish(c, rc);
  c->phase = C_SEND;
  c->off = 0;
}

static void step_send(brk_conv *c) {
  ssize_t w = send(c->fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (w < 0 && (errno == EAGAIN || errno == EINTR))
    return;
  if (w > 0)
    c->off += (size_t)w;
  /* a peer that refuses us answers before reading our request, and closes:
   * the send may fail (EPIPE) with its answer waiting to be read */
  if (w <= 0 || c->off == c->len) {
    c->phase = C_FIRST;
    c->off = 0;
  }
}

/* One whole line in buf: a commit moves on to the final answer. */
static void on_line(brk_conv *c) {
  brk_answer *a = &c->out->ans;
  int rc = brk_decode_answer(c->op, c->buf, a);
  if (rc)
    return finish(c, rc);
  if (a->commit) {
    c->out->committed = 1;
    c->out->commit = a->commit_bytes;
    c->out->eta_ms = a->eta_ms;
    a->commit = 0;
    c->phase = C_FINAL;
    return;
  }
  if (a->err_code[0])
    return finish(c, ebb_seterr(EBB_EPROTO, "broker: peer pid %ld refused: %s: %s", (long)c->pid,
                                a->err_code, a->err_msg));
  finish(c, 0);
}

static void step_recv(brk_conv *c) {
  ssize_t r = recv(c->fd, c->buf + c->off, BRK_MAX_LINE + 1 - c->off, MSG_DONTWAIT);
  if (r < 0 && (errno == EAGAIN || errno == EINTR))
    return;
  if (r <= 0) {
    ebb_seterr(EBB_EIO, "broker: peer pid %ld closed without a whole answer", (long)c->pid);
    return finish(c, EBB_EIO);
  }
  c->off += (size_t)r;
  c->buf[c->off] = '\0';
  char *nl;
  while (c->phase != C_DONE && (nl = memchr(c->buf, '\n', c->off))) {
    size_t used = (size_t)(nl - c->buf) + 1;
    *nl = '\0';
    on_line(c);
    memmove(c->buf, c->buf + used, c->off - used + 1);
    c->off -= used;
  }
  if (c->phase != C_DONE && c->off >= BRK_MAX_LINE) {
    ebb_seterr(EBB_EPROTO, "broker: peer pid %ld: answer over %d bytes", (long)c->pid,
               BRK_MAX_LINE);
    finish(c, EBB_EPROTO);
  }
}

static void expire(brk_conv *c, double now, double until) {
  if (c->phase == C_DONE)
    return;
  if (c->phase != C_FINAL && now >= c->first_until)
    finish(c, ebb_seterr(EBB_ETIMEDOUT,
                         "broker: peer pid %ld did not answer within %.1f s "
                         "(--broker-timeout): skipped",
                         (long)c->pid, c->timeout_s));
  else if (c->phase == C_FINAL && now >= until)
    finish(c, ebb_seterr(EBB_ETIMEDOUT,
                         "broker: peer pid %ld committed %llu MiB (expected in %.0f ms) "
                         "but had not given it when this asker's deadline came",
                         (long)c->pid, (unsigned long long)(c->out->commit >> 20), c->out->eta_ms));
}

static int waiting(brk_conv **cs, size_t n, int firsts_only) {
  for (size_t i = 0; i < n; i++)
    if (cs[i]->phase != C_DONE && (!firsts_only || cs[i]->phase != C_FINAL))
      return 1;
  return 0;
}

void brk_convs_run(brk_conv **cs, size_t n, double firsts_by, double until, int (*stop)(void *),
                   void *arg) {
  struct pollfd *pf = calloc(n ? n : 1, sizeof *pf);
  double next_stop = 0;
  int firsts_only = firsts_by > 0;
  while (pf && waiting(cs, n, firsts_only)) {
    double now = brk_now();
    if (firsts_only && now >= firsts_by)
      break;
    if (stop && now >= next_stop) {
      if (stop(arg))
        break;
      next_stop = now + 0.05;
    }
    for (size_t i = 0; i < n; i++) {
      expire(cs[i], now, until);
      if (cs[i]->phase == C_CONNECT)
        step_connect(cs[i]);
      int fd = cs[i]->phase == C_DONE || cs[i]->phase == C_CONNECT ? -1 : cs[i]->fd;
      pf[i] = (struct pollfd){fd, (short)(cs[i]->phase == C_SEND ? POLLOUT : POLLIN), 0};
    }
    if (!waiting(cs, n, firsts_only))
      break;
    if (poll(pf, n, 20) < 0 && errno != EINTR)
      break;
    for (size_t i = 0; i < n; i++) {
      if (pf[i].fd < 0 || !pf[i].revents || cs[i]->phase == C_DONE)
        continue;
      if (cs[i]->phase == C_SEND)
        step_send(cs[i]);
      else
        step_recv(cs[i]);
    }
  }
  free(pf);
}

int brk_ask(const char *dir, pid_t pid, const brk_request *req, double timeout_s, brk_answer *out) {
  brk_result_peer *r = malloc(sizeof *r);
  if (!r)
    return ebb_seterr(EBB_ENOMEM, "broker: out of host memory");
  brk_conv *c = brk_conv_new(dir, pid, req, timeout_s, r);
  if (!c) {
    free(r);
    return ebb_seterr(EBB_ENOMEM, "broker: out of host memory");
  }
  brk_convs_run(&c, 1, 0, brk_now() + (timeout_s > 0 ? timeout_s : 2), NULL, NULL);
  int rc = r->status;
  *out = r->ans;
  if (rc)
    ebb_seterr(rc, "%s", r->ans.err_msg);
  brk_conv_free(c);
  free(r);
  return rc;
}
