/* The pinned host pool: page-locked buffers from dev_host_alloc,
 * counted per owner, kept idle after free for the next request of the same
 * rounded size, given back by trim and release. Lock: the allocator's. */
#include <stdlib.h>

#include "memory/internal.h"

static size_t pin_round(size_t n) {
  size_t m = n < (1u << 20) ? 4096u : (1u << 20);
  return (n + m - 1) / m * m;
}

/* An idle buffer of exactly size bytes, taken off the idle list, or NULL. */
static pin_buf *idle_take_locked(mem_allocator *a, size_t size) {
  for (pin_buf **pp = &a->pin_idle; *pp; pp = &(*pp)->next)
    if ((*pp)->size == size) {
      pin_buf *b = *pp;
      *pp = b->next;
      return b;
    }
  return NULL;
}

/* A new buffer from the driver (the idle ones given back and one retry when
 * it says no). */
static int driver_take_locked(mem_allocator *a, ebb_owner *o, size_t size, size_t bytes,
                              pin_buf **out) {
  pin_buf *b = calloc(1, sizeof *b);
  if (!b)
    return ebb_seterr(EBB_ENOMEM, "memory: no host memory for a pinned buffer record");
  int rc = mem__ctx_ensure_locked(a);
  if (!rc) {
    rc = dev_host_alloc(a->dev, size, &b->p);
    if (rc && mem__pin_trim_locked(a))
      rc = dev_host_alloc(a->dev, size, &b->p);
  }
  if (rc) {
    free(b);
    return ebb_errctx(rc, "%s '%s' asked for %zu bytes of pinned host memory: ", o->kind, o->name,
                      bytes);
  }
  b->size = size;
  mem__stat_add(&a->pinned_reserved, size);
  *out = b;
  return 0;
}

static int alloc_locked(mem_allocator *a, ebb_owner *o, size_t bytes, void **out) {
  size_t size = pin_round(bytes);
  pin_buf *b = idle_take_locked(a, size);
  int rc = b ? 0 : driver_take_locked(a, o, size, bytes, &b);
  if (rc)
    return rc;
  if (mem__map_put(&a->pin_live, (uint64_t)(uintptr_t)b->p, b)) {
    b->next = a->pin_idle;
    a->pin_idle = b;
    return ebb_seterr(EBB_ENOMEM, "memory: no host memory for the pinned table");
  }
  b->req = bytes;
  b->owner = o;
  b->next = NULL;
  MEM_DLIST_PUSH(o->pins, b, oprev, onext);
  mem__stat_add(&o->pinned_bytes, size);
  mem__stat_add(&o->pinned_blocks, 1);
  mem__stat_add(&a->pinned_allocated, size);
  mem__event_locked(a, EBB_EV_PIN_ALLOC, o, (uint64_t)(uintptr_t)b->p, size);
  *out = b->p;
  return 0;
}

int mem_pinned_alloc(ebb_owner *o, size_t bytes, void **out) {
  if (!o || !out || !bytes)
    return ebb_seterr(EBB_EINVAL, "mem_pinned_alloc: owner, a size > 0 and out are required");
  mem__check_owner(o);
  *out = NULL;
  if (bytes > SIZE_MAX - (1u << 20))
    return ebb_seterr(EBB_ENOMEM, "%s '%s' asked for %zu pinned bytes: too large", o->kind, o->name,
                      bytes);
  mem_allocator *a = o->a;
  mem__lock(a);
  int rc = alloc_locked(a, o, bytes, out);
  mem__unlock(a);
  return rc;
}

void mem__pin_release_locked(mem_allocator *a, pin_buf *b) {
  ebb_owner *o = b->owner;
  mem__map_del(&a->pin_live, (uint64_t)(uintptr_t)b->p);
  MEM_DLIST_UNLINK(o->pins, b, oprev, onext);
  mem__stat_sub(&o->pinned_bytes, b->size);
  mem__stat_sub(&o->pinned_blocks, 1);
  mem__stat_sub(&a->pinned_allocated, b->size);
  mem__event_locked(a, EBB_EV_PIN_FREE, o, (uint64_t)(uintptr_t)b->p, b->size);
  b->owner = NULL;
  b->req = 0;
  b->next = a->pin_idle;
  a->pin_idle = b;
}

int mem_pinned_free(mem_allocator *a, void *p) {
  if (!a || !p)
    return ebb_seterr(EBB_EINVAL, "mem_pinned_free: allocator and pointer are required");
  mem__lock(a);
  pin_buf *b = mem__map_get(&a->pin_live, (uint64_t)(uintptr_t)p);
  if (!b) {
    mem__unlock(a);
    return ebb_seterr(EBB_ENOTFOUND, "mem_pinned_free: %p is not a live pinned buffer", p);
  }
  mem__pin_release_locked(a, b);
  mem__unlock(a);
  return 0;
}

uint64_t mem__pin_trim_locked(mem_allocator *a) {
  uint64_t bytes = 0;
  while (a->pin_idle) {
    pin_buf *b = a->pin_idle;
    a->pin_idle = b->next;
    dev_host_free(a->dev, b->p);
    mem__stat_sub(&a->pinned_reserved, b->size);
    bytes += b->size;
    free(b);
  }
  return bytes;
}
