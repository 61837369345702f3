/* ebb_broker_join (include/ebb/ebb.h): the giving side of the broker
 * (docs/broker.md) for any program that links libebb. The program's open
 * CUDA devices are what it offers; a request runs ebb_gpu_release on the
 * device asked for (the release callbacks: a framework's cache, a model
 * cache; the cached segments; the context when nothing is live) and answers
 * with the bytes the driver got back. Live blocks are kept, named. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/events.h"
#include "broker/broker.h"
#include "device/device.h"
#include "ebb/ebb.h"
#include "lib/lib_int.h"

#define MAXDEV 16

struct ebb_broker {
  brk_peer *peer;
  char what[96];
  int n;                 /* CUDA devices the driver reports (at join) */
  char uuid[MAXDEV][64]; /* by ordinal */
  double t_join;
};

/* What this process holds on ordinal i, and what a release could give. */
static void held(ebb_gpu *g, uint64_t *held_b, uint64_t *givable) {
  ebb_gpu_stats st = {.size = sizeof st};
  *held_b = *givable = 0;
  if (ebb_gpu_get_stats(g, &st) != 0)
    return;
  uint64_t ctx = st.ctx_active ? st.context_bytes : 0;
  *held_b = st.driver_used_by_process ? st.driver_used_by_process : st.reserved + ctx;
  *givable = st.cached + (st.allocated ? 0 : ctx);
}

static int give_info(ebb_broker *b, brk_answer *a) {
  for (int i = 0; i < b->n && a->ndevices < BRK_MAX_DEVICES; i++) {
    ebb_gpu *g = lib_gpu_open_ordinal(i);
    if (!g)
      continue;
    brk_device_info *d = &a->devices[a->ndevices++];
    snprintf(d->uuid, sizeof d->uuid, "%s", b->uuid[i]);
    snprintf(d->label, sizeof d->label, "cuda:%d", i);
    held(g, &d->held_bytes, &d->givable_bytes);
    d->idle_s = base_now() - b->t_join; /* a library cannot tell when its program is idle */
    ebb_gpu_close(g);
  }
  return 0;
}

static int give(void *arg, const brk_request *req, brk_answer *a, brk_giving *gv) {
  ebb_broker *b = arg;
  if (req->op == BRK_OP_INFO)
    return give_info(b, a);
  int i = 0;
  while (i < b->n && strcmp(b->uuid[i], req->device))
    i++;
  snprintf(a->device, sizeof a->device, "%s", req->device);
  ebb_gpu *g = i < b->n ? lib_gpu_open_ordinal(i) : NULL;
  if (!g) {
    snprintf(a->reason, sizeof a->reason, "not on this device");
    return 0;
  }
  snprintf(a->label, sizeof a->label, "cuda:%d", i);
  uint64_t held_b, givable;
  held(g, &held_b, &givable);
  brk_commit(gv, a, givable, 10); /* a release is quick: callbacks, the cache, the context */
  ebb_released rel = {.size = sizeof rel};
  double t0 = base_now();
  int rc = ebb_gpu_release(g, EBB_GPU_RELEASE_CONTEXT, &rel);
  a->ms = (base_now() - t0) * 1000.0;
  ebb_gpu_stats st = {.size = sizeof st};
  ebb_gpu_get_stats(g, &st);
  ebb_gpu_close(g);
  if (rc)
    return rc;
  a->given_bytes = rel.released_bytes;
  snprintf(a->reason, sizeof a->reason, "release: %d callbacks run, cache %s%s", rel.callbacks_run,
           rel.segment_bytes ? "trimmed" : "empty",
           rel.context_released ? ", context released" : "");
  if (st.allocated && a->nkept < BRK_MAX_KEPT) {
    brk_kept *k = &a->kept[a->nkept++];
    snprintf(k->what, sizeof k->what, "live blocks");
    k->bytes = st.reserved;
    snprintf(k->why, sizeof k->why, "in use by the program (%s)", b->what);
  }
  base_event_publish_grant("gave", (int)getpid(), b->what, a->label, req->bytes, a->given_bytes,
                           a->ms, a->reason);
  return 0;
}

static int probe_uuids(ebb_broker *b) {
  dev_probe *p = malloc(sizeof *p);
  if (!p)
    return ebb_seterr(EBB_ENOMEM, "ebb_broker_join: out of host memory");
  int rc = 0;
  if (dev_device_probe(p) != 0 || !p->driver_loaded)
    rc = ebb_seterr(EBB_ENODEV, "ebb_broker_join: no CUDA driver (%s)", p->why);
  for (int i = 0; !rc && i < p->ndevices && i < MAXDEV; i++)
    snprintf(b->uuid[b->n++], sizeof b->uuid[0], "%s", p->devices[i].uuid);
  free(p);
  return rc;
}

int ebb_broker_join(const char *broker_dir, const char *what, ebb_broker **out) {
  if (!out)
    return ebb_seterr(EBB_EINVAL, "ebb_broker_join: out is NULL");
  *out = NULL;
  ebb_broker *b = calloc(1, sizeof *b);
  if (!b)
    return ebb_seterr(EBB_ENOMEM, "ebb_broker_join: out of host memory");
  snprintf(b->what, sizeof b->what, "%s", what && *what ? what : "libebb");
  b->t_join = base_now();
  char dir[512];
  int rc = probe_uuids(b);
  if (!rc)
    rc = brk_dir_open(broker_dir, NULL, dir, sizeof dir);
  brk_peer_opts po = {.size = sizeof po,
                      .dir = dir,
                      .what = b->what,
                      .group = (gid_t)-1,
                      .give = give,
                      .give_arg = b};
  if (!rc)
    rc = brk_peer_start(&po, &b->peer);
  if (rc) {
    free(b);
    return rc;
  }
  *out = b;
  return 0;
}

void ebb_broker_leave(ebb_broker *b) {
  if (!b)
    return;
  brk_peer_stop(b->peer);
  free(b);
}
