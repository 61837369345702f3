/* The data directory: one server at a time (an exclusive flock on the
 * directory itself, held on its descriptor; DATA_DIR/lock holds the
 * holder's pid for the message), partial uploads a killed
 * server left, worker load directories (scratch/) likewise, and retention
 * (--keep-jobs). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "server/internal.h"

/* The pid DATA_DIR/lock names ("" when none can be read). */
static void read_holder(int dfd, char *pid, size_t n) {
  pid[0] = '\0';
  int f = openat(dfd, "lock", O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (f < 0)
    return;
  ssize_t k = read(f, pid, n - 1);
  close(f);
  pid[k > 0 ? k : 0] = '\0';
  pid[strspn(pid, "0123456789")] = '\0';
}

/* DATA_DIR/lock says who holds the directory, for the second server's
 * message; the lock itself is on the directory's descriptor, so deleting or
 * replacing the file changes nothing. */
static void write_holder(int dfd, const char *dir) {
  char pid[32];
  int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
  unlinkat(dfd, "lock", 0); /* a symlink planted there is not followed */
  int f = openat(dfd, "lock", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (f < 0 || write(f, pid, (size_t)n) != n)
    base_log(EBB_LOG_WARN, "server", "%s/lock: cannot write the pid: %s", dir, strerror(errno));
  if (f >= 0)
    close(f);
}

int srv_datadir_lock(const char *dir, int *fd) {
  int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d < 0)
    return ebb_seterr(EBB_EIO, "--data-dir %s: cannot open it: %s", dir, strerror(errno));
  if (flock(d, LOCK_EX | LOCK_NB) != 0) {
    char pid[32];
    read_holder(d, pid, sizeof pid);
    close(d);
    return ebb_seterr(EBB_EBUSY,
                      "--data-dir %s is in use by another ebb server (pid %s); "
                      "stop it or give this one another --data-dir",
                      dir, pid[0] ? pid : "unknown");
  }
  write_holder(d, dir);
  *fd = d;
  return 0;
}

/* Removes the entries of path whose names start with prefix ("": all of
 * them) with all they hold; how many went. */
static int remove_entries(const char *path, const char *prefix) {
  DIR *d = opendir(path);
  struct dirent *e;
  int n = 0;
  while (d && (e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
        !strncmp(e->d_name, prefix, strlen(prefix))) {
      char f[4500];
      snprintf(f, sizeof f, "%s/%s", path, e->d_name);
      n += base_rm_tree(f) == 0;
    }
  if (d)
    closedir(d);
  return n;
}

void srv_datadir_clean_uploads(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/uploads", dir);
  int n = remove_entries(path, "tmp-");
  if (n)
    base_log(EBB_LOG_INFO, "server", "removed %d partial upload%s left by the last server", n,
             n == 1 ? "" : "s");
}

void srv_datadir_clean_scratch(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/" EBB_SERVER_SCRATCH, dir);
  mkdir(path, 0700);
  int n = remove_entries(path, "");
  if (n)
    base_log(EBB_LOG_INFO, "server", "removed %d worker load director%s left by the last server", n,
             n == 1 ? "y" : "ies");
}

/* A pruned job's directory: the parent of its output directory, when that
 * lies under DATA_DIR/jobs/. */
static void remove_job_dir(void *arg, int64_t id, const char *outdir) {
  (void)id;
  const srv_server *s = arg;
  char jobs[4200], dir[4200];
  snprintf(jobs, sizeof jobs, "%s/jobs/", s->data_dir);
  if (!outdir || strncmp(outdir, jobs, strlen(jobs)))
    return;
  snprintf(dir, sizeof dir, "%s", outdir);
  char *slash = strrchr(dir, '/');
  if (slash && slash > dir + strlen(jobs))
    *slash = '\0';
  base_rm_tree(dir);
}

void srv_retention(srv_server *s) {
  if (!s->keep_jobs && s->keep_jobs_s <= 0)
    return;
  int n = srv_store_prune(s->store, s->keep_jobs, s->keep_jobs_s, remove_job_dir, s);
  if (n > 0)
    base_log(EBB_LOG_INFO, "server", "--keep-jobs: removed %d old job%s", n, n == 1 ? "" : "s");
}
