/* What a job brings besides its options, made the job's own at submit
 * (docs/api.md, "Security"): a file it names (its input, or a path option
 * the operator allowed) is opened once, under the --input-dir directories
 * with no symlink anywhere (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS),
 * non-blocking, and must be a regular file with one link and at most a cap
 * of bytes; the job's directory gets a copy and the job reads that, so a
 * file swapped after submit is never read. Lyrics sent with the job are
 * stored there too, and the align stage is pointed at the stored file. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pipeline/trust.h"
#include "server/internal.h"

#define OPEN_FLAGS (O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)

/* The same walk as openat2's without it (kernels before 5.6): one component
 * at a time with O_NOFOLLOW, no "..", so nothing resolves outside dirfd. */
static int open_walk(int dirfd, const char *rel) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", rel) >= (int)sizeof buf)
    return errno = ENAMETOOLONG, -1;
  int cur = dup(dirfd);
  char *save = NULL;
  for (char *part = strtok_r(buf, "/", &save); cur >= 0 && part;) {
    char *next = strtok_r(NULL, "/", &save);
    int fd = -1;
    if (!strcmp(part, ".."))
      errno = EXDEV;
    else
      fd = openat(cur, part,
                  next ? O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC : OPEN_FLAGS | O_NOFOLLOW);
    close(cur);
    cur = fd;
    part = next;
  }
  return cur;
}

static int open_beneath(const char *dir, const char *rel) {
  int dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dirfd < 0)
    return -1;
  struct open_how how = {.flags = OPEN_FLAGS,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
  int fd = (int)syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
  if (fd < 0 && errno == ENOSYS)
    fd = open_walk(dirfd, rel);
  int e = errno;
  close(dirfd);
  errno = e;
  return fd;
}

int srv_open_confined(srv_server *s, const char *path, size_t cap, int *fd, int64_t *size) {
  *fd = -1;
  if (!s->ninput_dirs || !path || path[0] != '/')
    return SRV_CONFINE_REFUSED;
  for (size_t i = 0; i < s->ninput_dirs && *fd < 0; i++) {
    const char *d = s->input_dirs[i];
    size_t n = strlen(d);
    if (n == 1 && d[0] == '/')
      n = 0;
    if (strncmp(path, d, n) || path[n] != '/' || !path[n + 1])
      continue;
    *fd = open_beneath(n ? d : "/", path + n + 1);
  }
  if (*fd < 0)
    return SRV_CONFINE_REFUSED;
  struct stat st;
  int rc = fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode) ? SRV_CONFINE_REFUSED
           : st.st_nlink != 1                           ? SRV_CONFINE_LINKED
           : (uint64_t)st.st_size > cap                 ? SRV_CONFINE_TOO_BIG
                                                        : 0;
  *size = st.st_size;
  if (rc) {
    close(*fd);
    *fd = -1;
  }
  return rc;
}

const char *srv_confine_message(srv_server *s, int why, const char *what, const char *path,
                                int64_t size, size_t cap, char *buf, size_t n) {
  if (!s->ninput_dirs)
    snprintf(buf, n,
             "%s %s: this server reads no paths named in a request (it was started "
             "without --input-dir); upload the file instead (multipart/form-data field "
             "\"file\", or Content-Type audio/*)",
             what, path);
  else if (why == SRV_CONFINE_TOO_BIG)
    snprintf(buf, n, "%s %s: %lld bytes, more than the %zu this server takes", what, path,
             (long long)size, cap);
  else if (why == SRV_CONFINE_LINKED)
    snprintf(buf, n,
             "%s %s: the file has more than one hard link; the server reads only "
             "files with one link under its --input-dir directories (copy it there)",
             what, path);
  else
    snprintf(buf, n,
             "%s %s: not a readable regular file under the server's --input-dir "
             "directories (no symbolic links); upload the file instead",
             what, path);
  return buf;
}

/* Copies fd (at most cap bytes; it may have grown since it was checked) to
 * path, created anew. */
static int copy_fd(int fd, const char *path, size_t cap) {
  int out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0)
    return ebb_seterr(EBB_EIO, "cannot create %s: %s", path, strerror(errno));
  char buf[65536];
  size_t total = 0;
  int rc = 0;
  if (lseek(fd, 0, SEEK_SET) < 0)
    rc = ebb_seterr(EBB_EIO, "copying to %s: %s", path, strerror(errno));
  for (ssize_t got; !rc && (got = read(fd, buf, sizeof buf)) != 0;) {
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      rc = ebb_seterr(EBB_EIO, "copying to %s: %s", path, strerror(errno));
    else if ((total += (size_t)got) > cap)
      rc = ebb_seterr(EBB_EINPUT, "the file grew past %zu bytes while it was copied", cap);
    else if (write(out, buf, (size_t)got) != got)
      rc = ebb_seterr(EBB_EIO, "writing %s: %s", path, strerror(errno ? errno : ENOSPC));
  }
  if (close(out) != 0 && !rc)
    rc = ebb_seterr(EBB_EIO, "writing %s: %s", path, strerror(errno));
  if (rc)
    unlink(path);
  return rc;
}

static int write_text(const char *path, const char *text, size_t n) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return ebb_seterr(EBB_EIO, "cannot create %s: %s", path, strerror(errno));
  int ok = (size_t)write(fd, text, n) == n;
  if (close(fd) != 0)
    ok = 0;
  if (!ok) {
    unlink(path);
    return ebb_seterr(EBB_EIO, "writing %s failed", path);
  }
  return 0;
}

/* The option's value becomes the server's file (a new stage object when the
 * job's options had none for it). */
static int set_option(srv_input *in, const char *stage, const char *option, const char *path) {
  if (!in->options && !(in->options = json_object()))
    return ebb_seterr(EBB_ENOMEM, "out of host memory");
  json_t *so = json_object_get(in->options, stage);
  if (!so) {
    so = json_object();
    if (!so || json_object_set_new(in->options, stage, so))
      return ebb_seterr(EBB_ENOMEM, "out of host memory");
  }
  return json_object_set_new(so, option, json_string(path)) ? ebb_seterr(EBB_ENOMEM, "out of "
                                                                                     "host memory")
                                                            : 0;
}

/* s with every character but letters, digits, '-', '_' (and '.' when
 * dots) as '_', at most cap - 1 of them: a part of a file name. */
static void safe_part(const char *s, int dots, char *out, size_t cap) {
  size_t k = 0;
  for (; *s && k + 1 < cap; s++)
    out[k++] = isalnum((unsigned char)*s) || *s == '-' || *s == '_' || (dots && *s == '.') ? *s
                                                                                           : '_';
  out[k] = '\0';
}

static const char *ext_of(const char *ctype) {
  if (srv_starts_with(ctype, "audio/wav") || srv_starts_with(ctype, "audio/x-wav") ||
      srv_starts_with(ctype, "audio/wave") || srv_starts_with(ctype, "audio/vnd.wave"))
    return ".wav";
  if (srv_starts_with(ctype, "audio/flac") || srv_starts_with(ctype, "audio/x-flac"))
    return ".flac";
  if (srv_starts_with(ctype, "audio/mpeg") || srv_starts_with(ctype, "audio/mp3"))
    return ".mp3";
  if (srv_starts_with(ctype, "audio/ogg"))
    return ".ogg";
  return ".bin";
}

/* The sent name made safe (letters, digits, . - _) and short: at most 96
 * characters, its extension kept, so "input-NAME" fits any file system. */
static void safe_name(const char *sent, const char *ctype, char *name, size_t cap) {
  enum { KEEP = 96 };
  const char *base = strrchr(sent, '/');
  base = base ? base + 1 : sent;
  size_t k = 0;
  for (const char *p = base; *p && k + 1 < cap; p++)
    name[k++] = (isalnum((unsigned char)*p) || *p == '.' || *p == '-' || *p == '_') ? *p : '_';
  name[k] = '\0';
  if (!k || name[0] == '.') {
    snprintf(name, cap, "upload%s", ext_of(ctype));
    return;
  }
  if (k > KEEP) {
    const char *dot = strrchr(name, '.');
    size_t ext = dot && strlen(dot) <= 16 ? strlen(dot) : 0;
    memmove(name + KEEP - ext, name + k - ext, ext + 1);
  }
}

/* Moves the upload into dir as input-NAME (NAME: the sent filename made safe
 * and short); path gets where. */
static int place_upload(srv_req *r, const char *dir, char *path, size_t n) {
  char name[256];
  safe_name(r->filename, r->ctype, name, sizeof name);
  snprintf(path, n, "%s/input-%s", dir, name);
  if (rename(r->tmp, path) != 0)
    return ebb_seterr(EBB_EIO, "moving the upload to %s: %s", path, strerror(errno));
  r->tmp[0] = '\0';
  return 0;
}

int srv_place_input(srv_server *s, srv_req *r, srv_input *in, const char *dir, char *path,
                    size_t n) {
  if (in->upload)
    return place_upload(r, dir, path, n);
  const char *base = strrchr(in->path, '/');
  char name[128];
  safe_part(base ? base + 1 : in->path, 1, name, sizeof name);
  snprintf(path, n, "%s/input-%s", dir, name);
  return copy_fd(in->fd, path, s->max_upload);
}

int srv_place_extras(srv_server *s, srv_input *in, const char *dir) {
  char path[4400];
  for (size_t i = 0; i < in->nfiles; i++) {
    char st[80], op[80];
    safe_part(in->files[i].stage, 0, st, sizeof st);
    safe_part(in->files[i].option, 0, op, sizeof op);
    snprintf(path, sizeof path, "%s/option-%s.%s", dir, st, op);
    int rc = copy_fd(in->files[i].fd, path, s->max_upload);
    if (!rc)
      rc = set_option(in, in->files[i].stage, in->files[i].option, path);
    if (rc)
      return rc;
  }
  if (!in->lyrics)
    return 0;
  snprintf(path, sizeof path, "%s/lyrics.txt", dir);
  int rc = write_text(path, in->lyrics, in->lyrics_len);
  return rc ? rc : set_option(in, in->lyrics_stage, "lyrics", path);
}

/* pl_trust_path_fn: an allowed path option, opened now under the
 * confinement (its value is replaced by the server's copy at
 * srv_place_extras). */
int srv_trust_path(void *arg, const char *stage, const char *option, const char *value,
                   json_t *opts) {
  (void)opts;
  srv_path_ctx *pc = arg;
  srv_input *in = pc->in;
  if (in->nfiles == SRV_MAX_OPTFILES)
    return ebb_seterr(EBB_ECONFIG, "option %s.%s: a job names at most %d files in its options",
                      stage, option, SRV_MAX_OPTFILES);
  srv_optfile *f = &in->files[in->nfiles];
  int64_t size = 0;
  int why = srv_open_confined(pc->s, value, pc->s->max_upload, &f->fd, &size);
  if (why) {
    char what[200], msg[1200];
    snprintf(what, sizeof what, "option %s.%s:", stage, option);
    srv_confine_message(pc->s, why, what, value, size, pc->s->max_upload, msg, sizeof msg);
    return ebb_seterr(EBB_ECONFIG, "%s", msg);
  }
  snprintf(f->stage, sizeof f->stage, "%s", stage);
  snprintf(f->option, sizeof f->option, "%s", option);
  in->nfiles++;
  return 0;
}
