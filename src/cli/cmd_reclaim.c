/* `ebb reclaim --device cuda:N --bytes SIZE`: asks every ebb on the device
 * for memory (docs/broker.md), most idle first, waits for the driver to
 * show it free, and prints what each peer gave back and what it keeps. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "broker/broker.h"
#include "server/server.h"
#include "device/nvml.h"
#include "cli/commands.h"
#include "ebb/error.h"

#define MIB(x) ((unsigned long long)((x) >> 20))

static void usage(FILE *f) {
  fprintf(f, "usage: ebb reclaim --device cuda:N --bytes SIZE [--broker-dir DIR]\n"
             "                   [--broker-timeout S] [--wait S] [--for PID] [--hold S]\n\n"
             "Asks the ebb processes using the device (docs/broker.md) to give memory back\n"
             "until SIZE bytes are free there, all at once; each gives by its own rules\n"
             "(caches, then idle pipelines: asleep or unloaded). Prints what each gave back,\n"
             "confirmed by the driver, and what each keeps and why.\n\n"
             "  --device cuda:N     the device\n"
             "  --bytes SIZE        free memory wanted there: 8G, 512MiB, or bytes\n"
             "  --broker-dir DIR    default $XDG_RUNTIME_DIR/ebb, else /run/ebb\n"
             "  --broker-timeout S  skip a peer that has not answered (committed what it will\n"
             "                      give) within S seconds (default 2); peers are asked at once\n"
             "  --wait S            this asker's deadline: how long it waits for what the\n"
             "                      peers committed and for the driver to show it free\n"
             "                      (default 5)\n"
             "  --for PID           the process that will allocate the bytes (default: the\n"
             "                      one that ran this): the bytes stay claimed for it, so\n"
             "                      another asker does not count them free, until its usage\n"
             "                      has grown by them, it exits, or --hold passes\n"
             "  --hold S            the claim's longest life (default 10)\n\n"
             "Exit status: 0 the bytes are free, 1 they could not all be had, 2 bad usage.\n");
}

typedef struct reclaim_args {
  const char *device, *bytes, *dir;
  double timeout_s, wait_s, hold_s;
  long holder;
} reclaim_args;

static int parse_secs(const char *flag, const char *v, double *out) {
  char *end = NULL;
  double x = strtod(v, &end);
  if (end && end != v && !*end && x > 0 && x <= 3600) {
    *out = x;
    return 0;
  }
  fprintf(stderr, "ebb reclaim: %s %s: expected seconds in (0, 3600]\n", flag, v);
  return EBB_EXIT_USAGE;
}

static int parse_pid(const char *v, long *out) {
  char *end = NULL;
  long x = strtol(v, &end, 10);
  if (end && end != v && !*end && x > 0 && x < (1L << 22) &&
      (kill((pid_t)x, 0) == 0 || errno == EPERM)) {
    *out = x;
    return 0;
  }
  fprintf(stderr, "ebb reclaim: --for %s: expected the pid of a running process\n", v);
  return EBB_EXIT_USAGE;
}

static int parse_args(int argc, char **argv, reclaim_args *a) {
  static const struct option lo[] = {{"device", required_argument, NULL, 'd'},
                                     {"bytes", required_argument, NULL, 'b'},
                                     {"broker-dir", required_argument, NULL, 'D'},
                                     {"broker-timeout", required_argument, NULL, 't'},
                                     {"wait", required_argument, NULL, 'w'},
                                     {"for", required_argument, NULL, 'f'},
                                     {"hold", required_argument, NULL, 'H'},
                                     {"help", no_argument, NULL, 'h'},
                                     {NULL, 0, NULL, 0}};
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
    int st = 0;
    switch (c) {
    case 'd': a->device = optarg; break;
    case 'b': a->bytes = optarg; break;
    case 'D': a->dir = optarg; break;
    case 't': st = parse_secs("--broker-timeout", optarg, &a->timeout_s); break;
    case 'w': st = parse_secs("--wait", optarg, &a->wait_s); break;
    case 'H': st = parse_secs("--hold", optarg, &a->hold_s); break;
    case 'f': st = parse_pid(optarg, &a->holder); break;
    case 'h': usage(stdout); return -1;
    case ':': fprintf(stderr, "ebb reclaim: %s needs a value\n", argv[optind - 1]); return 2;
    default:
      fprintf(stderr, "ebb reclaim: unknown option '%s' (see ebb reclaim --help)\n",
              argv[optind - 1]);
      return EBB_EXIT_USAGE;
    }
    if (st)
      return st;
  }
  if (optind != argc || !a->device || !a->bytes) {
    fprintf(stderr, "ebb reclaim: %s (see ebb reclaim --help)\n",
            optind != argc ? "unexpected argument" : "--device and --bytes are required");
    return EBB_EXIT_USAGE;
  }
  return 0;
}

static void print_peer(const brk_result_peer *p) {
  if (p->status) {
    printf("pid %ld skipped: %s\n", (long)p->pid, p->ans.err_msg);
    return;
  }
  printf("[broker] pid %ld (%s) gave back %llu MiB on %s in %.0f ms: %s\n", (long)p->pid,
         p->ans.what, MIB(p->ans.given_bytes), p->ans.label, p->ans.ms, p->ans.reason);
  for (size_t k = 0; k < p->ans.nkept; k++)
    printf("  pid %ld keeps %s (%llu MiB): %s\n", (long)p->pid, p->ans.kept[k].what,
           MIB(p->ans.kept[k].bytes), p->ans.kept[k].why);
}

static void print_claims(const reclaim_args *a, const brk_claims_seen *c) {
  if (!c->total)
    return;
  printf("%s: %llu MiB claimed by %zu other asker%s, not yet allocated (", a->device, MIB(c->bytes),
         c->total, c->total == 1 ? "" : "s");
  for (size_t i = 0; i < c->n; i++)
    printf("%spid %ld %llu MiB", i ? ", " : "", (long)c->claims[i].holder, MIB(c->claims[i].bytes));
  printf("%s): counted as taken\n", c->total > c->n ? ", ..." : "");
}

static int report(const reclaim_args *a, uint64_t want, const brk_reclaim_result *r) {
  print_claims(a, &r->earlier);
  for (size_t i = 0; i < r->npeers; i++)
    print_peer(&r->peers[i]);
  printf("%s: %llu MiB free (was %llu MiB), %llu MiB wanted: peers gave back %llu MiB", a->device,
         MIB(r->free_after), MIB(r->free_before), MIB(want), MIB(r->given_bytes));
  if (r->claimed_after)
    printf(" (%llu MiB of the free memory claimed by other askers)", MIB(r->claimed_after));
  if (r->satisfied) {
    printf("\n");
    return EBB_EXIT_OK;
  }
  uint64_t mine = r->free_after > r->claimed_after ? r->free_after - r->claimed_after : 0;
  printf("; %llu MiB still missing\n", MIB(want - mine));
  if (!r->npeers)
    printf("no ebb process on %s answered (broker directory: none registered)\n", a->device);
  return EBB_EXIT_FAILED;
}

int cli_cmd_reclaim(int argc, char **argv) {
  reclaim_args a = {0};
  int st = parse_args(argc, argv, &a);
  if (st)
    return st < 0 ? EBB_EXIT_OK : st;
  dev_nvml_ref dev = {0};
  uint64_t want;
  char *end = NULL, dir[512];
  dev.ordinal = strncmp(a.device, "cuda:", 5) ? -1 : (int)strtol(a.device + 5, &end, 10);
  if (dev.ordinal < 0 || !end || end == a.device + 5 || *end) {
    fprintf(stderr, "ebb reclaim: --device %s: expected cuda:N\n", a.device);
    return EBB_EXIT_USAGE;
  }
  if (cli_parse_bytes(a.bytes, &want) != 0 || !want) {
    fprintf(stderr, "ebb reclaim: --bytes %s: expected a size > 0 (8G, 512MiB, or bytes)\n",
            a.bytes);
    return EBB_EXIT_USAGE;
  }
  if (srv_cuda_uuid(dev.ordinal, dev.uuid, sizeof dev.uuid) != 0 ||
      brk_dir_open(a.dir, NULL, dir, sizeof dir) != 0) {
    fprintf(stderr, "ebb reclaim: %s\n", ebb_errmsg());
    return EBB_EXIT_USAGE;
  }
  brk_reclaim_opts o = {.size = sizeof o,
                        .dir = dir,
                        .uuid = dev.uuid,
                        .bytes = want,
                        .timeout_s = a.timeout_s,
                        .wait_s = a.wait_s,
                        .free_fn = dev_nvml_ref_free,
                        .free_arg = &dev,
                        .holder = a.holder ? (pid_t)a.holder : getppid(),
                        .hold_s = a.hold_s,
                        .used_fn = dev_nvml_ref_used,
                        .used_arg = &dev};
  brk_reclaim_result r;
  if (brk_reclaim(&o, &r) != 0) {
    fprintf(stderr, "ebb reclaim: %s\n", ebb_errmsg());
    brk_reclaim_free(&r);
    return EBB_EXIT_FAILED;
  }
  st = report(&a, want, &r);
  if (!r.satisfied) /* nothing to allocate: another asker may have what there is */
    brk_claim_release(&r.claim);
  brk_reclaim_free(&r);
  return st;
}
