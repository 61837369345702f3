/* The broker directory: one socket per process, DIR/PID.sock. No daemon:
 * a peer is its socket, and a dead peer's socket is removed by whoever
 * notices (its pid is gone, or its socket refuses). The directory is
 * hostile input (anyone who may write into it: this user, a group member):
 * an entry is looked at without following a link, a file is opened only
 * when it is a regular one, never blocking, and read bounded; anything
 * else is junk, logged once and ignored. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/log.h"
#include "broker/broker.h"
#include "ebb/error.h"

static void default_dir(char *out, size_t len) {
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  if (xdg && *xdg)
    snprintf(out, len, "%s/ebb", xdg);
  else
    snprintf(out, len, "/run/ebb");
}

/* Without --broker-group, a shared directory (group-writable) is trusted
 * when it is this user's (it shared it) or this process is of its group: whoever can put a socket there is a
 * member too, and each peer's credentials are checked on its socket. */
static int in_group(gid_t g) {
  gid_t gs[256];
  int n = getgroups(256, gs);
  if (g == getegid())
    return 1;
  for (int i = 0; i < n; i++)
    if (gs[i] == g)
      return 1;
  return 0;
}

/* An existing directory is trusted only when it is ours (or root's) and no
 * one else may write into it: a socket there is a peer we talk to. */
static int check_dir(const char *path, gid_t gid) {
  struct stat st;
  if (stat(path, &st) != 0)
    return ebb_seterr(EBB_EIO, "broker directory %s: %s", path, strerror(errno));
  if (!S_ISDIR(st.st_mode))
    return ebb_seterr(EBB_EINVAL, "broker directory %s: not a directory", path);
  if (st.st_uid != geteuid() && st.st_uid != 0)
    return ebb_seterr(EBB_EINVAL, "broker directory %s: owned by uid %u, not by this user", path,
                      (unsigned)st.st_uid);
  if (st.st_mode & S_IWOTH)
    return ebb_seterr(EBB_EINVAL, "broker directory %s: writable by every user (mode %04o)", path,
                      (unsigned)(st.st_mode & 07777));
  if ((st.st_mode & S_IWGRP) &&
      (gid == (gid_t)-1 ? st.st_uid != geteuid() && !in_group(st.st_gid) : st.st_gid != gid))
    return ebb_seterr(EBB_EINVAL, "broker directory %s: group-writable (mode %04o) but %s", path,
                      (unsigned)(st.st_mode & 07777),
                      gid == (gid_t)-1 ? "neither this user nor its groups own it "
                                         "(--broker-group names the group to share with)"
                                       : "its group is not the --broker-group given");
  return 0;
}

int brk_dir_group(const char *group, gid_t *gid) {
  *gid = (gid_t)-1;
  if (!group)
    return 0;
  struct group *g = getgrnam(group);
  if (!g)
    return ebb_seterr(EBB_EINVAL, "--broker-group %s: no such group", group);
  *gid = g->gr_gid;
  return 0;
}

int brk_dir_open(const char *dir, const char *group, char *out, size_t outlen) {
  char path[512];
  gid_t gid;
  if (dir)
    snprintf(path, sizeof path, "%s", dir);
  else
    default_dir(path, sizeof path);
  int rc = brk_dir_group(group, &gid);
  if (rc)
    return rc;
  char parent[512];
  snprintf(parent, sizeof parent, "%s", path);
  char *slash = strrchr(parent, '/');
  if (slash && slash != parent) { /* $XDG_RUNTIME_DIR itself may not exist yet */
    *slash = '\0';
    if ((rc = base_mkdirs(parent, 0700, "broker directory")))
      return rc;
  }
  if (mkdir(path, 0700) == 0) {
    if (gid != (gid_t)-1 && (chown(path, (uid_t)-1, gid) != 0 || chmod(path, 02770) != 0))
      return ebb_seterr(EBB_EIO, "broker directory %s: giving it to group %s: %s", path, group,
                        strerror(errno));
  } else if (errno != EEXIST)
    return ebb_seterr(EBB_EIO, "broker directory %s: %s", path, strerror(errno));
  if ((rc = check_dir(path, gid)))
    return rc;
  if (strlen(path) + 1 > outlen)
    return ebb_seterr(EBB_EINVAL, "broker directory %s: path too long", path);
  memcpy(out, path, strlen(path) + 1);
  return 0;
}

void brk_sock_path(const char *dir, pid_t pid, char *out, size_t outlen) {
  snprintf(out, outlen, "%s/%ld.sock", dir, (long)pid);
}

/* Junk is logged once per file (by inode), then ignored quietly. */
void brk_junk(const char *path, const struct stat *st, const char *why) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static struct {
    dev_t dev;
    ino_t ino;
  } seen[64];
  static size_t nseen;
  int fresh = 1;
  pthread_mutex_lock(&lock);
  for (size_t i = 0; st && i < nseen && i < 64; i++)
    if (seen[i].dev == st->st_dev && seen[i].ino == st->st_ino)
      fresh = 0;
  if (fresh && st) {
    seen[nseen % 64].dev = st->st_dev;
    seen[nseen % 64].ino = st->st_ino;
    nseen++;
  }
  pthread_mutex_unlock(&lock);
  if (fresh)
    base_log(EBB_LOG_WARN, "broker", "ignoring %s in the broker directory: %s", path, why);
}

static const char *kind_of(mode_t m) {
  return S_ISFIFO(m)   ? "a FIFO"
         : S_ISLNK(m)  ? "a symbolic link"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISDIR(m)  ? "a directory"
         : S_ISSOCK(m) ? "a socket"
                       : "not a regular file";
}

int brk_open_file(const char *path, int flags, size_t max, struct stat *st) {
  struct stat l;
  if (lstat(path, &l) != 0)
    return -1; /* gone: not junk */
  if (!S_ISREG(l.st_mode)) {
    brk_junk(path, &l, kind_of(l.st_mode));
    errno = EINVAL;
    return -1;
  }
  int fd = open(path, flags | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return -1;
  if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || (size_t)st->st_size > max) {
    char why[96];
    snprintf(why, sizeof why, "%s", !S_ISREG(st->st_mode) ? kind_of(st->st_mode) : "");
    if (!why[0])
      snprintf(why, sizeof why, "%lld bytes, over the %zu-byte limit", (long long)st->st_size, max);
    brk_junk(path, st, why);
    close(fd);
    errno = EINVAL;
    return -1;
  }
  return fd;
}

/* "PID.sock" -> PID, else 0. */
static pid_t name_pid(const char *name) {
  char *end = NULL;
  long v = strtol(name, &end, 10);
  if (v <= 0 || !end || strcmp(end, ".sock"))
    return 0;
  return (pid_t)v;
}

int brk_dir_peers(const char *dir, pid_t *pids, size_t cap, size_t *n) {
  *n = 0;
  DIR *d = opendir(dir);
  if (!d)
    return ebb_seterr(EBB_EIO, "broker directory %s: %s", dir, strerror(errno));
  struct dirent *e;
  while ((e = readdir(d))) {
    pid_t pid = name_pid(e->d_name);
    char p[768];
    struct stat st;
    if (!pid || pid == getpid())
      continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (lstat(p, &st) != 0)
      continue;
    if (!S_ISSOCK(st.st_mode)) { /* a FIFO, a link, a file named like a peer */
      brk_junk(p, &st, kind_of(st.st_mode));
      continue;
    }
    if (kill(pid, 0) != 0 && errno == ESRCH) { /* dead: its entry goes */
      unlink(p);
      continue;
    }
    if (*n < cap)
      pids[(*n)++] = pid;
  }
  closedir(d);
  return 0;
}
