/* The shared state file of the fake GPU; see fg_state.h. */
#include "fg_state.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FG_MAGIC 0x3054534750474b46ull /* "FKGPGST0" */
#define FG_VERSION 3u

typedef struct fg_slot {
  int32_t pid;
  int32_t state_fd; /* the fd the owner holds on this file (exec check) */
  uint64_t start_time;
  uint64_t used[FG_MAX_DEVICES];
  uint32_t contexts[FG_MAX_DEVICES];
  uint64_t launches[FG_MAX_DEVICES]; /* kernel launches accepted, per device */
} fg_slot;

typedef struct fg_file {
  uint64_t magic;
  uint32_t version;
  uint32_t ndevices;
  uint64_t total_bytes[FG_MAX_DEVICES];
  uint64_t granularity;
  uint32_t lost[FG_MAX_DEVICES];
  fg_slot slots[FG_MAX_PROCS];
} fg_file;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_fd = -1;
static fg_file *g_file;
static int g_slot = -1;
static dev_t g_dev;
static ino_t g_ino;
static fg_config g_cfg;

static uint64_t env_u64(const char *name, uint64_t def) {
  const char *v = getenv(name);
  if (!v || !*v)
    return def;
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  if (errno || *end)
    return def;
  return x;
}

/* FAKEGPU_MEMORY_MIB: one figure for every device, or a list with one per
 * device ("8192,8192,4096,4096"); a list alone sets the number of devices. */
static void parse_memory(fg_config *cfg, int devices_set) {
  const char *v = getenv("FAKEGPU_MEMORY_MIB");
  uint64_t mib[FG_MAX_DEVICES];
  unsigned n = 0;
  if (v && *v) {
    const char *p = v;
    for (;;) {
      char *end;
      errno = 0;
      unsigned long long x = strtoull(p, &end, 10);
      if (end == p || errno || x == 0 || n == FG_MAX_DEVICES || (*end && *end != ',')) {
        snprintf(cfg->error, sizeof cfg->error,
                 "FAKEGPU_MEMORY_MIB='%.100s' is not a list of at most %d positive MiB "
                 "figures, one per device",
                 v, FG_MAX_DEVICES);
        n = 0;
        break;
      }
      mib[n++] = x;
      if (!*end)
        break;
      p = end + 1;
    }
  }
  if (n == 0)
    mib[n++] = 81920;
  if (n > 1 && !devices_set)
    cfg->ndevices = n;
  if (n > 1 && n != cfg->ndevices && !cfg->error[0])
    snprintf(cfg->error, sizeof cfg->error,
             "FAKEGPU_MEMORY_MIB has %u figures but FAKEGPU_DEVICES=%u", n, cfg->ndevices);
  for (unsigned d = 0; d < FG_MAX_DEVICES; d++)
    cfg->total_bytes[d] = mib[d < n ? d : n - 1] * FG_MIB;
}

/* FAKEGPU_FAIL_DEVICE=D[:after=N][:lost] */
static void parse_fail_device(fg_config *cfg) {
  cfg->fail_device = -1;
  const char *v = getenv("FAKEGPU_FAIL_DEVICE");
  if (!v || !*v)
    return;
  char *end;
  long d = strtol(v, &end, 10);
  long after = 0;
  int lost = 0, ok = end != v && d >= 0 && d < (long)cfg->ndevices;
  while (ok && *end == ':') {
    const char *opt = end + 1;
    if (!strncmp(opt, "after=", 6)) {
      after = strtol(opt + 6, &end, 10);
      ok = end != opt + 6 && after >= 0;
    } else if (!strncmp(opt, "lost", 4)) {
      lost = 1;
      end = (char *)opt + 4;
    } else {
      ok = 0;
    }
  }
  if (!ok || *end) {
    snprintf(cfg->error, sizeof cfg->error,
             "FAKEGPU_FAIL_DEVICE='%.100s': want D[:after=N][:lost] with D a device below %u", v,
             cfg->ndevices);
    return;
  }
  cfg->fail_device = (int)d;
  cfg->fail_after = after;
  cfg->fail_lost = lost;
}

/* A setting that must be a whole number (def when unset); anything else is
 * named in cfg->error. */
static long env_number(fg_config *cfg, const char *name, long def, long max) {
  const char *v = getenv(name);
  if (!v || !*v)
    return def;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || x < 0 || x > max) {
    if (!cfg->error[0])
      snprintf(cfg->error, sizeof cfg->error, "%s='%.100s' is not a number from 0 to %ld", name, v,
               max);
    return def;
  }
  return x;
}

void fg_config_from_env(fg_config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->ndevices = (unsigned)env_u64("FAKEGPU_DEVICES", 1);
  if (cfg->ndevices > FG_MAX_DEVICES)
    cfg->ndevices = FG_MAX_DEVICES;
  const char *devs = getenv("FAKEGPU_DEVICES");
  parse_memory(cfg, devs && *devs);
  parse_fail_device(cfg);
  cfg->granularity = env_u64("FAKEGPU_GRANULARITY_KIB", 2048) * 1024;
  if (cfg->granularity == 0)
    cfg->granularity = 2048 * 1024;
  cfg->context_bytes = env_u64("FAKEGPU_CONTEXT_MIB", 300) * FG_MIB;
  cfg->fail_alloc_at = (long)env_u64("FAKEGPU_FAIL_ALLOC_AT", 0);
  cfg->fault_launch_at = (long)env_u64("FAKEGPU_FAULT_LAUNCH_AT", 0);
  cfg->stub = env_u64("FAKEGPU_STUB", 0) != 0;
  cfg->poison = env_u64("FAKEGPU_POISON", 0) != 0;
  cfg->check_args = (int)env_number(cfg, "FAKEGPU_CHECK_ARGS", 1, 2);
  cfg->quarantine = env_number(cfg, "FAKEGPU_QUARANTINE", 4096, 1L << 20);
  cfg->kernel_us = env_number(cfg, "FAKEGPU_KERNEL_US", 0, 60000000);
  cfg->wait_value_ms = env_number(cfg, "FAKEGPU_WAIT_VALUE_MS", 10000, 3600000);
  const char *p = getenv("FAKEGPU_STATE");
  if (p && *p)
    snprintf(cfg->state_path, sizeof cfg->state_path, "%s", p);
  else
    snprintf(cfg->state_path, sizeof cfg->state_path, "/tmp/fakegpu-%u.state", (unsigned)getuid());
}

uint64_t fg_proc_start_time(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return 0;
  buf[n] = 0;
  /* The command name may contain spaces and parentheses: skip to the last ')'. */
  char *p = strrchr(buf, ')');
  if (!p)
    return 0;
  p++;
  /* p is at the space before field 3 (state); starttime is field 22. */
  for (int field = 3; field < 22 && p; field++)
    p = strchr(p + 1, ' ');
  if (!p)
    return 0;
  return strtoull(p + 1, NULL, 10);
}

static int proc_is_zombie(pid_t pid) {
  char path[64], buf[512];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return 1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return 1;
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* A slot is live while its process runs the same image that took it: same
 * pid, same start time (pid reuse), not a zombie, and still holding its fd on
 * this file (an exec closes it: O_CLOEXEC). */
static int slot_alive(const fg_slot *s) {
  if (s->pid <= 0)
    return 0;
  if (s->pid == getpid() && (int)(s - g_file->slots) == g_slot)
    return 1;
  uint64_t st = fg_proc_start_time(s->pid);
  if (st == 0 || st != s->start_time || proc_is_zombie(s->pid))
    return 0;
  char path[64];
  struct stat sb;
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)s->pid, (int)s->state_fd);
  if (stat(path, &sb) != 0)
    return errno == EACCES; /* another user's process: trust pid + start */
  return sb.st_dev == g_dev && sb.st_ino == g_ino;
}

static void reap_locked(void) {
  for (int i = 0; i < FG_MAX_PROCS; i++) {
    fg_slot *s = &g_file->slots[i];
    if (s->pid != 0 && !slot_alive(s))
      memset(s, 0, sizeof *s);
  }
}

static int any_live_locked(void) {
  for (int i = 0; i < FG_MAX_PROCS; i++)
    if (g_file->slots[i].pid != 0)
      return 1;
  return 0;
}

static void lock(void) {
  pthread_mutex_lock(&g_mu);
  if (g_fd >= 0)
    while (flock(g_fd, LOCK_EX) != 0 && errno == EINTR) {
    }
}

static void unlock(void) {
  if (g_fd >= 0)
    flock(g_fd, LOCK_UN);
  pthread_mutex_unlock(&g_mu);
}

static void write_config_locked(void) {
  g_file->magic = FG_MAGIC;
  g_file->version = FG_VERSION;
  g_file->ndevices = g_cfg.ndevices;
  memcpy(g_file->total_bytes, g_cfg.total_bytes, sizeof g_file->total_bytes);
  g_file->granularity = g_cfg.granularity;
  memset(g_file->lost, 0, sizeof g_file->lost);
}

static int open_locked(void) {
  int fd = open(g_cfg.state_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    return -errno;
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      int e = -errno;
      close(fd);
      return e;
    }
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 ||
      (sb.st_size < (off_t)sizeof(fg_file) && ftruncate(fd, sizeof(fg_file)) != 0)) {
    int e = -errno;
    close(fd);
    return e;
  }
  void *m = mmap(NULL, sizeof(fg_file), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    int e = -errno;
    close(fd);
    return e;
  }
  g_fd = fd;
  g_file = m;
  g_dev = sb.st_dev;
  g_ino = sb.st_ino;
  if (g_file->magic != FG_MAGIC || g_file->version != FG_VERSION) {
    memset(g_file, 0, sizeof *g_file);
    write_config_locked();
  }
  return 0;
}

int fg_state_attach(const fg_config *cfg, int register_self) {
  pthread_mutex_lock(&g_mu);
  int rc = 0;
  if (!g_file) {
    g_cfg = *cfg;
    rc = open_locked(); /* returns holding the flock */
    if (rc) {
      pthread_mutex_unlock(&g_mu);
      return rc;
    }
  } else {
    while (flock(g_fd, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  reap_locked();
  /* A slot left by this pid before an exec is stale: drop it. */
  if (register_self && g_slot < 0)
    for (int i = 0; i < FG_MAX_PROCS; i++)
      if (g_file->slots[i].pid == getpid())
        memset(&g_file->slots[i], 0, sizeof g_file->slots[i]);
  if (!any_live_locked())
    write_config_locked(); /* nobody else uses the device: our config rules */
  if (register_self && g_slot < 0) {
    rc = -ENOSPC;
    for (int i = 0; i < FG_MAX_PROCS; i++) {
      fg_slot *s = &g_file->slots[i];
      if (s->pid == 0) {
        memset(s, 0, sizeof *s);
        s->pid = getpid();
        s->state_fd = g_fd;
        s->start_time = fg_proc_start_time(getpid());
        g_slot = i;
        rc = 0;
        break;
      }
    }
  }
  unlock();
  return rc;
}

void fg_state_detach(void) {
  pthread_mutex_lock(&g_mu);
  if (g_file) {
    flock(g_fd, LOCK_EX);
    if (g_slot >= 0 && g_file->slots[g_slot].pid == getpid())
      memset(&g_file->slots[g_slot], 0, sizeof g_file->slots[g_slot]);
    flock(g_fd, LOCK_UN);
    munmap(g_file, sizeof *g_file);
    close(g_fd);
  }
  g_file = NULL;
  g_fd = -1;
  g_slot = -1;
  pthread_mutex_unlock(&g_mu);
}

void fg_state_forget(void) {
  /* Called in a forked child: the mutex may be held by a parent thread that
   * does not exist here, so reinitialise it instead of locking. */
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  g_mu = fresh;
  if (g_file)
    munmap(g_file, sizeof *g_file);
  if (g_fd >= 0)
    close(g_fd);
  g_file = NULL;
  g_fd = -1;
  g_slot = -1;
}

static uint64_t used_locked(unsigned dev) {
  uint64_t sum = 0;
  for (int i = 0; i < FG_MAX_PROCS; i++)
    if (g_file->slots[i].pid != 0)
      sum += g_file->slots[i].used[dev];
  return sum;
}

int fg_state_charge(unsigned dev, uint64_t bytes, int is_ctx) {
  if (dev >= FG_MAX_DEVICES)
    return -EINVAL;
  lock();
  if (!g_file || g_slot < 0) {
    unlock();
    return -ENOENT;
  }
  uint64_t used = used_locked(dev);
  uint64_t total = g_file->total_bytes[dev];
  if (used + bytes > total || used + bytes < used) {
    reap_locked(); /* a dead process may still hold memory */
    used = used_locked(dev);
  }
  int rc = 0;
  if (used + bytes > total || used + bytes < used) {
    rc = -ENOMEM;
  } else {
    g_file->slots[g_slot].used[dev] += bytes;
    if (is_ctx)
      g_file->slots[g_slot].contexts[dev]++;
  }
  unlock();
  return rc;
}

void fg_state_uncharge(unsigned dev, uint64_t bytes, int is_ctx) {
  if (dev >= FG_MAX_DEVICES)
    return;
  lock();
  if (g_file && g_slot >= 0) {
    fg_slot *s = &g_file->slots[g_slot];
    s->used[dev] = s->used[dev] > bytes ? s->used[dev] - bytes : 0;
    if (is_ctx && s->contexts[dev] > 0)
      s->contexts[dev]--;
  }
  unlock();
}

int fg_state_device(unsigned dev, fg_device_usage *out) {
  lock();
  if (!g_file) {
    unlock();
    return -ENOENT;
  }
  reap_locked();
  out->ndevices = g_file->ndevices;
  out->total_bytes = dev < FG_MAX_DEVICES ? g_file->total_bytes[dev] : 0;
  out->granularity = g_file->granularity;
  out->used_bytes = dev < FG_MAX_DEVICES ? used_locked(dev) : 0;
  out->lost = dev < FG_MAX_DEVICES && g_file->lost[dev];
  unlock();
  return 0;
}

void fg_state_set_lost(unsigned dev) {
  if (dev >= FG_MAX_DEVICES)
    return;
  lock();
  if (g_file)
    g_file->lost[dev] = 1;
  unlock();
}

int fg_state_lost(unsigned dev) {
  const volatile fg_file *f = g_file;
  return f && dev < FG_MAX_DEVICES && f->lost[dev];
}

int fg_state_procs(unsigned dev, fg_proc_usage *out, unsigned max, unsigned *n) {
  if (dev >= FG_MAX_DEVICES)
    return -EINVAL;
  lock();
  if (!g_file) {
    unlock();
    return -ENOENT;
  }
  reap_locked();
  unsigned k = 0;
  for (int i = 0; i < FG_MAX_PROCS; i++) {
    const fg_slot *s = &g_file->slots[i];
    if (s->pid == 0 || (s->used[dev] == 0 && s->contexts[dev] == 0))
      continue;
    if (k < max) {
      out[k].pid = s->pid;
      out[k].used_bytes = s->used[dev];
      out[k].contexts = s->contexts[dev];
      out[k].launches = s->launches[dev];
    }
    k++;
  }
  *n = k;
  unlock();
  return 0;
}

void fg_state_count_launch(unsigned dev) {
  if (dev >= FG_MAX_DEVICES)
    return;
  lock();
  if (g_file && g_slot >= 0)
    g_file->slots[g_slot].launches[dev]++;
  unlock();
}

int fg_state_debug_clone_slot(pid_t pid, int64_t start_delta, uint64_t used) {
  lock();
  int rc = -ENOENT;
  if (!g_file)
    goto out;
  const fg_slot *src = NULL;
  for (int i = 0; i < FG_MAX_PROCS; i++)
    if (g_file->slots[i].pid == pid)
      src = &g_file->slots[i];
  if (!src)
    goto out;
  rc = -ENOSPC;
  for (int i = 0; i < FG_MAX_PROCS; i++) {
    fg_slot *s = &g_file->slots[i];
    if (s->pid == 0) {
      *s = *src;
      s->start_time += (uint64_t)start_delta;
      s->used[0] = used;
      rc = 0;
      break;
    }
  }
out:
  unlock();
  return rc;
}
