/* The pinned host pool: page-locked buffers from ebb_device_host_alloc,
 * counted per owner, kept idle after free for the next request of the same
 * rounded size, given back by trim and release. Lock: the allocator's. */
#include <stdlib.h>

#include "memory/internal.h"

static size_t pin_round(size_t n) {
  size_t m = n < (1u << 20) ? 4096u : (1u << 20);
  return (n + m - 1) / m * m;
}

int ebb_pinned_alloc(ebb_owner *o, size_t bytes, void **out) {
  if (!o || !out || !bytes)
    return ebb_seterr(EBB_EINVAL, "ebb_pinned_alloc: owner, a size > 0 and out are required");
  mem_check_owner(o);
  *out = NULL;
  if (bytes > SIZE_MAX - (1u << 20))
    return ebb_seterr(EBB_ENOMEM, "%s '%s' asked for %zu pinned bytes: too large", o->kind,
                      o->name, bytes);
  ebb_allocator *a = o->a;
  size_t size = pin_round(bytes);
  int rc = 0;
  mem_lock(a);
  pin_buf *b = NULL, **pp;
  for (pp = &a->pin_idle; *pp; pp = &(*pp)->next)
    if ((*pp)->size == size) {
      b = *pp;
      *pp = b->next;
      break;
    }
  if (!b) {
    b = calloc(1, sizeof *b);
    if (!b) {
      rc = ebb_seterr(EBB_ENOMEM, "memory: no host memory for a pinned buffer record");
      goto out;
    }
    rc = mem_ctx_ensure_locked(a);
    if (!rc) {
      rc = ebb_device_host_alloc(a->dev, size, &b->p);
      if (rc && pin_trim_locked(a))
        rc = ebb_device_host_alloc(a->dev, size, &b->p);
    }
    if (rc) {
      free(b);
      ebb_errctx(rc, "%s '%s' asked for %zu bytes of pinned host memory: ", o->kind, o->name,
                 bytes);
      goto out;
    }
    b->size = size;
    stat_add(&a->pinned_reserved, size);
  }
  rc = mem_map_put(&a->pin_live, (uint64_t)(uintptr_t)b->p, b);
  if (rc) {
    b->next = a->pin_idle;
    a->pin_idle = b;
    rc = ebb_seterr(EBB_ENOMEM, "memory: no host memory for the pinned table");
    goto out;
  }
  b->req = bytes;
  b->owner = o;
  b->next = NULL;
  b->oprev = NULL;
  b->onext = o->pins;
  if (o->pins)
    o->pins->oprev = b;
  o->pins = b;
  stat_add(&o->pinned_bytes, size);
  stat_add(&o->pinned_blocks, 1);
  stat_add(&a->pinned_allocated, size);
  ledger_add(a->ledger, EBB_EV_PIN_ALLOC, o->id, (uint64_t)(uintptr_t)b->p, size,
             o->bytes.current, a->reserved.current, a->allocated.current);
  *out = b->p;
out:
  mem_unlock(a);
  return rc;
}

void pin_release_locked(ebb_allocator *a, pin_buf *b) {
  ebb_owner *o = b->owner;
  mem_map_del(&a->pin_live, (uint64_t)(uintptr_t)b->p);
  if (b->oprev)
    b->oprev->onext = b->onext;
  else
    o->pins = b->onext;
  if (b->onext)
    b->onext->oprev = b->oprev;
  b->oprev = b->onext = NULL;
  stat_sub(&o->pinned_bytes, b->size);
  stat_sub(&o->pinned_blocks, 1);
  stat_sub(&a->pinned_allocated, b->size);
  ledger_add(a->ledger, EBB_EV_PIN_FREE, o->id, (uint64_t)(uintptr_t)b->p, b->size,
             o->bytes.current, a->reserved.current, a->allocated.current);
  b->owner = NULL;
  b->req = 0;
  b->next = a->pin_idle;
  a->pin_idle = b;
}

int ebb_pinned_free(ebb_allocator *a, void *p) {
  if (!a || !p)
    return ebb_seterr(EBB_EINVAL, "ebb_pinned_free: allocator and pointer are required");
  mem_lock(a);
  pin_buf *b = mem_map_get(&a->pin_live, (uint64_t)(uintptr_t)p);
  if (!b) {
    mem_unlock(a);
    return ebb_seterr(EBB_ENOTFOUND, "ebb_pinned_free: %p is not a live pinned buffer", p);
  }
  pin_release_locked(a, b);
  mem_unlock(a);
  return 0;
}

uint64_t pin_trim_locked(ebb_allocator *a) {
  uint64_t bytes = 0;
  while (a->pin_idle) {
    pin_buf *b = a->pin_idle;
    a->pin_idle = b->next;
    ebb_device_host_free(a->dev, b->p);
    stat_sub(&a->pinned_reserved, b->size);
    bytes += b->size;
    free(b);
  }
  return bytes;
}
