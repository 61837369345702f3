/* The live picture's memory (events_int.h): each device's allocator ledger
 * read every interval into per-owner rows (allocations aggregated per
 * owner: bytes, peaks, parked bytes, which only the ledger has), with the
 * device's driver numbers: the `memory` samples and the running jobs'
 * peaks. Every other event (releases, owners put to sleep, leaks,
 * out-of-memory, marks) is a fact from the bus (events.c), not read here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "server/events_int.h"

#define LEDGER_BATCH 8192

static owner_row *owner_get(ev_dev *d, uint32_t id, const char *name) {
  for (size_t i = 0; i < d->nowners; i++)
    if (d->owners[i].id == id)
      return &d->owners[i];
  if (d->nowners == d->capowners) {
    size_t cap = d->capowners ? d->capowners * 2 : 32;
    owner_row *p = realloc(d->owners, cap * sizeof *p);
    if (!p)
      return NULL;
    d->owners = p;
    d->capowners = cap;
  }
  owner_row *r = &d->owners[d->nowners++];
  memset(r, 0, sizeof *r);
  r->id = id;
  snprintf(r->name, sizeof r->name, "%s", name ? name : "?");
  return r;
}

/* 1 when pipeline p (an entry of e->pipelines) is loaded on the device
 * labelled label. */
static int loaded_on(json_t *p, const char *label) {
  size_t i;
  json_t *x;
  json_array_foreach(json_object_get(p, "devices"), i,
                     x) if (!strcmp(json_string_value(x) ?: "", label)) return 1;
  return 0;
}

/* The pipeline an owner (a stage instance or "job P") of device label
 * belongs to: the running job's pipeline if it is loaded there and has that
 * stage, else a pipeline loaded there that has it, else the running one,
 * else one loaded anywhere, else any. NULL when none. */
const char *srv_ev_pipeline_of(srv_events *e, const char *label, const char *owner,
                               const char *running) {
  if (!strncmp(owner, "job ", 4))
    return owner + 4;
  const char *here = NULL, *run = NULL, *loaded = NULL, *any = NULL;
  size_t i, k;
  json_t *p, *st;
  json_array_foreach(e->pipelines, i, p) {
    const char *name = json_string_value(json_object_get(p, "name"));
    json_array_foreach(json_object_get(p, "stages"), k, st) {
      if (strcmp(json_string_value(json_object_get(st, "name")) ?: "", owner))
        continue;
      int on = loaded_on(p, label);
      if (running && !strcmp(running, name) && on)
        return name;
      if (!here && on)
        here = name;
      if (running && !strcmp(running, name))
        run = name;
      if (!loaded && json_is_true(json_object_get(p, "loaded")))
        loaded = name;
      if (!any || !strcmp(name, e->last_job_pipeline))
        any = name;
    }
  }
  return here ? here : run ? run : loaded ? loaded : any;
}

/* An owner's allocation, free, park or wake. */
static void on_owner_event(ev_dev *d, const mem_ledger_event *x) {
  owner_row *r = owner_get(d, x->owner_id, x->label);
  if (!r)
    return;
  r->touched = 1;
  if (x->kind == EBB_EV_PARK) {
    r->parked += x->bytes;
    return;
  }
  if (x->kind == EBB_EV_WAKE) {
    r->parked -= x->bytes < r->parked ? x->bytes : r->parked;
    return;
  }
  r->bytes = x->owner_bytes;
  if (!r->bytes)
    r->parked = 0; /* torn down while asleep */
  if (x->kind == EBB_EV_ALLOC) {
    r->allocs++;
    if (x->owner_bytes > r->peak)
      r->peak = x->owner_bytes;
  } else {
    r->frees++;
  }
}

/* Reads a device's ledger events since the last tick into its owner rows. */
void srv_ev_read_ledger(ev_dev *d) {
  mem_ledger *l = mem_allocator_ledger(d->alloc);
  size_t n = 0;
  uint64_t before = 0;
  if (mem_ledger_events(l, NULL, 0, &n, &before) != 0 || before == d->ledger_seen)
    return;
  size_t want = before - d->ledger_seen > LEDGER_BATCH ? LEDGER_BATCH
                                                       : (size_t)(before - d->ledger_seen);
  mem_ledger_event *ev = malloc((want + 64) * sizeof *ev);
  uint64_t rest = 0;
  if (!ev || mem_ledger_events(l, ev, want + 64, &n, &rest) != 0) {
    free(ev);
    return;
  }
  uint64_t total = rest + n, first = total - n; /* ev[0] is event number `first` */
  for (size_t i = 0; i < n; i++) {
    if (first + i < d->ledger_seen)
      continue;
    switch (ev[i].kind) {
    case EBB_EV_ALLOC:
    case EBB_EV_FREE:
    case EBB_EV_LEAK_FREE:
    case EBB_EV_PARK:
    case EBB_EV_WAKE: on_owner_event(d, &ev[i]); break;
    default: break; /* the rest are the bus's facts or not the picture's */
    }
  }
  d->ledger_seen = total;
  free(ev);
}

/* --- per-interval memory sample ------------------------------------------------------ */
/* The device's owners of this interval (asleep_bytes: parked in host memory,
 * not held on the device); rows that hold nothing are forgotten. */
static json_t *owners_sample(srv_events *e, size_t di, const char *running,
                             uint64_t *asleep_total) {
  ev_dev *d = &e->dev[di];
  json_t *owners = json_array();
  size_t keep = 0;
  *asleep_total = 0;
  for (size_t i = 0; i < d->nowners; i++) {
    owner_row *r = &d->owners[i];
    if (r->bytes || r->touched) {
      const char *p = srv_ev_pipeline_of(e, d->label, r->name, running);
      uint64_t asleep = r->parked < r->bytes ? r->parked : r->bytes;
      *asleep_total += asleep;
      json_array_append_new(owners,
                            json_pack("{s:s,s:o,s:I,s:I,s:I,s:i,s:i}", "owner", r->name, "pipeline",
                                      p ? json_string(p) : json_null(), "bytes",
                                      (json_int_t)r->bytes, "asleep_bytes", (json_int_t)asleep,
                                      "peak", (json_int_t)(r->peak > r->bytes ? r->peak : r->bytes),
                                      "allocs", r->allocs, "frees", r->frees));
    }
    r->peak = r->bytes;
    r->allocs = r->frees = 0;
    r->touched = 0;
    if (r->bytes) /* forget owners that hold nothing */
      d->owners[keep++] = *r;
  }
  d->nowners = keep;
  return owners;
}

void srv_ev_publish_memory(srv_events *e, size_t di, const char *running) {
  ev_dev *d = &e->dev[di];
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(d->alloc, &st);
  mem_unattributed un = {.size = sizeof un};
  int un_ok = mem_allocator_unattributed(d->alloc, &un) == 0 && un.known;
  /* the figures above may have waited for the device (a wake, a load):
   * the owners catch up with the ledger so that both tell the same moment */
  srv_ev_read_ledger(d);
  uint64_t asleep = 0;
  json_t *owners = owners_sample(e, di, running, &asleep);
  uint64_t used = st.driver_total > st.driver_free ? st.driver_total - st.driver_free : 0;
  json_t *o = json_pack("{s:f,s:s,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "t", base_wall_s(),
                        "device", d->label, "owners", owners, "reserved_bytes",
                        (json_int_t)st.reserved.current, "allocated_bytes",
                        (json_int_t)st.allocated.current, "cached_bytes",
                        (json_int_t)st.cached.current, "context_bytes",
                        (json_int_t)(st.ctx_active ? st.context_estimate : 0), "asleep_bytes",
                        (json_int_t)asleep, "backup_bytes",
                        (json_int_t)mem_allocator_backup_bytes(d->alloc), "driver_used_bytes",
                        (json_int_t)used, "driver_free_bytes", (json_int_t)st.driver_free,
                        "driver_total_bytes", (json_int_t)st.driver_total);
  if (un_ok && un.per_process) {
    json_object_set_new(o, "process_bytes", json_integer((json_int_t)un.driver_used));
    json_object_set_new(o, "others_bytes",
                        json_integer(
                            (json_int_t)(used > un.driver_used ? used - un.driver_used : 0)));
  } else {
    json_object_set_new(o, "process_bytes", json_null());
    json_object_set_new(o, "others_bytes", json_null());
  }
  json_object_set_new(o, "unattributed_bytes",
                      un_ok ? json_integer((json_int_t)(un.unattributed > 0 ? un.unattributed : 0))
                            : json_null());
  srv_sse_send(e->sse, "memory", o, 1);
}

/* Peaks of this interval's owners go to the job that ran in it. */
void srv_ev_add_peaks(srv_events *e, watched_job *w) {
  for (size_t d = 0; d < e->ndev; d++)
    for (size_t i = 0; i < e->dev[d].nowners; i++) {
      owner_row *r = &e->dev[d].owners[i];
      if (!r->touched && !r->bytes)
        continue;
      const char *p = srv_ev_pipeline_of(e, e->dev[d].label, r->name, w->pipeline);
      if (!p || strcmp(p, w->pipeline))
        continue;
      uint64_t pk = r->peak > r->bytes ? r->peak : r->bytes;
      json_t *old = json_object_get(w->peaks, r->name);
      if (!old || (uint64_t)json_integer_value(old) < pk)
        json_object_set_new(w->peaks, r->name, json_integer((json_int_t)pk));
    }
}
