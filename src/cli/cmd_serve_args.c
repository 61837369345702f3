/* `ebb serve`'s command line (cmd_serve.h): its --help text, each option
 * checked with an error that names it, and the config file's optional
 * "server" object. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "broker/broker.h"
#include "cli/cmd_serve.h"
#include "cli/commands.h"

static const char *const usage_text[] =
    {"usage: ebb serve [--config FILE] [--listen HOST:PORT] [--data-dir DIR]\n"
     "                 [--devices all|cuda:0,cuda:2|cpu] [--max-wait S] [--keep-resident S]\n"
     "                 [--release "
     "after-stage|after-job|idle:SECONDS|never|sleep|sleep:SECONDS]\n"
     "                 [--log-format text|json] [--cache-dir DIR | --no-cache]\n"
     "                 [--token-file FILE] [--metrics-public] [--allow-host NAME]...\n"
     "                 [--allow-origin ORIGIN]... [--max-queued N]\n"
     "                 [--max-queued-per-token N] [--queued-bytes SIZE]\n"
     "                 [--queued-bytes-per-token SIZE]\n"
     "                 [--input-dir DIR]... [--job-timeout S] [--max-job-seconds S]\n"
     "                 [--keep-jobs N|DURATION]\n"
     "                 [--sleep-host-budget SIZE] [--shutdown-grace S]\n"
     "                 [--queue redis://HOST:PORT[/DB] [--queue-prefix P] [--node-id ID]\n"
     "                  [--queue-password-file FILE] [--shared-dir DIR] [--inline-max-mib N]\n"
     "                  [--lease S] [--max-attempts N]]\n\n",
     "Serves the HTTP API of docs/api.md: jobs (queued, run one at a time), pipelines\n"
     "kept loaded for sessions, memory and metrics. The first line on stdout is\n"
     "  ebb: listening on http://HOST:PORT\n\n",
     "  --config FILE     pipelines (and an optional \"server\" object: max_json_kib,\n"
     "                    max_upload_mib, max_field_kib, max_lyrics_kib (lyrics sent\n"
     "                    with a job; default 256), load_wait_s, max_connections,\n"
     "                    max_connections_per_ip, idle_timeout_s, header_timeout_s,\n"
     "                    min_body_rate)\n"
     "  --listen H:P      address to listen on (default 127.0.0.1:8470; port 0: any free\n"
     "                    port, printed on the first line). An address other than\n"
     "                    loopback needs a token.\n"
     "  --data-dir DIR    job store (jobs.db), job and session files (default\n"
     "                    $XDG_DATA_HOME/ebb when XDG_DATA_HOME is set, else ./ebb-data);\n"
     "                    one server per directory\n",
     "  --devices LIST    all (default: every CUDA device, else the CPU), cpu, or a\n"
     "                    list cuda:0,cuda:2. With several devices each job goes where\n"
     "                    its pipeline is loaded or fits (docs/architecture.md,\n"
     "                    \"Placement\"), jobs on different devices run side by side\n"
     "  --device SPEC     one device: auto (the most free memory), cpu, cuda, cuda:N\n"
     "  --max-wait S      a job or session item that waits longer than S seconds\n"
     "                    for a device held by other work (a session item, a load)\n"
     "                    fails unrun (EBB_EBUSY, naming --max-wait); with several\n"
     "                    devices a job queued longer reserves the next device that\n"
     "                    can fit it (default 60)\n"
     "  --keep-resident S a pipeline a job loaded stays while jobs use it; idle S\n"
     "                    seconds with none of its jobs queued, it is released by\n"
     "                    its policy (asleep under sleep, else unloaded; idle:S and\n"
     "                    sleep:S give their own S; never keeps it). 0: as soon as\n"
     "                    no job of it is queued. Default: 300 with several devices;\n"
     "                    with one, off (a job leaves nothing loaded)\n"
     "  --release POLICY  default release policy for pipelines that set none\n"
     "  --log-format F    text (default) or json\n"
     "  --cache-dir DIR   stage result cache (default DATA_DIR/cache); --no-cache: none\n"
     "  --token-file FILE tokens, one per line: TOKEN [admin|submit] (also EBB_TOKEN,\n"
     "                    admin); requests send 'Authorization: Bearer TOKEN'\n"
     "  --metrics-public  /metrics without a token\n"
     "  --allow-host NAME a name the Host header may give besides IP addresses,\n"
     "                    localhost and the listen host (repeatable)\n"
     "  --allow-origin O  a browser origin (https://ebb.example.com) that may call the\n"
     "                    API besides the server's own (http, its host, its port);\n"
     "                    other Origins get 403 (repeatable)\n",
     "  --max-queued N    jobs waiting to run at most (default 10000); beyond it\n"
     "                    POST /v1/jobs gets 429 with Retry-After\n"
     "  --max-queued-per-token N  of them, one token's at most (default 1000; 429\n"
     "                    beyond it, the other tokens still submit)\n"
     "  --queued-bytes SIZE  files (inputs, lyrics, option files) the waiting jobs\n"
     "                    keep on disk at most (default 32GiB); beyond it 507\n"
     "  --queued-bytes-per-token SIZE  of them, one token's (default 8GiB; 429)\n"
     "  --input-dir DIR   JSON jobs may name files under DIR (repeatable); without it\n"
     "                    inputs are uploads\n"
     "  --job-timeout S   cancel and release a job or session item S seconds after\n"
     "                    its run started, not counting its wait for the device\n"
     "                    (default 86400; a pipeline's \"timeout_s\" wins, an item's\n"
     "                    ?timeout_s= may be shorter); the built-in stages stop\n"
     "                    within 100 ms of it, an isolated stage's worker is killed\n"
     "  --max-job-seconds S  refuse at submit (400, with the figures) a job whose\n"
     "                    stages estimate more than S CPU seconds of work on its\n"
     "                    input (default: on a CPU-only server the job's timeout,\n"
     "                    with a GPU none; 0: never refuse)\n",
     "  --shutdown-grace S  SIGINT/SIGTERM: the orderly stop gets S seconds (default\n"
     "                    10); past them (a plugin stage run in-process that ignores\n"
     "                    its cancellation) the server logs what held it and exits 1\n"
     "  --keep-jobs N|D   keep the newest N finished jobs, or those finished within\n"
     "                    D (30s, 90m, 12h, 7d); older ones and their files go\n"
     "  --sleep-host-budget SIZE  host memory the weights of sleeping pipelines may\n"
     "                    hold (512MiB, 16GiB; a plain number is MiB; default: no\n"
     "                    limit; with several devices, per device); beyond it the\n"
     "                    oldest sleeper there is unloaded instead\n",
     "  --queue URL       many nodes on one Redis (docs/scale-out.md): jobs, their state\n"
     "                    and results live there; any node answers for any job\n"
     "  --queue-prefix P  key prefix (default ebb); --node-id ID (default HOST-PID)\n"
     "  --queue-password-file FILE  Redis AUTH password (also EBB_QUEUE_PASSWORD)\n"
     "  --shared-dir DIR  a directory every node mounts: inputs over --inline-max-mib\n"
     "                    (default 16) and outputs go there\n"
     "  --lease S         a running job's lease (default 15): a node silent that long\n"
     "                    loses the job to another; --max-attempts N (default 3)\n"
     "  --broker-dir DIR  where this server registers for peers sharing its GPU\n"
     "                    (docs/broker.md; default $XDG_RUNTIME_DIR/ebb, else /run/ebb)\n"
     "  --broker-group G  share the broker directory with the processes of group G\n"
     "  --broker-timeout S  skip a peer silent for S seconds (default 2)\n"
     "  --reserve MIB     device memory this server never gives to a peer (default 0)\n"
     "  -v, --verbose     debug lines too\n\n",
     "SIGINT/SIGTERM stop the server: the running job goes back to the queue, every\n"
     "pipeline is unloaded and all device memory (the context too) goes back; exit 0.\n"};

static void usage(FILE *f) {
  for (size_t i = 0; i < sizeof usage_text / sizeof *usage_text; i++)
    fputs(usage_text[i], f);
}

/* One number of the config's "server" object. */
static int server_key(const char *key, double v, srv_opts *so, pl_manager_opts *mo) {
  if (!strcmp(key, "max_json_kib"))
    so->max_json_bytes = (size_t)(v * 1024);
  else if (!strcmp(key, "max_upload_mib"))
    so->max_upload_bytes = (size_t)(v * 1024 * 1024);
  else if (!strcmp(key, "max_field_kib"))
    so->max_field_bytes = (size_t)(v * 1024);
  else if (!strcmp(key, "max_lyrics_kib"))
    so->max_lyrics_bytes = (size_t)(v * 1024);
  else if (!strcmp(key, "load_wait_s"))
    mo->load_wait_s = v;
  else if (!strcmp(key, "max_connections"))
    so->max_connections = (unsigned)v;
  else if (!strcmp(key, "max_connections_per_ip"))
    so->max_per_ip = (unsigned)v;
  else if (!strcmp(key, "idle_timeout_s"))
    so->idle_timeout_s = v;
  else if (!strcmp(key, "header_timeout_s"))
    so->header_timeout_s = v;
  else if (!strcmp(key, "min_body_rate"))
    so->min_body_rate = v;
  else
    return -1;
  return 0;
}

/* The optional "server" object of the config file. */
int cli_serve_server_config(const char *path, srv_opts *so, pl_manager_opts *mo) {
  if (!path)
    return 0;
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root)
    return 0; /* cli_load reported it already */
  json_t *sv = json_object_get(root, "server");
  int rc = 0;
  if (sv && !json_is_object(sv)) {
    fprintf(stderr, "ebb serve: %s: \"server\" must be an object\n", path);
    rc = -1;
  }
  const char *key;
  json_t *v;
  json_object_foreach(sv, key, v) {
    if (!json_is_number(v) || json_number_value(v) <= 0 || json_number_value(v) > 1e12) {
      fprintf(stderr, "ebb serve: %s: \"server\".\"%s\" must be a positive number\n", path, key);
      rc = -1;
    } else if (server_key(key, json_number_value(v), so, mo) != 0) {
      fprintf(stderr,
              "ebb serve: %s: unknown key \"server\".\"%s\" (known: max_json_kib, "
              "max_upload_mib, max_field_kib, max_lyrics_kib, load_wait_s, "
              "max_connections, "
              "max_connections_per_ip, idle_timeout_s, header_timeout_s, "
              "min_body_rate)\n",
              path, key);
      rc = -1;
    }
  }
  json_decref(root);
  return rc;
}

/* "30", "30s", "90m", "12h", "7d" -> seconds; a plain number for
 * --keep-jobs is a count. */
static int parse_keep(const char *v, srv_opts *so) {
  char *end;
  errno = 0;
  double n = strtod(v, &end);
  if (end == v || errno || n <= 0 || n > 1e12)
    return -1;
  double mul = !*end               ? 0
               : !strcmp(end, "s") ? 1
               : !strcmp(end, "m") ? 60
               : !strcmp(end, "h") ? 3600
               : !strcmp(end, "d") ? 86400
                                   : -1;
  if (mul < 0)
    return -1;
  if (mul == 0) {
    if (n != (double)(uint64_t)n)
      return -1;
    so->keep_jobs = (uint64_t)n;
  } else
    so->keep_jobs_s = n * mul;
  return 0;
}

static int parse_seconds(const char *v, double *out) {
  char *end;
  errno = 0;
  double n = strtod(v, &end);
  if (end == v || *end || errno || n <= 0 || n > 31536000.0)
    return -1;
  *out = n;
  return 0;
}

/* FLAG's seconds into *out; else the usage error "expected " EXPECT. */
static int seconds_opt(const char *flag, const char *v, double *out, const char *expect) {
  if (parse_seconds(v, out) == 0)
    return 0;
  fprintf(stderr, "ebb serve: %s %s: expected %s\n", flag, v, expect);
  return EBB_EXIT_USAGE;
}

/* A queue count: a whole number 1..100000000, no sign, no suffix. */
static int parse_count(const char *v, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (!(v[0] >= '1' && v[0] <= '9' && !*end && !errno && n <= 100000000ull))
    return -1;
  *out = (size_t)n;
  return 0;
}

static int add_list(const char **list, size_t *n, const char *v, const char *flag) {
  if (*n == MAX_LIST) {
    fprintf(stderr, "ebb serve: at most %d %s\n", MAX_LIST, flag);
    return -1;
  }
  list[(*n)++] = v;
  return 0;
}

/* "512" (MiB), "512MiB", "16GiB", "2TiB" -> bytes. */
static int parse_size(const char *v, uint64_t *out) {
  char *end;
  errno = 0;
  double n = strtod(v, &end);
  if (end == v || errno || n < 0 || n > 1e9)
    return -1;
  double mul = !*end || !strcmp(end, "MiB") ? 1048576.0
               : !strcmp(end, "GiB")        ? 1073741824.0
               : !strcmp(end, "TiB")        ? 1099511627776.0
                                            : -1;
  if (mul < 0)
    return -1;
  *out = (uint64_t)(n * mul);
  return 0;
}

enum {
  O_TOKEN = 256,
  O_METRICS,
  O_ALLOW,
  O_INPUT,
  O_JOBTO,
  O_KEEP,
  O_DEVICES,
  O_MAXWAIT,
  O_SLEEPB,
  O_RESIDENT,
  O_QUEUE,
  O_QPREFIX,
  O_QPASS,
  O_SHARED,
  O_NODE,
  O_INLINE,
  O_LEASE,
  O_ATTEMPTS,
  O_ORIGIN,
  O_MAXQ,
  O_MAXQ_TOKEN,
  O_QBYTES,
  O_QBYTES_TOKEN,
  O_GRACE,
  O_MAXJOB,
  O_BROKER_DIR,
  O_BROKER_GROUP,
  O_BROKER_TIMEOUT,
  O_RESERVE
}; /* last 4: the broker */

static int cluster_number(serve_args *a, int c, const char *v) {
  double n;
  const char *flag = c == O_INLINE  ? "--inline-max-mib"
                     : c == O_LEASE ? "--lease"
                                    : "--max-attempts";
  if (parse_seconds(v, &n) != 0 || (c == O_ATTEMPTS && (n != (int)n || n > 100)) ||
      (c == O_INLINE && n > 512)) {
    fprintf(stderr, "ebb serve: %s %s: expected a number > 0%s\n", flag, v,
            c == O_ATTEMPTS ? " (a whole number up to 100)"
            : c == O_INLINE ? " (MiB, up to 512: Redis strings stop there)"
                            : "");
    return EBB_EXIT_USAGE;
  }
  if (c == O_INLINE)
    a->co.inline_max = (size_t)(n * 1024 * 1024);
  else if (c == O_LEASE)
    a->co.lease_s = n;
  else
    a->co.max_attempts = (int)n;
  return 0;
}

/* The --queue flags: the URL parses, the flags that need it have it, the
 * node id is a label, the password file reads. */
static int cluster_args(serve_args *a) {
  srv_cluster_opts *co = &a->co;
  if (!co->url) {
    if (co->prefix || a->pw_file || co->shared_dir || co->node_id || co->inline_max ||
        co->lease_s > 0 || co->max_attempts) {
      fprintf(stderr, "ebb serve: --queue-prefix, --queue-password-file, --shared-dir, "
                      "--node-id, --inline-max-mib, --lease and --max-attempts need --queue\n");
      return EBB_EXIT_USAGE;
    }
    return 0;
  }
  char host[256], pw[256];
  int port, db;
  if (srv_cluster_parse_url(co->url, host, sizeof host, &port, &db, pw, sizeof pw) != 0) {
    fprintf(stderr, "ebb serve: %s\n", ebb_errmsg());
    return EBB_EXIT_USAGE;
  }
  for (const char *p = co->node_id; p && *p; p++)
    if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", *p)) {
      fprintf(stderr, "ebb serve: --node-id %s: use letters, digits, '.', '_', '-'\n", co->node_id);
      return EBB_EXIT_USAGE;
    }
  const char *env = getenv("EBB_QUEUE_PASSWORD");
  if (a->pw_file) {
    FILE *f = fopen(a->pw_file, "r");
    if (!f || !fgets(a->pw, sizeof a->pw, f)) {
      fprintf(stderr, "ebb serve: --queue-password-file %s: %s\n", a->pw_file,
              f ? "empty" : strerror(errno));
      if (f)
        fclose(f);
      return EBB_EXIT_USAGE;
    }
    fclose(f);
    a->pw[strcspn(a->pw, "\r\n")] = '\0';
    co->password = a->pw;
  } else if (env && *env)
    co->password = env;
  struct stat st;
  if (co->shared_dir && (stat(co->shared_dir, &st) != 0 || !S_ISDIR(st.st_mode))) {
    fprintf(stderr, "ebb serve: --shared-dir %s: not a directory\n", co->shared_dir);
    return EBB_EXIT_USAGE;
  }
  a->so.cluster = co;
  return 0;
}

/* The queue's fair limits (src/server/fairness.c): --max-queued-per-token,
 * --queued-bytes, --queued-bytes-per-token. */
static int fair_opt(serve_args *a, int c, const char *v) {
  if (c == O_MAXQ_TOKEN && parse_count(v, &a->so.max_queued_per_token) == 0)
    return 0;
  uint64_t b = 0;
  if (c != O_MAXQ_TOKEN && parse_size(v, &b) == 0 && b > 0) {
    *(c == O_QBYTES ? &a->so.queued_bytes : &a->so.queued_bytes_per_token) = b;
    return 0;
  }
  fprintf(stderr, "ebb serve: %s %s: expected %s\n",
          c == O_MAXQ_TOKEN ? "--max-queued-per-token"
          : c == O_QBYTES   ? "--queued-bytes"
                            : "--queued-bytes-per-token",
          v,
          c == O_MAXQ_TOKEN ? "a whole number 1..100000000"
                            : "a size > 0 (512MiB, 16GiB, 2TiB; a plain number is MiB)");
  return EBB_EXIT_USAGE;
}

/* --broker-dir, --broker-group, --broker-timeout, --reserve (docs/broker.md). */
static int broker_opt(serve_args *a, int c, const char *v) {
  gid_t g;
  switch (c) {
  case O_BROKER_DIR: a->broker.dir = v; return 0;
  case O_BROKER_GROUP:
    if (brk_dir_group(v, &g) == 0) {
      a->broker.group = v;
      return 0;
    }
    fprintf(stderr, "ebb serve: --broker-group %s: no such group\n", v);
    return EBB_EXIT_USAGE;
  case O_BROKER_TIMEOUT:
    return seconds_opt("--broker-timeout", v, &a->broker.timeout_s, "seconds > 0");
  default:
    if (cli_parse_bytes(v, &a->broker.reserve) == 0) {
      if (!strpbrk(v, "KkMmGgTt")) /* a plain number is MiB */
        a->broker.reserve <<= 20;
      return 0;
    }
    fprintf(stderr, "ebb serve: --reserve %s: expected MiB (a number) or a size (8GiB)\n", v);
    return EBB_EXIT_USAGE;
  }
}

#define YEAR_S "seconds > 0 (at most a year)"

/* The options that take a count, seconds or a size. */
static int number_opt(serve_args *a, int c, const char *v) {
  switch (c) {
  case O_MAXQ:
    if (parse_count(v, &a->so.max_queued) == 0)
      return 0;
    fprintf(stderr, "ebb serve: --max-queued %s: expected a whole number 1..100000000\n", v);
    return EBB_EXIT_USAGE;
  case O_MAXJOB:
    if (!strcmp(v, "0")) {
      a->so.max_job_s = -1.0; /* never refuse by estimate */
      return 0;
    }
    return seconds_opt("--max-job-seconds", v, &a->so.max_job_s,
                       YEAR_S ", or 0 for no refusal by estimate");
  case O_JOBTO: return seconds_opt("--job-timeout", v, &a->so.job_timeout_s, YEAR_S);
  case O_GRACE: return seconds_opt("--shutdown-grace", v, &a->grace_s, YEAR_S);
  case O_KEEP:
    if (parse_keep(v, &a->so) == 0)
      return 0;
    fprintf(stderr,
            "ebb serve: --keep-jobs %s: expected a count (100) or a duration (30s, "
            "90m, 12h, 7d)\n",
            v);
    return EBB_EXIT_USAGE;
  case O_MAXWAIT: return seconds_opt("--max-wait", v, &a->so.max_wait_s, "seconds > 0");
  case O_RESIDENT:
    if (!strcmp(v, "0")) {
      a->so.keep_resident_s = 1e-9; /* at once */
      return 0;
    }
    return seconds_opt("--keep-resident", v, &a->so.keep_resident_s, "seconds >= 0");
  default:
    if (parse_size(v, &a->sleep_budget) == 0)
      return 0;
    fprintf(stderr,
            "ebb serve: --sleep-host-budget %s: expected a size (512MiB, 16GiB; a plain "
            "number is MiB)\n",
            v);
    return EBB_EXIT_USAGE;
  }
}

/* One option; 0 to go on, else the exit status (-1: --help). */
static int take_opt(serve_args *a, int c, char **argv) {
  switch (c) {
  case 'c': a->config = optarg; return 0;
  case 'L': a->listen = optarg; return 0;
  case 'D': a->data_dir = optarg; return 0;
  case 'd': a->device = optarg; return 0;
  case 'r': a->release = optarg; return 0;
  case 'l': a->logfmt = optarg; return 0;
  case 'C': a->cache_dir = optarg; return 0;
  case 'N': a->no_cache = 1; return 0;
  case 'v': a->verbose = 1; return 0;
  case O_TOKEN: a->so.token_file = optarg; return 0;
  case O_METRICS: a->so.metrics_public = 1; return 0;
  case O_ALLOW: return add_list(a->allow, &a->nallow, optarg, "--allow-host") ? EBB_EXIT_USAGE : 0;
  case O_INPUT: return add_list(a->inputs, &a->ninputs, optarg, "--input-dir") ? EBB_EXIT_USAGE : 0;
  case O_ORIGIN:
    return add_list(a->origins, &a->norigins, optarg, "--allow-origin") ? EBB_EXIT_USAGE : 0;
  case O_MAXQ:
  case O_MAXJOB:
  case O_JOBTO:
  case O_GRACE:
  case O_KEEP:
  case O_MAXWAIT:
  case O_RESIDENT:
  case O_SLEEPB: return number_opt(a, c, optarg);
  case O_DEVICES: a->devices = optarg; return 0;
  case O_QUEUE: a->co.url = optarg; return 0;
  case O_QPREFIX: a->co.prefix = optarg; return 0;
  case O_QPASS: a->pw_file = optarg; return 0;
  case O_SHARED: a->co.shared_dir = optarg; return 0;
  case O_NODE: a->co.node_id = optarg; return 0;
  case O_INLINE:
  case O_LEASE:
  case O_ATTEMPTS: return cluster_number(a, c, optarg);
  case O_BROKER_DIR:
  case O_BROKER_GROUP:
  case O_BROKER_TIMEOUT:
  case O_RESERVE: return broker_opt(a, c, optarg);
  case O_MAXQ_TOKEN:
  case O_QBYTES:
  case O_QBYTES_TOKEN: return fair_opt(a, c, optarg);
  case 'h': usage(stdout); return -1;
  case ':':
    fprintf(stderr, "ebb serve: %s needs a value (see ebb serve --help)\n", argv[optind - 1]);
    return EBB_EXIT_USAGE;
  default:
    fprintf(stderr, "ebb serve: unknown option '%s' (see ebb serve --help)\n", argv[optind - 1]);
    return EBB_EXIT_USAGE;
  }
}

int cli_serve_parse_args(int argc, char **argv, serve_args *a) {
  static const struct option longopts[] =
      {{"config", required_argument, NULL, 'c'},
       {"listen", required_argument, NULL, 'L'},
       {"data-dir", required_argument, NULL, 'D'},
       {"device", required_argument, NULL, 'd'},
       {"release", required_argument, NULL, 'r'},
       {"log-format", required_argument, NULL, 'l'},
       {"cache-dir", required_argument, NULL, 'C'},
       {"no-cache", no_argument, NULL, 'N'},
       {"help", no_argument, NULL, 'h'},
       {"verbose", no_argument, NULL, 'v'},
       {"token-file", required_argument, NULL, O_TOKEN},
       {"metrics-public", no_argument, NULL, O_METRICS},
       {"allow-host", required_argument, NULL, O_ALLOW},
       {"allow-origin", required_argument, NULL, O_ORIGIN},
       {"max-queued", required_argument, NULL, O_MAXQ},
       {"max-queued-per-token", required_argument, NULL, O_MAXQ_TOKEN},
       {"queued-bytes", required_argument, NULL, O_QBYTES},
       {"queued-bytes-per-token", required_argument, NULL, O_QBYTES_TOKEN},
       {"input-dir", required_argument, NULL, O_INPUT},
       {"job-timeout", required_argument, NULL, O_JOBTO},
       {"max-job-seconds", required_argument, NULL, O_MAXJOB},
       {"keep-jobs", required_argument, NULL, O_KEEP},
       {"devices", required_argument, NULL, O_DEVICES},
       {"max-wait", required_argument, NULL, O_MAXWAIT},
       {"keep-resident", required_argument, NULL, O_RESIDENT},
       {"sleep-host-budget", required_argument, NULL, O_SLEEPB},
       {"queue", required_argument, NULL, O_QUEUE},
       {"queue-prefix", required_argument, NULL, O_QPREFIX},
       {"queue-password-file", required_argument, NULL, O_QPASS},
       {"shared-dir", required_argument, NULL, O_SHARED},
       {"node-id", required_argument, NULL, O_NODE},
       {"inline-max-mib", required_argument, NULL, O_INLINE},
       {"lease", required_argument, NULL, O_LEASE},
       {"max-attempts", required_argument, NULL, O_ATTEMPTS},
       {"shutdown-grace", required_argument, NULL, O_GRACE},
       {"broker-dir", required_argument, NULL, O_BROKER_DIR},
       {"broker-group", required_argument, NULL, O_BROKER_GROUP},
       {"broker-timeout", required_argument, NULL, O_BROKER_TIMEOUT},
       {"reserve", required_argument, NULL, O_RESERVE},
       {NULL, 0, NULL, 0}};
  int c, st;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":hv", longopts, NULL)) != -1)
    if ((st = take_opt(a, c, argv)) != 0)
      return st;
  if (optind != argc) {
    fprintf(stderr, "ebb serve: unexpected argument '%s' (see ebb serve --help)\n", argv[optind]);
    return EBB_EXIT_USAGE;
  }
  if (a->release && pl_policy_parse(a->release, &a->policy) != 0) {
    fprintf(stderr, "ebb serve: --release: %s\n", ebb_errmsg());
    return EBB_EXIT_USAGE;
  }
  if ((st = cluster_args(a)) != 0)
    return st;
  if (strcmp(a->logfmt, "text") && strcmp(a->logfmt, "json")) {
    fprintf(stderr, "ebb serve: --log-format %s: expected text or json\n", a->logfmt);
    return EBB_EXIT_USAGE;
  }
  return 0;
}
