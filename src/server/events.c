/* GET /v1/events (events.h): the publisher thread, the per-client bounded
 * buffers and the streams. docs/api.md describes every event. */
#include "server/events.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"

#define KEEPALIVE_S 15
#define RECENT_JOBS 50
#define RECENT_LEAKS 50
#define LEDGER_BATCH 8192
#define BACKLOG_MAX (512u * 1024) /* remembered events a new client gets, at most */

typedef struct client {
  struct client *prev, *next;
  ebb_events *e;
  pthread_cond_t cv;
  char *buf;         /* queued bytes: [off, len) */
  size_t off, len, cap, limit;
  int dropped;       /* the `dropped` event is queued; the stream ends after it */
} client;

typedef struct hist_msg {
  uint64_t t_ns;
  char *text;
} hist_msg;

typedef struct owner_row {
  uint32_t id;
  char name[128];
  uint64_t bytes, peak; /* now; the most within this interval */
  uint64_t parked;      /* segment bytes parked (asleep) and not woken */
  unsigned allocs, frees;
  int touched;          /* had an event this interval */
} owner_row;

/* One device (one manager and its allocator): publisher-only state. */
typedef struct ev_dev {
  ebb_manager *m;
  ebb_allocator *alloc;
  const char *label;
  uint64_t ledger_seen;
  owner_row *owners;
  size_t nowners, capowners;
  char last_release_stage[128];
  json_t *pipes; /* this device's pipelines at the last poll (loaded, asleep) */
} ev_dev;

/* Owners that held memory lately, newest last: a leak report (from the log,
 * which names no device) goes to the device its owner was on. */
#define RECENT_OWNERS 64
typedef struct recent_owner {
  char name[128];
  size_t dev;
} recent_owner;

typedef struct watched_job {
  int64_t id;
  int state;            /* last seen (EBB_JOB_...) */
  char pipeline[128];
  json_t *peaks;        /* {owner name: peak bytes while it ran} */
  json_t *peaks_sent;   /* peaks in the last `job` event (changed: another) */
} watched_job;

typedef struct pending_leak {
  char owner[128];
  uint64_t bytes;
  json_t *sites;        /* [{"bytes":N,"site":"file.c:12"}] */
  int outside;
  size_t want;          /* site lines its header announced (at most 32) */
  uint64_t t_ns;        /* when its header came (monotonic) */
} pending_leak;

/* A leak is logged as a header line, then one line per block: the publisher
 * may tick between them, so a leak waits for its sites (at most this long,
 * should a line never come) */
#define LEAK_SITES_WAIT_NS 2000000000ull

struct ebb_events {
  ebb_manager *m; /* device 0's: the pipelines' definitions */
  ev_dev *dev;
  size_t ndev;
  ebb_store *store;
  int interval_ms, max_clients, history_s;
  size_t client_buffer;

  pthread_t th;
  int started;
  pthread_mutex_t mu; /* clients, history, counters and the hello state */
  pthread_cond_t wake;
  int stop;
  client *clients;
  int nclients;
  uint64_t dropped, published, seq;
  hist_msg *hist;
  size_t hcap, hn, hhead;
  json_t *pipelines, *jobs, *sessions, *leaks; /* hello state, under mu */

  /* publisher-only state */
  recent_owner recent[RECENT_OWNERS];
  size_t nrecent;
  char last_job_pipeline[128]; /* the pipeline of the job that ran last */
  char *pipelines_text;
  watched_job *wjobs;
  size_t nwjobs, capwjobs;
  char **wsessions;
  size_t nwsessions;
  pthread_mutex_t watch_mu; /* the watch lists (added to from request threads) */

  /* leak reports picked up from the log (the tap runs under the log's lock) */
  pthread_mutex_t tap_mu;
  pending_leak *tleaks;
  size_t ntleaks, captleaks;
};

/* --- clocks ---------------------------------------------------------------------- */
/* A ledger time (ebb_mono_ns) as Unix seconds. */
static double wall_of(uint64_t mono) {
  return ebb_wall_s() - ((double)ebb_mono_ns() - (double)mono) / 1e9;
}

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  if (!v || !*v)
    return dflt;
  char *end;
  long x = strtol(v, &end, 10);
  return *end || x <= 0 || x > (1L << 30) ? dflt : (int)x;
}

/* --- clients -------------------------------------------------------------------- */
/* Appends n bytes; 0, or -1 when the client's limit would be passed. Under mu. */
static int client_put(client *cl, const char *s, size_t n) {
  if (cl->off && cl->off == cl->len)
    cl->off = cl->len = 0;
  if (cl->len - cl->off + n > cl->limit)
    return -1;
  if (cl->len + n > cl->cap && cl->off) {
    memmove(cl->buf, cl->buf + cl->off, cl->len - cl->off);
    cl->len -= cl->off;
    cl->off = 0;
  }
  if (cl->len + n > cl->cap) {
    size_t cap = cl->cap ? cl->cap : 4096;
    while (cap < cl->len + n)
      cap *= 2;
    char *b = realloc(cl->buf, cap);
    if (!b)
      return -1;
    cl->buf = b;
    cl->cap = cap;
  }
  memcpy(cl->buf + cl->len, s, n);
  cl->len += n;
  return 0;
}

/* A reader too slow for the events: forget what it has not read, queue one
 * last event, end its stream once that is read. Under mu. */
static void client_drop(ebb_events *e, client *cl) {
  free(cl->buf);
  cl->buf = NULL;
  cl->off = cl->len = cl->cap = 0;
  char msg[400];
  int n = snprintf(msg, sizeof msg,
                   "event: dropped\ndata: {\"reason\":\"this client read the events slower "
                   "than they came: more than %zu bytes were waiting; reconnect\"}\n\n",
                   e->client_buffer);
  cl->limit = (size_t)n;
  client_put(cl, msg, (size_t)n);
  cl->dropped = 1;
  e->dropped++;
  pthread_cond_signal(&cl->cv);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  client *cl = cls;
  ebb_events *e = cl->e;
  pthread_mutex_lock(&e->mu);
  for (;;) {
    if (cl->len > cl->off) {
      size_t n = cl->len - cl->off < max ? cl->len - cl->off : max;
      memcpy(buf, cl->buf + cl->off, n);
      cl->off += n;
      pthread_mutex_unlock(&e->mu);
      return (ssize_t)n;
    }
    if (cl->dropped || e->stop) {
      int dropped = cl->dropped;
      pthread_mutex_unlock(&e->mu);
      return dropped ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += KEEPALIVE_S;
    if (pthread_cond_timedwait(&cl->cv, &e->mu, &ts) == ETIMEDOUT && cl->len == cl->off &&
        !cl->dropped && !e->stop) {
      pthread_mutex_unlock(&e->mu);
      static const char ka[] = ": keepalive\n\n";
      size_t n = sizeof ka - 1 < max ? sizeof ka - 1 : max;
      memcpy(buf, ka, n);
      return (ssize_t)n;
    }
  }
}

static void stream_free(void *cls) {
  client *cl = cls;
  ebb_events *e = cl->e;
  pthread_mutex_lock(&e->mu);
  if (cl->prev)
    cl->prev->next = cl->next;
  else if (e->clients == cl)
    e->clients = cl->next;
  if (cl->next)
    cl->next->prev = cl->prev;
  e->nclients--;
  pthread_mutex_unlock(&e->mu);
  pthread_cond_destroy(&cl->cv);
  free(cl->buf);
  free(cl);
}

/* --- publishing ------------------------------------------------------------------ */
static void hist_add_locked(ebb_events *e, uint64_t t, char *text) {
  if (e->hn == e->hcap) {
    hist_msg *old = &e->hist[e->hhead];
    free(old->text);
    e->hhead = (e->hhead + 1) % e->hcap;
    e->hn--;
  }
  e->hist[(e->hhead + e->hn) % e->hcap] = (hist_msg){t, text};
  e->hn++;
  /* forget what is older than the history window */
  uint64_t horizon = (uint64_t)e->history_s * 1000000000ull;
  while (e->hn && t > horizon && e->hist[e->hhead].t_ns < t - horizon) {
    free(e->hist[e->hhead].text);
    e->hhead = (e->hhead + 1) % e->hcap;
    e->hn--;
  }
}

/* Formats `event: name` with o (taken) as its data and sends it to every
 * client; keep: also remembered for new clients. */
static void publish(ebb_events *e, const char *name, json_t *o, int keep) {
  char *data = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!data)
    return;
  pthread_mutex_lock(&e->mu);
  uint64_t id = ++e->seq;
  char *text = NULL;
  if (asprintf(&text, "id: %" PRIu64 "\nevent: %s\ndata: %s\n\n", id, name, data) < 0) {
    pthread_mutex_unlock(&e->mu);
    free(data);
    return;
  }
  free(data);
  size_t n = strlen(text);
  for (client *cl = e->clients; cl; cl = cl->next) {
    if (cl->dropped)
      continue;
    if (client_put(cl, text, n) != 0)
      client_drop(e, cl);
    else
      pthread_cond_signal(&cl->cv);
  }
  e->published++;
  if (keep)
    hist_add_locked(e, ebb_mono_ns(), text);
  else
    free(text);
  pthread_mutex_unlock(&e->mu);
}

/* --- owners and the ledger ---------------------------------------------------------- */
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

/* An owner that goes from the rows is remembered with its device (leaks). */
static void remember_owner(ebb_events *e, const char *name, size_t dev) {
  recent_owner *r = &e->recent[e->nrecent++ % RECENT_OWNERS];
  snprintf(r->name, sizeof r->name, "%s", name);
  r->dev = dev;
}

/* The device an owner name is (or was lately) on; 0 when none says. */
static size_t device_of_owner(ebb_events *e, const char *name) {
  for (size_t d = 0; d < e->ndev; d++)
    for (size_t i = 0; i < e->dev[d].nowners; i++)
      if (!strcmp(e->dev[d].owners[i].name, name))
        return d;
  size_t n = e->nrecent < RECENT_OWNERS ? e->nrecent : RECENT_OWNERS;
  for (size_t k = 0; k < n; k++) {
    const recent_owner *r = &e->recent[(e->nrecent - 1 - k) % RECENT_OWNERS];
    if (!strcmp(r->name, name))
      return r->dev;
  }
  return 0;
}

/* 1 when pipeline p (an entry of e->pipelines) is loaded on the device
 * labelled label. */
static int loaded_on(json_t *p, const char *label) {
  size_t i;
  json_t *x;
  json_array_foreach(json_object_get(p, "devices"), i, x)
    if (!strcmp(json_string_value(x) ?: "", label))
      return 1;
  return 0;
}

/* The pipeline an owner (a stage instance or "job P") of device label
 * belongs to: the running job's pipeline if it is loaded there and has that
 * stage, else a pipeline loaded there that has it, else the running one,
 * else one loaded anywhere, else any. NULL when none. */
static const char *pipeline_of(ebb_events *e, const char *label, const char *owner,
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

/* No driver call here: a release goes out even while the device is busy
 * (the next `memory` sample carries the driver's numbers). */
static void on_release(ebb_events *e, ev_dev *d, const ebb_ledger_event *ev,
                       uint64_t ctx_bytes) {
  json_t *o = json_pack("{s:f,s:s,s:I,s:I}", "t", wall_of(ev->t_ns), "device", d->label, "bytes",
                        (json_int_t)ev->bytes, "context_bytes", (json_int_t)ctx_bytes);
  json_object_set_new(o, "stage", d->last_release_stage[0] ? json_string(d->last_release_stage)
                                                           : json_null());
  publish(e, "release", o, 1);
}

/* An owner put to sleep: its segments' physical memory went back to the
 * driver (a `release` with "asleep": true; the bytes are parked in host
 * memory, not gone). One per run of PARK events of one owner. */
typedef struct park_run {
  const ebb_ledger_event *first;
  uint64_t bytes;
} park_run;

static void flush_park(ebb_events *e, ev_dev *d, park_run *pr) {
  if (!pr->first || !pr->bytes) {
    *pr = (park_run){0};
    return;
  }
  publish(e, "release",
          json_pack("{s:f,s:s,s:I,s:I,s:s,s:b}", "t", wall_of(pr->first->t_ns), "device",
                    d->label, "bytes", (json_int_t)pr->bytes, "context_bytes", (json_int_t)0,
                    "stage", pr->first->label ? pr->first->label : "?", "asleep", 1),
          1);
  *pr = (park_run){0};
}

static void on_mark(ebb_events *e, ev_dev *d, uint64_t t_ns, const char *label) {
  size_t n = strlen(label);
  if (n > 8 && !strcmp(label + n - 8, " release"))
    snprintf(d->last_release_stage, sizeof d->last_release_stage, "%.*s", (int)(n - 8), label);
  publish(e, "mark", json_pack("{s:f,s:s,s:s}", "t", wall_of(t_ns), "device", d->label, "label",
                               label),
          1);
}

/* An owner's allocation, free, park or wake. */
static void on_owner_event(ev_dev *d, const ebb_ledger_event *x) {
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

/* Reads a device's ledger events since the last tick: owner rows, releases,
 * marks. */
static void read_ledger(ebb_events *e, ev_dev *d) {
  ebb_ledger *l = ebb_allocator_ledger(d->alloc);
  size_t n = 0;
  uint64_t before = 0;
  if (ebb_ledger_events(l, NULL, 0, &n, &before) != 0 || before == d->ledger_seen)
    return;
  size_t want = before - d->ledger_seen > LEDGER_BATCH ? LEDGER_BATCH
                                                       : (size_t)(before - d->ledger_seen);
  ebb_ledger_event *ev = malloc((want + 64) * sizeof *ev);
  uint64_t rest = 0;
  if (!ev || ebb_ledger_events(l, ev, want + 64, &n, &rest) != 0) {
    free(ev);
    return;
  }
  uint64_t total = rest + n, first = total - n; /* ev[0] is event number `first` */
  uint64_t ctx_bytes = 0;
  park_run pr = {0};
  for (size_t i = 0; i < n; i++) {
    if (first + i < d->ledger_seen)
      continue;
    const ebb_ledger_event *x = &ev[i];
    if (pr.first && (x->kind != EBB_EV_PARK || x->owner_id != pr.first->owner_id))
      flush_park(e, d, &pr);
    if (x->kind == EBB_EV_PARK) {
      pr.first = pr.first ? pr.first : x;
      pr.bytes += x->bytes;
    }
    switch (x->kind) {
    case EBB_EV_ALLOC:
    case EBB_EV_FREE:
    case EBB_EV_LEAK_FREE:
    case EBB_EV_PARK:
    case EBB_EV_WAKE: on_owner_event(d, x); break;
    case EBB_EV_CTX_RELEASE: ctx_bytes = x->bytes; break;
    case EBB_EV_RELEASE:
      if (x->bytes) {
        on_release(e, d, x, ctx_bytes);
        d->last_release_stage[0] = '\0'; /* a later release without a mark is no stage's */
      }
      ctx_bytes = 0;
      break;
    case EBB_EV_MARK: on_mark(e, d, x->t_ns, x->label ? x->label : ""); break;
    case EBB_EV_OOM: on_mark(e, d, x->t_ns, "out of device memory"); break;
    default: break;
    }
  }
  flush_park(e, d, &pr);
  d->ledger_seen = total;
  free(ev);
}

/* --- per-interval memory sample ------------------------------------------------------ */
/* The device's owners of this interval (asleep_bytes: parked in host memory,
 * not held on the device); rows that hold nothing are forgotten. */
static json_t *owners_sample(ebb_events *e, size_t di, const char *running,
                             uint64_t *asleep_total) {
  ev_dev *d = &e->dev[di];
  json_t *owners = json_array();
  size_t keep = 0;
  *asleep_total = 0;
  for (size_t i = 0; i < d->nowners; i++) {
    owner_row *r = &d->owners[i];
    if (r->bytes || r->touched) {
      const char *p = pipeline_of(e, d->label, r->name, running);
      uint64_t asleep = r->parked < r->bytes ? r->parked : r->bytes;
      *asleep_total += asleep;
      json_array_append_new(
          owners, json_pack("{s:s,s:o,s:I,s:I,s:I,s:i,s:i}", "owner", r->name, "pipeline",
                            p ? json_string(p) : json_null(), "bytes", (json_int_t)r->bytes,
                            "asleep_bytes", (json_int_t)asleep, "peak",
                            (json_int_t)(r->peak > r->bytes ? r->peak : r->bytes), "allocs",
                            r->allocs, "frees", r->frees));
    }
    r->peak = r->bytes;
    r->allocs = r->frees = 0;
    r->touched = 0;
    if (r->bytes) /* forget owners that hold nothing */
      d->owners[keep++] = *r;
    else
      remember_owner(e, r->name, di);
  }
  d->nowners = keep;
  return owners;
}

static void publish_memory(ebb_events *e, size_t di, const char *running) {
  ev_dev *d = &e->dev[di];
  ebb_alloc_stats st = {.size = sizeof st};
  ebb_allocator_get_stats(d->alloc, &st);
  ebb_unattributed un = {.size = sizeof un};
  int un_ok = ebb_allocator_unattributed(d->alloc, &un) == 0 && un.known;
  /* the figures above may have waited for the device (a wake, a load):
   * the owners catch up with the ledger so that both tell the same moment */
  read_ledger(e, d);
  uint64_t asleep = 0;
  json_t *owners = owners_sample(e, di, running, &asleep);
  uint64_t used = st.driver_total > st.driver_free ? st.driver_total - st.driver_free : 0;
  json_t *o = json_pack(
      "{s:f,s:s,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "t",
      wall_of(ebb_mono_ns()), "device", d->label, "owners", owners, "reserved_bytes",
      (json_int_t)st.reserved.current, "allocated_bytes", (json_int_t)st.allocated.current,
      "cached_bytes", (json_int_t)st.cached.current, "context_bytes",
      (json_int_t)(st.ctx_active ? st.context_estimate : 0), "asleep_bytes", (json_int_t)asleep,
      "backup_bytes", (json_int_t)ebb_allocator_backup_bytes(d->alloc), "driver_used_bytes",
      (json_int_t)used, "driver_free_bytes", (json_int_t)st.driver_free, "driver_total_bytes",
      (json_int_t)st.driver_total);
  if (un_ok && un.per_process) {
    json_object_set_new(o, "process_bytes", json_integer((json_int_t)un.driver_used));
    json_object_set_new(o, "others_bytes",
                        json_integer((json_int_t)(used > un.driver_used ? used - un.driver_used
                                                                        : 0)));
  } else {
    json_object_set_new(o, "process_bytes", json_null());
    json_object_set_new(o, "others_bytes", json_null());
  }
  json_object_set_new(o, "unattributed_bytes",
                      un_ok ? json_integer((json_int_t)(un.unattributed > 0 ? un.unattributed
                                                                            : 0))
                            : json_null());
  publish(e, "memory", o, 1);
}

/* --- pipelines, sessions, jobs ------------------------------------------------------- */
static json_t *pipe_named(json_t *arr, const char *name) {
  size_t i;
  json_t *p;
  json_array_foreach(arr, i, p)
    if (!strcmp(json_string_value(json_object_get(p, "name")) ?: "", name))
      return p;
  return NULL;
}

/* A device's pipelines now: load, unload, sleep and wake since the last
 * poll become marks on its chart; merged into all (the server's list). */
static void poll_device_pipes(ebb_events *e, ev_dev *d, json_t *all) {
  json_t *now = ebb_manager_pipelines_json(d->m);
  size_t i;
  json_t *np;
  json_array_foreach(now, i, np) {
    const char *name = json_string_value(json_object_get(np, "name")) ?: "";
    json_t *op = d->pipes ? pipe_named(d->pipes, name) : NULL;
    int loaded = json_is_true(json_object_get(np, "loaded"));
    int asleep = json_is_true(json_object_get(np, "asleep"));
    int was = op && json_is_true(json_object_get(op, "loaded"));
    int slept = op && json_is_true(json_object_get(op, "asleep"));
    char label[200] = "";
    if (loaded != was && (loaded || d->pipes))
      snprintf(label, sizeof label, "pipeline %s %s", name, loaded ? "loaded" : "unloaded");
    else if (loaded && asleep != slept && (asleep || d->pipes))
      snprintf(label, sizeof label, "pipeline %s %s", name, asleep ? "asleep" : "woke");
    if (label[0])
      on_mark(e, d, ebb_mono_ns(), label);
    json_t *m = pipe_named(all, name);
    if (!m || !loaded)
      continue;
    json_object_set_new(m, "loaded", json_true());
    json_array_append_new(json_object_get(m, "devices"), json_string(d->label));
    if (asleep) {
      json_object_set_new(m, "asleep", json_true());
      json_array_append_new(json_object_get(m, "asleep_devices"), json_string(d->label));
    }
    if (d != e->dev) /* all started as device 0's list, its sessions counted */
      json_object_set_new(m, "sessions",
                          json_integer(json_integer_value(json_object_get(m, "sessions")) +
                                       json_integer_value(json_object_get(np, "sessions"))));
  }
  json_decref(d->pipes);
  d->pipes = now;
}

/* The pipelines of every device as one list: "loaded" and "asleep" when on
 * any device, "devices" and "asleep_devices" say where. */
static void poll_pipelines(ebb_events *e) {
  json_t *p = ebb_manager_pipelines_json(e->m);
  size_t i;
  json_t *x;
  json_array_foreach(p, i, x) {
    json_object_set_new(x, "loaded", json_false());
    json_object_set_new(x, "asleep", json_false());
    json_object_set_new(x, "devices", json_array());
    json_object_set_new(x, "asleep_devices", json_array());
  }
  for (size_t d = 0; d < e->ndev; d++)
    poll_device_pipes(e, &e->dev[d], p);
  char *text = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
  if (!text || (e->pipelines_text && !strcmp(text, e->pipelines_text))) {
    free(text);
    json_decref(p);
    return;
  }
  free(e->pipelines_text);
  e->pipelines_text = text;
  pthread_mutex_lock(&e->mu);
  json_decref(e->pipelines);
  e->pipelines = json_incref(p);
  pthread_mutex_unlock(&e->mu);
  publish(e, "pipelines", json_pack("{s:o}", "pipelines", p), 0);
}

static json_t *session_json(const ebb_session_info *si) {
  return json_pack("{s:s,s:s,s:s,s:s,s:i,s:I,s:I,s:f}", "id", si->id, "pipeline", si->pipeline,
                   "state", si->state == EBB_SESSION_OPEN ? "open" : "stopped", "stop_reason",
                   si->stop_reason, "inflight", si->inflight, "items_done",
                   (json_int_t)si->items_done, "items_failed", (json_int_t)si->items_failed,
                   "created", si->created);
}

/* A session's state from the device that has it; NULL when it is closed. */
static json_t *session_now(ebb_events *e, const char *id) {
  for (size_t d = 0; d < e->ndev; d++) {
    ebb_session_info si;
    if (ebb_sessions_info(ebb_manager_sessions(e->dev[d].m), id, &si) == 0) {
      json_t *o = session_json(&si);
      json_object_set_new(o, "device", json_string(e->dev[d].label));
      return o;
    }
  }
  return NULL;
}

static void poll_sessions(ebb_events *e) {
  json_t *now = json_array();
  pthread_mutex_lock(&e->watch_mu);
  size_t keep = 0;
  for (size_t i = 0; i < e->nwsessions; i++) {
    json_t *o = session_now(e, e->wsessions[i]);
    if (o) {
      json_array_append_new(now, o);
      e->wsessions[keep++] = e->wsessions[i];
    } else {
      free(e->wsessions[i]); /* closed */
    }
  }
  e->nwsessions = keep;
  pthread_mutex_unlock(&e->watch_mu);
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
    publish(e, "sessions", json_pack("{s:o}", "sessions", now), 0);
}

/* The store's job with per-stage peaks merged into its stages. */
static json_t *job_json(json_t *o, json_t *peaks) {
  json_t *rel = json_object_get(o, "released_bytes");
  json_t *j = json_pack("{s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:o,s:o}", "id", json_object_get(o, "id"),
                        "pipeline", json_object_get(o, "pipeline"), "state",
                        json_object_get(o, "state"), "created", json_object_get(o, "created"),
                        "started", json_object_get(o, "started") ?: json_null(), "finished",
                        json_object_get(o, "finished") ?: json_null(), "error",
                        json_object_get(o, "error") ?: json_null(), "released_bytes",
                        rel ? json_incref(rel) : json_integer(0), "stages", json_array());
  json_t *stages = json_object_get(j, "stages"), *s;
  size_t i;
  json_array_foreach(json_object_get(o, "stages"), i, s) {
    const char *name = json_string_value(json_object_get(s, "name"));
    json_t *pk = name && peaks ? json_object_get(peaks, name) : NULL;
    json_array_append_new(stages, json_pack("{s:O,s:O,s:O}", "name", json_object_get(s, "name"),
                                            "released_bytes",
                                            json_object_get(s, "released_bytes") ?: json_null(),
                                            "peak_bytes", pk ? pk : json_null()));
  }
  /* stages that ran but have no release row yet (running) */
  const char *key;
  json_t *v;
  json_object_foreach(peaks, key, v) {
    int found = 0;
    json_array_foreach(stages, i, s)
      found |= !strcmp(json_string_value(json_object_get(s, "name")) ?: "", key);
    if (!found && strncmp(key, "job ", 4))
      json_array_append_new(stages, json_pack("{s:s,s:n,s:O}", "name", key, "released_bytes",
                                              "peak_bytes", v));
  }
  return j;
}

static void remember_job(ebb_events *e, json_t *j) {
  pthread_mutex_lock(&e->mu);
  size_t i;
  json_t *x;
  json_array_foreach(e->jobs, i, x)
    if (json_equal(json_object_get(x, "id"), json_object_get(j, "id"))) {
      json_array_remove(e->jobs, i);
      break;
    }
  json_array_append(e->jobs, j);
  while (json_array_size(e->jobs) > RECENT_JOBS)
    json_array_remove(e->jobs, 0);
  pthread_mutex_unlock(&e->mu);
}

/* Peaks of this interval's owners go to the job that ran in it. */
static void add_peaks(ebb_events *e, watched_job *w) {
  for (size_t d = 0; d < e->ndev; d++)
    for (size_t i = 0; i < e->dev[d].nowners; i++) {
      owner_row *r = &e->dev[d].owners[i];
      if (!r->touched && !r->bytes)
        continue;
      const char *p = pipeline_of(e, e->dev[d].label, r->name, w->pipeline);
      if (!p || strcmp(p, w->pipeline))
        continue;
      uint64_t pk = r->peak > r->bytes ? r->peak : r->bytes;
      json_t *old = json_object_get(w->peaks, r->name);
      if (!old || (uint64_t)json_integer_value(old) < pk)
        json_object_set_new(w->peaks, r->name, json_integer((json_int_t)pk));
    }
}

static int state_of(json_t *o) {
  const char *s = json_string_value(json_object_get(o, "state"));
  for (int i = 0; s && i < EBB_JOB_NSTATES; i++)
    if (!strcmp(s, ebb_job_state_name(i)))
      return i;
  return -1;
}

static const char *poll_jobs(ebb_events *e, char *running, size_t rn) {
  running[0] = '\0';
  pthread_mutex_lock(&e->watch_mu);
  size_t keep = 0;
  for (size_t i = 0; i < e->nwjobs; i++) {
    watched_job *w = &e->wjobs[i];
    json_t *o = NULL;
    if (ebb_store_get(e->store, w->id, &o) != 0) {
      json_decref(w->peaks);
      json_decref(w->peaks_sent);
      continue;
    }
    int st = state_of(o);
    snprintf(w->pipeline, sizeof w->pipeline, "%s",
             json_string_value(json_object_get(o, "pipeline")) ?: "");
    if (st == EBB_JOB_RUNNING || (w->state <= EBB_JOB_RUNNING && st > EBB_JOB_RUNNING &&
                                  json_object_get(o, "started") &&
                                  !json_is_null(json_object_get(o, "started"))))
      add_peaks(e, w);
    if (st == EBB_JOB_RUNNING || (st != w->state && st > EBB_JOB_RUNNING)) {
      snprintf(running, rn, "%s", w->pipeline); /* running, or ran in this interval */
      snprintf(e->last_job_pipeline, sizeof e->last_job_pipeline, "%s", w->pipeline);
    }
    int changed = st != w->state;
    json_t *j = changed || st == EBB_JOB_RUNNING ? job_json(o, w->peaks) : NULL;
    json_decref(o);
    w->state = st;
    if (j) {
      remember_job(e, j);
      /* state changes are remembered for new clients; a running job's
       * next stage is news to the ones connected */
      if (changed || !json_equal(w->peaks, w->peaks_sent)) {
        json_decref(w->peaks_sent);
        w->peaks_sent = json_deep_copy(w->peaks);
        publish(e, "job", j, changed);
      } else {
        json_decref(j);
      }
    }
    if (st > EBB_JOB_RUNNING || st < 0) {
      json_decref(w->peaks);
      json_decref(w->peaks_sent);
    } else
      e->wjobs[keep++] = *w;
  }
  e->nwjobs = keep;
  pthread_mutex_unlock(&e->watch_mu);
  return running[0] ? running : NULL;
}

void ebb_events_watch_job(ebb_events *e, int64_t id) {
  if (!e)
    return;
  pthread_mutex_lock(&e->watch_mu);
  if (e->nwjobs == e->capwjobs) {
    size_t cap = e->capwjobs ? e->capwjobs * 2 : 16;
    watched_job *p = realloc(e->wjobs, cap * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&e->watch_mu);
      return;
    }
    e->wjobs = p;
    e->capwjobs = cap;
  }
  e->wjobs[e->nwjobs++] = (watched_job){.id = id, .state = -1, .peaks = json_object()};
  pthread_mutex_unlock(&e->watch_mu);
}

void ebb_events_watch_session(ebb_events *e, const char *id) {
  if (!e || !id)
    return;
  pthread_mutex_lock(&e->watch_mu);
  char **p = realloc(e->wsessions, (e->nwsessions + 1) * sizeof *p);
  char *s = strdup(id);
  if (p)
    e->wsessions = p;
  if (p && s)
    e->wsessions[e->nwsessions++] = s;
  else
    free(s);
  pthread_mutex_unlock(&e->watch_mu);
}

/* Jobs a previous server (or this one, before the stream) stored: the last
 * ones become the recent list, unfinished ones are watched. */
static void scan_jobs(ebb_events *e) {
  uint64_t counts[EBB_JOB_NSTATES] = {0}, total = 0;
  if (ebb_store_counts(e->store, counts) != 0)
    return;
  for (int i = 0; i < EBB_JOB_NSTATES; i++)
    total += counts[i];
  int64_t hi = (int64_t)total + 16, lo = hi - RECENT_JOBS - 32;
  for (int64_t id = lo < 1 ? 1 : lo; id <= hi; id++) {
    json_t *o = NULL;
    if (ebb_store_get(e->store, id, &o) != 0)
      continue;
    if (state_of(o) > EBB_JOB_RUNNING) {
      json_t *j = job_json(o, NULL);
      remember_job(e, j);
      json_decref(j);
    } else {
      ebb_events_watch_job(e, id);
    }
    json_decref(o);
  }
}

/* --- leaks (from the log tap) ------------------------------------------------------- */
static void tap(void *ctx, ebb_log_level level, const char *scope, const char *msg) {
  ebb_events *e = ctx;
  if (level < EBB_LOG_WARN || !scope)
    return;
  unsigned long long mib = 0, bytes = 0;
  size_t blocks = 0;
  char site[256];
  pthread_mutex_lock(&e->tap_mu);
  int outside = strstr(msg, " MiB taken from the driver directly were not given back") &&
                sscanf(msg, "%llu", &mib) == 1;
  if (outside || sscanf(msg, "leaked %llu MiB in %zu blocks", &mib, &blocks) == 2) {
    if (e->ntleaks == e->captleaks && e->ntleaks < 64) {
      size_t cap = e->captleaks ? e->captleaks * 2 : 8;
      pending_leak *p = realloc(e->tleaks, cap * sizeof *p);
      if (p) {
        e->tleaks = p;
        e->captleaks = cap;
      }
    }
    if (e->ntleaks < e->captleaks) {
      pending_leak *l = &e->tleaks[e->ntleaks++];
      memset(l, 0, sizeof *l);
      snprintf(l->owner, sizeof l->owner, "%s", scope);
      l->bytes = mib << 20;
      l->outside = outside;
      l->want = outside ? 0 : blocks < 32 ? blocks : 32;
      l->t_ns = ebb_mono_ns();
      l->sites = json_array();
      if (outside)
        json_array_append_new(l->sites, json_pack("{s:I,s:s}", "bytes", (json_int_t)l->bytes,
                                                  "site", "taken from the driver directly, "
                                                          "outside ebb's allocator"));
    }
  } else if (e->ntleaks && sscanf(msg, " %*s %*s (%llu bytes) at %255[^\n]", &bytes, site) == 2 &&
             !strcmp(e->tleaks[e->ntleaks - 1].owner, scope) &&
             json_array_size(e->tleaks[e->ntleaks - 1].sites) < 32) {
    json_array_append_new(e->tleaks[e->ntleaks - 1].sites,
                          json_pack("{s:I,s:s}", "bytes", (json_int_t)bytes, "site", site));
  }
  pthread_mutex_unlock(&e->tap_mu);
}

/* Moves the leaks whose site lines have all come (or that waited long
 * enough) out of the tap's list, in order: *n of them, malloc'd. */
static pending_leak *take_complete_leaks(ebb_events *e, size_t *n) {
  *n = 0;
  pthread_mutex_lock(&e->tap_mu);
  pending_leak *out = e->ntleaks ? malloc(e->ntleaks * sizeof *out) : NULL;
  uint64_t now = ebb_mono_ns();
  size_t keep = 0;
  for (size_t i = 0; i < e->ntleaks; i++) {
    pending_leak *l = &e->tleaks[i];
    int done = json_array_size(l->sites) >= l->want || now - l->t_ns > LEAK_SITES_WAIT_NS;
    if (out && done && keep == 0) /* in order: none after one that still waits */
      out[(*n)++] = *l;
    else
      e->tleaks[keep++] = *l;
  }
  e->ntleaks = keep;
  pthread_mutex_unlock(&e->tap_mu);
  return out;
}

static void publish_leaks(ebb_events *e, const char *running) {
  size_t n;
  pending_leak *l = take_complete_leaks(e, &n);
  for (size_t i = 0; i < n; i++) {
    uint64_t sum = 0;
    size_t k;
    json_t *s;
    json_array_foreach(l[i].sites, k, s)
      sum += (uint64_t)json_integer_value(json_object_get(s, "bytes"));
    const char *label = e->dev[device_of_owner(e, l[i].owner)].label;
    const char *p = pipeline_of(e, label, l[i].owner, running);
    json_t *o = json_pack("{s:f,s:s,s:s,s:o,s:I,s:s,s:o}", "t",
                          wall_of(ebb_mono_ns()), "device", label, "owner", l[i].owner,
                          "pipeline", p ? json_string(p) : json_null(), "bytes",
                          (json_int_t)(sum > l[i].bytes ? sum : l[i].bytes), "kind",
                          l[i].outside ? "outside" : "leak", "sites", l[i].sites);
    pthread_mutex_lock(&e->mu);
    json_array_append(e->leaks, o);
    while (json_array_size(e->leaks) > RECENT_LEAKS)
      json_array_remove(e->leaks, 0);
    pthread_mutex_unlock(&e->mu);
    publish(e, "leak", o, 0);
  }
  free(l);
}

/* --- the publisher ------------------------------------------------------------------- */
/* The device sample goes last: it is the only step that may wait on the
 * device (a segment being allocated), and everything else is news already. */
static void tick(ebb_events *e) {
  char running[128];
  for (size_t d = 0; d < e->ndev; d++)
    read_ledger(e, &e->dev[d]);
  poll_pipelines(e);
  poll_sessions(e);
  const char *run = poll_jobs(e, running, sizeof running);
  publish_leaks(e, run);
  for (size_t d = 0; d < e->ndev; d++)
    publish_memory(e, d, run);
}

static void *publisher(void *arg) {
  ebb_events *e = arg;
  pthread_mutex_lock(&e->mu);
  while (!e->stop) {
    pthread_mutex_unlock(&e->mu);
    tick(e);
    pthread_mutex_lock(&e->mu);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)e->interval_ms * 1000000ull;
    ts.tv_sec += (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    while (!e->stop && pthread_cond_timedwait(&e->wake, &e->mu, &ts) != ETIMEDOUT) {
    }
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

static void cond_init_mono(pthread_cond_t *c) {
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(c, &ca);
  pthread_condattr_destroy(&ca);
}

int ebb_events_create(const ebb_events_opts *o, ebb_events **out) {
  if (!o || !o->manager || !o->alloc || !o->store || (o->ndevices && (!o->managers || !o->allocs)))
    return ebb_seterr(EBB_EINVAL, "events: manager, allocator and store are required");
  ebb_events *e = calloc(1, sizeof *e);
  if (!e)
    return ebb_seterr(EBB_ENOMEM, "events: out of host memory");
  e->m = o->manager;
  e->store = o->store;
  e->ndev = o->ndevices ? o->ndevices : 1;
  e->dev = calloc(e->ndev, sizeof *e->dev);
  if (!e->dev) {
    free(e);
    return ebb_seterr(EBB_ENOMEM, "events: out of host memory");
  }
  for (size_t d = 0; d < e->ndev; d++) {
    ev_dev *x = &e->dev[d];
    x->m = o->ndevices ? o->managers[d] : o->manager;
    x->alloc = o->ndevices ? o->allocs[d] : o->alloc;
    x->label = ebb_device_label(ebb_allocator_device(x->alloc));
  }
  e->interval_ms = o->interval_ms > 0 ? o->interval_ms : env_int("EBB_EVENTS_INTERVAL_MS", 500);
  e->max_clients = o->max_clients > 0 ? o->max_clients : env_int("EBB_EVENTS_MAX_CLIENTS", 256);
  e->client_buffer = o->client_buffer
                         ? o->client_buffer
                         : (size_t)env_int("EBB_EVENTS_CLIENT_BUFFER", 256 * 1024);
  e->history_s = o->history_s > 0 ? o->history_s : 300;
  e->hcap = (size_t)e->history_s * 1000 / (size_t)e->interval_ms * 2 + 512;
  if (e->hcap > 65536)
    e->hcap = 65536;
  e->hist = calloc(e->hcap, sizeof *e->hist);
  e->pipelines = json_array();
  e->jobs = json_array();
  e->sessions = json_array();
  e->leaks = json_array();
  pthread_mutex_init(&e->mu, NULL);
  pthread_mutex_init(&e->watch_mu, NULL);
  pthread_mutex_init(&e->tap_mu, NULL);
  cond_init_mono(&e->wake);
  if (!e->hist || !e->pipelines || !e->jobs || !e->sessions || !e->leaks) {
    ebb_events_destroy(e);
    return ebb_seterr(EBB_ENOMEM, "events: out of host memory");
  }
  /* what the ledgers hold already is history, not news */
  for (size_t d = 0; d < e->ndev; d++) {
    size_t n = 0;
    ebb_ledger_events(ebb_allocator_ledger(e->dev[d].alloc), NULL, 0, &n, &e->dev[d].ledger_seen);
  }
  scan_jobs(e);
  ebb_log_set_tap(tap, e);
  if (pthread_create(&e->th, NULL, publisher, e) != 0) {
    ebb_events_destroy(e);
    return ebb_seterr(EBB_EIO, "events: cannot start the publisher thread: %s", strerror(errno));
  }
  e->started = 1;
  *out = e;
  return 0;
}

void ebb_events_stop(ebb_events *e) {
  if (!e)
    return;
  pthread_mutex_lock(&e->mu);
  e->stop = 1;
  pthread_cond_broadcast(&e->wake);
  for (client *cl = e->clients; cl; cl = cl->next)
    pthread_cond_signal(&cl->cv);
  pthread_mutex_unlock(&e->mu);
  if (e->started) {
    pthread_join(e->th, NULL);
    e->started = 0;
  }
}

void ebb_events_destroy(ebb_events *e) {
  if (!e)
    return;
  ebb_events_stop(e);
  ebb_log_set_tap(NULL, NULL);
  for (size_t i = 0; i < e->hn; i++)
    free(e->hist[(e->hhead + i) % e->hcap].text);
  free(e->hist);
  json_decref(e->pipelines);
  json_decref(e->jobs);
  json_decref(e->sessions);
  json_decref(e->leaks);
  for (size_t d = 0; d < e->ndev; d++) {
    free(e->dev[d].owners);
    json_decref(e->dev[d].pipes);
  }
  free(e->dev);
  free(e->pipelines_text);
  for (size_t i = 0; i < e->nwjobs; i++) {
    json_decref(e->wjobs[i].peaks);
    json_decref(e->wjobs[i].peaks_sent);
  }
  free(e->wjobs);
  for (size_t i = 0; i < e->nwsessions; i++)
    free(e->wsessions[i]);
  free(e->wsessions);
  for (size_t i = 0; i < e->ntleaks; i++)
    json_decref(e->tleaks[i].sites);
  free(e->tleaks);
  pthread_cond_destroy(&e->wake);
  pthread_mutex_destroy(&e->mu);
  pthread_mutex_destroy(&e->watch_mu);
  pthread_mutex_destroy(&e->tap_mu);
  free(e);
}

void ebb_events_get_stats(ebb_events *e, ebb_events_stats *out) {
  pthread_mutex_lock(&e->mu);
  out->clients = e->nclients;
  out->dropped = e->dropped;
  out->published = e->published;
  pthread_mutex_unlock(&e->mu);
}

/* --- the stream ------------------------------------------------------------------------ */
static enum MHD_Result refuse(struct MHD_Connection *c, unsigned status, const char *code,
                              const char *msg) {
  json_t *o = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
  char *t = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!t)
    return MHD_NO;
  struct MHD_Response *r = MHD_create_response_from_buffer(strlen(t), t, MHD_RESPMEM_MUST_FREE);
  MHD_add_response_header(r, "Content-Type", "application/json");
  enum MHD_Result ret = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ret;
}

/* hello + the remembered events, under mu. */
static int client_start_locked(ebb_events *e, client *cl) {
  json_t *devs = json_array();
  for (size_t d = 0; d < e->ndev; d++) {
    ebb_device *dev = ebb_allocator_device(e->dev[d].alloc);
    json_array_append_new(devs, json_pack("{s:s,s:s,s:I}", "device", ebb_device_label(dev),
                                          "name", ebb_device_name(dev), "total_bytes",
                                          (json_int_t)ebb_device_total_bytes(dev)));
  }
  json_t *hello = json_pack("{s:i,s:i,s:i,s:f,s:o,s:O,s:O,s:O,s:O}", "version", 1,
                            "interval_ms", e->interval_ms, "history_s", e->history_s, "t",
                            wall_of(ebb_mono_ns()), "devices", devs, "pipelines",
                            e->pipelines, "jobs", e->jobs, "sessions", e->sessions, "leaks",
                            e->leaks);
  char *data = json_dumps(hello, JSON_COMPACT);
  json_decref(hello);
  if (!data)
    return -1;
  char *text = NULL;
  int n = asprintf(&text, "retry: 2000\nevent: hello\ndata: %s\n\n", data);
  free(data);
  if (n < 0)
    return -1;
  /* the newest remembered events that fit in BACKLOG_MAX */
  size_t need = (size_t)n, from = e->hn;
  while (from > 0) {
    size_t k = strlen(e->hist[(e->hhead + from - 1) % e->hcap].text);
    if (need + k > BACKLOG_MAX)
      break;
    need += k;
    from--;
  }
  cl->limit = need + e->client_buffer; /* the backlog is allowed on top */
  int rc = client_put(cl, text, (size_t)n);
  free(text);
  for (size_t i = from; !rc && i < e->hn; i++) {
    const char *t = e->hist[(e->hhead + i) % e->hcap].text;
    rc = client_put(cl, t, strlen(t));
  }
  return rc;
}

enum MHD_Result ebb_events_serve(ebb_events *e, struct MHD_Connection *c) {
  client *cl = calloc(1, sizeof *cl);
  if (!cl)
    return refuse(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "out of host memory");
  cl->e = e;
  cond_init_mono(&cl->cv);
  /* the kernel's send buffer is part of what a client may hold: keep it
   * to the client's buffer so 256 streams cannot pin gigabytes of it */
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  if (ci) {
    int sb = e->client_buffer < 4096 ? 4096 : e->client_buffer > (1u << 20) ? (1 << 20)
                                                                           : (int)e->client_buffer;
    setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb);
  }
  pthread_mutex_lock(&e->mu);
  char msg[200];
  if (e->stop || e->nclients >= e->max_clients) {
    int stop = e->stop;
    pthread_mutex_unlock(&e->mu);
    pthread_cond_destroy(&cl->cv);
    free(cl);
    snprintf(msg, sizeof msg, stop ? "the server is stopping"
                                   : "%d clients are reading /v1/events already, the most "
                                     "this server takes (EBB_EVENTS_MAX_CLIENTS)",
             e->max_clients);
    return refuse(c, MHD_HTTP_SERVICE_UNAVAILABLE, "too_many_clients", msg);
  }
  if (client_start_locked(e, cl) != 0) {
    pthread_mutex_unlock(&e->mu);
    pthread_cond_destroy(&cl->cv);
    free(cl->buf);
    free(cl);
    return refuse(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "out of host memory");
  }
  cl->next = e->clients;
  if (e->clients)
    e->clients->prev = cl;
  e->clients = cl;
  e->nclients++;
  pthread_mutex_unlock(&e->mu);
  struct MHD_Response *r =
      MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, cl, stream_free);
  if (!r) {
    stream_free(cl);
    return MHD_NO;
  }
  MHD_add_response_header(r, "Content-Type", "text/event-stream; charset=utf-8");
  MHD_add_response_header(r, "Cache-Control", "no-cache");
  MHD_add_response_header(r, "X-Accel-Buffering", "no");
  /* a reader that stops reading altogether is closed after a minute without
   * progress (the keepalive comments keep a healthy idle stream going) */
  MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 4 * KEEPALIVE_S);
  enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
  MHD_destroy_response(r);
  return ret;
}
