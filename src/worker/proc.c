/* Worker processes, host side (proc.h). */
#include "worker/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "worker/wire.h"

extern char **environ;

struct wrk_wproc {
  pid_t pid;
  int fd;     /* our end of the socket; -1 once closed */
  int alive;  /* not reaped yet */
  int status; /* wait status once reaped */
  char label[128];
  char prefix[64];
  wrk_wire_reader rd; /* on fd: reads ahead, so an answer costs one recv */
};

/* --- workers still running at exit ----------------------------------------- */
#define MAX_LIVE 256
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t live[MAX_LIVE];
static pthread_once_t live_once = PTHREAD_ONCE_INIT;

static void kill_live(void) {
  pthread_mutex_lock(&live_lock);
  for (int i = 0; i < MAX_LIVE; i++)
    if (live[i] > 0) {
      kill(live[i], SIGKILL);
      waitpid(live[i], NULL, 0);
      live[i] = 0;
    }
  pthread_mutex_unlock(&live_lock);
}
static void live_init(void) { atexit(kill_live); }

static void live_set(pid_t pid, int add) {
  pthread_once(&live_once, live_init);
  pthread_mutex_lock(&live_lock);
  for (int i = 0; i < MAX_LIVE; i++)
    if (add ? live[i] == 0 : live[i] == pid) {
      live[i] = add ? pid : 0;
      break;
    }
  pthread_mutex_unlock(&live_lock);
}

/* --- status words ---------------------------------------------------------- */
const char *wrk_signal_name(int sig) {
  switch (sig) {
    /* clang-format lays this list out differently on every pass */
    /* clang-format off */
#define S_(x) case x: return #x;
    S_(SIGSEGV) S_(SIGABRT) S_(SIGKILL) S_(SIGTERM) S_(SIGINT) S_(SIGBUS) S_(SIGFPE)
    S_(SIGILL) S_(SIGPIPE) S_(SIGHUP) S_(SIGQUIT) S_(SIGTRAP) S_(SIGUSR1) S_(SIGUSR2)
    S_(SIGALRM) S_(SIGXCPU) S_(SIGXFSZ) S_(SIGSYS)
#undef S_
  default:
    return "an unnamed signal";
  }
  /* clang-format on */
}

void wrk_wait_status_describe(int status, char *buf, size_t n) {
  if (WIFEXITED(status))
    snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(buf, n, "was killed by signal %s (%s)%s", wrk_signal_name(WTERMSIG(status)),
             strsignal(WTERMSIG(status)), WCOREDUMP(status) ? ", core dumped" : "");
  else
    snprintf(buf, n, "ended with wait status 0x%x", (unsigned)status);
}

/* --- spawn ------------------------------------------------------------------- */
static char **build_env(pid_t host) {
  size_t n = 0;
  while (environ && environ[n])
    n++;
  char **env = calloc(n + 3, sizeof *env);
  if (!env)
    return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "EBB_WORKER_FD=", 14) && strncmp(environ[i], "EBB_WORKER_PARENT=", 18))
      env[k++] = environ[i];
  static __thread char fdvar[32], parentvar[48];
  snprintf(fdvar, sizeof fdvar, "EBB_WORKER_FD=3");
  snprintf(parentvar, sizeof parentvar, "EBB_WORKER_PARENT=%ld", (long)host);
  env[k++] = fdvar;
  env[k++] = parentvar;
  env[k] = NULL;
  return env;
}

/* The reader's busy poll (EBB_WORKER_SPIN_US), or an error naming a bad value. */
static int spin_of(const char *exe, unsigned *spin) {
  const char *bad = NULL;
  *spin = wrk_wire_spin_us(&bad);
  if (bad)
    return ebb_seterr(EBB_EINVAL,
                      "worker %s: EBB_WORKER_SPIN_US='%s' is not a whole number of "
                      "microseconds from 0 to %d",
                      exe, bad, EBB_WIRE_SPIN_US_MAX);
  return 0;
}

int wrk_wproc_spawn(const char *exe, const char *const *args, size_t nargs, const char *label,
                    wrk_wproc **out) {
  int sv[2] = {-1, -1}, child_fd = -1, rc = 0;
  char **argv = NULL, **env = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t at;
  int have_fa = 0, have_at = 0;
  unsigned spin;
  if ((rc = spin_of(exe, &spin)))
    return rc;
  wrk_wproc *w = calloc(1, sizeof *w);
  if (!w)
    return ebb_seterr(EBB_ENOMEM, "worker %s: out of host memory", exe);
  w->fd = -1;
  snprintf(w->label, sizeof w->label, "%s", label && *label ? label : exe);
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    rc = ebb_seterr(EBB_EIO, "worker %s: socketpair: %s", exe, strerror(errno));
    goto fail;
  }
  /* dup2 onto the same number would keep FD_CLOEXEC: never hand over fd 3 as is */
  child_fd = sv[1] == 3 ? fcntl(sv[1], F_DUPFD_CLOEXEC, 10) : sv[1];
  if (child_fd < 0) {
    rc = ebb_seterr(EBB_EIO, "worker %s: dup: %s", exe, strerror(errno));
    goto fail;
  }
  if (!(argv = calloc(nargs + 2, sizeof *argv)) || !(env = build_env(getpid()))) {
    rc = ebb_seterr(EBB_ENOMEM, "worker %s: out of host memory", exe);
    goto fail;
  }
  argv[0] = (char *)exe;
  for (size_t i = 0; i < nargs; i++)
    argv[i + 1] = (char *)args[i];
  posix_spawn_file_actions_init(&fa);
  have_fa = 1;
  posix_spawn_file_actions_adddup2(&fa, child_fd, 3);
  posix_spawnattr_init(&at);
  have_at = 1;
  sigset_t none, dflt;
  sigemptyset(&none);
  sigemptyset(&dflt);
  sigaddset(&dflt, SIGINT);
  sigaddset(&dflt, SIGTERM);
  sigaddset(&dflt, SIGPIPE);
  sigaddset(&dflt, SIGHUP);
  posix_spawnattr_setsigmask(&at, &none);
  posix_spawnattr_setsigdefault(&at, &dflt);
  posix_spawnattr_setpgroup(&at, 0);
  posix_spawnattr_setflags(&at,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  int e = strchr(exe, '/') ? posix_spawn(&w->pid, exe, &fa, &at, argv, env)
                           : posix_spawnp(&w->pid, exe, &fa, &at, argv, env);
  if (e) {
    rc = ebb_seterr(EBB_EIO, "cannot start worker %s: %s", exe, strerror(e));
    goto fail;
  }
  w->alive = 1;
  live_set(w->pid, 1);
  w->fd = sv[0];
  sv[0] = -1;
  wrk_wire_reader_init(&w->rd, w->fd);
  w->rd.spin_us = spin;
  snprintf(w->prefix, sizeof w->prefix, "ebb-w%ld-%ld-", (long)getpid(), (long)w->pid);
  *out = w;
fail:
  if (have_fa)
    posix_spawn_file_actions_destroy(&fa);
  if (have_at)
    posix_spawnattr_destroy(&at);
  if (child_fd >= 0 && child_fd != sv[1])
    close(child_fd);
  if (sv[1] >= 0)
    close(sv[1]);
  if (sv[0] >= 0)
    close(sv[0]);
  free(argv);
  free(env);
  if (rc)
    free(w);
  return rc;
}

pid_t wrk_wproc_pid(const wrk_wproc *w) { return w->pid; }
const char *wrk_wproc_shm_prefix(const wrk_wproc *w) { return w->prefix; }
int wrk_wproc_alive(const wrk_wproc *w) { return w && w->alive && w->fd >= 0; }
int wrk_wproc_reaped(const wrk_wproc *w, int *status) {
  if (!w || w->alive)
    return 0;
  if (status)
    *status = w->status;
  return 1;
}

void wrk_wait_status_short(int status, char *buf, size_t n) {
  if (WIFSIGNALED(status))
    snprintf(buf, n, "killed by %s", wrk_signal_name(WTERMSIG(status)));
  else if (WIFEXITED(status))
    snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
  else
    snprintf(buf, n, "ended (wait status 0x%x)", (unsigned)status);
}

/* Waits up to grace_s for the worker to end by itself; else SIGKILL. */
static void reap(wrk_wproc *w, double grace_s) {
  if (!w->alive)
    return;
  double until = base_now() + grace_s;
  for (;;) {
    pid_t p = waitpid(w->pid, &w->status, WNOHANG);
    if (p == w->pid || (p < 0 && errno != EINTR))
      break;
    if (base_now() >= until) {
      kill(w->pid, SIGKILL);
      while (waitpid(w->pid, &w->status, 0) < 0 && errno == EINTR)
        ;
      break;
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  w->alive = 0;
  live_set(w->pid, 0);
  if (w->fd >= 0) {
    close(w->fd);
    w->fd = -1;
  }
  wrk_shm_unlink_prefix(w->prefix);
}

/* The worker failed us: kill (unless it already ended) and say what happened. */
static int worker_failed(wrk_wproc *w, int rc, const char *during) {
  char why[1200], how[256];
  snprintf(why, sizeof why, "%s", ebb_errmsg());
  /* closed: it is probably dying, let it say how; garbage: no more chances */
  reap(w, rc == EBB_EIO ? 2.0 : rc == EBB_EPROTO ? 0.1 : 0.0);
  wrk_wait_status_describe(w->status, how, sizeof how);
  switch (rc) {
  case EBB_ETIMEDOUT:
    return ebb_seterr(EBB_ETIMEDOUT,
                      "worker pid %ld (%s) did not answer %s in time (timeout); "
                      "killed",
                      (long)w->pid, w->label, during);
  case EBB_ECANCELED:
    return ebb_seterr(EBB_ECANCELED, "worker pid %ld (%s) stopped: the job was cancelled during %s",
                      (long)w->pid, w->label, during);
  case EBB_EIO:
    return ebb_seterr(EBB_ESTAGE, "worker pid %ld (%s) %s during %s without answering",
                      (long)w->pid, w->label, how, during);
  case EBB_EPROTO:
    return ebb_seterr(EBB_EPROTO, "worker pid %ld (%s): protocol error during %s: %s; worker %s",
                      (long)w->pid, w->label, during, why,
                      WIFSIGNALED(w->status) && WTERMSIG(w->status) == SIGKILL ? "killed" : how);
  default:
    return ebb_seterr(rc, "worker pid %ld (%s) during %s: %s", (long)w->pid, w->label, during, why);
  }
}

/* Waits for a message without sending one (the worker's hello). */
static int wrk_wproc_recv(wrk_wproc *w, double deadline, const atomic_int *cancel, json_t **reply) {
  *reply = NULL;
  if (!wrk_wproc_alive(w))
    return ebb_seterr(EBB_ESTATE, "worker pid %ld (%s) is not running", (long)(w ? w->pid : 0),
                      w ? w->label : "?");
  for (;;) {
    json_t *m = NULL;
    int rc = wrk_wire_read(&w->rd, deadline, cancel, &m);
    if (rc)
      return rc;
    const char *type = json_string_value(json_object_get(m, "type"));
    if (!strcmp(type, "heartbeat")) {
      json_decref(m);
      continue;
    }
    if (!strcmp(type, "log")) {
      const char *text = json_string_value(json_object_get(m, "message"));
      json_int_t lvl = json_integer_value(json_object_get(m, "level"));
      base_log(lvl <= 0   ? EBB_LOG_DEBUG
               : lvl >= 3 ? EBB_LOG_ERROR
                          : (base_log_level)lvl,
               json_string_value(json_object_get(m, "scope")), "%s", text ? text : "");
      json_decref(m);
      continue;
    }
    *reply = m;
    if (!strcmp(type, "error")) {
      const char *code = json_string_value(json_object_get(m, "code"));
      const char *msg = json_string_value(json_object_get(m, "message"));
      int c = wrk_wire_code(code);
      return ebb_seterr(c ? c : EBB_ESTAGE, "%s", msg && *msg ? msg : ebb_strerror(c));
    }
    return 0;
  }
}

int wrk_wproc_call(wrk_wproc *w, const json_t *msg, double deadline, const atomic_int *cancel,
                   json_t **reply) {
  const char *during = json_string_value(json_object_get(msg, "type"));
  *reply = NULL;
  if (!wrk_wproc_alive(w))
    return ebb_seterr(EBB_ESTATE, "worker pid %ld (%s) is not running", (long)(w ? w->pid : 0),
                      w ? w->label : "?");
  int rc = wrk_wire_send(w->fd, msg);
  if (rc)
    return worker_failed(w, rc, during ? during : "a request");
  rc = wrk_wproc_recv(w, deadline, cancel, reply);
  if (rc && !*reply) /* transport trouble, not an answered error */
    return worker_failed(w, rc, during ? during : "a request");
  return rc;
}

int wrk_wproc_stop(wrk_wproc *w, double grace_s, char *how) {
  if (!w)
    return 0;
  /* closing our end is the worker's cue to exit if it has not yet */
  if (w->fd >= 0)
    shutdown(w->fd, SHUT_RDWR);
  reap(w, grace_s);
  int clean = WIFEXITED(w->status) && WEXITSTATUS(w->status) == 0;
  if (how)
    wrk_wait_status_describe(w->status, how, 256);
  free(w);
  return clean ? 0 : EBB_ESTAGE;
}
