/* GET /v1/events (events.h): the bus's facts (releases, owners put to
 * sleep, leaks, jobs, pipelines, sessions, grants, out-of-memory and marks,
 * in the order they were published) and the ledgers' memory samples turned
 * into the live picture's events; docs/api.md describes every event. */
#include "server/events.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "server/events_int.h"

#define RECENT_LEAKS 50
#define LEAK_SITES 32 /* sites a leak event carries, at most */

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  if (!v || !*v)
    return dflt;
  char *end;
  long x = strtol(v, &end, 10);
  return *end || x <= 0 || x > (1L << 30) ? dflt : (int)x;
}

static char *dup0(const char *s) { return s ? strdup(s) : NULL; }

/* --- facts from the bus ------------------------------------------------------------ */
static void fact_free(ev_fact *f) {
  free(f->device);
  free(f->owner);
  free(f->pipeline);
  free(f->id);
  free(f->state);
  free(f->message);
  free(f->code);
  free(f->detail);
  json_decref(f->sites);
  free(f);
}

/* A leak's sites as the `leak` event names them ("file.c:12", with the
 * block's own owner when a child's). */
static json_t *leak_sites(const ebb_event *ev) {
  json_t *a = json_array();
  if (ev->outside) {
    json_array_append_new(a, json_pack("{s:I,s:s}", "bytes", (json_int_t)ev->bytes, "site",
                                       "taken from the driver directly, outside ebb's "
                                       "allocator"));
    return a;
  }
  for (size_t i = 0; i < ev->nsites && json_array_size(a) < LEAK_SITES; i++) {
    const ebb_event_site *s = &ev->sites[i];
    char site[400];
    snprintf(site, sizeof site, "%s%s%s%s", s->site ? s->site : "?", s->owner ? " (owner '" : "",
             s->owner ? s->owner : "", s->owner ? "')" : "");
    json_array_append_new(a, json_pack("{s:I,s:s}", "bytes", (json_int_t)s->bytes, "site", site));
  }
  return a;
}

/* The bus's callback: the fact is copied and handed to the publisher thread
 * (the publishing thread, often a device's, never waits on the stream). */
static void on_fact(void *ctx, const ebb_event *ev) {
  srv_events *e = ctx;
  if ((ev->kind == EBB_EVENT_RELEASED || ev->kind == EBB_EVENT_PARKED) && !ev->bytes)
    return;
  if (ev->kind == EBB_EVENT_LEAK && !ev->outside && !ev->bytes && !ev->blocks)
    return; /* pinned host buffers only: not the device's */
  ev_fact *f = calloc(1, sizeof *f);
  if (!f)
    return;
  *f = (ev_fact){.kind = ev->kind,
                 .t = ev->t,
                 .device = dup0(ev->device),
                 .owner = dup0(ev->owner),
                 .pipeline = dup0(ev->pipeline),
                 .id = dup0(ev->id),
                 .state = dup0(ev->state),
                 .message = dup0(ev->message),
                 .code = dup0(ev->code),
                 .detail = dup0(ev->detail),
                 .job = ev->job,
                 .bytes = ev->bytes,
                 .context_bytes = ev->context_bytes,
                 .outside = ev->outside,
                 .pid = ev->pid,
                 .ms = ev->ms,
                 .bytes_asked = ev->bytes_asked,
                 .free_after = ev->driver_free_after,
                 .peers = ev->peers};
  if (ev->kind == EBB_EVENT_LEAK)
    f->sites = leak_sites(ev);
  pthread_mutex_lock(&e->mu);
  if (e->ftail)
    e->ftail->next = f;
  else
    e->fhead = f;
  e->ftail = f;
  pthread_cond_signal(&e->wake);
  pthread_mutex_unlock(&e->mu);
}

/* A `mark` on device d's chart. */
static void send_mark(srv_events *e, const ev_dev *d, double t, const char *label) {
  srv_sse_send(e->sse, "mark",
               json_pack("{s:f,s:s,s:s}", "t", t, "device", d->label, "label", label), 1);
}

static ev_dev *dev_named(srv_events *e, const char *label) {
  for (size_t d = 0; label && d < e->ndev; d++)
    if (!strcmp(e->dev[d].label, label))
      return &e->dev[d];
  return &e->dev[0];
}

static void on_release(srv_events *e, const ev_fact *f) {
  json_t *o = json_pack("{s:f,s:s,s:I,s:I}", "t", f->t, "device", dev_named(e, f->device)->label,
                        "bytes", (json_int_t)f->bytes, "context_bytes",
                        (json_int_t)f->context_bytes);
  json_object_set_new(o, "stage", f->owner ? json_string(f->owner) : json_null());
  srv_sse_send(e->sse, "release", o, 1);
}

static void on_leak(srv_events *e, ev_fact *f, const char *running) {
  const char *label = dev_named(e, f->device)->label;
  const char *p = srv_ev_pipeline_of(e, label, f->owner ? f->owner : "?", running);
  json_t *o = json_pack("{s:f,s:s,s:s,s:o,s:I,s:s,s:O}", "t", f->t, "device", label, "owner",
                        f->owner ? f->owner : "?", "pipeline", p ? json_string(p) : json_null(),
                        "bytes", (json_int_t)f->bytes, "kind", f->outside ? "outside" : "leak",
                        "sites", f->sites);
  pthread_mutex_lock(&e->mu);
  json_array_append(e->leaks, o);
  while (json_array_size(e->leaks) > RECENT_LEAKS)
    json_array_remove(e->leaks, 0);
  pthread_mutex_unlock(&e->mu);
  srv_sse_send(e->sse, "leak", o, 0);
}

/* An owner put to sleep (or parked): its segments' physical memory went back
 * to the driver; a `release` with "asleep": true (the bytes are parked in
 * host memory, not gone). */
static void on_parked(srv_events *e, const ev_fact *f) {
  srv_sse_send(e->sse, "release",
               json_pack("{s:f,s:s,s:I,s:I,s:s,s:b}", "t", f->t, "device",
                         dev_named(e, f->device)->label, "bytes", (json_int_t)f->bytes,
                         "context_bytes", (json_int_t)0, "stage", f->owner ? f->owner : "?",
                         "asleep", 1),
               1);
}

/* The broker (docs/broker.md): memory this server gave a peer, got from
 * peers, or asked its peers for. News only: not replayed to a new client. */
static void on_grant(srv_events *e, const ev_fact *f) {
  int asked = f->state && !strcmp(f->state, "asked");
  json_t *o = json_pack("{s:f,s:s,s:s,s:i,s:I}", "t", f->t, "state", f->state ? f->state : "?",
                        "device", f->device ? f->device : "?", "pid", f->pid, "bytes",
                        (json_int_t)(asked ? f->bytes_asked : f->bytes));
  if (asked) {
    json_object_set_new(o, "peers", json_integer((json_int_t)f->peers));
    json_object_set_new(o, "free_after", json_integer((json_int_t)f->free_after));
    json_object_set_new(o, "satisfied",
                        json_boolean(f->message && !strcmp(f->message, "satisfied")));
  } else {
    json_object_set_new(o, "what", json_string(f->owner ? f->owner : "?"));
    json_object_set_new(o, "ms", json_real(f->ms));
    json_object_set_new(o, "reason", json_string(f->message ? f->message : ""));
  }
  srv_sse_send(e->sse, "broker", o, 0);
}

/* A pipeline's state: a mark on its device's chart; the list is news. */
static void on_pipeline(srv_events *e, const ev_fact *f) {
  char label[200];
  snprintf(label, sizeof label, "pipeline %s %s", f->pipeline ? f->pipeline : "?",
           f->state && !strcmp(f->state, "awake") ? "woke"
           : f->state                             ? f->state
                                                  : "?");
  send_mark(e, dev_named(e, f->device), f->t, label);
  e->pipes_dirty = 1;
}

/* The open sessions' ids follow their facts; the list is news. */
static void on_session(srv_events *e, const ev_fact *f) {
  e->sessions_dirty = e->pipes_dirty = 1; /* a pipeline's "sessions" count */
  if (!f->id || !f->state)
    return;
  size_t i = 0;
  while (i < e->nsids && strcmp(e->sids[i], f->id))
    i++;
  if (!strcmp(f->state, "closed") && i < e->nsids) {
    free(e->sids[i]);
    e->sids[i] = e->sids[--e->nsids];
  } else if (strcmp(f->state, "closed") && i == e->nsids) {
    char **p = realloc(e->sids, (e->nsids + 1) * sizeof *p);
    char *id = strdup(f->id);
    if (p)
      e->sids = p;
    if (p && id)
      e->sids[e->nsids++] = id;
    else
      free(id);
  }
}

/* --- pipelines and sessions ---------------------------------------------------------- */
static json_t *pipe_named(json_t *arr, const char *name) {
  size_t i;
  json_t *p;
  json_array_foreach(arr, i, p) if (!strcmp(json_string_value(json_object_get(p, "name")) ?: "",
                                            name)) return p;
  return NULL;
}

/* The pipelines of every device as one list: "loaded" and "asleep" when on
 * any device, "devices" and "asleep_devices" say where. */
static void refresh_pipelines(srv_events *e) {
  json_t *all = pl_manager_pipelines_json(e->m), *x, *np;
  size_t i;
  json_array_foreach(all, i, x) {
    json_object_set_new(x, "loaded", json_false());
    json_object_set_new(x, "asleep", json_false());
    json_object_set_new(x, "devices", json_array());
    json_object_set_new(x, "asleep_devices", json_array());
  }
  for (size_t d = 0; d < e->ndev; d++) {
    json_t *now = pl_manager_pipelines_json(e->dev[d].m);
    json_array_foreach(now, i, np) {
      json_t *m = pipe_named(all, json_string_value(json_object_get(np, "name")) ?: "");
      if (!m || !json_is_true(json_object_get(np, "loaded")))
        continue;
      json_object_set_new(m, "loaded", json_true());
      json_array_append_new(json_object_get(m, "devices"), json_string(e->dev[d].label));
      if (json_is_true(json_object_get(np, "asleep"))) {
        json_object_set_new(m, "asleep", json_true());
        json_array_append_new(json_object_get(m, "asleep_devices"), json_string(e->dev[d].label));
      }
      if (d) /* all started as device 0's list, its sessions counted */
        json_object_set_new(m, "sessions",
                            json_integer(json_integer_value(json_object_get(m, "sessions")) +
                                         json_integer_value(json_object_get(np, "sessions"))));
    }
    json_decref(now);
  }
  char *text = json_dumps(all, JSON_COMPACT | JSON_SORT_KEYS);
  if (!text || (e->pipelines_text && !strcmp(text, e->pipelines_text))) {
    free(text);
    json_decref(all);
    return;
  }
  free(e->pipelines_text);
  e->pipelines_text = text;
  pthread_mutex_lock(&e->mu);
  json_decref(e->pipelines);
  e->pipelines = json_incref(all);
  pthread_mutex_unlock(&e->mu);
  srv_sse_send(e->sse, "pipelines", json_pack("{s:o}", "pipelines", all), 0);
}

static json_t *session_json(const pl_session_info *si, const char *device) {
  return json_pack("{s:s,s:s,s:s,s:s,s:i,s:I,s:I,s:f,s:s}", "id", si->id, "pipeline", si->pipeline,
                   "state", si->state == EBB_SESSION_OPEN ? "open" : "stopped", "stop_reason",
                   si->stop_reason, "inflight", si->inflight, "items_done",
                   (json_int_t)si->items_done, "items_failed", (json_int_t)si->items_failed,
                   "created", si->created, "device", device);
}

/* The sessions the facts said are open, as their devices have them now. */
static void refresh_sessions(srv_events *e) {
  json_t *now = json_array();
  for (size_t i = 0; i < e->nsids; i++)
    for (size_t d = 0; d < e->ndev; d++) {
      pl_session_info si;
      if (pl_sessions_info(pl_manager_sessions(e->dev[d].m), e->sids[i], &si) == 0) {
        json_array_append_new(now, session_json(&si, e->dev[d].label));
        break;
      }
    }
  pthread_mutex_lock(&e->mu);
  int same = json_equal(now, e->sessions);
  if (!same) {
    json_decref(e->sessions);
    e->sessions = json_incref(now);
  }
  pthread_mutex_unlock(&e->mu);
  if (same)
    json_decref(now);
  else
    srv_sse_send(e->sse, "sessions", json_pack("{s:o}", "sessions", now), 0);
}

/* --- the publisher ------------------------------------------------------------------- */
static ev_fact *take_facts(srv_events *e) {
  pthread_mutex_lock(&e->mu);
  ev_fact *f = e->fhead;
  e->fhead = e->ftail = NULL;
  pthread_mutex_unlock(&e->mu);
  return f;
}

/* The facts in the order they were published: a stage's marks (load, run,
 * release) come before its release because they were published before it. */
static void handle_facts(srv_events *e, ev_fact *f, const char *running) {
  for (ev_fact *n; f; f = n) {
    n = f->next;
    switch (f->kind) {
    case EBB_EVENT_MARK:
      send_mark(e, dev_named(e, f->device), f->t, f->message ? f->message : "");
      break;
    case EBB_EVENT_OOM: send_mark(e, dev_named(e, f->device), f->t, "out of device memory"); break;
    case EBB_EVENT_RELEASED: on_release(e, f); break;
    case EBB_EVENT_PARKED: on_parked(e, f); break;
    case EBB_EVENT_LEAK: on_leak(e, f, running); break;
    case EBB_EVENT_JOB: srv_ev_on_job(e, f); break;
    case EBB_EVENT_PIPELINE: on_pipeline(e, f); break;
    case EBB_EVENT_SESSION: on_session(e, f); break;
    case EBB_EVENT_GRANT: on_grant(e, f); break;
    case EBB_EVENT_DEVICE_LOST: send_mark(e, dev_named(e, f->device), f->t, "device failed"); break;
    default: break;
    }
    fact_free(f);
  }
}

/* The ledgers are read before the facts are handled, so that a job's end
 * (a fact) carries the peaks its owners reached (the ledgers'). The device
 * samples go last: the only step that may wait on the device (a segment
 * being allocated); everything else is news already. */
static void tick(srv_events *e) {
  char running[128];
  ev_fact *f = take_facts(e);
  for (size_t d = 0; d < e->ndev; d++)
    srv_ev_read_ledger(&e->dev[d]);
  const char *run = srv_ev_running_jobs(e, running, sizeof running);
  handle_facts(e, f, run);
  if (e->pipes_dirty) {
    e->pipes_dirty = 0;
    refresh_pipelines(e);
  }
  if (e->sessions_dirty) {
    e->sessions_dirty = 0;
    refresh_sessions(e);
  }
  for (size_t d = 0; d < e->ndev; d++)
    srv_ev_publish_memory(e, d, run);
}

/* Every interval, or sooner when a fact comes (but not more often than
 * every interval/10: a burst of facts is one tick). */
static void *publisher(void *arg) {
  srv_events *e = arg;
  pthread_mutex_lock(&e->mu);
  while (!e->stop) {
    pthread_mutex_unlock(&e->mu);
    tick(e);
    pthread_mutex_lock(&e->mu);
    uint64_t t0 = base_mono_ns(), step = (uint64_t)e->interval_ms * 1000000ull;
    while (!e->stop) {
      uint64_t now = base_mono_ns();
      if (now - t0 >= step || (e->fhead && now - t0 >= step / 10))
        break;
      uint64_t until = e->fhead ? t0 + step / 10 : t0 + step;
      struct timespec ts = {(time_t)(until / 1000000000ull), (long)(until % 1000000000ull)};
      pthread_cond_timedwait(&e->wake, &e->mu, &ts);
    }
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

/* --- hello -------------------------------------------------------------------------- */
static json_t *hello(void *ctx) {
  srv_events *e = ctx;
  json_t *devs = json_array();
  for (size_t d = 0; d < e->ndev; d++) {
    dev_device *dev = mem_allocator_device(e->dev[d].alloc);
    json_array_append_new(devs, json_pack("{s:s,s:s,s:I}", "device", dev_device_label(dev), "name",
                                          dev_name(dev), "total_bytes",
                                          (json_int_t)dev_total_bytes(dev)));
  }
  json_t *jobs = srv_ev_hello_jobs(e);
  pthread_mutex_lock(&e->mu);
  json_t *h = json_pack("{s:i,s:i,s:i,s:f,s:o,s:O,s:o,s:O,s:O}", "version", 1, "interval_ms",
                        e->interval_ms, "history_s", e->history_s, "t", base_wall_s(), "devices",
                        devs, "pipelines", e->pipelines, "jobs", jobs, "sessions", e->sessions,
                        "leaks", e->leaks);
  pthread_mutex_unlock(&e->mu);
  return h;
}

/* --- life ------------------------------------------------------------------------------ */
static int init(srv_events *e, const srv_events_opts *o) {
  e->m = o->manager;
  e->store = o->store;
  e->ndev = o->ndevices ? o->ndevices : 1;
  e->dev = calloc(e->ndev, sizeof *e->dev);
  if (!e->dev)
    return ebb_seterr(EBB_ENOMEM, "events: out of host memory");
  for (size_t d = 0; d < e->ndev; d++) {
    ev_dev *x = &e->dev[d];
    x->m = o->ndevices ? o->managers[d] : o->manager;
    x->alloc = o->ndevices ? o->allocs[d] : o->alloc;
    x->label = dev_device_label(mem_allocator_device(x->alloc));
    /* what the ledgers hold already is history, not news */
    size_t n = 0;
    mem_ledger_events(mem_allocator_ledger(x->alloc), NULL, 0, &n, &x->ledger_seen);
  }
  e->interval_ms = o->interval_ms > 0 ? o->interval_ms : env_int("EBB_EVENTS_INTERVAL_MS", 500);
  e->history_s = o->history_s > 0 ? o->history_s : 300;
  e->pipelines = json_array();
  e->sessions = json_array();
  e->leaks = json_array();
  e->pipes_dirty = 1;
  pthread_mutex_init(&e->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&e->wake, &ca);
  pthread_condattr_destroy(&ca);
  if (!e->pipelines || !e->sessions || !e->leaks)
    return ebb_seterr(EBB_ENOMEM, "events: out of host memory");
  srv_sse_opts so = {.max_clients = o->max_clients,
                     .client_buffer = o->client_buffer,
                     .history_s = e->history_s,
                     .hello = hello,
                     .hello_ctx = e};
  return srv_sse_create(&so, &e->sse);
}

int srv_events_create(const srv_events_opts *o, srv_events **out) {
  if (!o || !o->manager || !o->alloc || !o->store || (o->ndevices && (!o->managers || !o->allocs)))
    return ebb_seterr(EBB_EINVAL, "events: manager, allocator and store are required");
  srv_events *e = calloc(1, sizeof *e);
  if (!e)
    return ebb_seterr(EBB_ENOMEM, "events: out of host memory");
  int rc = init(e, o);
  if (!rc)
    rc = ebb_events_subscribe(on_fact, e, &e->sub);
  if (!rc && pthread_create(&e->th, NULL, publisher, e) != 0)
    rc = ebb_seterr(EBB_EIO, "events: cannot start the publisher thread: %s", strerror(errno));
  if (rc) {
    srv_events_destroy(e);
    return rc;
  }
  e->started = 1;
  *out = e;
  return 0;
}

void srv_events_stop(srv_events *e) {
  if (!e)
    return;
  ebb_events_unsubscribe(e->sub); /* no fact comes after this */
  e->sub = NULL;
  pthread_mutex_lock(&e->mu);
  e->stop = 1;
  pthread_cond_broadcast(&e->wake);
  pthread_mutex_unlock(&e->mu);
  if (e->started) {
    pthread_join(e->th, NULL);
    e->started = 0;
  }
  srv_sse_stop(e->sse);
}

void srv_events_destroy(srv_events *e) {
  if (!e)
    return;
  srv_events_stop(e);
  srv_sse_destroy(e->sse);
  for (ev_fact *f = take_facts(e), *n; f; f = n) {
    n = f->next;
    fact_free(f);
  }
  json_decref(e->pipelines);
  json_decref(e->sessions);
  json_decref(e->leaks);
  for (size_t d = 0; e->dev && d < e->ndev; d++)
    free(e->dev[d].owners);
  free(e->dev);
  free(e->pipelines_text);
  for (size_t i = 0; i < e->nwjobs; i++) {
    json_decref(e->wjobs[i].peaks);
    json_decref(e->wjobs[i].peaks_sent);
  }
  free(e->wjobs);
  for (size_t i = 0; i < e->nsids; i++)
    free(e->sids[i]);
  free(e->sids);
  pthread_cond_destroy(&e->wake);
  pthread_mutex_destroy(&e->mu);
  free(e);
}

enum MHD_Result srv_events_serve(srv_events *e, struct MHD_Connection *c) {
  return srv_sse_serve(e->sse, c);
}
