/* ebb_reclaim (include/ebb/ebb.h): the asking side of the broker
 * (docs/broker.md) for any program that links libebb. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "broker/broker.h"
#include "device/device.h"
#include "device/nvml.h"
#include "ebb/ebb.h"

static int find_device(const char *device, dev_nvml_ref *d) {
  char *end = NULL;
  d->ordinal = device && !strncmp(device, "cuda:", 5) ? (int)strtol(device + 5, &end, 10) : -1;
  if (d->ordinal < 0 || !end || end == device + 5 || *end)
    return ebb_seterr(EBB_EINVAL, "ebb_reclaim: device '%s' is not cuda:N",
                      device ? device : "(null)");
  dev_probe *p = malloc(sizeof *p);
  if (!p)
    return ebb_seterr(EBB_ENOMEM, "ebb_reclaim: out of host memory");
  int rc = 0;
  if (dev_device_probe(p) != 0 || !p->driver_loaded)
    rc = ebb_seterr(EBB_ENODEV, "ebb_reclaim: %s: no CUDA driver (%s)", device, p->why);
  else if (d->ordinal >= p->ndevices || !p->devices[d->ordinal].uuid[0])
    rc = ebb_seterr(EBB_ENODEV, "ebb_reclaim: %s: no such device (the driver reports %d)", device,
                    p->ndevices);
  else
    snprintf(d->uuid, sizeof d->uuid, "%s", p->devices[d->ordinal].uuid);
  free(p);
  return rc;
}

/* "pid P keeps WHAT (N MiB): WHY; ..." into msg. */
static void kept_message(const brk_reclaim_result *r, char *msg, size_t len) {
  size_t n = 0;
  for (size_t i = 0; i < r->npeers && n + 1 < len; i++) {
    const brk_result_peer *p = &r->peers[i];
    if (p->status)
      n +=
          (size_t)snprintf(msg + n, len - n, "; pid %ld skipped: %s", (long)p->pid, p->ans.err_msg);
    for (size_t k = 0; !p->status && k < p->ans.nkept && n + 1 < len; k++)
      n += (size_t)snprintf(msg + n, len - n, "; pid %ld keeps %s (%llu MiB): %s", (long)p->pid,
                            p->ans.kept[k].what, (unsigned long long)(p->ans.kept[k].bytes >> 20),
                            p->ans.kept[k].why);
  }
}

static void fill(const brk_reclaim_result *r, ebb_reclaim_result *out) {
  if (!out || out->size < sizeof(uint32_t))
    return;
  ebb_reclaim_result full = {.size = out->size,
                             .free_before = r->free_before,
                             .free_after = r->free_after,
                             .given_bytes = r->given_bytes};
  for (size_t i = 0; i < r->npeers; i++) {
    full.peers_asked += r->peers[i].status == 0;
    full.peers_skipped += r->peers[i].status != 0;
  }
  size_t n = out->size < sizeof full ? out->size : sizeof full;
  memcpy(out, &full, n);
}

int ebb_reclaim(const char *device, uint64_t bytes, const char *broker_dir, double timeout_s,
                ebb_reclaim_result *out) {
  dev_nvml_ref d = {0};
  char dir[512];
  int rc = find_device(device, &d);
  if (!rc)
    rc = brk_dir_open(broker_dir, NULL, dir, sizeof dir);
  if (rc)
    return rc;
  brk_reclaim_opts o = {.size = sizeof o,
                        .dir = dir,
                        .uuid = d.uuid,
                        .bytes = bytes,
                        .timeout_s = timeout_s,
                        .wait_s = 5,
                        .free_fn = dev_nvml_ref_free,
                        .free_arg = &d,
                        .used_fn = dev_nvml_ref_used,
                        .used_arg = &d};
  brk_reclaim_result r;
  if ((rc = brk_reclaim(&o, &r)) != 0) {
    brk_reclaim_free(&r);
    return rc;
  }
  fill(&r, out);
  if (!r.satisfied)
    brk_claim_release(&r.claim); /* else it is this process's until its allocation lands */
  if (!r.satisfied) {
    char *msg = calloc(1, 4096);
    if (msg)
      kept_message(&r, msg, 4096);
    rc = ebb_seterr(EBB_EOOM,
                    "ebb_reclaim: %s: %llu MiB free of %llu MiB wanted after asking "
                    "%zu peer%s (they gave %llu MiB)%s",
                    device, (unsigned long long)(r.free_after >> 20),
                    (unsigned long long)(bytes >> 20), r.npeers, r.npeers == 1 ? "" : "s",
                    (unsigned long long)(r.given_bytes >> 20), msg ? msg : "");
    free(msg);
  }
  brk_reclaim_free(&r);
  return rc;
}
