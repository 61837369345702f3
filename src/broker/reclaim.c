/* The whole reclaim (docs/broker.md, "Asking"): the claim, then every peer
 * on the device asked at once (info), then the reclaims, all at once, each
 * peer for its share of what is missing by what it says it could give; the
 * peers commit at once (what, how long), the ones not asked yet are asked
 * when the commits fall short; then the asker waits, within its own
 * deadline, for the committed gives and for the driver to show the bytes
 * free. A peer that committed and is working is waited for; a silent one
 * costs --broker-timeout once, beside the others. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "broker/broker.h"
#include "ebb/error.h"

#define MAX_PEERS 256
#define FINAL_GRACE_S 0.5 /* for the final answers once the memory is free */
#define HEDGE_S 0.2       /* a commit later than this: the next peers are asked */
#define BUSY_RETRY_S 0.1  /* a busy peer is asked again this often */

typedef struct cand {
  pid_t pid;
  double idle_s;
  uint64_t givable, bytes; /* what it said it could give; what it was asked */
  int asked;
} cand;

typedef struct asking {
  const brk_reclaim_opts *o;
  brk_reclaim_result *r;
  brk_conv *convs[MAX_PEERS];
  brk_result_peer *outs[MAX_PEERS]; /* each conversation's result (in r->peers) */
  cand *cands[MAX_PEERS];           /* each conversation's peer */
  size_t nconvs;
  double until; /* the asker's own deadline */
  uint64_t missing;
} asking;

static int by_idle(const void *x, const void *y) {
  const cand *a = x, *b = y;
  return a->idle_s < b->idle_s ? 1 : a->idle_s > b->idle_s ? -1 : 0;
}

static brk_result_peer *add_peer(brk_reclaim_result *r, pid_t pid) {
  brk_result_peer *p = &r->peers[r->npeers++];
  memset(p, 0, sizeof *p);
  p->pid = pid;
  return p;
}

static const brk_device_info *on_dev(const brk_answer *a, const char *uuid) {
  for (size_t i = 0; i < a->ndevices; i++)
    if (!strcmp(a->devices[i].uuid, uuid))
      return &a->devices[i];
  return NULL;
}

/* Every peer asked `info` at once; the ones on the device become
 * candidates (most idle first), the ones that did not answer go into r as
 * skipped. */
static int on_device(const brk_reclaim_opts *o, brk_reclaim_result *r, cand *cs, size_t *nc) {
  pid_t pids[MAX_PEERS];
  size_t n;
  int rc = brk_dir_peers(o->dir, pids, MAX_PEERS, &n);
  if (rc)
    return rc;
  /* each peer twice at most: its info (skipped) and its reclaim */
  r->peers = calloc(n ? n : 1, sizeof *r->peers);
  brk_result_peer *infos = calloc(n ? n : 1, sizeof *infos);
  brk_conv **cv = calloc(n ? n : 1, sizeof *cv);
  brk_request req = {.op = BRK_OP_INFO};
  for (size_t i = 0; r->peers && infos && cv && i < n; i++)
    cv[i] = brk_conv_new(o->dir, pids[i], &req, o->timeout_s, &infos[i]);
  for (size_t i = 0; cv && i < n; i++)
    if (!cv[i])
      rc = ebb_seterr(EBB_ENOMEM, "broker: out of host memory");
  if (!r->peers || !infos || !cv)
    rc = ebb_seterr(EBB_ENOMEM, "broker: out of host memory");
  if (!rc)
    brk_convs_run(cv, n, 0, brk_now() + 3600, NULL, NULL);
  *nc = 0;
  for (size_t i = 0; !rc && i < n; i++) {
    const brk_device_info *d = infos[i].status ? NULL : on_dev(&infos[i].ans, o->uuid);
    if (infos[i].status)
      *add_peer(r, pids[i]) = infos[i];
    else if (d)
      cs[(*nc)++] = (cand){.pid = pids[i], .idle_s = d->idle_s, .givable = d->givable_bytes};
  }
  for (size_t i = 0; cv && i < n; i++)
    brk_conv_free(cv[i]);
  free(cv);
  free(infos);
  qsort(cs, *nc, sizeof *cs, by_idle);
  return rc;
}

/* What the peers asked so far will give by their commits and answers; a
 * commit expected after the asker's deadline counts nothing (others are
 * asked too). */
static uint64_t promised(const asking *k) {
  uint64_t sum = 0;
  double now = brk_now();
  for (size_t i = 0; i < k->nconvs; i++) {
    const brk_result_peer *p = k->outs[i];
    int open = brk_conv_open(k->convs[i]);
    if (p->status || (open && !p->committed))
      continue; /* skipped, or not heard from yet */
    if (open)   /* committed, giving */
      sum += now + p->eta_ms / 1000.0 <= k->until ? p->commit : 0;
    else
      sum += p->ans.given_bytes;
  }
  return sum;
}

static int ask_one(asking *k, cand *c, uint64_t bytes) {
  brk_request req = {.op = BRK_OP_RECLAIM, .asker = getpid(), .bytes = bytes};
  req.by = k->o->by ? k->o->by : BRK_BY_OPERATOR;
  snprintf(req.device, sizeof req.device, "%s", k->o->uuid);
  c->asked = 1;
  c->bytes = bytes;
  brk_result_peer *p = add_peer(k->r, c->pid);
  brk_conv *cv = brk_conv_new(k->o->dir, c->pid, &req, k->o->timeout_s, p);
  if (!cv) {
    k->r->npeers--;
    return ebb_seterr(EBB_ENOMEM, "broker: out of host memory");
  }
  k->outs[k->nconvs] = p;
  k->cands[k->nconvs] = c;
  k->convs[k->nconvs++] = cv;
  return 0;
}

/* One round: the peers not asked yet, most idle first, each for its share
 * of what the commits so far leave missing by what it said it could give;
 * when none of them said it could give, or some asked before are late to
 * commit, all of them for the rest. 1 when someone was asked. */
static int ask_round(asking *k, cand *cs, size_t nc) {
  uint64_t have = promised(k);
  uint64_t rest = have >= k->missing ? 0 : k->missing - have;
  int asked = 0, late = 0;
  for (size_t i = 0; i < k->nconvs; i++)
    late += brk_conv_open(k->convs[i]) && !k->outs[i]->committed;
  /* some have not committed within HEDGE_S (stuck, silent): the others are
   * asked all at once for the rest, so silent peers cost one timeout */
  for (size_t i = 0; late && rest && i < nc; i++)
    if (!cs[i].asked && ask_one(k, &cs[i], rest) == 0)
      asked = 1;
  for (size_t i = 0; rest && i < nc; i++) {
    if (cs[i].asked || !cs[i].givable)
      continue;
    uint64_t share = cs[i].givable < rest ? cs[i].givable : rest;
    if (ask_one(k, &cs[i], share) == 0)
      asked = 1;
    rest -= share;
  }
  for (size_t i = 0; !asked && rest && i < nc; i++)
    if (!cs[i].asked && ask_one(k, &cs[i], rest) == 0)
      asked = 1;
  return asked;
}

static brk_claims_opts claims_of(const brk_reclaim_opts *o) {
  return (brk_claims_opts){.dir = o->dir,
                           .uuid = o->uuid,
                           .holder = o->holder > 0 ? o->holder : getpid(),
                           .bytes = o->bytes,
                           .hold_s = o->hold_s,
                           .used_fn = o->used_fn,
                           .used_arg = o->used_arg};
}

/* Free for this asker: the driver's free minus what earlier claims have
 * not allocated yet. */
static uint64_t free_for_me(uint64_t free_b, uint64_t claimed) {
  return free_b > claimed ? free_b - claimed : 0;
}

/* What is missing for this asker: bytes more than the free memory less
 * the earlier claims, the part of those claims the free memory does not
 * cover included (free_for_me's 0 would drop it, and the peers would be
 * asked for too little). */
static uint64_t missing_for_me(uint64_t free_b, uint64_t claimed, uint64_t bytes) {
  uint64_t need = bytes + claimed;
  return free_b >= need ? 0 : need - free_b;
}

/* Enough is free for this asker now (the driver, less the earlier claims
 * still standing); without a driver figure, enough was given. */
static int enough(void *arg) {
  asking *k = arg;
  const brk_reclaim_opts *o = k->o;
  brk_reclaim_result *r = k->r;
  if (!o->free_fn) {
    uint64_t given = 0;
    for (size_t i = 0; i < r->npeers; i++)
      given += r->peers[i].status ? 0 : r->peers[i].ans.given_bytes;
    return given >= o->bytes;
  }
  uint64_t f = 0;
  brk_claims_seen seen;
  brk_claims_opts co = claims_of(o);
  if (o->free_fn(o->free_arg, &f) == 0)
    r->free_after = f;
  if (r->claim.seq && brk_claims_before(&co, r->claim.seq, &seen) == 0)
    r->claimed_after = seen.bytes;
  return free_for_me(r->free_after, r->claimed_after) >= o->bytes;
}

/* A peer that answered busy (a load or unload of its own under way, or
 * another asker's giving) is asked again every BUSY_RETRY_S while the
 * memory is short, for --broker-timeout from the first ask at most (two
 * servers in a switch asking each other would otherwise wait each other out). */
static void ask_busy_again(asking *k, double t0) {
  double until = t0 + (k->o->timeout_s > 0 ? k->o->timeout_s : 2);
  until = until < k->until ? until : k->until;
  for (;;) {
    size_t again = 0;
    for (size_t i = 0; i < k->nconvs; i++)
      again += !brk_conv_open(k->convs[i]) && !k->outs[i]->status && k->outs[i]->ans.busy;
    if (!again || enough(k) || brk_now() + BUSY_RETRY_S >= until)
      return;
    struct timespec ts = {0, (long)(BUSY_RETRY_S * 1e9)};
    nanosleep(&ts, NULL);
    brk_request req = {.op = BRK_OP_RECLAIM, .asker = getpid()};
    req.by = k->o->by ? k->o->by : BRK_BY_OPERATOR;
    snprintf(req.device, sizeof req.device, "%s", k->o->uuid);
    for (size_t i = 0; i < k->nconvs; i++) {
      if (brk_conv_open(k->convs[i]) || k->outs[i]->status || !k->outs[i]->ans.busy)
        continue;
      req.bytes = k->cands[i]->bytes;
      brk_conv *c = brk_conv_new(k->o->dir, k->cands[i]->pid, &req, k->o->timeout_s, k->outs[i]);
      if (c) {
        brk_conv_free(k->convs[i]);
        k->convs[i] = c;
      }
    }
    brk_convs_run(k->convs, k->nconvs, 0, k->until, enough, k);
  }
}

/* The rounds, then the wait for the committed gives; conversations still
 * open when enough is free are let go (the peer finishes on its own). */
static void converse(asking *k, cand *cs, size_t nc) {
  double t0 = brk_now();
  /* a peer commits at once (its rules run dry): one that has not within
   * HEDGE_S is not waited for before the next are asked, so silent peers
   * cost --broker-timeout side by side, not round after round */
  while (!enough(k) && ask_round(k, cs, nc))
    brk_convs_run(k->convs, k->nconvs, brk_now() + HEDGE_S, k->until, enough, k);
  brk_convs_run(k->convs, k->nconvs, 0, k->until, enough, k);
  ask_busy_again(k, t0);
  /* the memory is free: the answers on their way (the driver often shows
   * the bytes a moment before the giver writes its figure) get a moment */
  double grace = brk_now() + FINAL_GRACE_S;
  brk_convs_run(k->convs, k->nconvs, 0, grace < k->until ? grace : k->until, NULL, NULL);
  for (size_t i = 0; i < k->nconvs; i++) {
    brk_conv_cut(k->convs[i], 0, "still giving when the memory was free: not waited for");
    brk_conv_free(k->convs[i]);
  }
  for (size_t i = 0; i < k->r->npeers; i++)
    k->r->given_bytes += k->r->peers[i].status ? 0 : k->r->peers[i].ans.given_bytes;
}

/* After the peers: the driver may show what they gave a little later. When
 * the free memory before plus what they gave (driver figures already) falls
 * short, there is nothing to wait for. */
static void wait_free(asking *k) {
  const brk_reclaim_opts *o = k->o;
  brk_reclaim_result *r = k->r;
  int hopeless = missing_for_me(r->free_before, r->earlier.bytes, o->bytes) > r->given_bytes;
  r->claimed_after = r->earlier.bytes;
  while (!enough(k) && !hopeless && brk_now() < k->until) {
    struct timespec ts = {0, 5 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

int brk_reclaim(const brk_reclaim_opts *o, brk_reclaim_result *out) {
  memset(out, 0, sizeof *out);
  if (o->free_fn) { /* the claim first: a later asker sees it before it reads the free */
    brk_claims_opts co = claims_of(o);
    if (brk_claim_open(&co, &out->claim, &out->earlier) != 0) { /* asks on, unclaimed */
      base_log(EBB_LOG_WARN, "broker", "asking without a claim: %s", ebb_errmsg());
      brk_claim_release(&out->claim);
      memset(&out->claim, 0, sizeof out->claim);
      memset(&out->earlier, 0, sizeof out->earlier);
    }
  }
  if (o->free_fn && o->free_fn(o->free_arg, &out->free_before) != 0) {
    brk_claim_release(&out->claim);
    return ebb_errctx(EBB_EDRIVER, "broker: the driver's free memory: ");
  }
  asking *k = calloc(1, sizeof *k);
  cand *cs = calloc(MAX_PEERS, sizeof *cs);
  size_t nc = 0;
  int rc = !k || !cs ? ebb_seterr(EBB_ENOMEM, "broker: out of host memory") : 0;
  if (!rc) {
    *k = (asking){.o = o, .r = out, .until = brk_now() + (o->wait_s > 0 ? o->wait_s : 5)};
    k->missing = !o->free_fn ? o->bytes
                             : missing_for_me(out->free_before, out->earlier.bytes, o->bytes);
    rc = k->missing ? on_device(o, out, cs, &nc)
                    : brk_dir_peers(o->dir, NULL, 0, &nc); /* nothing to ask: dead entries go */
  }
  if (!rc && k->missing)
    converse(k, cs, nc);
  if (!rc && o->free_fn)
    wait_free(k);
  if (!rc)
    out->satisfied = o->free_fn ? free_for_me(out->free_after, out->claimed_after) >= o->bytes
                                : out->given_bytes >= o->bytes;
  free(cs);
  free(k);
  if (rc)
    brk_claim_release(&out->claim);
  return rc;
}

void brk_reclaim_free(brk_reclaim_result *r) {
  if (!r)
    return;
  free(r->peers);
  r->peers = NULL;
  r->npeers = 0;
}
