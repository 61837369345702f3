/* The memory room's lowest file: the clock, bytes as text, sized struct
 * copies, handle checks, the allocator lock and publishing a fact (the
 * counters' helpers are inline in internal.h). Calls nothing else in the
 * room, so every other file may call it. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/events.h"
#include "base/log.h"
#include "memory/internal.h"

void mem__publish(ebb_event *ev, int rc) {
  char msg[1024]; /* the size of error.c's message */
  if (rc)
    snprintf(msg, sizeof msg, "%s", ebb_errmsg());
  base_event_publish(ev);
  if (rc)
    ebb_seterr(rc, "%s", msg);
}

void mem__copy_sized(void *dst, const void *src, size_t n) {
  uint32_t keep;
  memcpy(&keep, dst, sizeof keep);
  memcpy(dst, src, keep < n ? keep : n);
  memcpy(dst, &keep, sizeof keep);
}

void mem__check_alloc(const mem_allocator *a) {
#ifdef EBB_DEBUG
  if (a->sig != EBB_SIG_ALLOC) {
    base_log(EBB_LOG_ERROR, "memory", "bad allocator handle %p (signature %08x)", (const void *)a,
             a->sig);
    abort();
  }
#else
  (void)a;
#endif
}

void mem__check_owner(const ebb_owner *o) {
#ifdef EBB_DEBUG
  if (o->sig != EBB_SIG_OWNER) {
    base_log(EBB_LOG_ERROR, "memory", "bad owner handle %p (signature %08x%s)", (const void *)o,
             o->sig, o->sig == EBB_SIG_DEAD ? ": used after mem_owner_destroy" : "");
    abort();
  }
#else
  (void)o;
#endif
}

void mem__lock(mem_allocator *a) {
  mem__check_alloc(a);
  pthread_mutex_lock(&a->mu);
}

void mem__unlock(mem_allocator *a) { pthread_mutex_unlock(&a->mu); }
