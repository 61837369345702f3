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

#include "base/error.h"
#include "base/log.h"
#include "base/wait.h"
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
  fprintf(f, "usage: ebb run --pipeline NAME [--config FILE] INPUT [-o OUTDIR]\n"
             "               [--device auto|cpu|cuda|cuda:N]\n"
             "               [--release "
             "after-stage|after-job|idle:SECONDS|never|sleep|sleep:SECONDS]\n"
             "               [--timeline FILE.svg|FILE.json] [--log-format text|json]\n"
             "               [--cache] [--cache-dir DIR] [--no-cache] [--verbose]\n"
             "               [--set STAGE.OPTION=VALUE]... [--lyrics FILE]\n\n"
             "Runs INPUT through the pipeline's stages in order and gives device memory\n"
             "back to the driver after each stage (by default), logging\n"
             "  [STAGE] released N MiB of GPU memory\n\n"
             "  --pipeline NAME   a built-in pipeline (`ebb pipelines`) or one from --config\n"
             "  --config FILE     a JSON config with \"pipelines\" and \"plugin_dirs\"\n"
             "  -o, --output DIR  where outputs and result.json go (default: ebb-out)\n"
             "  --device SPEC     auto (default: the GPU with the most free memory, else the CPU), "
             "cpu, cuda, cuda:N\n"
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
             "  -v, --verbose     debug lines too (each release checked against the driver)\n"
             "  --set STAGE.OPTION=VALUE\n"
             "                    sets one option of the stage entry STAGE (repeatable; over\n"
             "                    the config's); VALUE is JSON (1, 0.5, true, \"text\") or else\n"
             "                    a string, checked like the config's options. On the command\n"
             "                    line you are the operator: operator-only options (`ebb\n"
             "                    stages`) may be set too\n"
             "  --lyrics FILE     the lyrics for the align stage (--set align.lyrics=FILE)\n\n"
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
    p->started = base_now();
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
              base_now() - p->started);
    base_cond_wait_ms(&p->cond, &p->lock, 200);
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
static int is_usage_error(const pl_job_result *res) {
  if (res->stage[0])
    return res->code == EBB_EINPUT || res->code == EBB_ECONFIG;
  return base_exit_status(res->code) == EBB_EXIT_USAGE;
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

/* --- the command line --------------------------------------------------------- */
typedef struct run_args {
  const char *pipeline, *config, *outdir, *device, *release, *timeline, *logfmt, *cache_dir;
  const char *input, *lyrics;
  const char *sets[64]; /* --set STAGE.OPTION=VALUE */
  int nsets;
  int no_cache, use_cache, verbose;
  pl_policy policy; /* when release */
  char cachebuf[4096];
} run_args;

/* Reads argv into a. Returns -1 to go on, else the exit status (--help, bad usage). */
static int parse_args(int argc, char **argv, run_args *a) {
  static const struct option longopts[] = {{"pipeline", required_argument, NULL, 'p'},
                                           {"config", required_argument, NULL, 'c'},
                                           {"output", required_argument, NULL, 'o'},
                                           {"device", required_argument, NULL, 'd'},
                                           {"release", required_argument, NULL, 'r'},
                                           {"timeline", required_argument, NULL, 't'},
                                           {"log-format", required_argument, NULL, 'l'},
                                           {"cache-dir", required_argument, NULL, 'C'},
                                           {"no-cache", no_argument, NULL, 'N'},
                                           {"help", no_argument, NULL, 'h'},
                                           {"cache", no_argument, NULL, 'K'},
                                           {"verbose", no_argument, NULL, 'v'},
                                           {"set", required_argument, NULL, 'S'},
                                           {"lyrics", required_argument, NULL, 'L'},
                                           {NULL, 0, NULL, 0}};
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":o:hv", longopts, NULL)) != -1) {
    switch (c) {
    case 'p': a->pipeline = optarg; break;
    case 'c': a->config = optarg; break;
    case 'o': a->outdir = optarg; break;
    case 'd': a->device = optarg; break;
    case 'r': a->release = optarg; break;
    case 't': a->timeline = optarg; break;
    case 'l': a->logfmt = optarg; break;
    case 'C':
      a->cache_dir = optarg;
      a->use_cache = 1;
      break;
    case 'K': a->use_cache = 1; break;
    case 'N': a->no_cache = 1; break;
    case 'v': a->verbose = 1; break;
    case 'L': a->lyrics = optarg; break;
    case 'S':
      if (a->nsets == (int)(sizeof a->sets / sizeof a->sets[0])) {
        fprintf(stderr, "ebb run: at most %zu --set options\n", sizeof a->sets / sizeof a->sets[0]);
        return EBB_EXIT_USAGE;
      }
      a->sets[a->nsets++] = optarg;
      break;
    case 'h': usage(stdout); return EBB_EXIT_OK;
    case ':':
      fprintf(stderr, "ebb run: %s needs a value (see ebb run --help)\n", argv[optind - 1]);
      return EBB_EXIT_USAGE;
    default:
      fprintf(stderr, "ebb run: unknown option '%s' (see ebb run --help)\n", argv[optind - 1]);
      return EBB_EXIT_USAGE;
    }
  }
  if (!a->pipeline) {
    fprintf(stderr, "ebb run: --pipeline NAME is required (see `ebb pipelines`)\n");
    return EBB_EXIT_USAGE;
  }
  if (optind != argc - 1) {
    fprintf(stderr, "ebb run: expected exactly one INPUT file, got %d (see ebb run --help)\n",
            argc - optind);
    return EBB_EXIT_USAGE;
  }
  a->input = argv[optind];
  return -1;
}

/* --timeline: a .svg or .json file that can be written. */
static int check_timeline(const char *timeline) {
  if (ends_with(timeline, ".svg") || ends_with(timeline, ".json")) {
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
    return -1;
  }
  fprintf(stderr, "ebb run: --timeline %s: the file must end in .svg or .json\n", timeline);
  return EBB_EXIT_USAGE;
}

/* Checks the values, sets up logging and the cache directory. Returns -1 to
 * go on, else the exit status. */
static int check_args(run_args *a) {
  if (a->release && pl_policy_parse(a->release, &a->policy) != 0) {
    fprintf(stderr, "ebb run: --release: %s\n", ebb_errmsg());
    return EBB_EXIT_USAGE;
  }
  int st = a->timeline ? check_timeline(a->timeline) : -1;
  if (st >= 0)
    return st;
  if (strcmp(a->logfmt, "text") && strcmp(a->logfmt, "json")) {
    fprintf(stderr, "ebb run: --log-format %s: expected text or json\n", a->logfmt);
    return EBB_EXIT_USAGE;
  }
  base_log_set_format(!strcmp(a->logfmt, "json") ? EBB_LOG_JSON : EBB_LOG_TEXT);
  if (a->verbose)
    base_log_set_level(EBB_LOG_DEBUG);
  if (a->no_cache)
    a->cache_dir = NULL;
  else if (!a->cache_dir)
    a->cache_dir = pl_cache_default_dir(a->cachebuf, sizeof a->cachebuf);
  return -1;
}

/* The stage entry of p named name (NULL: none). */
static pl_stage_def *stage_entry(pl_def *p, const char *name, size_t n) {
  for (size_t i = 0; i < p->nstages; i++)
    if (strlen(p->stages[i].name) == n && !strncmp(p->stages[i].name, name, n))
      return &p->stages[i];
  return NULL;
}

static void stage_names(const pl_def *p, char *buf, size_t n) {
  buf[0] = '\0';
  for (size_t i = 0; i < p->nstages; i++)
    snprintf(buf + strlen(buf), n - strlen(buf), "%s%s", i ? ", " : "", p->stages[i].name);
}

/* One --set STAGE.OPTION=VALUE onto the pipeline's stage options (checked
 * with the rest by pl_check). VALUE: JSON, else a string. */
static int apply_set(pl_def *p, const char *set) {
  const char *dot = strchr(set, '.'), *eq = strchr(set, '=');
  if (!dot || !eq || dot > eq || dot == set || eq == dot + 1) {
    fprintf(stderr,
            "ebb run: --set %s: expected STAGE.OPTION=VALUE (e.g. --set "
            "align.snap_ms=100)\n",
            set);
    return EBB_EXIT_USAGE;
  }
  pl_stage_def *d = stage_entry(p, set, (size_t)(dot - set));
  if (!d) {
    char known[1024];
    stage_names(p, known, sizeof known);
    fprintf(stderr, "ebb run: --set %s: pipeline '%s' has no stage '%.*s' (its stages: %s)\n", set,
            p->name, (int)(dot - set), set, known);
    return EBB_EXIT_USAGE;
  }
  char opt[256];
  snprintf(opt, sizeof opt, "%.*s", (int)(eq - dot - 1), dot + 1);
  json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, NULL);
  if (!v)
    v = json_string(eq + 1);
  if (!v || json_object_set_new(d->options, opt, v) != 0) {
    fprintf(stderr, "ebb run: --set %s: out of host memory\n", set);
    return EBB_EXIT_FAILED;
  }
  return -1;
}

/* --set and --lyrics onto the pipeline's definition (the config is this
 * run's own: on the command line the user is the operator). */
static int apply_sets(const run_args *a, pl_def *p) {
  for (int i = 0; i < a->nsets; i++) {
    int st = apply_set(p, a->sets[i]);
    if (st >= 0)
      return st;
  }
  if (!a->lyrics)
    return -1;
  for (size_t i = 0; i < p->nstages; i++)
    if (!strcmp(p->stages[i].stage, "align")) {
      if (access(a->lyrics, R_OK) != 0) {
        fprintf(stderr, "ebb run: --lyrics %s: %s\n", a->lyrics, strerror(errno));
        return EBB_EXIT_USAGE;
      }
      json_object_set_new(p->stages[i].options, "lyrics", json_string(a->lyrics));
      return -1;
    }
  fprintf(stderr, "ebb run: --lyrics: pipeline '%s' has no align stage\n", p->name);
  return EBB_EXIT_USAGE;
}

/* The pipeline (known and valid, with --set and --lyrics) and the input
 * (readable); *p gets it. Returns -1 to go on, else EBB_EXIT_USAGE. */
static int check_job(const run_args *a, const pl_config *cfg, const pl_registry *reg,
                     const pl_def **p) {
  if (!(*p = pl_config_pipeline(cfg, a->pipeline))) {
    char known[1024] = "";
    for (size_t i = 0; i < cfg->npipelines; i++)
      snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
               cfg->pipelines[i].name);
    fprintf(stderr, "ebb run: unknown pipeline '%s' (known: %s%s)\n", a->pipeline, known,
            a->config ? "" : "; pass --config FILE for others");
    return EBB_EXIT_USAGE;
  }
  int st = apply_sets(a, (pl_def *)*p); /* cfg is this run's own */
  if (st >= 0)
    return st;
  if (pl_check(reg, *p) != 0) {
    fprintf(stderr, "ebb run: %s\n", ebb_errmsg());
    return EBB_EXIT_USAGE;
  }
  if (access(a->input, R_OK) != 0) {
    fprintf(stderr, "ebb run: input %s: %s\n", a->input, strerror(errno));
    return EBB_EXIT_USAGE;
  }
  return -1;
}

/* --- the device ------------------------------------------------------------------ */
typedef struct run_env {
  pl_config *cfg;
  pl_registry *reg;
  dev_device *dev;
  mem_allocator *alloc;
  pl_runner *runner;
} run_env;

/* Device, allocator, runner. Returns -1 to go on, else the exit status. */
static int open_device(const run_args *a, const pl_registry *reg, run_env *e) {
  int rc = dev_open(a->device, &e->dev);
  if (rc) {
    fprintf(stderr, "ebb run: --device %s: %s\n", a->device, ebb_errmsg());
    /* a device that is not there (no driver, cuda:1 on a one-GPU box) is a
     * bad argument; a driver that fails is a failed job */
    return base_exit_status(rc) == EBB_EXIT_USAGE ? EBB_EXIT_USAGE : EBB_EXIT_FAILED;
  }
  mem_alloc_opts ao = {.size = sizeof ao, .seg_kind = EBB_SEG_AUTO, .backtraces = -1};
  if ((rc = mem_allocator_create(e->dev, &ao, &e->alloc))) {
    fprintf(stderr, "ebb run: %s\n", ebb_errmsg());
    return EBB_EXIT_FAILED;
  }
  pl_runner_opts ro = {.size = sizeof ro,
                       .dev = e->dev,
                       .alloc = e->alloc,
                       .reg = reg,
                       .cache_dir = a->cache_dir,
                       .oneshot = 1,
                       .cache_default = a->use_cache};
  if ((rc = pl_runner_create(&ro, &e->runner))) {
    fprintf(stderr, "ebb run: %s\n", ebb_errmsg());
    return EBB_EXIT_FAILED;
  }
  return -1;
}

/* --- the job ------------------------------------------------------------------- */
typedef struct progress_view {
  progress pr;
  pthread_t th;
  int have_thread;
  FILE *logf;
} progress_view;

/* The progress line on a terminal (stderr), with log lines routed around it. */
static void progress_start(progress_view *v) {
  v->pr = (progress){.tty = isatty(2)};
  pthread_mutex_init(&v->pr.lock, NULL);
  pthread_cond_init(&v->pr.cond, NULL);
  v->have_thread = v->pr.tty && pthread_create(&v->th, NULL, progress_thread, &v->pr) == 0;
  v->logf = NULL;
  if (v->have_thread && isatty(1)) {
    cookie_io_functions_t io = {.write = log_write};
    if ((v->logf = fopencookie(&v->pr, "w", io))) {
      setvbuf(v->logf, NULL, _IOFBF, 8192);
      base_log_set_stream(v->logf);
    }
  }
}

static void progress_stop(progress_view *v) {
  if (v->have_thread) {
    pthread_mutex_lock(&v->pr.lock);
    v->pr.stop = 1;
    pthread_cond_signal(&v->pr.cond);
    pthread_mutex_unlock(&v->pr.lock);
    pthread_join(v->th, NULL);
  }
  if (v->logf) {
    base_log_set_stream(NULL);
    fclose(v->logf);
  }
  pthread_cond_destroy(&v->pr.cond);
  pthread_mutex_destroy(&v->pr.lock);
}

/* Runs the job (SIGINT/SIGTERM cancel it) and answers the exit status. */
static int run_job(const run_args *a, const pl_def *p, run_env *e) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  progress_view v;
  progress_start(&v);
  pl_job job = {.size = sizeof job,
                .pipeline = p,
                .input = a->input,
                .output_dir = a->outdir,
                .policy = a->release ? &a->policy : NULL,
                .cancel = &run_cancel,
                .progress = progress_cb,
                .progress_arg = &v.pr};
  pl_job_result res;
  int rc = pl_runner_run(e->runner, &job, &res);
  progress_stop(&v);

  if (a->timeline && mem_ledger_write(mem_allocator_ledger(e->alloc), a->timeline) != 0)
    fprintf(stderr, "ebb run: --timeline %s: %s\n", a->timeline, ebb_errmsg());
  int sig = atomic_load(&run_cancel);
  if (rc == 0)
    return EBB_EXIT_OK;
  if (is_usage_error(&res)) {
    fprintf(stderr, "ebb run: %s\n", res.message);
    return EBB_EXIT_USAGE;
  }
  if (sig)
    fprintf(stderr, "ebb run: job cancelled by %s: %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
            res.message);
  else
    fprintf(stderr, "ebb run: job failed: %s\n", res.message);
  return EBB_EXIT_FAILED;
}

int cli_cmd_run(int argc, char **argv) {
  run_args a = {.device = "auto", .logfmt = "text"};
  int status = parse_args(argc, argv, &a);
  if (status < 0)
    status = check_args(&a);
  if (status >= 0)
    return status;
  run_env e = {0};
  if ((status = cli_load(a.config, &e.cfg, &e.reg)) != 0)
    return status;
  const pl_def *p = NULL;
  status = check_job(&a, e.cfg, e.reg, &p);
  if (status < 0)
    status = open_device(&a, e.reg, &e);
  if (status < 0)
    status = run_job(&a, p, &e);
  pl_runner_destroy(e.runner);
  mem_allocator_destroy(e.alloc);
  dev_close(e.dev);
  pl_registry_destroy(e.reg);
  pl_config_free(e.cfg);
  return status;
}
