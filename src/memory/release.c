/* The release registry and mem_release; unattributed memory. The registry
 * has its own mutex; callbacks run with no lock held (the list is copied
 * first), so a callback may free memory and (un)register. Every registration
 * belongs to an owner (a stage instance's, mem_on_release_for) or to the
 * process (mem_on_release: owner NULL, released under the name
 * EBB_RELEASE_PROCESS_OWNER), so releasing one stage runs its own callbacks
 * only (mem_release_callbacks_of). */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "memory/internal.h"

typedef struct rel_cb {
  uint64_t handle;
  const ebb_owner *owner; /* NULL: process-wide; compared, never dereferenced */
  char *name;
  mem_release_fn fn;
  mem_release_fn_int fn_int;
  void *arg;
} rel_cb;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static rel_cb *reg;
static size_t reg_n, reg_cap;
static uint64_t reg_next = 1;

static int reg_add(const ebb_owner *owner, const char *name, mem_release_fn fn,
                   mem_release_fn_int fn_int, void *arg, uint64_t *handle) {
  if ((!fn && !fn_int) || !handle)
    return ebb_seterr(EBB_EINVAL,
                      "mem_on_release('%s'): a function and a handle out-param are "
                      "required",
                      name ? name : "?");
  char *nm = strdup(name && *name ? name : "anonymous");
  if (!nm)
    return ebb_seterr(EBB_ENOMEM, "mem_on_release: no host memory");
  pthread_mutex_lock(&reg_mu);
  if (reg_n == reg_cap) {
    size_t ncap = reg_cap ? reg_cap * 2 : 16;
    rel_cb *n = realloc(reg, ncap * sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&reg_mu);
      free(nm);
      return ebb_seterr(EBB_ENOMEM, "mem_on_release: no host memory");
    }
    reg = n;
    reg_cap = ncap;
  }
  rel_cb *c = &reg[reg_n++];
  c->handle = reg_next++;
  c->owner = owner;
  c->name = nm;
  c->fn = fn;
  c->fn_int = fn_int;
  c->arg = arg;
  *handle = c->handle;
  pthread_mutex_unlock(&reg_mu);
  return 0;
}

int mem_on_release(const char *name, mem_release_fn fn, void *arg, uint64_t *handle) {
  return reg_add(NULL, name, fn, NULL, arg, handle);
}

int mem_on_release_int(const char *name, mem_release_fn_int fn, void *arg, uint64_t *handle) {
  return reg_add(NULL, name, NULL, fn, arg, handle);
}

int mem_on_release_for(ebb_owner *owner, const char *name, mem_release_fn fn, void *arg,
                       uint64_t *handle) {
  return reg_add(owner, name, fn, NULL, arg, handle);
}

int mem_off_release(uint64_t handle) {
  pthread_mutex_lock(&reg_mu);
  for (size_t i = 0; i < reg_n; i++)
    if (reg[i].handle == handle) {
      free(reg[i].name);
      memmove(&reg[i], &reg[i + 1], (reg_n - i - 1) * sizeof *reg);
      reg_n--;
      if (!reg_n) { /* nothing left: give the array back too */
        free(reg);
        reg = NULL;
        reg_cap = 0;
      }
      pthread_mutex_unlock(&reg_mu);
      return 0;
    }
  pthread_mutex_unlock(&reg_mu);
  return ebb_seterr(EBB_ENOTFOUND, "mem_off_release: no release callback with handle %" PRIu64,
                    handle);
}

/* Runs the callbacks registered now (all of them, or only `owner`'s when
 * only_owner), in registration order. One that is unregistered by an earlier
 * callback during the run is skipped; one registered during the run waits
 * for the next release. */
static void run_callbacks(int only_owner, const ebb_owner *owner, int *run, int *failed) {
  pthread_mutex_lock(&reg_mu);
  size_t n = 0;
  uint64_t *handles = reg_n ? malloc(reg_n * sizeof *handles) : NULL;
  for (size_t i = 0; handles && i < reg_n; i++)
    if (!only_owner || reg[i].owner == owner)
      handles[n++] = reg[i].handle;
  if (!handles)
    n = reg_n;
  pthread_mutex_unlock(&reg_mu);
  if (n && !handles) {
    base_log(EBB_LOG_ERROR, "release", "no host memory to run %zu release callbacks", n);
    *failed += (int)n;
    return;
  }
  for (size_t i = 0; i < n; i++) {
    rel_cb c;
    int found = 0;
    char name[128];
    pthread_mutex_lock(&reg_mu);
    for (size_t j = 0; j < reg_n; j++)
      if (reg[j].handle == handles[i]) {
        c = reg[j];
        snprintf(name, sizeof name, "%s", c.name);
        found = 1;
        break;
      }
    pthread_mutex_unlock(&reg_mu);
    if (!found)
      continue;
    (*run)++;
    if (c.fn) {
      c.fn(c.arg);
      continue;
    }
    ebb_clearerr();
    int rc = c.fn_int(c.arg);
    if (rc) {
      (*failed)++;
      base_log(EBB_LOG_ERROR, "release",
               "release callback '%s' failed: %s (%s); the others still run", name, ebb_errmsg(),
               ebb_errname(rc < 0 ? rc : EBB_ESTAGE));
    }
  }
  free(handles);
}

int mem_release(mem_allocator *a, unsigned flags, mem_release_result *out) {
  mem_release_result r;
  memset(&r, 0, sizeof r);
  r.size = sizeof r;
  if (out && out->size < sizeof(uint32_t))
    return ebb_seterr(EBB_EINVAL, "mem_release: out->size must be set");
  if (a)
    mem__check_alloc(a);
  if (flags & EBB_RELEASE_CALLBACKS)
    run_callbacks(0, NULL, &r.callbacks_run, &r.callbacks_failed);
  if (a) {
    mem__lock(a);
    if (flags & EBB_RELEASE_TRIM) {
      r.segment_bytes = mem__trim_locked(a);
      if (r.segment_bytes)
        mem__event_locked(a, EBB_EV_TRIM, NULL, 0, r.segment_bytes);
    }
    if (flags & EBB_RELEASE_PINNED)
      r.pinned_bytes = mem__pin_trim_locked(a);
    mem__unlock(a);
    if (flags & EBB_RELEASE_CONTEXT)
      mem__ctx_release(a, &r);
    r.released_bytes = r.segment_bytes + r.context_bytes;
    mem__lock(a);
    mem__event_locked(a, EBB_EV_RELEASE, NULL, 0, r.released_bytes);
    mem__unlock(a);
  }
  if (out)
    mem__copy_sized(out, &r, sizeof r);
  return 0;
}
int mem_release_callbacks_of(ebb_owner *owner, int *run, int *failed) {
  int r = 0, f = 0;
  run_callbacks(1, owner, &r, &f);
  if (run)
    *run = r;
  if (failed)
    *failed = f;
  return r;
}

size_t mem_release_count_of(ebb_owner *owner) {
  size_t n = 0;
  pthread_mutex_lock(&reg_mu);
  for (size_t i = 0; i < reg_n; i++)
    n += reg[i].owner == owner;
  pthread_mutex_unlock(&reg_mu);
  return n;
}

int mem_allocator_unattributed(mem_allocator *a, mem_unattributed *out) {
  if (!a || !out || out->size < sizeof(uint32_t))
    return ebb_seterr(EBB_EINVAL, "mem_allocator_unattributed: out->size must be set");
  mem_unattributed u;
  memset(&u, 0, sizeof u);
  u.size = sizeof u;
  mem__lock(a);
  u.ebb_reserved = a->reserved.current;
  int cuda = dev_kind_of(a->dev) == EBB_DEVICE_CUDA;
  u.context_estimate = cuda && dev_ctx_active(a->dev) ? a->context_estimate : 0;
  mem__unlock(a);
  uint64_t used = 0;
  if (cuda && dev_process_used(a->dev, getpid(), &used) == 0) {
    u.per_process = 1;
    u.known = 1;
    u.driver_used = used;
  } else if (cuda) {
    dev_meminfo mi = {0};
    if (dev_mem_info(a->dev, &mi) == 0 && mi.source != EBB_MEMINFO_NONE &&
        mi.total_bytes >= mi.free_bytes) {
      u.known = 1;
      u.driver_used = mi.total_bytes - mi.free_bytes;
    }
  }
  if (u.known)
    u.unattributed = (int64_t)u.driver_used - (int64_t)u.ebb_reserved - (int64_t)u.context_estimate;
  mem__copy_sized(out, &u, sizeof u);
  return 0;
}
