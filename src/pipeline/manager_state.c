/* What the manager knows and the read side (manager.h): a pipeline found by
 * name, its figures under the manager's `lock`, the events it publishes
 * about a pipeline, and the JSON views of the pipelines and the memory.
 * Nothing here waits for the device thread or a switch. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/events.h"
#include "base/log.h"

#include "pipeline/host.h"
#include "pipeline/manager_int.h"

uint64_t pl__mgr_driver_free(pl_manager *m, int *known) { return pl_driver_free(m->dev, known); }

void pl__mgr_log_free(const char *name, const char *when, uint64_t bytes) {
  char scope[160];
  snprintf(scope, sizeof scope, "pipeline %s", name);
  base_log_field f[] = {EBB_LF_S("event", "pipeline_memory"), EBB_LF_S("pipeline", name),
                        EBB_LF_S("when", when), EBB_LF_U("driver_free_bytes", bytes)};
  base_log_ev(EBB_LOG_INFO, scope, f, 4, "GPU memory free %s: %.2f GiB", when, GIB(bytes));
}

/* A pipeline's state changed on this manager's device: the fact, once
 * (include/ebb/events.h; the server's stream marks it on the chart). */
void pl__mgr_publish(pl_manager *m, const char *name, const char *state, uint64_t before,
                     uint64_t after) {
  ebb_event ev = {.kind = EBB_EVENT_PIPELINE,
                  .device = dev_device_label(m->dev),
                  .pipeline = name,
                  .state = state,
                  .driver_free_before = before,
                  .driver_free_after = after};
  base_event_publish(&ev);
}

mpipe *pl__mgr_find(pl_manager *m, const char *name) {
  for (size_t i = 0; i < m->npipes; i++)
    if (!strcmp(m->pipes[i].def->name, name))
      return &m->pipes[i];
  return NULL;
}

int pl__mgr_unknown(pl_manager *m, const char *name) {
  char known[1024] = "";
  for (size_t i = 0; i < m->npipes; i++)
    snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "",
             m->pipes[i].def->name);
  return ebb_seterr(EBB_ENOTFOUND, "unknown pipeline '%s' (known: %s)", name, known);
}

int pl__mgr_loaded_count(pl_manager *m) {
  int n = 0;
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->npipes; i++)
    n += m->pipes[i].loaded;
  pthread_mutex_unlock(&m->lock);
  return n;
}

void pl__mgr_add_released(pl_manager *m, uint64_t b) {
  pthread_mutex_lock(&m->lock);
  m->released_total += b;
  pthread_mutex_unlock(&m->lock);
}
int pl__mgr_asleep(pl_manager *m, mpipe *pp) {
  pthread_mutex_lock(&m->lock);
  int a = pp->loaded && pp->asleep;
  pthread_mutex_unlock(&m->lock);
  return a;
}

/* The figure the read side shows, refreshed after every change. */
void pl__mgr_note_backup(pl_manager *m) {
  uint64_t b = mem_allocator_backup_bytes(m->alloc);
  pthread_mutex_lock(&m->lock);
  m->backup_bytes = b;
  pthread_mutex_unlock(&m->lock);
}

pl_sessions *pl_manager_sessions(pl_manager *m) { return m->sessions; }

const pl_def *pl_manager_pipeline(pl_manager *m, const char *name) {
  mpipe *pp = pl__mgr_find(m, name);
  return pp ? pp->def : NULL;
}

int pl_manager_is_loaded(pl_manager *m, const char *name) {
  pthread_mutex_lock(&m->lock);
  mpipe *pp = pl__mgr_find(m, name);
  int l = pp && pp->loaded;
  pthread_mutex_unlock(&m->lock);
  return l;
}

int pl_manager_policy_of(pl_manager *m, const char *name, pl_policy *out) {
  mpipe *pp = pl__mgr_find(m, name); /* the definitions never change after create */
  if (!pp)
    return ebb_seterr(EBB_ENOTFOUND, "no pipeline '%s'", name);
  *out = pp->def->has_policy ? pp->def->policy : m->policy;
  return 0;
}

void pl_manager_place_figures(pl_manager *m, const char *name, uint64_t *measured, int *asleep) {
  pthread_mutex_lock(&m->lock);
  mpipe *pp = pl__mgr_find(m, name);
  *measured = pp && pp->measured ? pp->need : 0;
  *asleep = pp && pp->loaded && pp->asleep;
  pthread_mutex_unlock(&m->lock);
}

uint64_t pl_manager_context_estimate(pl_manager *m) {
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(m->alloc, &st);
  return st.context_estimate;
}

uint64_t pl_manager_asleep_bytes(pl_manager *m, const char *except) {
  uint64_t b = 0;
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->npipes; i++)
    if (m->pipes[i].loaded && m->pipes[i].asleep &&
        (!except || strcmp(m->pipes[i].def->name, except)))
      b += m->pipes[i].need;
  pthread_mutex_unlock(&m->lock);
  return b;
}

uint64_t pl_manager_loaded_bytes(pl_manager *m, const char *except, int *count) {
  uint64_t b = 0;
  int c = 0;
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->npipes; i++)
    if (m->pipes[i].loaded && (!except || strcmp(m->pipes[i].def->name, except))) {
      b += m->pipes[i].need;
      c++;
    }
  pthread_mutex_unlock(&m->lock);
  if (count)
    *count = c;
  return b;
}

dev_device *pl_manager_device(pl_manager *m) { return m->dev; }

uint64_t pl_manager_released_total(pl_manager *m) {
  pthread_mutex_lock(&m->lock);
  uint64_t b = m->released_total;
  pthread_mutex_unlock(&m->lock);
  return b;
}

/* --- JSON views ---------------------------------------------------------------- */
json_t *pl_manager_pipelines_json(pl_manager *m) {
  json_t *arr = json_array();
  for (size_t i = 0; i < m->npipes; i++) {
    mpipe *pp = &m->pipes[i];
    const pl_def *d = pp->def;
    json_t *o = json_object(), *st = json_array();
    for (size_t k = 0; k < d->nstages; k++)
      json_array_append_new(st, json_pack("{s:s,s:s}", "name", d->stages[k].name, "stage",
                                          d->stages[k].stage));
    char pol[64];
    pl_policy_format(d->has_policy ? &d->policy : &m->policy, pol, sizeof pol);
    pthread_mutex_lock(&m->lock);
    int loaded = pp->loaded;
    uint64_t need = pp->need;
    pthread_mutex_unlock(&m->lock);
    json_object_set_new(o, "name", json_string(d->name));
    json_object_set_new(o, "description",
                        d->description ? json_string(d->description) : json_null());
    json_object_set_new(o, "origin", json_string(d->origin ? d->origin : ""));
    json_object_set_new(o, "release", json_string(pol));
    json_object_set_new(o, "stages", st);
    json_object_set_new(o, "loaded", json_boolean(loaded));
    json_object_set_new(o, "asleep", json_boolean(loaded && pp->asleep));
    json_object_set_new(o, "sessions", json_integer(pl_sessions_leases(m->sessions, d->name)));
    json_object_set_new(o, "need_bytes", need ? json_integer((json_int_t)need) : json_null());
    json_array_append_new(arr, o);
  }
  return arr;
}

/* Per-owner current bytes from the ledger (thread-safe, never waits for a
 * job): an owner's last event carries its bytes after it. */
static json_t *owners_json(pl_manager *m) {
  mem_ledger *l = mem_allocator_ledger(m->alloc);
  size_t cap = mem_ledger_count(l) + 64, n = 0;
  mem_ledger_event *ev = malloc(cap * sizeof *ev);
  json_t *arr = json_array();
  if (!ev || mem_ledger_events(l, ev, cap, &n, NULL) != 0) {
    free(ev);
    return arr;
  }
  typedef struct {
    uint32_t id;
    const char *label;
    uint64_t bytes;
  } row;
  row *rows = calloc(n + 1, sizeof *rows);
  size_t nr = 0;
  for (size_t i = 0; rows && i < n; i++) {
    if (!ev[i].owner_id || ev[i].kind == EBB_EV_MARK)
      continue;
    size_t k = 0;
    while (k < nr && rows[k].id != ev[i].owner_id)
      k++;
    if (k == nr)
      rows[nr++] = (row){ev[i].owner_id, ev[i].label, 0};
    rows[k].bytes = ev[i].owner_bytes;
  }
  for (size_t k = 0; k < nr; k++)
    if (rows[k].bytes)
      json_array_append_new(arr, json_pack("{s:s,s:I}", "name", rows[k].label ? rows[k].label : "?",
                                           "bytes", (json_int_t)rows[k].bytes));
  free(rows);
  free(ev);
  return arr;
}

json_t *pl_manager_memory_json(pl_manager *m) {
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(m->alloc, &st);
  mem_unattributed un = {.size = sizeof un};
  int un_ok = mem_allocator_unattributed(m->alloc, &un) == 0;
  json_t *loaded = json_array();
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->npipes; i++)
    if (m->pipes[i].loaded)
      json_array_append_new(loaded, json_string(m->pipes[i].def->name));
  pthread_mutex_unlock(&m->lock);
  static const char *src[] = {"none", "driver", "nvml", "host"};
  json_t *dev = json_pack("{s:s,s:s,s:I,s:I,s:I,s:s}", "label", dev_device_label(m->dev), "name",
                          dev_name(m->dev), "total_bytes", (json_int_t)dev_total_bytes(m->dev),
                          "driver_free_bytes", (json_int_t)st.driver_free, "driver_total_bytes",
                          (json_int_t)st.driver_total, "driver_source",
                          src[st.driver_source <= EBB_MEMINFO_HOST ? st.driver_source : 0]);
  json_t *al =
      json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "reserved_bytes", (json_int_t)st.reserved.current,
                "allocated_bytes", (json_int_t)st.allocated.current, "cached_bytes",
                (json_int_t)st.cached.current, "reserved_peak_bytes", (json_int_t)st.reserved.peak,
                "segments", (json_int_t)st.segments.current, "blocks",
                (json_int_t)st.blocks.current, "trimmed_bytes", (json_int_t)st.trimmed_bytes);
  json_t *ctx = json_pack("{s:b,s:I}", "held", st.ctx_active, "estimate_bytes",
                          (json_int_t)st.context_estimate);
  json_t *pin = json_pack("{s:I,s:I}", "reserved_bytes", (json_int_t)st.pinned_reserved.current,
                          "allocated_bytes", (json_int_t)st.pinned_allocated.current);
  json_t *una = un_ok && un.known
                    ? json_pack("{s:b,s:b,s:I,s:I,s:I,s:I}", "known", 1, "per_process",
                                un.per_process, "driver_used_bytes", (json_int_t)un.driver_used,
                                "ebb_reserved_bytes", (json_int_t)un.ebb_reserved,
                                "context_estimate_bytes", (json_int_t)un.context_estimate,
                                "unattributed_bytes", (json_int_t)un.unattributed)
                    : json_pack("{s:b}", "known", 0);
  return json_pack("{s:o,s:o,s:o,s:o,s:o,s:o,s:o,s:I}", "device", dev, "allocator", al, "owners",
                   owners_json(m), "context", ctx, "pinned", pin, "unattributed", una, "loaded",
                   loaded, "released_total_bytes", (json_int_t)pl_manager_released_total(m));
}
