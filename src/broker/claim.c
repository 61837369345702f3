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
 * or when its holder's pid is gone.
 *
 * The directory is hostile input: a claim is read only from a regular file
 * of at most CLAIM_MAX bytes (brk_open_file), and believed only when its
 * holder is alive and the same process (its start time, from /proc, as
 * recorded), the file belongs to the holder's user, root or this user, and
 * its `until` is within BRK_MAX_HOLD_S. Anything else is dropped (its file
 * removed) with a log line. The lock is taken without blocking, bounded. */
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

#include "base/log.h"
#include "broker/broker.h"
#include "ebb/error.h"

#define CLAIM_MAX 4096
#define LOCK_WAIT_S 1.0 /* a lock held longer than this by another is not waited on */

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

/* DIR/claims.lock, a regular file: junk in its place (a FIFO, a link) is
 * removed and the lock made anew. */
static int open_lock(const char *dir, const char *path) {
  struct stat st;
  int fd = brk_open_file(path, O_RDWR, 64, &st);
  if (fd < 0 && errno == EINVAL)
    unlink(path); /* junk, logged: a lock file is made anew */
  if (fd < 0)
    fd =
        open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, file_mode(dir));
  if (fd < 0 && errno == EEXIST) /* another asker made it just now */
    fd = brk_open_file(path, O_RDWR, 64, &st);
  return fd;
}

static uint64_t name_seq(const char *name);

/* The highest SEQ of the claim.SEQ names in dir. */
static uint64_t top_seq(const char *dir) {
  uint64_t top = 0;
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d && (e = readdir(d))) {
    uint64_t s = name_seq(e->d_name);
    top = s > top ? s : top;
  }
  if (d)
    closedir(d);
  return top;
}

/* The next sequence number, under an exclusive flock on DIR/claims.lock;
 * the lock stays held (its fd in *lockfd) until the claim is written. */
static int next_seq(const char *dir, int *lockfd, uint64_t *seq) {
  char path[600], buf[32] = "";
  snprintf(path, sizeof path, "%s/claims.lock", dir);
  int fd = open_lock(dir, path);
  if (fd < 0)
    return ebb_seterr(EBB_EIO, "broker claims %s: %s", path, strerror(errno));
  share(fd, dir);
  double until = brk_now() + LOCK_WAIT_S;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK || brk_now() >= until) {
      close(fd);
      return ebb_seterr(EBB_EIO, "broker claims %s: lock: %s", path,
                        errno == EWOULDBLOCK ? "held by another process for over 1 s"
                                             : strerror(errno));
    }
    struct timespec ts = {0, 2 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  buf[n > 0 ? n : 0] = '\0';
  *seq = strtoull(buf, NULL, 10);
  uint64_t top = top_seq(dir); /* a lock made anew must not start below a standing claim */
  *seq = (top > *seq && top < UINT64_MAX / 2 ? top : *seq) + 1;
  int len = snprintf(buf, sizeof buf, "%llu\n", (unsigned long long)*seq);
  if (pwrite(fd, buf, (size_t)len, 0) != len || ftruncate(fd, len) != 0) {
    close(fd);
    return ebb_seterr(EBB_EIO, "broker claims %s: %s", path, strerror(errno));
  }
  *lockfd = fd;
  return 0;
}

/* The holder's start time (clock ticks since boot, /proc/PID/stat field 22)
 * and its user; -1 when it is gone or /proc cannot say. */
static int proc_of(pid_t pid, unsigned long long *start, uid_t *uid) {
  char path[64], buf[1024];
  struct stat st;
  snprintf(path, sizeof path, "/proc/%ld", (long)pid);
  if (pid <= 0 || stat(path, &st) != 0)
    return -1;
  *uid = st.st_uid;
  snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
  if (fd >= 0)
    close(fd);
  if (n <= 0)
    return -1;
  buf[n] = '\0';
  char *p = strrchr(buf, ')'); /* the name may hold spaces and parentheses */
  for (int field = 2; p && field < 22; field++)
    p = strchr(p + 1, ' ');
  return p && sscanf(p, " %llu", start) == 1 ? 0 : -1;
}

typedef struct claim {
  uint64_t seq, bytes, base, start;
  int64_t holder;
  double until;
  char device[64];
  uid_t owner; /* the file's */
} claim;

/* -1: not a claim yet (being written, gone); -2: junk (logged). */
static int read_claim(const char *path, claim *c) {
  struct stat st;
  char buf[CLAIM_MAX + 1];
  int fd = brk_open_file(path, O_RDONLY, CLAIM_MAX, &st);
  if (fd < 0)
    return errno == EINVAL ? -2 : -1;
  ssize_t n = read(fd, buf, CLAIM_MAX);
  close(fd);
  json_error_t je;
  json_t *j = n > 0 ? json_loadb(buf, (size_t)n, 0, &je) : NULL;
  const char *dev = NULL;
  json_int_t seq = 0, bytes = 0, base = 0, holder = 0, start = 0, v = 0;
  int rc = !j ? -1
              : json_unpack(j, "{s:I, s:I, s:I, s:s, s:I, s:I, s:I, s:F}", "v", &v, "seq", &seq,
                            "holder", &holder, "device", &dev, "bytes", &bytes, "base", &base,
                            "start", &start, "until", &c->until);
  if (!rc && (v != BRK_VERSION || seq <= 0 || holder <= 0 || bytes < 0 || base < 0 || start < 0))
    rc = -1;
  if (rc) {
    brk_junk(path, &st,
             "not a claim of this version (v, seq, holder, device, bytes, base, "
             "start, until)");
    json_decref(j);
    return -2;
  }
  c->owner = st.st_uid;
  c->start = (uint64_t)start;
  c->seq = (uint64_t)seq;
  c->holder = holder;
  c->bytes = (uint64_t)bytes;
  c->base = (uint64_t)base;
  snprintf(c->device, sizeof c->device, "%s", dev);
  json_decref(j);
  return 0;
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

/* Why a claim is not believed (NULL: it is): its holder is gone or another
 * process now has its pid, its file is not of the holder's user (nor root
 * nor this user), or it would stand longer than any claim may. */
static const char *unbelieved(const claim *c, double now, int *quiet) {
  unsigned long long start = 0;
  uid_t uid = 0;
  int known = proc_of((pid_t)c->holder, &start, &uid) == 0; /* else /proc cannot say */
  *quiet = 1;
  if (!known && kill((pid_t)c->holder, 0) != 0 && errno == ESRCH)
    return "its holder is gone";
  if (known && start != c->start)
    return "its holder's pid belongs to another process now";
  if (c->until < now)
    return "expired";
  *quiet = 0;
  if (known && c->owner != uid && c->owner != 0 && c->owner != geteuid())
    return "its file belongs to another user than its holder";
  if (c->until > now + BRK_MAX_HOLD_S + 60)
    return "it would stand longer than any claim may (" BRK_MAX_HOLD_STR " s)";
  return NULL;
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
    claim c = {0};
    if (!s || (seq && s >= seq))
      continue;
    snprintf(path, sizeof path, "%s/%s", o->dir, e->d_name);
    if (read_claim(path, &c) == -2) {
      unlink(path); /* junk (a FIFO, a link, garbage) is never a claim */
      continue;
    }
    if (c.seq == 0)
      continue; /* being written (renamed in whole), or gone */
    int quiet;
    const char *why = unbelieved(&c, now, &quiet);
    if (why) { /* it ended, or was never a claim: whoever notices removes it */
      if (!quiet)
        base_log(EBB_LOG_WARN, "broker", "dropping claim %s (holder pid %lld, %llu MiB): %s", path,
                 (long long)c.holder, (unsigned long long)(c.bytes >> 20), why);
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
  unsigned long long start = 0;
  uid_t uid;
  if (o->used_fn && o->used_fn(o->used_arg, o->holder, &base) != 0)
    base = 0;
  if (proc_of(o->holder, &start, &uid) != 0)
    return ebb_seterr(EBB_EINVAL, "broker claim: holder pid %ld: no such process", (long)o->holder);
  double hold = o->hold_s > 0 ? o->hold_s : 10;
  json_t *j = json_pack("{s:i, s:I, s:I, s:s, s:I, s:I, s:I, s:f}", "v", BRK_VERSION, "seq",
                        (json_int_t)seq, "holder", (json_int_t)o->holder, "device", o->uuid,
                        "bytes", (json_int_t)o->bytes, "base", (json_int_t)base, "start",
                        (json_int_t)start, "until",
                        wall_s() + (hold < BRK_MAX_HOLD_S ? hold : BRK_MAX_HOLD_S));
  snprintf(path, len, "%s/claim.%llu", o->dir, (unsigned long long)seq);
  snprintf(tmp, sizeof tmp, "%s/.claim.%llu.tmp", o->dir, (unsigned long long)seq);
  unlink(tmp); /* whatever was planted there: never written through */
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, file_mode(o->dir));
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

/* What this process's own standing claims on the device have not
 * allocated yet (read under the lock). A new claim of the same holder
 * supersedes them (one claim a holder: its usage is one figure), so it
 * carries their remainder: a second ask of a process (a load beside a
 * job's working memory) must not free the first's bytes for others. */
static uint64_t own_unlanded(const brk_claims_opts *o) {
  uint64_t sum = 0;
  DIR *d = o->holder == getpid() ? opendir(o->dir) : NULL;
  struct dirent *e;
  double now = wall_s();
  while (d && (e = readdir(d))) {
    char path[768];
    claim c = {0};
    int quiet;
    if (!name_seq(e->d_name))
      continue;
    snprintf(path, sizeof path, "%s/%s", o->dir, e->d_name);
    if (read_claim(path, &c) != 0 || c.holder != (int64_t)o->holder || strcmp(c.device, o->uuid) ||
        unbelieved(&c, now, &quiet))
      continue;
    sum += unlanded(&c, o->used_fn, o->used_arg);
  }
  if (d)
    closedir(d);
  return sum;
}

int brk_claim_open(const brk_claims_opts *o, brk_claim_handle *h, brk_claims_seen *earlier) {
  memset(h, 0, sizeof *h);
  memset(earlier, 0, sizeof *earlier);
  int lockfd = -1, rc = next_seq(o->dir, &lockfd, &h->seq);
  if (rc)
    return rc;
  brk_claims_opts mine = *o;
  mine.bytes += own_unlanded(o);
  rc = write_claim(&mine, h->seq, h->path, sizeof h->path);
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
