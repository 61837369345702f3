/* The ledger: a bounded ring of memory events with monotonic timestamps, the
 * names of the owners they refer to, and snapshots of both for the exporters
 * (ledger_export.c, ledger_svg.c). A mark is also a fact on the bus. Its mutex is a leaf: it may be taken with
 * the allocator's held, never the other way; it is held only inside this
 * file (helpers that expect it end in _ledger_locked). */
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "memory/internal.h"
#include "memory/ledger_internal.h"

static const char *kind_names[] = {
#define EBB_X_(k, s) s,
    EBB_LEDGER_KINDS(EBB_X_)
#undef EBB_X_
};

const char *mem_ledger_kind_name(mem_ledger_kind k) {
  return (unsigned)k < sizeof kind_names / sizeof *kind_names ? kind_names[k] : "?";
}

int mem__ledger_create(size_t cap, const char *device, mem_ledger **out) {
  mem_ledger *l = calloc(1, sizeof *l);
  if (!l || !(l->ev = calloc(cap, sizeof *l->ev))) {
    free(l);
    return ebb_seterr(EBB_ENOMEM, "memory: no host memory for a ledger of %zu events", cap);
  }
  l->cap = cap;
  snprintf(l->device, sizeof l->device, "%s", device ? device : "?");
  l->t0 = base_mono_ns();
  pthread_mutex_init(&l->mu, NULL);
  *out = l;
  return 0;
}

void mem__ledger_destroy(mem_ledger *l) {
  if (!l)
    return;
  for (size_t i = 0; i < l->nnames; i++)
    free(l->names[i]);
  free(l->names);
  for (size_t i = 0; i < l->nmarks; i++)
    free(l->marks[i]);
  free(l->marks);
  free(l->ev);
  pthread_mutex_destroy(&l->mu);
  free(l);
}

void mem__ledger_owner_name(mem_ledger *l, uint32_t id, const char *name) {
  pthread_mutex_lock(&l->mu);
  if (id >= l->nnames) {
    size_t n = id + 1 > l->nnames * 2 ? id + 1 : l->nnames * 2;
    char **nn = realloc(l->names, n * sizeof *nn);
    if (nn) {
      memset(nn + l->nnames, 0, (n - l->nnames) * sizeof *nn);
      l->names = nn;
      l->nnames = n;
    }
  }
  if (id < l->nnames && !l->names[id])
    l->names[id] = strdup(name);
  pthread_mutex_unlock(&l->mu);
}

static const char *name_ledger_locked(const mem_ledger *l, uint32_t id) {
  return id && id < l->nnames && l->names[id] ? l->names[id] : NULL;
}

static inline void push_ledger_locked(mem_ledger *l, const mem_ledger_event *e) {
  l->ev[l->head] = *e;
  l->head = (l->head + 1) % l->cap;
  if (l->n < l->cap)
    l->n++;
  else
    l->dropped++;
}

void mem__ledger_add(mem_ledger *l, mem_ledger_kind k, uint32_t owner_id, uint64_t addr,
                     uint64_t bytes, uint64_t owner_bytes, uint64_t reserved, uint64_t allocated) {
  mem_ledger_event e = {.t_ns = base_mono_ns(),
                        .kind = k,
                        .owner_id = owner_id,
                        .addr = addr,
                        .bytes = bytes,
                        .owner_bytes = owner_bytes,
                        .reserved = reserved,
                        .allocated = allocated};
  pthread_mutex_lock(&l->mu);
  e.label = name_ledger_locked(l, owner_id);
  l->last_reserved = reserved;
  l->last_allocated = allocated;
  push_ledger_locked(l, &e);
  pthread_mutex_unlock(&l->mu);
}

/* Marks repeat (one per stage run): each distinct text is kept once, for as
 * long as the ledger lives. NULL when there is no memory for a new one. */
static const char *mark_text_ledger_locked(mem_ledger *l, const char *label) {
  for (size_t i = 0; i < l->nmarks; i++)
    if (strcmp(l->marks[i], label) == 0)
      return l->marks[i];
  char **nm = realloc(l->marks, (l->nmarks + 1) * sizeof *nm);
  char *s = strdup(label);
  if (nm)
    l->marks = nm;
  if (!nm || !s) {
    free(s);
    return NULL;
  }
  l->marks[l->nmarks++] = s;
  return s;
}

/* Recorded in the ring (the timeline's tick) and published on the bus
 * (EBB_EVENT_MARK: the live picture's `mark`), after the ledger's mutex is
 * let go: a subscriber may read the ledger. */
void mem_ledger_mark(mem_ledger *l, const char *label) {
  if (!l)
    return;
  label = label ? label : "";
  pthread_mutex_lock(&l->mu);
  const char *text = mark_text_ledger_locked(l, label);
  if (text) {
    mem_ledger_event e = {.t_ns = base_mono_ns(),
                          .kind = EBB_EV_MARK,
                          .label = text,
                          .reserved = l->last_reserved,
                          .allocated = l->last_allocated};
    push_ledger_locked(l, &e);
  }
  pthread_mutex_unlock(&l->mu);
  ebb_event ev = {.kind = EBB_EVENT_MARK, .device = l->device, .message = label};
  mem__publish(&ev, 0);
}

size_t mem_ledger_count(mem_ledger *l) {
  if (!l)
    return 0;
  pthread_mutex_lock(&l->mu);
  size_t n = l->n;
  pthread_mutex_unlock(&l->mu);
  return n;
}

int mem_ledger_events(mem_ledger *l, mem_ledger_event *out, size_t cap, size_t *n,
                      uint64_t *dropped) {
  if (!l || !n || (cap && !out))
    return ebb_seterr(EBB_EINVAL, "mem_ledger_events: ledger and n are required");
  pthread_mutex_lock(&l->mu);
  size_t take = l->n < cap ? l->n : cap;
  size_t start = (l->head + l->cap - take) % l->cap; /* the newest `take` events */
  for (size_t i = 0; i < take; i++)
    out[i] = l->ev[(start + i) % l->cap];
  if (dropped)
    *dropped = l->dropped + (l->n - take);
  pthread_mutex_unlock(&l->mu);
  *n = take;
  return 0;
}

/* Snapshot for the exporters: events oldest first plus a copy of the names. */
int mem__ledger_snapshot(mem_ledger *l, ledger_snap *s) {
  memset(s, 0, sizeof *s);
  pthread_mutex_lock(&l->mu);
  s->n = l->n;
  s->ev = malloc((l->n ? l->n : 1) * sizeof *s->ev);
  s->nnames = l->nnames;
  s->names = calloc(l->nnames ? l->nnames : 1, sizeof *s->names);
  int ok = s->ev && s->names;
  for (size_t i = 0; ok && i < l->nnames; i++)
    if (l->names[i] && !(s->names[i] = strdup(l->names[i])))
      ok = 0;
  if (ok) {
    size_t start = (l->head + l->cap - l->n) % l->cap;
    for (size_t i = 0; i < l->n; i++)
      s->ev[i] = l->ev[(start + i) % l->cap];
  }
  s->dropped = l->dropped;
  s->t0 = l->t0;
  snprintf(s->device, sizeof s->device, "%s", l->device);
  pthread_mutex_unlock(&l->mu);
  if (!ok) {
    mem__ledger_snap_free(s);
    return ebb_seterr(EBB_ENOMEM, "ledger: no host memory for a snapshot");
  }
  /* labels of owner events point into the ledger's names; re-point them at
   * the snapshot's copy so they stay valid without the lock (marks stay:
   * their strings live as long as the ledger) */
  for (size_t i = 0; i < s->n; i++)
    if (s->ev[i].kind != EBB_EV_MARK)
      s->ev[i].label = s->ev[i].owner_id < s->nnames ? s->names[s->ev[i].owner_id] : NULL;
  return 0;
}

void mem__ledger_snap_free(ledger_snap *s) {
  for (size_t i = 0; s->names && i < s->nnames; i++)
    free(s->names[i]);
  free(s->names);
  free(s->ev);
  memset(s, 0, sizeof *s);
}
