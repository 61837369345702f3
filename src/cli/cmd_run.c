/* `ebb run`: one job through one pipeline, on one device, then exit.
 * Exit status: 0 success, 1 the job failed (a stage failed, ran out of
 * memory, timed out, or the job was cancelled by SIGINT/SIGTERM), 2 bad usage
 * or bad input (options, config, unknown pipeline or stage, plugin, missing
 * input, timeline extension). */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "cli/commands.h"
#include "pipeline/cache.h"
#include "pipeline/config.h"
#include "pipeline/host.h"
#include "pipeline/registry.h"
#include "pipeline/runner.h"

static atomic_int run_cancel;

/* The first SIGINT/SIGTERM cancels the job (the stage sees ebb_cancelled(),
 * ebb releases and exits 1); a second one kills ebb at once. */
static void on_signal(int sig) {
  if (atomic_exchange(&run_cancel, sig)) {
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: ebb run --pipeline NAME [--config FILE] INPUT [-o OUTDIR]\n"
          "               [--device auto|cpu|cuda|cuda:N]\n"
          "               [--release after-stage|after-job|idle:SECONDS|never]\n"
          "               [--timeline FILE.svg|FILE.json] [--log-format text|json]\n"
          "               [--cache] [--cache-dir DIR] [--no-cache] [--verbose]\n\n"
          "Runs INPUT through the pipeline's stages in order and gives device memory\n"
          "back to the driver after each stage (by default), logging\n"
          "  [STAGE] released N MiB of GPU memory\n\n"
          "  --pipeline NAME   a built-in pipeline (`ebb pipelines`) or one from --config\n"
          "  --config FILE     a JSON config with \"pipelines\" and \"plugin_dirs\"\n"
          "  -o, --output DIR  where outputs and result.json go (default: ebb-out)\n"
          "  --device SPEC     auto (default: the first GPU, else the CPU), cpu, cuda, cuda:N\n"
          "  --release POLICY  overrides the pipeline's release policy\n"
          "  --timeline FILE   write the memory timeline (.svg picture or .json events)\n"
          "  --log-format F    text (default) or json (one object per line, on stdout)\n"
          "  --cache           serve stages from the stage result cache when their\n"
          "                    stage, version, options and inputs are the same (a cached\n"
          "                    stage is neither run nor released); off by default, and\n"
          "                    per stage with \"cache\": true|false in a config\n"
          "  --cache-dir DIR   where the cache lives (default: $XDG_CACHE_HOME/ebb or\n"
          "                    ~/.cache/ebb); implies --cache\n"
          "  --no-cache        never read or write the cache, whatever the config says\n"
          "  -v, --verbose     debug lines too (each release checked against the driver)\n\n"
          "Environment: EBB_PLUGIN_PATH (plugin directories, colon-separated),\n"
          "EBB_STAGE_HOOK (a command run after each stage; see docs/stage-abi.md).\n"
          "Exit status: 0 success, 1 the job failed (stage error, out of memory,\n"
          "timeout, cancelled by SIGINT/SIGTERM: a second signal kills ebb at once),\n"
          "2 bad usage or bad input.\n");
}

/* --- progress on stderr ------------------------------------------------------ */
typedef struct progress {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int tty, stop, index, count, active;
  char stage[128];
  double started;
} progress;

static void progress_cb(void *arg, int index, int count, const char *stage, int done) {
  progress *p = arg;
  pthread_mutex_lock(&p->lock);
  p->index = index;
  p->count = count;
  p->active = !done;
  snprintf(p->stage, sizeof p->stage, "%s", stage);
  if (!done)
    p->started = ebb_now();
  int tty = p->tty;
  pthread_mutex_unlock(&p->lock);
  if (!tty && !done)
    fprintf(stderr, "stage %d/%d %s\n", index + 1, count, stage);
  if (tty && done)
    fprintf(stderr, "\r\033[K");
}

static void *progress_thread(void *arg) {
  progress *p = arg;
  pthread_mutex_lock(&p->lock);
  while (!p->stop) {
    if (p->active)
      fprintf(stderr, "\r\033[Kstage %d/%d %s  %.1f s", p->index + 1, p->count, p->stage,
              ebb_now() - p->started);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 200 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&p->cond, &p->lock, &ts);
  }
  pthread_mutex_unlock(&p->lock);
  fprintf(stderr, "\r\033[K");
  return NULL;
}

/* On a terminal the log lines (stdout) and the progress line (stderr) share
 * the screen: every log write first clears the progress line; the progress
 * thread redraws it on its next tick. */
static ssize_t log_write(void *cookie, const char *buf, size_t n) {
  progress *p = cookie;
  pthread_mutex_lock(&p->lock);
  fputs("\r\033[K", stderr);
  fflush(stderr);
  size_t w = fwrite(buf, 1, n, stdout);
  fflush(stdout);
  pthread_mutex_unlock(&p->lock);
  return (ssize_t)w;
}

static int ends_with(const char *s, const char *suf) {
  size_t n = strlen(s), m = strlen(suf);
  return n >= m && !strcmp(s + n - m, suf);
}

/* Configuration and input errors found before any stage ran, and a stage
 * refusing its input or options (decode on a file that is not audio): exit 2. */
static int is_usage_error(const ebb_job_result *res) {
  if (res->stage[0])
    return res->code == EBB_EINPUT || res->code == EBB_ECONFIG;
  return ebb_exit_status(res->code) == EBB_EXIT_USAGE;
}

/* mkdir -p of path's directory; failures show up when the file is opened. */
static void make_parent_dirs(const char *path) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", path);
  char *slash = strrchr(tmp, '/');
  if (!slash || slash == tmp)
    return;
  *slash = '\0';
  for (char *q = tmp + 1; *q; q++)
    if (*q == '/') {
      *q = '\0';
      mkdir(tmp, 0755);
      *q = '/';
    }
  mkdir(tmp, 0755);
}

int ebb_cmd_run(int argc, char **argv) {
  static const struct option longopts[] = {
      {"pipeline", required_argument, NULL, 'p'}, {"config", required_argument, NULL, 'c'},
      {"output", required_argument, NULL, 'o'},   {"device", required_argument, NULL, 'd'},
      {"release", required_argument, NULL, 'r'},  {"timeline", required_argument, NULL, 't'},
      {"log-format", required_argument, NULL, 'l'}, {"cache-dir", required_argument, NULL, 'C'},
      {"no-cache", no_argument, NULL, 'N'},       {"help", no_argument, NULL, 'h'},
      {"cache", no_argument, NULL, 'K'},
      {"verbose", no_argument, NULL, 'v'},
      {NULL, 0, NULL, 0}};
  const char *pipeline = NULL, *config = NULL, *outdir = NULL, *device = "auto";
  const char *release = NULL, *timeline = NULL, *logfmt = "text", *cache_dir = NULL;
  int no_cache = 0, use_cache = 0, verbose = 0, c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":o:hv", longopts, NULL)) != -1) {
    switch (c) {
    case 'p': pipeline = optarg; break;
    case 'c': config = optarg; break;
    case 'o': outdir = optarg; break;
    case 'd': device = optarg; break;
    case 'r': release = optarg; break;
    case 't': timeline = optarg; break;
    case 'l': logfmt = optarg; break;
    case 'C': cache_dir = optarg; use_cache = 1; break;
    case 'K': use_cache = 1; break;
    case 'N': no_cache = 1; break;
    case 'v': verbose = 1; break;
    case 'h': usage(stdout); return EBB_EXIT_OK;
    case ':':
      fprintf(stderr, "ebb run: %s needs a value (see ebb run --help)\n", argv[optind - 1]);
      return EBB_EXIT_USAGE;
    default:
      fprintf(stderr, "ebb run: unknown option '%s' (see ebb run --help)\n", argv[optind - 1]);
      return EBB_EXIT_USAGE;
    }
  }
  if (!pipeline) {
    fprintf(stderr, "ebb run: --pipeline NAME is required (see `ebb pipelines`)\n");
    return EBB_EXIT_USAGE;
  }
  if (optind != argc - 1) {
    fprintf(stderr, "ebb run: expected exactly one INPUT file, got %d (see ebb run --help)\n",
            argc - optind);
    return EBB_EXIT_USAGE;
  }
  const char *input = argv[optind];
  ebb_policy policy;
  if (release && ebb_policy_parse(release, &policy) != 0) {
    fprintf(stderr, "ebb run: --release: %s\n", ebb_errmsg());
    return EBB_EXIT_USAGE;
  }
  if (timeline && (ends_with(timeline, ".svg") || ends_with(timeline, ".json"))) {
    /* find out now, not after the job, that the file cannot be written (its
     * directory is made like -o's, e.g. --timeline OUTDIR/timeline.svg) */
    make_parent_dirs(timeline);
    int existed = access(timeline, F_OK) == 0;
    FILE *tf = fopen(timeline, "a");
    if (!tf) {
      fprintf(stderr, "ebb run: --timeline %s: %s\n", timeline, strerror(errno));
      return EBB_EXIT_USAGE;
    }
    fclose(tf);
    if (!existed)
      unlink(timeline);
  }
  if (timeline && !ends_with(timeline, ".svg") && !ends_with(timeline, ".json")) {
    fprintf(stderr, "ebb run: --timeline %s: the file must end in .svg or .json\n", timeline);
    return EBB_EXIT_USAGE;
  }
  if (strcmp(logfmt, "text") && strcmp(logfmt, "json")) {
    fprintf(stderr, "ebb run: --log-format %s: expected text or json\n", logfmt);
    return EBB_EXIT_USAGE;
  }
  ebb_log_set_format(!strcmp(logfmt, "json") ? EBB_LOG_JSON : EBB_LOG_TEXT);
  if (verbose)
    ebb_log_set_level(EBB_LOG_DEBUG);
  char cachebuf[4096];
  if (no_cache)
    cache_dir = NULL;
  else if (!cache_dir)
    cache_dir = ebb_cache_default_dir(cachebuf, sizeof cachebuf);

  ebb_config *cfg = NULL;
  ebb_registry *reg = NULL;
  ebb_device *dev = NULL;
  ebb_allocator *alloc = NULL;
  ebb_runner *runner = NULL;
  int status = ebb_cli_load(config, &cfg, &reg);
  if (status)
    return status;
  status = EBB_EXIT_USAGE;
  const ebb_pipeline_def *p = ebb_config_pipeline(cfg, pipeline);
  if (!p) {
    char known[1024] = "";
    for (size_t i = 0; i < cfg->npipelines; i++)
      snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
               cfg->pipelines[i].name);
    fprintf(stderr, "ebb run: unknown pipeline '%s' (known: %s%s)\n", pipeline, known,
            config ? "" : "; pass --config FILE for others");
    goto out;
  }
  if (ebb_pipeline_check(reg, p) != 0) {
    fprintf(stderr, "ebb run: %s\n", ebb_errmsg());
    goto out;
  }
  if (access(input, R_OK) != 0) {
    fprintf(stderr, "ebb run: input %s: %s\n", input, strerror(errno));
    goto out;
  }

  status = EBB_EXIT_FAILED;
  int rc = ebb_device_open(device, &dev);
  if (rc) {
    fprintf(stderr, "ebb run: --device %s: %s\n", device, ebb_errmsg());
    /* a device that is not there (no driver, cuda:1 on a one-GPU box) is a
     * bad argument; a driver that fails is a failed job */
    status = ebb_exit_status(rc) == EBB_EXIT_USAGE ? EBB_EXIT_USAGE : EBB_EXIT_FAILED;
    goto out;
  }
  ebb_alloc_opts ao = {.size = sizeof ao, .seg_kind = EBB_SEG_AUTO, .backtraces = -1};
  if ((rc = ebb_allocator_create(dev, &ao, &alloc))) {
    fprintf(stderr, "ebb run: %s\n", ebb_errmsg());
    goto out;
  }
  ebb_runner_opts ro = {.size = sizeof ro, .dev = dev, .alloc = alloc, .reg = reg,
                        .cache_dir = cache_dir, .oneshot = 1,
                        .cache_default = use_cache};
  if ((rc = ebb_runner_create(&ro, &runner))) {
    fprintf(stderr, "ebb run: %s\n", ebb_errmsg());
    goto out;
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  progress pr = {.tty = isatty(2)};
  pthread_mutex_init(&pr.lock, NULL);
  pthread_cond_init(&pr.cond, NULL);
  pthread_t th;
  int have_thread = pr.tty && pthread_create(&th, NULL, progress_thread, &pr) == 0;
  FILE *logf = NULL;
  if (have_thread && isatty(1)) {
    cookie_io_functions_t io = {.write = log_write};
    if ((logf = fopencookie(&pr, "w", io))) {
      setvbuf(logf, NULL, _IOFBF, 8192);
      ebb_log_set_stream(logf);
    }
  }

  ebb_job job = {.size = sizeof job, .pipeline = p, .input = input, .output_dir = outdir,
                 .policy = release ? &policy : NULL, .cancel = &run_cancel,
                 .progress = progress_cb, .progress_arg = &pr};
  ebb_job_result res;
  rc = ebb_runner_run(runner, &job, &res);

  if (have_thread) {
    pthread_mutex_lock(&pr.lock);
    pr.stop = 1;
    pthread_cond_signal(&pr.cond);
    pthread_mutex_unlock(&pr.lock);
    pthread_join(th, NULL);
  }
  if (logf) {
    ebb_log_set_stream(NULL);
    fclose(logf);
  }
  pthread_cond_destroy(&pr.cond);
  pthread_mutex_destroy(&pr.lock);

  if (timeline && ebb_ledger_write(ebb_allocator_ledger(alloc), timeline) != 0)
    fprintf(stderr, "ebb run: --timeline %s: %s\n", timeline, ebb_errmsg());
  int sig = atomic_load(&run_cancel);
  if (rc == 0) {
    status = EBB_EXIT_OK;
  } else if (is_usage_error(&res)) {
    fprintf(stderr, "ebb run: %s\n", res.message);
    status = EBB_EXIT_USAGE;
  } else {
    if (sig)
      fprintf(stderr, "ebb run: job cancelled by %s: %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
              res.message);
    else
      fprintf(stderr, "ebb run: job failed: %s\n", res.message);
    status = EBB_EXIT_FAILED;
  }
out:
  ebb_runner_destroy(runner);
  ebb_allocator_destroy(alloc);
  ebb_device_close(dev);
  ebb_registry_destroy(reg);
  ebb_config_free(cfg);
  return status;
}
