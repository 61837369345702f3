/* Askers' claims on freed bytes (docs/broker.md, "Claims"). Two processes
 * asking at once must not both count the same free bytes: each asker
 * records a claim in the broker directory before it looks at the free
 * memory, and counts as taken what earlier claims on the device have not
 * yet allocated. A claim is
 *   DIR/claim.SEQ  one JSON line: {"v": 1, "seq", "holder", "device",
 *                  "bytes", "base", "until"}
 * SEQ orders the claims: it comes from DIR/claims.lock, taken under flock,
 * so of two askers the second always sees the first. A claim ends when its
 * holder's driver usage has grown by its bytes (the allocation landed),
 * when it is released (its file removed), when `until` (wall clock) passes,
 * or when its holder's pid is gone. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "broker/broker.h"
#include "ebb/error.h"

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Files in the directory are shared with its group when it has one. */
static mode_t file_mode(const char *dir) {
  struct stat st;
  return stat(dir, &st) == 0 && (st.st_mode & S_IWGRP) ? 0660 : 0600;
}

/* The umask must not take the group's access away from a file of a shared
 * directory (only its owner may change it: a file someone else made stays). */
static void share(int fd, const char *dir) {
  struct stat st;
  if (fstat(fd, &st) == 0 && st.st_uid == geteuid())
    (void)fchmod(fd, file_mode(dir));
}

/* The next sequence number, under an exclusive flock on DIR/claims.lock;
 * the lock stays held (its fd in *lockfd) until the claim is written. */
static int next_seq(const char *dir, int *lockfd, uint64_t *seq) {
  char path[600], buf[32] = "";
  snprintf(path, sizeof path, "%s/claims.lock", dir);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, file_mode(dir));
  if (fd < 0)
    return ebb_seterr(EBB_EIO, "broker claims %s: %s", path, strerror(errno));
  share(fd, dir);
  if (flock(fd, LOCK_EX) != 0) {
    close(fd);
    return ebb_seterr(EBB_EIO, "broker claims %s: lock: %s", path, strerror(errno));
  }
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  buf[n > 0 ? n : 0] = '\0';
  *seq = strtoull(buf, NULL, 10) + 1;
  int len = snprintf(buf, sizeof buf, "%llu\n", (unsigned long long)*seq);
  if (pwrite(fd, buf, (size_t)len, 0) != len || ftruncate(fd, len) != 0) {
    close(fd);
    return ebb_seterr(EBB_EIO, "broker claims %s: %s", path, strerror(errno));
  }
  *lockfd = fd;
  return 0;
}

typedef struct claim {
  uint64_t seq, bytes, base;
  int64_t holder;
  double until;
  char device[64];
} claim;

static int read_claim(const char *path, claim *c) {
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  if (!j)
    return -1;
  const char *dev = NULL;
  json_int_t seq = 0, bytes = 0, base = 0, holder = 0;
  int rc = json_unpack(j, "{s:I, s:I, s:s, s:I, s:I, s:f}", "seq", &seq, "holder", &holder,
                       "device", &dev, "bytes", &bytes, "base", &base, "until", &c->until);
  if (!rc) {
    c->seq = (uint64_t)seq;
    c->holder = holder;
    c->bytes = (uint64_t)bytes;
    c->base = (uint64_t)base;
    snprintf(c->device, sizeof c->device, "%s", dev);
  }
  json_decref(j);
  return rc;
}

/* What of c its holder has not allocated yet (0: it landed). */
static uint64_t unlanded(const claim *c, brk_used_fn used_fn, void *used_arg) {
  uint64_t now = 0;
  if (!used_fn || used_fn(used_arg, (pid_t)c->holder, &now) != 0 || now <= c->base)
    return c->bytes;
  return now - c->base >= c->bytes ? 0 : c->bytes - (now - c->base);
}

/* "claim.SEQ" -> SEQ, else 0. */
static uint64_t name_seq(const char *name) {
  if (strncmp(name, "claim.", 6))
    return 0;
  char *end = NULL;
  unsigned long long v = strtoull(name + 6, &end, 10);
  return end && !*end ? v : 0;
}

int brk_claims_before(const brk_claims_opts *o, uint64_t seq, brk_claims_seen *out) {
  memset(out, 0, sizeof *out);
  DIR *d = opendir(o->dir);
  if (!d)
    return ebb_seterr(EBB_EIO, "broker directory %s: %s", o->dir, strerror(errno));
  struct dirent *e;
  double now = wall_s();
  while ((e = readdir(d))) {
    uint64_t s = name_seq(e->d_name);
    char path[768];
    claim c;
    if (!s || (seq && s >= seq))
      continue;
    snprintf(path, sizeof path, "%s/%s", o->dir, e->d_name);
    if (read_claim(path, &c) != 0)
      continue; /* being written (renamed in whole), or not a claim */
    int dead = kill((pid_t)c.holder, 0) != 0 && errno == ESRCH;
    if (dead || c.until < now) { /* it ended: whoever notices removes it */
      unlink(path);
      continue;
    }
    if (strcmp(c.device, o->uuid))
      continue;
    if (seq && c.holder == (int64_t)o->holder) { /* its holder asks again: superseded */
      unlink(path);
      continue;
    }
    uint64_t left = unlanded(&c, o->used_fn, o->used_arg);
    if (!left) { /* landed: it ended for good (the holder may free it again later) */
      unlink(path);
      continue;
    }
    out->bytes += left;
    if (out->n < BRK_MAX_CLAIMS)
      out->claims[out->n++] = (brk_claim_seen){(pid_t)c.holder, left};
    out->total++;
  }
  closedir(d);
  return 0;
}

static int write_claim(const brk_claims_opts *o, uint64_t seq, char *path, size_t len) {
  char tmp[640];
  uint64_t base = 0;
  if (o->used_fn && o->used_fn(o->used_arg, o->holder, &base) != 0)
    base = 0;
  json_t *j = json_pack("{s:i, s:I, s:I, s:s, s:I, s:I, s:f}", "v", BRK_VERSION, "seq",
                        (json_int_t)seq, "holder", (json_int_t)o->holder, "device", o->uuid,
                        "bytes", (json_int_t)o->bytes, "base", (json_int_t)base, "until",
                        wall_s() + (o->hold_s > 0 ? o->hold_s : 10));
  snprintf(path, len, "%s/claim.%llu", o->dir, (unsigned long long)seq);
  snprintf(tmp, sizeof tmp, "%s/.claim.%llu.tmp", o->dir, (unsigned long long)seq);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, file_mode(o->dir));
  if (fd >= 0)
    share(fd, o->dir);
  int rc = fd < 0 || !j || json_dumpfd(j, fd, JSON_COMPACT) != 0;
  if (fd >= 0)
    rc |= close(fd) != 0;
  json_decref(j);
  if (rc || rename(tmp, path) != 0) {
    int e = errno;
    unlink(tmp);
    path[0] = '\0';
    return ebb_seterr(EBB_EIO, "broker claim %s: %s", tmp, strerror(e));
  }
  return 0;
}

int brk_claim_open(const brk_claims_opts *o, brk_claim_handle *h, brk_claims_seen *earlier) {
  memset(h, 0, sizeof *h);
  memset(earlier, 0, sizeof *earlier);
  int lockfd = -1, rc = next_seq(o->dir, &lockfd, &h->seq);
  if (rc)
    return rc;
  rc = write_claim(o, h->seq, h->path, sizeof h->path);
  close(lockfd); /* the claim is visible: later askers see it */
  if (!rc)
    rc = brk_claims_before(o, h->seq, earlier);
  return rc;
}

void brk_claim_release(brk_claim_handle *h) {
  if (!h || !h->path[0])
    return;
  unlink(h->path);
  h->path[0] = '\0';
}
