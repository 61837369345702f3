/* The asking side: one request to one peer (bounded by a timeout), and the
 * whole reclaim: every peer on the device, most idle first, then the wait
 * for the driver to show the memory free. */
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

#define MAX_PEERS 256

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int ms_left(double deadline) {
  double l = (deadline - now_s()) * 1000.0;
  return l <= 0 ? 0 : (int)l + 1;
}

/* A refusing socket is a dead peer: its entry goes. */
static int connect_peer(const char *path, pid_t pid) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof sa.sun_path)
    return ebb_seterr(EBB_EINVAL, "broker socket %s: path too long", path);
  memcpy(sa.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return ebb_seterr(EBB_EIO, "broker: socket: %s", strerror(errno));
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    int e = errno;
    close(fd);
    if (e == ECONNREFUSED || e == ENOENT)
      unlink(path);
    return ebb_seterr(EBB_EIO, "broker: peer pid %ld refuses (%s): its entry is removed", (long)pid,
                      strerror(e));
  }
  return fd;
}

/* The asker checks the peer too: the process listening on DIR/PID.sock must
 * be PID (a socket left by a dead process and bound again by another is not
 * that peer), and this user, root, or of the directory's group when the
 * directory is shared (group-writable, --broker-group). */
static int peer_cred_ok(const char *dir, int fd, pid_t pid) {
  struct ucred cr = {0};
  socklen_t len = sizeof cr;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0)
    return ebb_seterr(EBB_EIO, "broker: peer pid %ld: its credentials: %s", (long)pid,
                      strerror(errno));
  if (cr.pid != pid)
    return ebb_seterr(EBB_EINVAL, "broker: %s/%ld.sock is served by pid %ld, not %ld: not asked",
                      dir, (long)pid, (long)cr.pid, (long)pid);
  struct stat st;
  int shared = stat(dir, &st) == 0 && (st.st_mode & S_IWGRP);
  if (cr.uid == geteuid() || cr.uid == 0 || (shared && cr.gid == st.st_gid))
    return 0;
  return ebb_seterr(EBB_EINVAL,
                    "broker: peer pid %ld runs as uid %u (gid %u): not this user, "
                    "root or the broker directory's group%s: not asked",
                    (long)pid, (unsigned)cr.uid, (unsigned)cr.gid,
                    shared ? "" : " (the directory is not shared)");
}

static int send_all(int fd, const char *s, size_t n, double deadline, pid_t pid) {
  while (n) {
    struct pollfd pf = {fd, POLLOUT, 0};
    if (poll(&pf, 1, ms_left(deadline)) <= 0)
      return ebb_seterr(EBB_ETIMEDOUT, "broker: peer pid %ld does not read", (long)pid);
    ssize_t w = send(fd, s, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (w <= 0)
      return ebb_seterr(EBB_EIO, "broker: peer pid %ld: %s", (long)pid, strerror(errno));
    s += w;
    n -= (size_t)w;
  }
  return 0;
}

static int recv_line(int fd, char *buf, size_t cap, double deadline, pid_t pid, double tmo) {
  size_t n = 0;
  while (n + 1 < cap) {
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, ms_left(deadline)) <= 0)
      return ebb_seterr(EBB_ETIMEDOUT,
                        "broker: peer pid %ld did not answer within %.1f s "
                        "(--broker-timeout): skipped",
                        (long)pid, tmo);
    ssize_t r = recv(fd, buf + n, cap - 1 - n, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
      continue;
    if (r <= 0)
      return ebb_seterr(EBB_EIO, "broker: peer pid %ld closed without a whole answer", (long)pid);
    n += (size_t)r;
    buf[n] = '\0';
    if (memchr(buf, '\n', n))
      return 0;
  }
  return ebb_seterr(EBB_EPROTO, "broker: peer pid %ld: answer over %d bytes", (long)pid,
                    BRK_MAX_LINE);
}

int brk_ask(const char *dir, pid_t pid, const brk_request *req, double timeout_s, brk_answer *out) {
  char path[600];
  memset(out, 0, sizeof *out);
  if (timeout_s <= 0)
    timeout_s = 2;
  double deadline = now_s() + timeout_s;
  char *buf = malloc(BRK_MAX_LINE + 2);
  if (!buf)
    return ebb_seterr(EBB_ENOMEM, "broker: out of host memory");
  brk_sock_path(dir, pid, path, sizeof path);
  int fd = -1, rc = brk_encode_request(req, buf, BRK_MAX_LINE + 2);
  if (rc < 0)
    goto out;
  size_t n = (size_t)rc;
  if ((fd = rc = connect_peer(path, pid)) < 0 || (rc = peer_cred_ok(dir, fd, pid)))
    goto out;
  /* a peer that refuses us answers before reading our request, and closes:
   * the send may fail (EPIPE) with its answer waiting to be read */
  int sent = send_all(fd, buf, n, deadline, pid);
  if (sent == EBB_ETIMEDOUT) {
    rc = sent;
    goto out;
  }
  if ((rc = recv_line(fd, buf, BRK_MAX_LINE + 2, deadline, pid, timeout_s)) ||
      (rc = brk_decode_answer(req->op, buf, out)))
    goto out;
  if (out->err_code[0])
    rc = ebb_seterr(EBB_EPROTO, "broker: peer pid %ld refused: %s: %s", (long)pid, out->err_code,
                    out->err_msg);
out:
  if (fd >= 0)
    close(fd);
  free(buf);
  return rc < 0 ? rc : 0;
}

/* --- reclaim ------------------------------------------------------------------ */
static double idle_on(const brk_answer *a, const char *uuid, int *found) {
  for (size_t i = 0; i < a->ndevices; i++)
    if (!strcmp(a->devices[i].uuid, uuid)) {
      *found = 1;
      return a->devices[i].idle_s;
    }
  *found = 0;
  return 0;
}

typedef struct cand {
  pid_t pid;
  double idle_s;
} cand;

static int by_idle(const void *x, const void *y) {
  const cand *a = x, *b = y;
  return a->idle_s < b->idle_s ? 1 : a->idle_s > b->idle_s ? -1 : 0;
}

static brk_result_peer *add_peer(brk_reclaim_result *r, pid_t pid) {
  brk_result_peer *p = &r->peers[r->npeers++];
  memset(p, 0, sizeof *p);
  p->pid = pid;
  return p;
}

/* The peers on the device, most idle first; the ones that did not answer
 * go into r as skipped. */
static int on_device(const brk_reclaim_opts *o, brk_reclaim_result *r, cand *cs, size_t *nc) {
  pid_t pids[MAX_PEERS];
  size_t n;
  int rc = brk_dir_peers(o->dir, pids, MAX_PEERS, &n);
  if (rc)
    return rc;
  r->peers = calloc(n ? n : 1, sizeof *r->peers);
  if (!r->peers)
    return ebb_seterr(EBB_ENOMEM, "broker: out of host memory");
  brk_answer *a = malloc(sizeof *a);
  if (!a)
    return ebb_seterr(EBB_ENOMEM, "broker: out of host memory");
  brk_request req = {.op = BRK_OP_INFO};
  *nc = 0;
  for (size_t i = 0; i < n; i++) {
    int found = 0, st = brk_ask(o->dir, pids[i], &req, o->timeout_s, a);
    double idle = st ? 0 : idle_on(a, o->uuid, &found);
    if (st) {
      brk_result_peer *p = add_peer(r, pids[i]);
      p->status = st;
      snprintf(p->ans.err_msg, sizeof p->ans.err_msg, "%s", ebb_errmsg());
    } else if (found)
      cs[(*nc)++] = (cand){pids[i], idle};
  }
  free(a);
  qsort(cs, *nc, sizeof *cs, by_idle);
  return 0;
}

static brk_claims_opts claims_of(const brk_reclaim_opts *o) {
  return (brk_claims_opts){.dir = o->dir,
                           .uuid = o->uuid,
                           .holder = o->holder > 0 ? o->holder : getpid(),
                           .bytes = o->bytes,
                           .hold_s = o->hold_s,
                           .used_fn = o->used_fn,
                           .used_arg = o->used_arg};
}

/* Free for this asker: the driver's free minus what earlier claims have
 * not allocated yet. */
static uint64_t free_for_me(uint64_t free_b, uint64_t claimed) {
  return free_b > claimed ? free_b - claimed : 0;
}

/* The peers' figures are the driver's already (each measured its own drop),
 * so when they do not add up to the bytes there is nothing to wait for: the
 * request fails at once. Earlier claims are read again as they land. */
static void wait_free(const brk_reclaim_opts *o, brk_reclaim_result *r) {
  brk_claims_opts co = claims_of(o);
  uint64_t mine_before = free_for_me(r->free_before, r->earlier.bytes);
  int hopeless = mine_before + r->given_bytes < o->bytes;
  double deadline = hopeless ? 0 : now_s() + (o->wait_s > 0 ? o->wait_s : 5);
  r->claimed_after = r->earlier.bytes;
  for (;;) {
    uint64_t f = 0;
    brk_claims_seen seen;
    if (o->free_fn(o->free_arg, &f) == 0)
      r->free_after = f;
    if (r->claim.seq && brk_claims_before(&co, r->claim.seq, &seen) == 0)
      r->claimed_after = seen.bytes;
    if (free_for_me(r->free_after, r->claimed_after) >= o->bytes || now_s() >= deadline)
      return;
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

int brk_reclaim(const brk_reclaim_opts *o, brk_reclaim_result *out) {
  memset(out, 0, sizeof *out);
  if (o->free_fn) { /* the claim first: a later asker sees it before it reads the free */
    brk_claims_opts co = claims_of(o);
    int rc = brk_claim_open(&co, &out->claim, &out->earlier);
    if (rc)
      return rc;
  }
  if (o->free_fn && o->free_fn(o->free_arg, &out->free_before) != 0) {
    brk_claim_release(&out->claim);
    return ebb_errctx(EBB_EDRIVER, "broker: the driver's free memory: ");
  }
  uint64_t mine = free_for_me(out->free_before, out->earlier.bytes);
  uint64_t missing = !o->free_fn ? o->bytes : mine >= o->bytes ? 0 : o->bytes - mine;
  cand *cs = calloc(MAX_PEERS, sizeof *cs);
  size_t nc = 0;
  int rc = !cs       ? ebb_seterr(EBB_ENOMEM, "broker: out of host memory")
           : missing ? on_device(o, out, cs, &nc)
                     : brk_dir_peers(o->dir, NULL, 0, &nc); /* nothing to ask: dead entries go */
  brk_request req = {.op = BRK_OP_RECLAIM, .asker = getpid()};
  snprintf(req.device, sizeof req.device, "%s", o->uuid);
  for (size_t i = 0; !rc && missing && i < nc; i++) {
    brk_result_peer *p = add_peer(out, cs[i].pid);
    req.bytes = missing;
    p->status = brk_ask(o->dir, cs[i].pid, &req, o->timeout_s, &p->ans);
    if (p->status) {
      snprintf(p->ans.err_msg, sizeof p->ans.err_msg, "%s", ebb_errmsg());
      continue;
    }
    out->given_bytes += p->ans.given_bytes;
    missing = p->ans.given_bytes >= missing ? 0 : missing - p->ans.given_bytes;
  }
  free(cs);
  if (rc) {
    brk_claim_release(&out->claim);
    return rc;
  }
  if (o->free_fn)
    wait_free(o, out);
  out->satisfied = o->free_fn ? free_for_me(out->free_after, out->claimed_after) >= o->bytes
                              : out->given_bytes >= o->bytes;
  return 0;
}

void brk_reclaim_free(brk_reclaim_result *r) {
  if (!r)
    return;
  free(r->peers);
  r->peers = NULL;
  r->npeers = 0;
}
