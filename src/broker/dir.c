/* The broker directory: one socket per process, DIR/PID.sock. No daemon:
 * a peer is its socket, and a dead peer's socket is removed by whoever
 * notices (its pid is gone, or its socket refuses). */
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
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
    if (!pid || pid == getpid())
      continue;
    if (kill(pid, 0) != 0 && errno == ESRCH) { /* dead: its entry goes */
      char p[768];
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
      continue;
    }
    if (*n < cap)
      pids[(*n)++] = pid;
  }
  closedir(d);
  return 0;
}
