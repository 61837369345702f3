/* The device context as the allocator sees it: activated (and measured) on
 * the first thing that needs the device, given back by mem_release when no
 * segment or pinned buffer is left, its cost measured both ways (NVML's
 * per-process usage, else the driver's free memory, else the estimate). */
#include <unistd.h>

#include "base/log.h"
#include "memory/internal.h"

int mem__ctx_ensure_locked(mem_allocator *a) {
  if (dev_kind_of(a->dev) == EBB_DEVICE_CPU || dev_ctx_active(a->dev))
    return 0;
  dev_meminfo before = {0}, after = {0};
  dev_mem_info(a->dev, &before);
  int rc = dev_activate(a->dev);
  if (rc)
    return rc;
  uint64_t used = 0;
  if (dev_process_used(a->dev, getpid(), &used) == 0 && used > a->reserved.current) {
    a->context_estimate = used - a->reserved.current;
    a->ctx_measured = 1;
  } else if (dev_mem_info(a->dev, &after) == 0 && before.source != EBB_MEMINFO_NONE &&
             after.source != EBB_MEMINFO_NONE && before.free_bytes > after.free_bytes) {
    a->context_estimate = before.free_bytes - after.free_bytes;
    a->ctx_measured = 1;
  }
  mem__event_locked(a, EBB_EV_CTX_CREATE, NULL, 0, a->context_estimate);
  return 0;
}

/* Mapped segments plus 1 when pinned buffers are held: what keeps the
 * context (a parked or sleeping segment holds only an address range, which
 * the driver keeps across the context: dev_ctx_release). */
static int holds_device_memory(mem_allocator *a) {
  mem__lock(a);
  int n = 0;
  for (const mem_seg *s = a->segs; s; s = s->next)
    n += !s->d.parked;
  int pins = a->pinned_reserved.current > 0;
  mem__unlock(a);
  return n + pins;
}

void mem__ctx_release(mem_allocator *a, mem_release_result *r) {
  dev_device *dev = a->dev;
  if (dev_kind_of(dev) != EBB_DEVICE_CUDA || !dev_ctx_active(dev))
    return;
  if (holds_device_memory(a)) {
    r->context_error = EBB_EBUSY;
    base_log(EBB_LOG_DEBUG, "release",
             "%s: context kept: ebb still holds live device blocks or pinned buffers",
             dev_device_label(dev));
    return;
  }
  mem__lock(a);
  mem__events_trim_locked(a); /* events belong to the context */
  mem__unlock(a);
  uint64_t before = 0, after = 0;
  int measured = dev_process_used(dev, getpid(), &before) == 0;
  int rc = dev_ctx_release(dev);
  if (rc) {
    r->context_error = rc;
    base_log(EBB_LOG_WARN, "release", "%s: releasing the context failed: %s", dev_device_label(dev),
             ebb_errmsg());
    return;
  }
  r->context_released = 1;
  measured = measured && dev_process_used(dev, getpid(), &after) == 0;
  mem__lock(a);
  if (measured && before >= after) {
    r->context_bytes = before - after;
    a->context_estimate = r->context_bytes;
    a->ctx_measured = 1;
  } else {
    r->context_bytes = a->context_estimate;
  }
  mem__event_locked(a, EBB_EV_CTX_RELEASE, NULL, 0, r->context_bytes);
  mem__unlock(a);
}
