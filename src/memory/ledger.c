/* The ledger: a bounded ring of memory events with monotonic timestamps, the
 * names of the owners they refer to, and the JSON export. Its mutex is a
 * leaf: it may be taken with the allocator's held, never the other way. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "memory/internal.h"
#include "base/text.h"
#include "memory/ledger_internal.h"

static const char *kind_names[] = {
#define EBB_X_(k, s) s,
    EBB_LEDGER_KINDS(EBB_X_)
#undef EBB_X_
};

const char *ebb_ledger_kind_name(ebb_ledger_kind k) {
  return (unsigned)k < sizeof kind_names / sizeof *kind_names ? kind_names[k] : "?";
}

int ledger_create(size_t cap, const char *device, ebb_ledger **out) {
  ebb_ledger *l = calloc(1, sizeof *l);
  if (!l || !(l->ev = calloc(cap, sizeof *l->ev))) {
    free(l);
    return ebb_seterr(EBB_ENOMEM, "memory: no host memory for a ledger of %zu events", cap);
  }
  l->cap = cap;
  snprintf(l->device, sizeof l->device, "%s", device ? device : "?");
  l->t0 = mem_now_ns();
  pthread_mutex_init(&l->mu, NULL);
  *out = l;
  return 0;
}

void ledger_destroy(ebb_ledger *l) {
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

void ledger_owner_name(ebb_ledger *l, uint32_t id, const char *name) {
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

const char *ledger_name_locked(const ebb_ledger *l, uint32_t id) {
  return id && id < l->nnames && l->names[id] ? l->names[id] : NULL;
}

static void push_locked(ebb_ledger *l, const ebb_ledger_event *e) {
  l->ev[l->head] = *e;
  l->head = (l->head + 1) % l->cap;
  if (l->n < l->cap)
    l->n++;
  else
    l->dropped++;
}

void ledger_add(ebb_ledger *l, ebb_ledger_kind k, uint32_t owner_id, uint64_t addr,
                uint64_t bytes, uint64_t owner_bytes, uint64_t reserved, uint64_t allocated) {
  ebb_ledger_event e = {.t_ns = mem_now_ns(), .kind = k, .owner_id = owner_id, .addr = addr,
                        .bytes = bytes, .owner_bytes = owner_bytes, .reserved = reserved,
                        .allocated = allocated};
  pthread_mutex_lock(&l->mu);
  e.label = ledger_name_locked(l, owner_id);
  l->last_reserved = reserved;
  l->last_allocated = allocated;
  push_locked(l, &e);
  pthread_mutex_unlock(&l->mu);
}

void ebb_ledger_mark(ebb_ledger *l, const char *label) {
  if (!l)
    return;
  if (!label)
    label = "";
  pthread_mutex_lock(&l->mu);
  /* marks repeat (one per stage run): keep each distinct text once */
  for (size_t i = 0; i < l->nmarks; i++)
    if (strcmp(l->marks[i], label) == 0) {
      ebb_ledger_event e = {.t_ns = mem_now_ns(), .kind = EBB_EV_MARK, .label = l->marks[i],
                            .reserved = l->last_reserved, .allocated = l->last_allocated};
      push_locked(l, &e);
      pthread_mutex_unlock(&l->mu);
      return;
    }
  char **nm = realloc(l->marks, (l->nmarks + 1) * sizeof *nm);
  char *s = strdup(label);
  if (nm)
    l->marks = nm;
  if (nm && s) {
    l->marks[l->nmarks++] = s;
    ebb_ledger_event e = {.t_ns = mem_now_ns(), .kind = EBB_EV_MARK, .label = s,
                          .reserved = l->last_reserved, .allocated = l->last_allocated};
    push_locked(l, &e);
  } else {
    free(s);
  }
  pthread_mutex_unlock(&l->mu);
}

size_t ebb_ledger_count(ebb_ledger *l) {
  if (!l)
    return 0;
  pthread_mutex_lock(&l->mu);
  size_t n = l->n;
  pthread_mutex_unlock(&l->mu);
  return n;
}

int ebb_ledger_events(ebb_ledger *l, ebb_ledger_event *out, size_t cap, size_t *n,
                      uint64_t *dropped) {
  if (!l || !n || (cap && !out))
    return ebb_seterr(EBB_EINVAL, "ebb_ledger_events: ledger and n are required");
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
int ledger_snapshot(ebb_ledger *l, ledger_snap *s) {
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
    ledger_snap_free(s);
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

void ledger_snap_free(ledger_snap *s) {
  for (size_t i = 0; s->names && i < s->nnames; i++)
    free(s->names[i]);
  free(s->names);
  free(s->ev);
  memset(s, 0, sizeof *s);
}

int ebb_ledger_write_json(ebb_ledger *l, FILE *f) {
  if (!l || !f)
    return ebb_seterr(EBB_EINVAL, "ebb_ledger_write_json: ledger and stream are required");
  ledger_snap s;
  int rc = ledger_snapshot(l, &s);
  if (rc)
    return rc;
  fprintf(f, "{\"device\":");
  ebb_write_json_str(f, s.device);
  fprintf(f, ",\"t0_ns\":%" PRIu64 ",\"dropped\":%" PRIu64 ",\"owners\":[", s.t0, s.dropped);
  int first = 1;
  for (size_t i = 0; i < s.nnames; i++)
    if (s.names[i]) {
      fprintf(f, "%s{\"id\":%zu,\"name\":", first ? "" : ",", i);
      ebb_write_json_str(f, s.names[i]);
      fputc('}', f);
      first = 0;
    }
  fprintf(f, "],\"events\":[");
  for (size_t i = 0; i < s.n; i++) {
    const ebb_ledger_event *e = &s.ev[i];
    fprintf(f, "%s\n{\"t_ns\":%" PRIu64 ",\"kind\":\"%s\"", i ? "," : "", e->t_ns - s.t0,
            ebb_ledger_kind_name(e->kind));
    if (e->kind == EBB_EV_MARK) {
      fprintf(f, ",\"label\":");
      ebb_write_json_str(f, e->label);
    } else if (e->owner_id) {
      fprintf(f, ",\"owner\":");
      ebb_write_json_str(f, e->label);
    }
    fprintf(f,
            ",\"addr\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"owner_bytes\":%" PRIu64
            ",\"reserved\":%" PRIu64 ",\"allocated\":%" PRIu64 "}",
            e->addr, e->bytes, e->owner_bytes, e->reserved, e->allocated);
  }
  fprintf(f, "]}\n");
  ledger_snap_free(&s);
  return ferror(f) ? ebb_seterr(EBB_EIO, "ledger: writing JSON failed") : 0;
}

int ebb_ledger_write(ebb_ledger *l, const char *path) {
  if (!l || !path)
    return ebb_seterr(EBB_EINVAL, "ebb_ledger_write: ledger and path are required");
  size_t n = strlen(path);
  int svg = n >= 4 && strcmp(path + n - 4, ".svg") == 0;
  int json = n >= 5 && strcmp(path + n - 5, ".json") == 0;
  if (!svg && !json)
    return ebb_seterr(EBB_EINVAL, "%s: a timeline file must end in .svg or .json", path);
  FILE *f = fopen(path, "w");
  if (!f)
    return ebb_seterr(EBB_EIO, "%s: cannot write: %s", path, strerror(errno));
  int rc = svg ? ebb_ledger_write_svg(l, f, NULL) : ebb_ledger_write_json(l, f);
  if (fclose(f) && !rc)
    rc = ebb_seterr(EBB_EIO, "%s: cannot write: %s", path, strerror(errno));
  return rc;
}
