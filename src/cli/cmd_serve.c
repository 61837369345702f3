/* `ebb serve`: the long-lived server (src/server/, docs/api.md). One device,
 * one allocator, one pipeline manager; jobs run one at a time.
 * SIGINT/SIGTERM: stop accepting, cancel the running job and session items,
 * unload every pipeline, release everything (the device context included),
 * exit 0. */
#include <errno.h>
#include <pthread.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/log.h"
#include "cli/commands.h"
#include "pipeline/config.h"
#include "pipeline/manager.h"
#include "pipeline/registry.h"
#include "server/server.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: ebb serve [--config FILE] [--listen HOST:PORT] [--data-dir DIR]\n"
          "                 [--device auto|cpu|cuda|cuda:N]\n"
          "                 [--release after-stage|after-job|idle:SECONDS|never]\n"
          "                 [--log-format text|json] [--cache-dir DIR | --no-cache]\n\n"
          "Serves the HTTP API of docs/api.md: jobs (queued, run one at a time), pipelines\n"
          "kept loaded for sessions, memory and metrics. The first line on stdout is\n"
          "  ebb: listening on http://HOST:PORT\n\n"
          "  --config FILE     pipelines (and an optional \"server\" object: max_json_kib,\n"
          "                    max_upload_mib, load_wait_s)\n"
          "  --listen H:P      address to listen on (default 127.0.0.1:8470; port 0: any free\n"
          "                    port, printed on the first line)\n"
          "  --data-dir DIR    job store (jobs.db), job and session files (default\n"
          "                    $XDG_DATA_HOME/ebb when XDG_DATA_HOME is set, else ./ebb-data)\n"
          "  --device SPEC     auto (default), cpu, cuda, cuda:N\n"
          "  --release POLICY  default release policy for pipelines that set none\n"
          "  --log-format F    text (default) or json\n"
          "  --cache-dir DIR   stage result cache (default DATA_DIR/cache); --no-cache: none\n"
          "  -v, --verbose     debug lines too\n\n"
          "SIGINT/SIGTERM stop the server: the running job is cancelled, every pipeline is\n"
          "unloaded and all device memory (the context too) goes back; exit status 0.\n");
}

/* Log lines written before the server listens (the device note of `auto`
 * falling back to the CPU, config warnings) wait here, so that the listening
 * line is the first line on stdout. */
static FILE *early;
static char *early_buf;
static size_t early_len;

static void flush_early(void) {
  if (!early)
    return;
  ebb_log_set_stream(NULL);
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

/* The optional "server" object of the config file. */
static int server_config(const char *path, ebb_server_opts *so, ebb_manager_opts *mo) {
  if (!path)
    return 0;
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root)
    return 0; /* ebb_cli_load reported it already */
  json_t *sv = json_object_get(root, "server");
  int rc = 0;
  if (sv && !json_is_object(sv)) {
    fprintf(stderr, "ebb serve: %s: \"server\" must be an object\n", path);
    rc = -1;
  }
  const char *key;
  json_t *v;
  json_object_foreach(sv, key, v) {
    if (!json_is_number(v) || json_number_value(v) <= 0) {
      fprintf(stderr, "ebb serve: %s: \"server\".\"%s\" must be a positive number\n", path, key);
      rc = -1;
    } else if (!strcmp(key, "max_json_kib"))
      so->max_json_bytes = (size_t)(json_number_value(v) * 1024);
    else if (!strcmp(key, "max_upload_mib"))
      so->max_upload_bytes = (size_t)(json_number_value(v) * 1024 * 1024);
    else if (!strcmp(key, "load_wait_s"))
      mo->load_wait_s = json_number_value(v);
    else {
      fprintf(stderr, "ebb serve: %s: unknown key \"server\".\"%s\" (known: max_json_kib, "
                      "max_upload_mib, load_wait_s)\n", path, key);
      rc = -1;
    }
  }
  json_decref(root);
  return rc;
}

int ebb_cmd_serve(int argc, char **argv) {
  static const struct option longopts[] = {
      {"config", required_argument, NULL, 'c'},     {"listen", required_argument, NULL, 'L'},
      {"data-dir", required_argument, NULL, 'D'},   {"device", required_argument, NULL, 'd'},
      {"release", required_argument, NULL, 'r'},    {"log-format", required_argument, NULL, 'l'},
      {"cache-dir", required_argument, NULL, 'C'},  {"no-cache", no_argument, NULL, 'N'},
      {"help", no_argument, NULL, 'h'},             {"verbose", no_argument, NULL, 'v'},
      {NULL, 0, NULL, 0}};
  const char *config = NULL, *listen = "127.0.0.1:8470", *data_dir = NULL, *device = "auto";
  const char *release = NULL, *logfmt = "text", *cache_dir = NULL;
  int no_cache = 0, verbose = 0, c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":hv", longopts, NULL)) != -1) {
    switch (c) {
    case 'c': config = optarg; break;
    case 'L': listen = optarg; break;
    case 'D': data_dir = optarg; break;
    case 'd': device = optarg; break;
    case 'r': release = optarg; break;
    case 'l': logfmt = optarg; break;
    case 'C': cache_dir = optarg; break;
    case 'N': no_cache = 1; break;
    case 'v': verbose = 1; break;
    case 'h': usage(stdout); return EBB_EXIT_OK;
    case ':':
      fprintf(stderr, "ebb serve: %s needs a value (see ebb serve --help)\n", argv[optind - 1]);
      return EBB_EXIT_USAGE;
    default:
      fprintf(stderr, "ebb serve: unknown option '%s' (see ebb serve --help)\n",
              argv[optind - 1]);
      return EBB_EXIT_USAGE;
    }
  }
  if (optind != argc) {
    fprintf(stderr, "ebb serve: unexpected argument '%s' (see ebb serve --help)\n", argv[optind]);
    return EBB_EXIT_USAGE;
  }
  ebb_policy policy;
  if (release && ebb_policy_parse(release, &policy) != 0) {
    fprintf(stderr, "ebb serve: --release: %s\n", ebb_errmsg());
    return EBB_EXIT_USAGE;
  }
  if (strcmp(logfmt, "text") && strcmp(logfmt, "json")) {
    fprintf(stderr, "ebb serve: --log-format %s: expected text or json\n", logfmt);
    return EBB_EXIT_USAGE;
  }
  ebb_log_set_format(!strcmp(logfmt, "json") ? EBB_LOG_JSON : EBB_LOG_TEXT);
  if (verbose)
    ebb_log_set_level(EBB_LOG_DEBUG);
  char dd[4096];
  if (!data_dir) {
    const char *xdg = getenv("XDG_DATA_HOME");
    if (xdg && *xdg)
      snprintf(dd, sizeof dd, "%s/ebb", xdg);
    else
      snprintf(dd, sizeof dd, "ebb-data");
    data_dir = dd;
  }
  /* absolute, so job records and result file lists stay valid from anywhere */
  char abs_dd[4096];
  {
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", data_dir);
    for (char *q = tmp + 1; *q; q++)
      if (*q == '/') {
        *q = '\0';
        mkdir(tmp, 0755);
        *q = '/';
      }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
      fprintf(stderr, "ebb serve: --data-dir %s: %s\n", data_dir, strerror(errno));
      return EBB_EXIT_USAGE;
    }
  }
  if (realpath(data_dir, abs_dd))
    data_dir = abs_dd;
  char cd[4200];
  if (no_cache)
    cache_dir = NULL;
  else if (!cache_dir) {
    snprintf(cd, sizeof cd, "%s/cache", data_dir);
    cache_dir = cd;
  }

  if ((early = open_memstream(&early_buf, &early_len)))
    ebb_log_set_stream(early);
  ebb_config *cfg = NULL;
  ebb_registry *reg = NULL;
  ebb_device *dev = NULL;
  ebb_allocator *alloc = NULL;
  ebb_manager *m = NULL;
  ebb_server *srv = NULL;
  int status = ebb_cli_load(config, &cfg, &reg);
  if (status) {
    flush_early();
    return status;
  }
  ebb_server_opts so = {.size = sizeof so, .listen = listen, .data_dir = data_dir,
                        .on_listen = print_listen};
  ebb_manager_opts mo = {.size = sizeof mo, .cfg = cfg, .reg = reg, .work_dir = data_dir,
                         .cache_dir = cache_dir, .policy = release ? &policy : NULL};
  status = EBB_EXIT_USAGE;
  if (server_config(config, &so, &mo) != 0)
    goto out;
  for (size_t i = 0; i < cfg->npipelines; i++)
    if (ebb_pipeline_check(reg, &cfg->pipelines[i]) != 0)
      ebb_log(EBB_LOG_WARN, "server", "pipeline '%s' cannot run: %s", cfg->pipelines[i].name,
              ebb_errmsg());
  status = EBB_EXIT_FAILED;
  int rc = ebb_device_open(device, &dev);
  if (rc) {
    fprintf(stderr, "ebb serve: --device %s: %s\n", device, ebb_errmsg());
    status = rc == EBB_EINVAL ? EBB_EXIT_USAGE : EBB_EXIT_FAILED;
    goto out;
  }
  ebb_alloc_opts ao = {.size = sizeof ao, .seg_kind = EBB_SEG_AUTO, .backtraces = -1};
  if ((rc = ebb_allocator_create(dev, &ao, &alloc)) != 0) {
    fprintf(stderr, "ebb serve: %s\n", ebb_errmsg());
    goto out;
  }
  mo.dev = dev;
  mo.alloc = alloc;
  if ((rc = ebb_manager_create(&mo, &m)) != 0) {
    fprintf(stderr, "ebb serve: %s\n", ebb_errmsg());
    goto out;
  }
  /* The signals are taken by sigtimedwait below: every thread started from
   * here on inherits the mask. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);
  so.manager = m;
  so.alloc = alloc;
  if ((rc = ebb_server_start(&so, &srv)) != 0) {
    fprintf(stderr, "ebb serve: %s\n", ebb_errmsg());
    status = rc == EBB_EINVAL ? EBB_EXIT_USAGE : EBB_EXIT_FAILED;
    goto out;
  }
  ebb_log(EBB_LOG_INFO, "server", "device %s (%s), data in %s", ebb_device_label(dev),
          ebb_device_name(dev), data_dir);
  int sig;
  for (;;) {
    struct timespec ts = {1, 0};
    sig = sigtimedwait(&set, NULL, &ts);
    if (sig == SIGINT || sig == SIGTERM)
      break;
    ebb_manager_tick(m); /* idle:S stages whose time is up, then the context */
  }
  ebb_log(EBB_LOG_INFO, "server", "%s: stopping (cancelling the running job, releasing all)",
          sig == SIGINT ? "SIGINT" : "SIGTERM");
  ebb_server_stop(srv);
  srv = NULL;
  ebb_manager_destroy(m);
  m = NULL;
  ebb_alloc_stats st = {.size = sizeof st};
  ebb_allocator_get_stats(alloc, &st);
  ebb_log(EBB_LOG_INFO, "server", "stopped: %llu MiB reserved, context %s",
          (unsigned long long)(st.reserved.current >> 20), st.ctx_active ? "held" : "released");
  status = EBB_EXIT_OK;
out:
  flush_early(); /* when the server never listened */
  ebb_server_stop(srv);
  ebb_manager_destroy(m);
  ebb_allocator_destroy(alloc);
  ebb_device_close(dev);
  ebb_registry_destroy(reg);
  ebb_config_free(cfg);
  return status;
}
