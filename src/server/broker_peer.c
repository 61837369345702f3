/* `ebb serve` as a broker peer (docs/broker.md, server.h "The broker"): it
 * registers a socket in the broker directory and gives memory back, by the
 * pipeline manager's own rules (pl_manager_give_back), to whoever asks for
 * it; it asks the peers when a load, wake or job needs room (the managers'
 * ask_peers hook) and for POST /v1/memory/reclaim (broker.c); it counts
 * what it gave and got for /metrics (ebb_broker_*). */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/events.h"
#include "base/log.h"
#include "broker/broker.h"
#include "device/device.h"
#include "device/nvml.h"
#include "pipeline/host.h"
#include "pipeline/manager.h"
#include "server/server.h"

#define MAXDEV 16

typedef struct serve_peer {
  srv_broker_opts o;
  size_t n;
  pl_manager *ms[MAXDEV];
  char uuid[MAXDEV][64], label[MAXDEV][32];
} serve_peer;

/* Every grant and refusal of the broker in ebb serve goes through
 * publish_fact, which logs it (the `[broker] pid P (WHAT) gave back
 * N MiB on cuda:K in T ms: REASON` line) and counts it for /metrics: the one
 * place to publish broker facts from (the event bus, /v1/events). */
typedef enum {
  EBB_BROKER_GAVE = 1, /* this server gave bytes to an asker (asker: its pid) */
  EBB_BROKER_REFUSED,  /* this server refused an asker (credentials, malformed) */
  EBB_BROKER_RECEIVED, /* a peer gave bytes to this server's ask */
  EBB_BROKER_SKIPPED,  /* a peer did not answer this server's ask, or refused it */
  EBB_BROKER_KEPT,     /* what a peer keeps and why, when the ask fell short */
  EBB_BROKER_ASKED,    /* an ask of this server ended (satisfied or not) */
} broker_fact_kind;
typedef struct broker_fact {
  int kind;
  long pid;           /* the giver (GAVE: this process), the peer, or the asker */
  const char *what;   /* "ebb serve", a kept item ("pipeline P") */
  const char *device; /* "cuda:0" */
  uint64_t bytes;     /* given / received / kept / needed (ASKED) */
  double ms;
  const char *reason;  /* what went, why skipped/refused/kept */
  long asker;          /* GAVE: the asker's pid as it said */
  uint64_t free_after; /* ASKED */
  size_t npeers;       /* ASKED */
  int satisfied;       /* ASKED */
} broker_fact;

static serve_peer the_peer;
/* Where and how this server asks (set once by srv_broker_start,
 * before any job runs; read-only after). */
static char ask_dir[512];
static double ask_timeout_s, ask_wait_s;
static int ask_by;           /* whose authority its asks carry: BRK_BY_TOKEN with a token */
static brk_peer *registered; /* its stats for /metrics */

/* What this server gave, refused, asked and received, for /metrics
 * (ebb_broker_*): counted by publish_fact only. */
static pthread_mutex_t stat_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t n_asks, n_satisfied, n_skipped, received_bytes, given_bytes, n_refused;

static void publish_fact(const broker_fact *f) {
  unsigned long long mib = (unsigned long long)(f->bytes >> 20);
  pthread_mutex_lock(&stat_lock);
  switch (f->kind) {
  case EBB_BROKER_GAVE: given_bytes += f->bytes; break;
  case EBB_BROKER_REFUSED: n_refused++; break;
  case EBB_BROKER_RECEIVED: received_bytes += f->bytes; break;
  case EBB_BROKER_SKIPPED: n_skipped++; break;
  case EBB_BROKER_ASKED:
    n_asks++;
    n_satisfied += (uint64_t)(f->satisfied != 0);
    break;
  default: break;
  }
  pthread_mutex_unlock(&stat_lock);
  switch (f->kind) {
  case EBB_BROKER_GAVE:
  case EBB_BROKER_RECEIVED: /* the line, on both sides: the log subscribes */
    base_event_publish_grant(f->kind == EBB_BROKER_GAVE ? "gave" : "received", (int)f->pid, f->what,
                             f->device, 0, f->bytes, f->ms, f->reason);
    break;
  case EBB_BROKER_REFUSED:
    base_log(EBB_LOG_WARN, "broker", "refused an asker (pid %ld): %s", f->pid, f->reason);
    break;
  case EBB_BROKER_SKIPPED:
    base_log(EBB_LOG_WARN, "broker", "pid %ld skipped: %s", f->pid, f->reason);
    break;
  case EBB_BROKER_KEPT:
    base_log(EBB_LOG_INFO, "broker", "pid %ld keeps %s (%llu MiB): %s", f->pid, f->what, mib,
             f->reason);
    break;
  case EBB_BROKER_ASKED:
    base_event_publish_ask(f->device, f->bytes, f->free_after, f->npeers, f->satisfied);
    break;
  }
}

/* One fact per peer of an ask (received, skipped, and what each keeps when
 * the bytes could not be had), then the ask itself. */
static void ask_facts(const brk_reclaim_result *r, const char *label, uint64_t need) {
  for (size_t i = 0; i < r->npeers; i++) {
    const brk_result_peer *p = &r->peers[i];
    broker_fact f = {.kind = p->status ? EBB_BROKER_SKIPPED : EBB_BROKER_RECEIVED,
                     .pid = (long)p->pid,
                     .what = p->ans.what,
                     .device = label,
                     .bytes = p->ans.given_bytes,
                     .ms = p->ans.ms,
                     .reason = p->status ? p->ans.err_msg : p->ans.reason};
    publish_fact(&f);
    for (size_t k = 0; !r->satisfied && !p->status && k < p->ans.nkept; k++)
      publish_fact(&(broker_fact){.kind = EBB_BROKER_KEPT,
                                  .pid = (long)p->pid,
                                  .what = p->ans.kept[k].what,
                                  .device = label,
                                  .bytes = p->ans.kept[k].bytes,
                                  .reason = p->ans.kept[k].why});
  }
  if (!r->npeers && !r->earlier.total && r->satisfied)
    return; /* enough was free and unclaimed: nobody was asked */
  publish_fact(&(broker_fact){.kind = EBB_BROKER_ASKED,
                              .pid = (long)getpid(),
                              .what = "ebb serve",
                              .device = label,
                              .bytes = need,
                              .free_after = r->free_after,
                              .npeers = r->npeers,
                              .satisfied = r->satisfied,
                              .reason = ""});
}

int srv_cuda_uuid(int ordinal, char *uuid, size_t len) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static dev_probe p; /* probing is slow: once (jobs, loads and the API ask from their threads) */
  static int probed;
  int rc = 0;
  pthread_mutex_lock(&lock);
  if (!probed && dev_device_probe(&p) == 0)
    probed = 1;
  if (!p.driver_loaded)
    rc = ebb_seterr(EBB_ENODEV, "no CUDA driver: %s", p.why);
  else if (ordinal < 0 || ordinal >= p.ndevices || !p.devices[ordinal].uuid[0])
    rc = ebb_seterr(EBB_ENODEV, "cuda:%d: no such device (the driver reports %d)", ordinal,
                    p.ndevices);
  else
    snprintf(uuid, len, "%s", p.devices[ordinal].uuid);
  pthread_mutex_unlock(&lock);
  return rc;
}

static int give_info(serve_peer *s, brk_answer *a) {
  for (size_t i = 0; i < s->n && a->ndevices < BRK_MAX_DEVICES; i++) {
    brk_device_info *d = &a->devices[a->ndevices++];
    snprintf(d->uuid, sizeof d->uuid, "%s", s->uuid[i]);
    snprintf(d->label, sizeof d->label, "%s", s->label[i]);
    d->held_bytes = pl_manager_process_bytes(s->ms[i]);
    d->givable_bytes = d->held_bytes > s->o.reserve ? d->held_bytes - s->o.reserve : 0;
    d->idle_s = pl_manager_idle_seconds(s->ms[i]);
  }
  return 0;
}

static void copy_kept(const pl_giveback *g, brk_answer *a) {
  for (size_t i = 0; i < g->nkept && a->nkept < BRK_MAX_KEPT; i++) {
    brk_kept *k = &a->kept[a->nkept++];
    snprintf(k->what, sizeof k->what, "%s", g->kept[i].what);
    k->bytes = g->kept[i].bytes;
    snprintf(k->why, sizeof k->why, "%s", g->kept[i].why);
  }
}

/* Authority does not travel through a peer (docs/broker.md, "Who may
 * ask"): a server protected by a token yields only to its operator (a
 * process asking for itself: `ebb reclaim`, ebb_reclaim()) or to a server
 * acting for a caller that proved a token, never to a tokenless server,
 * which acts for anyone on the box. */
static int authority_ok(const serve_peer *s, const brk_request *req, brk_answer *a) {
  if (!s->o.token || req->by != BRK_BY_ANYONE)
    return 0;
  snprintf(a->err_code, sizeof a->err_code, "forbidden");
  return ebb_seterr(EBB_EINVAL,
                    "broker: pid %ld (uid %u) asks for anyone (a server without a token, "
                    "acting for whoever called it): this server is token-protected and gives "
                    "only to its operator or for a caller holding a token",
                    (long)req->cred_pid, (unsigned)req->cred_uid);
}

static int give(void *arg, const brk_request *req, brk_answer *a, brk_giving *gv) {
  serve_peer *s = arg;
  if (req->op == BRK_OP_INFO)
    return give_info(s, a);
  int rc = authority_ok(s, req, a);
  if (rc)
    return rc;
  size_t i = 0;
  while (i < s->n && strcmp(s->uuid[i], req->device))
    i++;
  snprintf(a->device, sizeof a->device, "%s", req->device);
  if (i == s->n) {
    snprintf(a->reason, sizeof a->reason, "not on this device");
    return 0;
  }
  snprintf(a->label, sizeof a->label, "%s", s->label[i]);
  uint64_t plan;
  double eta_ms;
  pl_manager_give_plan(s->ms[i], req->bytes, s->o.reserve, &plan, &eta_ms);
  brk_commit(gv, a, plan, eta_ms); /* the asker hears at once, then waits for the giving */
  pl_giveback g;
  double t0 = base_now();
  pl_manager_give_back(s->ms[i], req->bytes, s->o.reserve, &g);
  a->ms = (base_now() - t0) * 1000.0;
  a->given_bytes = g.given;
  a->busy = g.busy;
  snprintf(a->reason, sizeof a->reason, "%s", g.reason[0] ? g.reason : "nothing could go");
  copy_kept(&g, a);
  publish_fact(&(broker_fact){.kind = EBB_BROKER_GAVE,
                              .pid = (long)getpid(),
                              .what = a->what,
                              .device = s->label[i],
                              .bytes = g.given,
                              .ms = a->ms,
                              .reason = a->reason,
                              .asker = (long)req->asker});
  return 0;
}

/* brk_peer_opts.refused: an asker this server would not answer. */
static void refused_fact(void *arg, long pid, const char *why) {
  (void)arg;
  publish_fact(&(broker_fact){.kind = EBB_BROKER_REFUSED,
                              .pid = pid,
                              .what = "",
                              .device = "",
                              .reason = why});
}

void srv_broker_start(const srv_broker_opts *o, pl_manager **ms, dev_device **devs, size_t n,
                      brk_peer **out) {
  serve_peer *s = &the_peer;
  *out = NULL;
  memset(s, 0, sizeof *s);
  s->o = *o;
  for (size_t i = 0; i < n && s->n < MAXDEV; i++) {
    if (dev_kind_of(devs[i]) != EBB_DEVICE_CUDA)
      continue;
    if (srv_cuda_uuid(dev_ordinal(devs[i]), s->uuid[s->n], sizeof s->uuid[0]) != 0)
      continue;
    snprintf(s->label[s->n], sizeof s->label[0], "%s", dev_device_label(devs[i]));
    s->ms[s->n++] = ms[i];
  }
  if (!s->n)
    return; /* the CPU only: nothing to give */
  char dir[512] = "";
  brk_peer_opts po = {.size = sizeof po,
                      .dir = dir,
                      .what = "ebb serve",
                      .give = give,
                      .give_arg = s,
                      .group = (gid_t)-1,
                      .refused = refused_fact};
  int rc = brk_dir_open(o->dir, o->group, dir, sizeof dir);
  if (!rc) {
    snprintf(ask_dir, sizeof ask_dir, "%s", dir);
    ask_timeout_s = o->timeout_s > 0 ? o->timeout_s : 2;
    ask_wait_s = o->wait_s > 0 ? o->wait_s : 60;
    ask_by = o->token ? BRK_BY_TOKEN : BRK_BY_ANYONE;
  }
  if (!rc && o->group)
    brk_dir_group(o->group, &po.group);
  if (!rc)
    rc = brk_peer_start(&po, out);
  registered = *out;
  if (rc)
    base_log(EBB_LOG_WARN, "broker", "not registered (peers cannot ask this server for memory): %s",
             ebb_errmsg());
  else
    base_log(EBB_LOG_DEBUG, "broker", "registered in %s (pid %ld)", dir, (long)getpid());
}

void srv_broker_stop(brk_peer *p) {
  if (p == registered)
    registered = NULL; /* /metrics stops reading it first */
  brk_peer_stop(p);
}

/* This server's ask of the peers on device d for bytes: its directory,
 * timeout and authority, the driver's free and used memory through NVML;
 * the claim held hold_s seconds (0: the broker's default). The one place
 * ebb serve builds an ask. */
static brk_reclaim_opts ask_opts(dev_nvml_ref *d, uint64_t bytes, double wait_s, double hold_s) {
  return (brk_reclaim_opts){.size = sizeof(brk_reclaim_opts),
                            .dir = ask_dir,
                            .uuid = d->uuid,
                            .bytes = bytes,
                            .timeout_s = ask_timeout_s,
                            .wait_s = wait_s,
                            .by = ask_by,
                            .free_fn = dev_nvml_ref_free,
                            .free_arg = d,
                            .hold_s = hold_s,
                            .used_fn = dev_nvml_ref_used,
                            .used_arg = d};
}

/* This server's claims on freed bytes (docs/broker.md, "Claims"), one per
 * device ordinal: held from the ask until the load, wake or job that asked
 * has taken its memory (ask_done). */
static pthread_mutex_t claim_lock = PTHREAD_MUTEX_INITIALIZER;
static brk_claim_handle claims[MAXDEV];
static int asking[MAXDEV]; /* asks of this server not done yet (a job's beside a load's) */

static void ask_begins(int ordinal) {
  if (ordinal < 0 || ordinal >= MAXDEV)
    return;
  pthread_mutex_lock(&claim_lock);
  asking[ordinal]++;
  pthread_mutex_unlock(&claim_lock);
}

/* The newest claim stands for all this server's asks on the device (it
 * carries the earlier ones' unallocated bytes: brk_claim_open): kept until
 * the last of them is done. */
static void keep_claim(int ordinal, brk_claim_handle *h) {
  if (ordinal < 0 || ordinal >= MAXDEV) {
    brk_claim_release(h);
    return;
  }
  pthread_mutex_lock(&claim_lock);
  if (h->path[0]) {
    if (strcmp(claims[ordinal].path, h->path))
      brk_claim_release(&claims[ordinal]);
    claims[ordinal] = *h;
  }
  pthread_mutex_unlock(&claim_lock);
}

void srv_broker_ask_done(void *arg, dev_device *dev) {
  (void)arg;
  int i = dev_ordinal(dev);
  if (i < 0 || i >= MAXDEV)
    return;
  pthread_mutex_lock(&claim_lock);
  if (asking[i] > 0)
    asking[i]--;
  if (!asking[i])
    brk_claim_release(&claims[i]);
  pthread_mutex_unlock(&claim_lock);
}

/* The manager's ask_peers: a load, wake or job over the free memory asks
 * the peers on its device (most idle first) and logs who gave what. */
int srv_broker_ask(void *arg, dev_device *dev, uint64_t need) {
  (void)arg;
  dev_nvml_ref d = {.ordinal = dev_ordinal(dev)};
  ask_begins(d.ordinal); /* ask_done follows every ask */
  if (!ask_dir[0] || dev_kind_of(dev) != EBB_DEVICE_CUDA ||
      srv_cuda_uuid(d.ordinal, d.uuid, sizeof d.uuid) != 0)
    return 0;
  brk_reclaim_opts o = ask_opts(&d, need, ask_wait_s, 60);
  brk_reclaim_result r;
  int rc = brk_reclaim(&o, &r);
  keep_claim(d.ordinal, &r.claim);
  if (rc) {
    base_log(EBB_LOG_WARN, "broker", "asking the peers on %s: %s", dev_device_label(dev),
             ebb_errmsg());
    brk_reclaim_free(&r);
    return rc;
  }
  if (r.earlier.total)
    base_log(EBB_LOG_INFO, "broker",
             "%s: %llu MiB claimed by %zu earlier asker%s, not yet "
             "allocated (first: pid %ld): counted as taken",
             dev_device_label(dev), (unsigned long long)(r.earlier.bytes >> 20), r.earlier.total,
             r.earlier.total == 1 ? "" : "s", (long)r.earlier.claims[0].holder);
  ask_facts(&r, dev_device_label(dev), need);
  brk_reclaim_free(&r);
  return 0;
}

/* --- POST /v1/memory/reclaim and /metrics ------------------------------------- */
static json_t *peer_json(const brk_result_peer *p) {
  if (p->status)
    return json_pack("{s:I, s:s}", "pid", (json_int_t)p->pid, "skipped", p->ans.err_msg);
  json_t *kept = json_array();
  for (size_t k = 0; kept && k < p->ans.nkept; k++)
    json_array_append_new(kept,
                          json_pack("{s:s, s:I, s:s}", "what", p->ans.kept[k].what, "bytes",
                                    (json_int_t)p->ans.kept[k].bytes, "why", p->ans.kept[k].why));
  return json_pack("{s:I, s:s, s:I, s:f, s:s, s:o}", "pid", (json_int_t)p->pid, "what", p->ans.what,
                   "given_bytes", (json_int_t)p->ans.given_bytes, "ms", p->ans.ms, "reason",
                   p->ans.reason, "kept", kept ? kept : json_array());
}

int srv_broker_reclaim(const char *device, uint64_t bytes, json_t **answer) {
  dev_nvml_ref d = {0};
  char *end = NULL;
  *answer = NULL;
  long v = strncmp(device, "cuda:", 5) || !isdigit((unsigned char)device[5])
               ? -1
               : strtol(device + 5, &end, 10);
  if (v < 0 || !end || *end)
    return ebb_seterr(EBB_EINPUT, "\"device\": '%s' is not cuda:N", device);
  if (v > 1024) /* cuda:N, but no driver has that many */
    return ebb_seterr(EBB_ENOTFOUND, "\"device\": %s: no such device", device);
  d.ordinal = (int)v;
  if (!ask_dir[0])
    return ebb_seterr(EBB_EUNSUPPORTED, "this server has no broker directory (see its log)");
  if (srv_cuda_uuid(d.ordinal, d.uuid, sizeof d.uuid) != 0)
    return ebb_errctx(EBB_ENOTFOUND, "\"device\": ");
  brk_reclaim_opts o = ask_opts(&d, bytes, 5, 0);
  brk_reclaim_result r;
  int rc = brk_reclaim(&o, &r);
  brk_claim_release(&r.claim); /* the HTTP caller allocates nothing through this server */
  if (rc) {
    brk_reclaim_free(&r);
    return rc;
  }
  ask_facts(&r, device, bytes);
  json_t *peers = json_array();
  for (size_t i = 0; peers && i < r.npeers; i++)
    json_array_append_new(peers, peer_json(&r.peers[i]));
  *answer = json_pack("{s:s, s:I, s:b, s:I, s:I, s:I, s:o}", "device", device, "bytes",
                      (json_int_t)bytes, "satisfied", r.satisfied, "free_before_bytes",
                      (json_int_t)r.free_before, "free_bytes", (json_int_t)r.free_after,
                      "given_bytes", (json_int_t)r.given_bytes, "peers",
                      peers ? peers : json_array());
  brk_reclaim_free(&r);
  return *answer ? 0 : ebb_seterr(EBB_ENOMEM, "out of host memory");
}

static void counter(FILE *f, const char *name, const char *help, uint64_t v) {
  fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
          (unsigned long long)v);
}

void srv_broker_metrics(FILE *f) {
  brk_peer_stats st;
  brk_peer_stats_get(registered, &st);
  pthread_mutex_lock(&stat_lock);
  uint64_t asks = n_asks, sat = n_satisfied, skipped = n_skipped, recv = received_bytes;
  uint64_t given = given_bytes, refused = n_refused;
  pthread_mutex_unlock(&stat_lock);
  fprintf(f,
          "# HELP ebb_broker_registered 1 when peers can ask this server for memory\n"
          "# TYPE ebb_broker_registered gauge\nebb_broker_registered %d\n",
          registered != NULL);
  counter(f, "ebb_broker_requests_answered_total", "requests from peers answered", st.requests);
  counter(f, "ebb_broker_requests_refused_total",
          "requests from peers refused (credentials, malformed)", refused);
  counter(f, "ebb_broker_given_bytes_total", "bytes given back to peers, driver-confirmed", given);
  counter(f, "ebb_broker_asks_total", "times this server asked its peers for memory", asks);
  counter(f, "ebb_broker_asks_satisfied_total", "asks after which the bytes were free", sat);
  counter(f, "ebb_broker_peers_skipped_total", "peers skipped (silent, refusing, dead)", skipped);
  counter(f, "ebb_broker_received_bytes_total", "bytes peers gave back to this server's asks",
          recv);
}
