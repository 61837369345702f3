/* Frames and shared-memory payloads of the worker protocol (wire.h). */
#include "worker/wire.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int check_body(const unsigned char *body, size_t len, json_t **msg) {
  json_error_t je;
  json_t *v = json_loadb((const char *)body, len, JSON_REJECT_DUPLICATES, &je);
  if (!v)
    return ebb_seterr(EBB_EPROTO, "invalid JSON in a %zu-byte frame (column %d): %s", len,
                      je.column, je.text);
  if (!json_is_object(v)) {
    const char *what = json_is_array(v) ? "an array" : "a scalar";
    json_decref(v);
    return ebb_seterr(EBB_EPROTO, "a frame's JSON must be an object, got %s", what);
  }
  const char *type = json_string_value(json_object_get(v, "type"));
  if (!type || !*type) {
    json_decref(v);
    return ebb_seterr(EBB_EPROTO, "a frame's JSON object has no string \"type\"");
  }
  *msg = v;
  return 0;
}

int wrk_wire_decode(const void *buf, size_t n, size_t max, json_t **msg, size_t *used) {
  const unsigned char *b = buf;
  *msg = NULL;
  *used = 0;
  if (!max)
    max = EBB_WIRE_MAX_FRAME;
  if (n < 4)
    return 0;
  uint32_t len = le32(b);
  if (len == 0)
    return ebb_seterr(EBB_EPROTO, "empty frame (length 0)");
  if (len > max)
    return ebb_seterr(EBB_EPROTO, "oversized frame: length %u bytes, the limit is %zu", len, max);
  if (n - 4 < len)
    return 0;
  int rc = check_body(b + 4, len, msg);
  if (rc)
    return rc;
  *used = 4 + (size_t)len;
  return 0;
}

int wrk_wire_encode(const json_t *msg, unsigned char **out, size_t *n) {
  char *text = json_dumps(msg, JSON_COMPACT);
  if (!text)
    return ebb_seterr(EBB_ENOMEM, "encoding a protocol message failed");
  size_t len = strlen(text);
  if (len > EBB_WIRE_MAX_FRAME) {
    free(text);
    return ebb_seterr(EBB_EINVAL, "protocol message of %zu bytes is over the %u-byte limit", len,
                      EBB_WIRE_MAX_FRAME);
  }
  unsigned char *f = malloc(4 + len);
  if (!f) {
    free(text);
    return ebb_seterr(EBB_ENOMEM, "encoding a protocol message failed: out of host memory");
  }
  f[0] = (unsigned char)len;
  f[1] = (unsigned char)(len >> 8);
  f[2] = (unsigned char)(len >> 16);
  f[3] = (unsigned char)(len >> 24);
  memcpy(f + 4, text, len);
  free(text);
  *out = f;
  *n = 4 + len;
  return 0;
}

int wrk_wire_send(int fd, const json_t *msg) {
  /* the hot path: the frame is encoded straight after its length, in one
   * buffer (on the stack for the usual small message), and sent with one
   * send(2) */
  unsigned char stack[16384], *f = stack;
  size_t len = json_dumpb(msg, (char *)stack + 4, sizeof stack - 4, JSON_COMPACT);
  size_t n;
  if (len == 0 || len > sizeof stack - 4) {
    int rc = wrk_wire_encode(msg, &f, &n);
    if (rc)
      return rc;
  } else {
    stack[0] = (unsigned char)len;
    stack[1] = (unsigned char)(len >> 8);
    stack[2] = (unsigned char)(len >> 16);
    stack[3] = (unsigned char)(len >> 24);
    n = 4 + len;
  }
  size_t off = 0;
  int rc = 0;
  while (off < n) {
    ssize_t w = send(fd, f + off, n - off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0) {
      int e = errno;
      rc = ebb_seterr(EBB_EIO, "sending a protocol message failed: %s",
                      e == EPIPE || e == ECONNRESET ? "the peer closed the connection"
                                                    : strerror(e));
      break;
    }
    off += (size_t)w;
  }
  if (f != stack)
    free(f);
  return rc;
}

/* Reads exactly n bytes. *got: bytes read before an error or EOF. try_now:
 * the bytes are probably there already (a body after its length): try a
 * non-blocking recv before the first poll, one syscall fewer per frame. */
static int read_full(int fd, unsigned char *buf, size_t n, size_t *got, double deadline,
                     const atomic_int *cancel, int try_now) {
  *got = 0;
  while (*got < n) {
    if (cancel && atomic_load(cancel))
      return EBB_ECANCELED;
    if (try_now) {
      try_now = 0;
      ssize_t r = recv(fd, buf + *got, n - *got, MSG_DONTWAIT);
      if (r > 0) {
        *got += (size_t)r;
        continue;
      }
      if (r == 0)
        return 1; /* EOF */
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        return errno == ECONNRESET ? 1 : ebb_seterr(EBB_EIO, "reading: %s", strerror(errno));
    }
    int wait_ms = 100;
    if (deadline > 0) {
      double left = deadline - base_now();
      if (left <= 0)
        return EBB_ETIMEDOUT;
      if (left * 1000 < wait_ms)
        wait_ms = (int)(left * 1000) + 1;
    }
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    int pr = poll(&pf, 1, wait_ms);
    if (pr < 0 && errno != EINTR)
      return ebb_seterr(EBB_EIO, "waiting for a protocol message: %s", strerror(errno));
    if (pr <= 0)
      continue;
    ssize_t r = recv(fd, buf + *got, n - *got, 0);
    if (r < 0 && (errno == EINTR || errno == EAGAIN))
      continue;
    if (r < 0)
      return errno == ECONNRESET ? 1 : ebb_seterr(EBB_EIO, "reading: %s", strerror(errno));
    if (r == 0)
      return 1; /* EOF */
    *got += (size_t)r;
    try_now = 1; /* the rest of a frame usually follows at once */
  }
  return 0;
}

/* The error of a frame that could not be read whole: rc from read_full or
 * fill (1: EOF), got: bytes of the part being read (the length when
 * body_len is 0, else the body). */
static int frame_error(int rc, size_t got, uint32_t body_len) {
  const char *what = rc == EBB_ETIMEDOUT ? "timed out" : "cancelled";
  if (rc == 1 && !body_len && got == 0)
    return ebb_seterr(EBB_EIO, "the peer closed the connection");
  if (rc == 1 && !body_len)
    return ebb_seterr(EBB_EPROTO,
                      "truncated frame: the connection closed after %zu of 4 "
                      "length bytes",
                      got);
  if (rc == 1)
    return ebb_seterr(EBB_EPROTO, "truncated frame: the connection closed after %zu of %u bytes",
                      got, body_len);
  if ((rc == EBB_ETIMEDOUT || rc == EBB_ECANCELED) && !body_len)
    return ebb_seterr(rc, "%s while waiting for a message", what);
  if (rc == EBB_ETIMEDOUT || rc == EBB_ECANCELED)
    return ebb_seterr(rc, "%s in the middle of a %u-byte frame", what, body_len);
  return rc;
}

static int check_len(uint32_t len) {
  if (len == 0)
    return ebb_seterr(EBB_EPROTO, "empty frame (length 0)");
  if (len > EBB_WIRE_MAX_FRAME)
    return ebb_seterr(EBB_EPROTO, "oversized frame: length %u bytes, the limit is %u", len,
                      EBB_WIRE_MAX_FRAME);
  return 0;
}

int wrk_wire_recv(int fd, double deadline, const atomic_int *cancel, json_t **msg) {
  unsigned char hdr[4];
  size_t got;
  *msg = NULL;
  int rc = read_full(fd, hdr, 4, &got, deadline, cancel, 0);
  if (rc)
    return frame_error(rc, got, 0);
  uint32_t len = le32(hdr);
  if ((rc = check_len(len)))
    return rc;
  unsigned char *body = malloc(len);
  if (!body)
    return ebb_seterr(EBB_ENOMEM, "a %u-byte frame: out of host memory", len);
  rc = read_full(fd, body, len, &got, deadline, cancel, 1);
  rc = rc ? frame_error(rc, got, len) : check_body(body, len, msg);
  free(body);
  return rc;
}

/* --- the reader (wire.h): one recv per small frame, no allocation ---------------- */
#define WAKE_MS 100

void wrk_wire_reader_init(wrk_wire_reader *r, int fd) {
  r->fd = fd;
  r->timed = 0;
  r->spin_us = 0;
  r->start = r->end = 0;
}

unsigned wrk_wire_spin_us(const char **bad) {
  const char *e = getenv("EBB_WORKER_SPIN_US");
  if (bad)
    *bad = NULL;
  if (!e)
    return EBB_WIRE_SPIN_US_DEFAULT;
  char *end = NULL;
  errno = 0;
  unsigned long v = strtoul(e, &end, 10);
  if (!*e || *end || errno || e[0] == '-' || v > EBB_WIRE_SPIN_US_MAX) {
    if (bad)
      *bad = e;
    return EBB_WIRE_SPIN_US_DEFAULT;
  }
  return (unsigned)v;
}

/* One recv into dst[0..n): the bytes read (> 0), 0 at EOF, or a negative
 * EBB_ code (EBB_ECANCELED, EBB_ETIMEDOUT, EBB_EIO). For the first
 * r->spin_us it tries non-blocking recvs, yielding between them (the busy
 * poll); then it blocks in recv itself: with a deadline or a cancel flag the
 * socket's SO_RCVTIMEO wakes it every WAKE_MS to look at them, and the last
 * stretch before the deadline is a poll of exactly what is left. */
static ssize_t recv_some(wrk_wire_reader *r, void *dst, size_t n, double deadline,
                         const atomic_int *cancel) {
  if ((deadline > 0 || cancel) && !r->timed) {
    struct timeval tv = {0, WAKE_MS * 1000};
    if (setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0)
      return ebb_seterr(EBB_EIO, "setting the socket's receive timeout: %s", strerror(errno));
    r->timed = 1;
  }
  double spin_until = r->spin_us ? base_now() + r->spin_us / 1e6 : 0;
  for (;;) {
    if (cancel && atomic_load(cancel))
      return EBB_ECANCELED;
    int spinning = spin_until > 0 && base_now() <= spin_until;
    if (deadline > 0) {
      double left = deadline - base_now();
      if (left <= 0)
        return EBB_ETIMEDOUT;
      if (!spinning && left * 1000 < WAKE_MS) {
        struct pollfd pf = {.fd = r->fd, .events = POLLIN};
        int pr = poll(&pf, 1, (int)(left * 1000) + 1);
        if (pr < 0 && errno != EINTR)
          return ebb_seterr(EBB_EIO, "waiting for a protocol message: %s", strerror(errno));
        if (pr <= 0)
          continue;
      }
    }
    ssize_t got = recv(r->fd, dst, n, spinning ? MSG_DONTWAIT : 0);
    if (got >= 0)
      return got;
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
      if (spinning)
        sched_yield(); /* a peer waiting for this core runs first */
      continue;        /* a signal, SO_RCVTIMEO's wake-up, or nothing yet */
    }
    if (errno == ECONNRESET)
      return 0;
    return ebb_seterr(EBB_EIO, "reading: %s", strerror(errno));
  }
}

/* Makes the buffer hold need (<= its size) unread bytes: 0, 1 at EOF, or a
 * negative EBB_ code. */
static int fill(wrk_wire_reader *r, size_t need, double deadline, const atomic_int *cancel) {
  if (r->start + need > sizeof r->buf) { /* the frame wraps: move what is unread down */
    memmove(r->buf, r->buf + r->start, r->end - r->start);
    r->end -= r->start;
    r->start = 0;
  }
  while (r->end - r->start < need) {
    ssize_t k = recv_some(r, r->buf + r->end, sizeof r->buf - r->end, deadline, cancel);
    if (k <= 0)
      return k ? (int)k : 1;
    r->end += (size_t)k;
  }
  return 0;
}

/* A frame too large for the buffer: the part already read, then the rest
 * straight into a block of its own (nothing past the frame is read). */
static int read_big(wrk_wire_reader *r, uint32_t len, double deadline, const atomic_int *cancel,
                    json_t **msg) {
  size_t have = r->end - r->start - 4, got = 0;
  unsigned char *body = malloc(len);
  if (!body)
    return ebb_seterr(EBB_ENOMEM, "a %u-byte frame: out of host memory", len);
  memcpy(body, r->buf + r->start + 4, have);
  r->start = r->end = 0;
  int rc = read_full(r->fd, body + have, len - have, &got, deadline, cancel, 1);
  rc = rc ? frame_error(rc, have + got, len) : check_body(body, len, msg);
  free(body);
  return rc;
}

int wrk_wire_read(wrk_wire_reader *r, double deadline, const atomic_int *cancel, json_t **msg) {
  *msg = NULL;
  if (r->start == r->end)
    r->start = r->end = 0;
  int rc = fill(r, 4, deadline, cancel);
  if (rc)
    return frame_error(rc, r->end - r->start, 0);
  uint32_t len = le32(r->buf + r->start);
  if ((rc = check_len(len)))
    return rc;
  if (4 + (size_t)len > sizeof r->buf)
    return read_big(r, len, deadline, cancel, msg);
  if ((rc = fill(r, 4 + (size_t)len, deadline, cancel)))
    return frame_error(rc, r->end - r->start - 4, len);
  rc = check_body(r->buf + r->start + 4, len, msg); /* parsed where it lies */
  r->start += 4 + (size_t)len;
  return rc;
}

/* --- shared memory ------------------------------------------------------ */
int wrk_shm_name_ok(const char *name) {
  if (!name || !*name || strlen(name) > 200 || name[0] == '.')
    return 0;
  for (const char *c = name; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
          *c == '-' || *c == '_' || *c == '.'))
      return 0;
  return 1;
}

static void shm_path(const char *name, char *buf, size_t n) {
  snprintf(buf, n, "/dev/shm/%s", name);
}

/* Opens /dev/shm/NAME, which must not exist yet, for reading and writing. */
static int shm_open_new(const char *name, char *path, size_t cap, int *fd) {
  if (!wrk_shm_name_ok(name))
    return ebb_seterr(EBB_EINVAL, "shared memory name '%s' is not valid", name ? name : "");
  shm_path(name, path, cap);
  *fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (*fd < 0)
    return ebb_seterr(EBB_EIO, "%s: %s", path, strerror(errno));
  return 0;
}

int wrk_shm_put(const char *name, const void *data, size_t n) {
  if (n) {
    void *p;
    int rc = wrk_shm_create(name, n, &p);
    if (rc)
      return rc;
    memcpy(p, data, n);
    munmap(p, n);
    return 0;
  }
  char path[256];
  int fd = -1, rc = shm_open_new(name, path, sizeof path, &fd);
  if (rc)
    return rc;
  close(fd);
  return 0;
}

int wrk_shm_create(const char *name, size_t n, void **p) {
  *p = NULL;
  if (!n)
    return ebb_seterr(EBB_EINVAL, "shared memory %s: size 0", wrk_shm_name_ok(name) ? name : "");
  char path[256];
  int fd = -1, rc = shm_open_new(name, path, sizeof path, &fd);
  if (rc)
    return rc;
  void *m = MAP_FAILED;
  /* MAP_POPULATE: the pages are allocated in one pass, not one fault each */
  if (ftruncate(fd, (off_t)n) != 0)
    rc = ebb_seterr(EBB_EIO, "%s: sizing to %zu bytes: %s", path, n, strerror(errno));
  else if ((m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0)) ==
           MAP_FAILED)
    rc = ebb_seterr(EBB_EIO, "%s: mapping %zu bytes: %s", path, n, strerror(errno));
  close(fd);
  if (rc) {
    unlink(path);
    return rc;
  }
  *p = m;
  return 0;
}

int wrk_shm_link(const char *from, const char *to) {
  if (!wrk_shm_name_ok(from) || !wrk_shm_name_ok(to))
    return ebb_seterr(EBB_EINVAL, "shared memory names '%s' -> '%s': not valid", from ? from : "",
                      to ? to : "");
  char a[256], b[256];
  shm_path(from, a, sizeof a);
  shm_path(to, b, sizeof b);
  if (link(a, b) != 0)
    return ebb_seterr(EBB_EIO, "%s -> %s: %s", a, b, strerror(errno));
  return 0;
}

/* Opens /dev/shm/NAME for mapping n bytes: a regular file (a peer could name
 * a FIFO, where open would block, or a symlink) of at least n bytes. */
static int shm_open_checked(const char *path, int flags, size_t n, int *fd_out) {
  int fd = open(path, flags | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0)
    return ebb_seterr(EBB_EPROTO, "%s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(fd);
    return ebb_seterr(EBB_EPROTO, "%s is not a regular file", path);
  }
  if ((uint64_t)sb.st_size < n) {
    close(fd);
    return ebb_seterr(EBB_EPROTO, "%s holds %lld bytes, the message says %zu", path,
                      (long long)sb.st_size, n);
  }
  *fd_out = fd;
  return 0;
}

int wrk_shm_take(const char *from, const char *to, size_t n, void **p) {
  *p = NULL;
  if (!wrk_shm_name_ok(from) || !wrk_shm_name_ok(to) || !n)
    return ebb_seterr(EBB_EPROTO, "shared memory '%s' -> '%s' (%zu bytes): not valid",
                      from ? from : "", to ? to : "", n);
  char a[256], b[256];
  shm_path(from, a, sizeof a);
  shm_path(to, b, sizeof b);
  if (rename(a, b) != 0)
    return ebb_seterr(EBB_EPROTO, "%s: %s", a, strerror(errno));
  int fd, rc = shm_open_checked(b, O_RDWR, n, &fd);
  if (!rc) {
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
      rc = ebb_seterr(EBB_EIO, "%s: mapping %zu bytes: %s", b, n, strerror(errno));
    else
      *p = m;
  }
  if (rc)
    unlink(b);
  return rc;
}

int wrk_shm_map(const char *name, size_t n, const void **p) {
  *p = NULL;
  if (!wrk_shm_name_ok(name))
    return ebb_seterr(EBB_EPROTO, "shared memory name '%s' is not valid", name ? name : "");
  char path[256];
  shm_path(name, path, sizeof path);
  int fd;
  int rc = shm_open_checked(path, O_RDONLY, n, &fd);
  if (rc)
    return rc;
  if (n) {
    void *m = mmap(NULL, n, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      close(fd);
      return ebb_seterr(EBB_EIO, "%s: mapping %zu bytes: %s", path, n, strerror(errno));
    }
    *p = m;
  }
  close(fd);
  return 0;
}

void wrk_shm_unmap(const void *p, size_t n) {
  if (p && n)
    munmap((void *)p, n);
}

void wrk_shm_unlink(const char *name) {
  if (!wrk_shm_name_ok(name))
    return;
  char path[256];
  shm_path(name, path, sizeof path);
  unlink(path);
}

int wrk_shm_unlink_prefix(const char *prefix) {
  DIR *d = opendir("/dev/shm");
  int n = 0;
  size_t pl = strlen(prefix);
  if (!d || !pl)
    goto out;
  struct dirent *e;
  while ((e = readdir(d)))
    if (!strncmp(e->d_name, prefix, pl) && wrk_shm_name_ok(e->d_name)) {
      wrk_shm_unlink(e->d_name);
      n++;
    }
out:
  if (d)
    closedir(d);
  return n;
}

int wrk_wire_code(const char *name) { return base_errcode(name, EBB_ESTAGE); }
