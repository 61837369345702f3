/* `ebb serve`: the long-lived server (src/server/, docs/api.md). One device
 * or several (--devices): per device one allocator and one pipeline manager;
 * jobs run one at a time per device.
 * SIGINT/SIGTERM: stop accepting, stop the running job (it goes back to the
 * queue) and session items, unload every pipeline, release everything (the
 * device context included), exit 0. */
#include <errno.h>
#include <pthread.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/log.h"
#include "cli/commands.h"
#include "pipeline/config.h"
#include "broker/broker.h"
#include "pipeline/manager.h"
#include "pipeline/registry.h"
#include "server/cluster/cluster.h"
#include "server/server.h"
#include "cli/cmd_serve.h"


/* Log lines written before the server listens (the device note of `auto`
 * falling back to the CPU, config warnings) wait here, so that the listening
 * line is the first line on stdout. */
static FILE *early;
static char *early_buf;
static size_t early_len;

static void flush_early(void) {
  if (!early)
    return;
  base_log_set_stream(NULL);
  fclose(early);
  early = NULL;
  if (early_len)
    fwrite(early_buf, 1, early_len, stdout);
  fflush(stdout);
  free(early_buf);
  early_buf = NULL;
}

static void print_listen(const char *url) {
  printf("ebb: listening on %s\n", url);
  fflush(stdout);
  flush_early();
}

/* The data directory made and absolute, so job records and result file
 * lists stay valid from anywhere; the cache directory under it. */
static int resolve_dirs(serve_args *a) {
  if (!a->data_dir) {
    const char *xdg = getenv("XDG_DATA_HOME");
    snprintf(a->dd, sizeof a->dd, "%s%s", xdg && *xdg ? xdg : "ebb-data",
             xdg && *xdg ? "/ebb" : "");
    a->data_dir = a->dd;
  }
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", a->data_dir);
  for (char *q = tmp + 1; *q; q++)
    if (*q == '/') {
      *q = '\0';
      mkdir(tmp, 0755);
      *q = '/';
    }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
    fprintf(stderr, "ebb serve: --data-dir %s: %s\n", a->data_dir, strerror(errno));
    return EBB_EXIT_USAGE;
  }
  if (realpath(a->data_dir, a->abs_dd))
    a->data_dir = a->abs_dd;
  /* isolated stages' private load directories (emptied at start: server.c) */
  snprintf(a->sd, sizeof a->sd, "%s/" EBB_SERVER_SCRATCH, a->data_dir);
  if (a->no_cache)
    a->cache_dir = NULL;
  else if (!a->cache_dir) {
    snprintf(a->cd, sizeof a->cd, "%s/cache", a->data_dir);
    a->cache_dir = a->cd;
  }
  return 0;
}

#define MAX_DEVICES 16
typedef struct serve_state {
  pl_config *cfg;
  pl_registry *reg;
  size_t n; /* devices */
  char specs[MAX_DEVICES][16];
  dev_device *devs[MAX_DEVICES];
  mem_allocator *allocs[MAX_DEVICES];
  pl_manager *ms[MAX_DEVICES];
  srv_server *srv;
  brk_peer *peer; /* the broker (docs/broker.md); NULL: not registered */
} serve_state;

/* --devices: "all" (every CUDA device the driver reports, 2 or more; else
 * one device as "auto": the GPU, else the CPU), "cpu", or "cuda:N,cuda:M".
 * --device SPEC: that one device. 0 or the exit status. */
static int resolve_devices(serve_args *a, serve_state *st) {
  if (a->device && a->devices) {
    fprintf(stderr, "ebb serve: give --devices or --device, not both\n");
    return EBB_EXIT_USAGE;
  }
  const char *list = a->devices ? a->devices : a->device ? NULL : "all";
  if (!list) {
    snprintf(st->specs[0], sizeof st->specs[0], "%s", a->device);
    st->n = 1;
    return 0;
  }
  if (!strcmp(list, "all")) {
    dev_probe p;
    int n = dev_device_probe(&p) == 0 && p.driver_loaded ? p.ndevices : 0;
    st->n = n >= 2 ? (size_t)(n < MAX_DEVICES ? n : MAX_DEVICES) : 1;
    for (size_t i = 0; i < st->n; i++)
      snprintf(st->specs[i], sizeof st->specs[i], n >= 2 ? "cuda:%zu" : "auto", i);
    return 0;
  }
  char buf[512];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    char *end = NULL;
    long v = !strncmp(t, "cuda:", 5) && t[5] >= '0' && t[5] <= '9' ? strtol(t + 5, &end, 10) : -1;
    if (strcmp(t, "cpu") && !(v >= 0 && v < 64 && end && !*end)) {
      fprintf(stderr, "ebb serve: --devices %s: '%s' is not all, cpu or cuda:N\n", list, t);
      return EBB_EXIT_USAGE;
    }
    for (size_t i = 0; i < st->n; i++)
      if (!strcmp(st->specs[i], t)) {
        fprintf(stderr, "ebb serve: --devices %s: '%s' is named twice\n", list, t);
        return EBB_EXIT_USAGE;
      }
    if (st->n == MAX_DEVICES) {
      fprintf(stderr, "ebb serve: --devices %s: at most %d devices\n", list, MAX_DEVICES);
      return EBB_EXIT_USAGE;
    }
    snprintf(st->specs[st->n++], sizeof st->specs[0], "%s", t);
  }
  if (!st->n) {
    fprintf(stderr, "ebb serve: --devices '%s': no device named\n", list);
    return EBB_EXIT_USAGE;
  }
  return 0;
}

/* One device, its allocator and manager (several devices: work under
 * DATA_DIR/devices/LABEL). 0 or the exit status. */
static int open_one(serve_args *a, serve_state *st, size_t i, pl_manager_opts *mo) {
  int rc = dev_open(st->specs[i], &st->devs[i]);
  if (rc) {
    fprintf(stderr, "ebb serve: device %s: %s\n", st->specs[i], ebb_errmsg());
    return base_exit_status(rc) == EBB_EXIT_USAGE ? EBB_EXIT_USAGE : EBB_EXIT_FAILED;
  }
  mem_alloc_opts ao = {.size = sizeof ao, .seg_kind = EBB_SEG_AUTO, .backtraces = -1};
  if ((rc = mem_allocator_create(st->devs[i], &ao, &st->allocs[i])) != 0) {
    fprintf(stderr, "ebb serve: %s\n", ebb_errmsg());
    return EBB_EXIT_FAILED;
  }
  char work[4200];
  snprintf(work, sizeof work, "%s/devices/%s", a->data_dir, dev_device_label(st->devs[i]));
  pl_manager_opts o = *mo;
  o.dev = st->devs[i];
  o.alloc = st->allocs[i];
  if (st->n > 1)
    o.work_dir = work;
  if ((rc = pl_manager_create(&o, &st->ms[i])) != 0) {
    fprintf(stderr, "ebb serve: %s\n", ebb_errmsg());
    return EBB_EXIT_FAILED;
  }
  pl_manager_set_sleep_budget(st->ms[i], a->sleep_budget);
  return 0;
}

static int open_runtime(serve_args *a, serve_state *st, pl_manager_opts *mo) {
  int status = resolve_devices(a, st);
  for (size_t i = 0; !status && i < st->n; i++)
    status = open_one(a, st, i, mo);
  return status;
}

static void close_runtime(serve_state *st) {
  for (size_t i = 0; i < st->n; i++) {
    pl_manager_destroy(st->ms[i]);
    st->ms[i] = NULL;
  }
  for (size_t i = 0; i < st->n; i++) {
    mem_allocator_destroy(st->allocs[i]);
    dev_close(st->devs[i]);
    st->allocs[i] = NULL;
    st->devs[i] = NULL;
  }
}

/* --- the shutdown grace ----------------------------------------------------------
 * The orderly stop (the running job cancelled and queued again, every
 * pipeline unloaded, everything released) normally takes well under a second:
 * the built-in stages see a cancellation within 100 ms and an isolated
 * stage's worker is killed. A plugin stage run in-process that never checks
 * its cancellation would hold the stop for as long as it runs; it is not
 * waited on past the grace: the server logs it and exits 1 there and then
 * (the kernel takes back the process's memory and the driver its device
 * memory and context; isolated workers die with the server). */
#define GRACE_DEFAULT_S 10.0
static atomic_int grace_done;

static double mono_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *grace_watch(void *arg) {
  double grace = *(const double *)arg, t0 = mono_now();
  while (!atomic_load(&grace_done)) {
    if (mono_now() - t0 >= grace) {
      base_log(EBB_LOG_ERROR, "server",
               "the stop took longer than the shutdown grace of %g s (a "
               "stage that ignores its cancellation?); exiting without waiting for it",
               grace);
      _exit(EBB_EXIT_FAILED);
    }
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

/* Until SIGINT or SIGTERM; idle releases and retention once a second. */
static void serve_loop(serve_state *st, const sigset_t *set, double grace_s) {
  int sig;
  for (;;) {
    struct timespec ts = {1, 0};
    sig = sigtimedwait(set, NULL, &ts);
    if (sig == SIGINT || sig == SIGTERM)
      break;
    for (size_t i = 0; i < st->n; i++)
      pl_manager_tick(st->ms[i]); /* idle:S stages whose time is up, then the context */
    srv_tick(st->srv);
  }
  base_log(EBB_LOG_INFO, "server",
           "%s: stopping (the running job goes back to the queue, "
           "releasing all)",
           sig == SIGINT ? "SIGINT" : "SIGTERM");
  static double grace;
  grace = grace_s > 0 ? grace_s : GRACE_DEFAULT_S;
  pthread_t gw;
  int watching = pthread_create(&gw, NULL, grace_watch, &grace) == 0;
  srv_stop(st->srv);
  st->srv = NULL;
  srv_broker_stop(st->peer); /* no peer asks a manager that is going */
  st->peer = NULL;
  for (size_t i = 0; i < st->n; i++) {
    pl_manager_destroy(st->ms[i]);
    st->ms[i] = NULL;
    mem_alloc_stats as = {.size = sizeof as};
    mem_allocator_get_stats(st->allocs[i], &as);
    base_log(EBB_LOG_INFO, "server", "stopped%s%s: %llu MiB reserved, context %s",
             st->n > 1 ? " " : "", st->n > 1 ? dev_device_label(st->devs[i]) : "",
             (unsigned long long)(as.reserved.current >> 20), as.ctx_active ? "held" : "released");
  }
  atomic_store(&grace_done, 1);
  if (watching)
    pthread_join(gw, NULL);
}

static int start_and_serve(serve_args *a, serve_state *st, pl_manager_opts *mo) {
  /* The signals are taken by sigtimedwait: every thread started from here
   * on inherits the mask (the manager's threads too: a SIGTERM delivered to
   * one of them would end the process with 143 instead of a clean stop). */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);
  int status = open_runtime(a, st, mo);
  if (status)
    return status;
  a->so.manager = st->ms[0];
  a->so.alloc = st->allocs[0];
  a->so.managers = st->ms;
  a->so.allocs = st->allocs;
  a->so.ndevices = st->n;
  int rc = srv_start(&a->so, &st->srv);
  if (rc) {
    fprintf(stderr, "ebb serve: %s\n", ebb_errmsg());
    /* a second server on a held data directory is bad usage too */
    return rc == EBB_EBUSY || base_exit_status(rc) == EBB_EXIT_USAGE ? EBB_EXIT_USAGE
                                                                     : EBB_EXIT_FAILED;
  }
  for (size_t i = 0; i < st->n; i++)
    base_log(EBB_LOG_INFO, "server", "device %s (%s), data in %s", dev_device_label(st->devs[i]),
             dev_name(st->devs[i]), a->data_dir);
  const char *env_token = getenv("EBB_TOKEN");
  a->broker.token = a->so.token_file || (env_token && *env_token);
  a->broker.wait_s = a->so.job_timeout_s > 0 ? a->so.job_timeout_s : 60;
  srv_broker_start(&a->broker, st->ms, st->devs, st->n, &st->peer);
  serve_loop(st, &set, a->grace_s);
  return EBB_EXIT_OK;
}

static int serve(serve_args *a) {
  serve_state st = {0};
  int status = cli_load(a->config, &st.cfg, &st.reg);
  if (status)
    return status;
  a->so = (srv_opts){.size = sizeof a->so,
                     .listen = a->listen,
                     .data_dir = a->data_dir,
                     .on_listen = print_listen,
                     .token_file = a->so.token_file,
                     .token = getenv("EBB_TOKEN"),
                     .metrics_public = a->so.metrics_public,
                     .allow_hosts = a->allow,
                     .nallow_hosts = a->nallow,
                     .allow_origins = a->origins,
                     .nallow_origins = a->norigins,
                     .max_queued = a->so.max_queued,
                     .max_queued_per_token = a->so.max_queued_per_token,
                     .queued_bytes = a->so.queued_bytes,
                     .queued_bytes_per_token = a->so.queued_bytes_per_token,
                     .input_dirs = a->inputs,
                     .ninput_dirs = a->ninputs,
                     .job_timeout_s = a->so.job_timeout_s,
                     .max_job_s = a->so.max_job_s,
                     .keep_jobs = a->so.keep_jobs,
                     .keep_jobs_s = a->so.keep_jobs_s,
                     .max_wait_s = a->so.max_wait_s,
                     .keep_resident_s = a->so.keep_resident_s,
                     .cluster = a->so.cluster,
                     .broker = 1 /* docs/broker.md */};
  pl_manager_opts mo = {.size = sizeof mo,
                        .cfg = st.cfg,
                        .reg = st.reg,
                        .work_dir = a->data_dir,
                        .cache_dir = a->cache_dir,
                        .scratch_dir = a->sd,
                        .policy = a->release ? &a->policy : NULL,
                        .ask_peers = srv_broker_ask, /* docs/broker.md */
                        .ask_done = srv_broker_ask_done};
  status = EBB_EXIT_USAGE;
  if (cli_serve_server_config(a->config, &a->so, &mo) == 0) {
    for (size_t i = 0; i < st.cfg->npipelines; i++)
      if (pl_check(st.reg, &st.cfg->pipelines[i]) != 0)
        base_log(EBB_LOG_WARN, "server", "pipeline '%s' cannot run: %s", st.cfg->pipelines[i].name,
                 ebb_errmsg());
    status = start_and_serve(a, &st, &mo);
  }
  flush_early(); /* when the server never listened */
  srv_stop(st.srv);
  srv_broker_stop(st.peer);
  close_runtime(&st);
  pl_registry_destroy(st.reg);
  pl_config_free(st.cfg);
  return status;
}

int cli_cmd_serve(int argc, char **argv) {
  static serve_args a;
  memset(&a, 0, sizeof a);
  a.listen = "127.0.0.1:8470";
  a.logfmt = "text";
  int st = cli_serve_parse_args(argc, argv, &a);
  if (st)
    return st < 0 ? EBB_EXIT_OK : st;
  base_log_set_format(!strcmp(a.logfmt, "json") ? EBB_LOG_JSON : EBB_LOG_TEXT);
  if (a.verbose)
    base_log_set_level(EBB_LOG_DEBUG);
  if ((st = resolve_dirs(&a)) != 0)
    return st;
  if ((early = open_memstream(&early_buf, &early_len)))
    base_log_set_stream(early);
  return serve(&a);
}
