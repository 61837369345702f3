/* The live picture's jobs (events_int.h): a job's facts become `job`
 * events (its stages' bytes from the fact, their peaks from the ledger's
 * owner rows while it runs), and a new client's hello lists the newest jobs
 * the store holds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "server/events_int.h"

#define RECENT_JOBS 50

static int state_of(const char *s) {
  for (int i = 0; s && i < EBB_JOB_NSTATES; i++)
    if (!strcmp(s, srv_job_state_name(i)))
      return i;
  return -1;
}

/* The stages: each one's released bytes (a finished job's, from its fact:
 * the runner's figures) with the peak it reached (its owner's in this
 * process's ledger while the job ran; else the runner's, as the fact has it:
 * an isolated stage's worker), then the ones that ran but have no bytes
 * yet. */
static json_t *stages_json(json_t *released, json_t *peaks) {
  json_t *stages = json_array(), *s;
  size_t i;
  json_array_foreach(released, i, s) {
    const char *name = json_string_value(json_object_get(s, "name"));
    json_t *pk = name && peaks ? json_object_get(peaks, name) : NULL;
    if (!pk)
      pk = json_object_get(s, "peak_bytes");
    json_array_append_new(stages, json_pack("{s:O,s:O,s:O}", "name", json_object_get(s, "name"),
                                            "released_bytes",
                                            json_object_get(s, "released_bytes") ?: json_null(),
                                            "peak_bytes", pk ? pk : json_null()));
  }
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
  return stages;
}

/* A stored job (the hello's) as the `job` event has it. */
static json_t *stored_job_json(json_t *o, json_t *peaks) {
  json_t *rel = json_object_get(o, "released_bytes");
  return json_pack("{s:O,s:O,s:O,s:O,s:O,s:O,s:O,s:o,s:o}", "id", json_object_get(o, "id"),
                   "pipeline", json_object_get(o, "pipeline"), "state", json_object_get(o, "state"),
                   "created", json_object_get(o, "created"), "started",
                   json_object_get(o, "started") ?: json_null(), "finished",
                   json_object_get(o, "finished") ?: json_null(), "error",
                   json_object_get(o, "error") ?: json_null(), "released_bytes",
                   rel ? json_incref(rel) : json_integer(0), "stages",
                   stages_json(json_object_get(o, "stages"), peaks));
}

/* A watched job as the `job` event has it; f: its fact now (NULL: a peak). */
static json_t *watched_json(const watched_job *w, const ev_fact *f) {
  int st = f ? state_of(f->state) : w->state;
  json_t *released = f && f->detail ? json_loads(f->detail, 0, NULL) : NULL;
  json_t *err = f && (f->code || f->message)
                    ? json_pack("{s:s?,s:s?}", "code", f->code, "message", f->message)
                    : json_null();
  json_t *o = json_pack("{s:s,s:s,s:s,s:f,s:o,s:o,s:o,s:I,s:o}", "id", w->uid, "pipeline",
                        w->pipeline, "state", srv_job_state_name(st), "created", w->created,
                        "started", w->started ? json_real(w->started) : json_null(), "finished",
                        st > EBB_JOB_RUNNING ? json_real(f ? f->t : base_wall_s()) : json_null(),
                        "error", err, "released_bytes", (json_int_t)(f ? f->bytes : 0), "stages",
                        stages_json(released, w->peaks));
  json_decref(released);
  return o;
}

/* Under mu. */
static watched_job *watched(srv_events *e, const ev_fact *f) {
  for (size_t i = 0; i < e->nwjobs; i++)
    if (e->wjobs[i].id == f->job)
      return &e->wjobs[i];
  if (e->nwjobs == e->capwjobs) {
    size_t cap = e->capwjobs ? e->capwjobs * 2 : 16;
    watched_job *p = realloc(e->wjobs, cap * sizeof *p);
    if (!p)
      return NULL;
    e->wjobs = p;
    e->capwjobs = cap;
  }
  watched_job *w = &e->wjobs[e->nwjobs++];
  *w = (watched_job){.id = f->job, .state = -1, .created = f->t, .peaks = json_object()};
  snprintf(w->uid, sizeof w->uid, "%s", f->id ? f->id : "");
  snprintf(w->pipeline, sizeof w->pipeline, "%s", f->pipeline ? f->pipeline : "");
  return w;
}

/* A job's state: a `job` event (kept for new clients); an ended job is
 * forgotten (the store has it for the next hello). */
void srv_ev_on_job(srv_events *e, const ev_fact *f) {
  int st = state_of(f->state);
  pthread_mutex_lock(&e->mu);
  watched_job *w = st < 0 ? NULL : watched(e, f);
  if (!w) {
    pthread_mutex_unlock(&e->mu);
    return;
  }
  if (st == EBB_JOB_RUNNING)
    w->started = f->t;
  if (st > EBB_JOB_RUNNING && w->state == EBB_JOB_RUNNING)
    srv_ev_add_peaks(e, w); /* the last interval's */
  if (st >= EBB_JOB_RUNNING)
    snprintf(e->last_job_pipeline, sizeof e->last_job_pipeline, "%s", w->pipeline);
  w->state = st;
  json_t *j = watched_json(w, f);
  json_decref(w->peaks_sent);
  w->peaks_sent = json_deep_copy(w->peaks);
  if (st > EBB_JOB_RUNNING) {
    json_decref(w->peaks);
    json_decref(w->peaks_sent);
    *w = e->wjobs[--e->nwjobs];
  }
  pthread_mutex_unlock(&e->mu);
  srv_sse_send(e->sse, "job", j, 1);
}

/* The running jobs' peaks this interval; a change is news to the clients
 * connected. Answers the pipeline that runs (NULL: none). */
const char *srv_ev_running_jobs(srv_events *e, char *running, size_t rn) {
  running[0] = '\0';
  pthread_mutex_lock(&e->mu);
  for (size_t i = 0; i < e->nwjobs; i++) {
    watched_job *w = &e->wjobs[i];
    if (w->state != EBB_JOB_RUNNING)
      continue;
    snprintf(running, rn, "%s", w->pipeline);
    srv_ev_add_peaks(e, w);
    if (json_equal(w->peaks, w->peaks_sent))
      continue;
    json_decref(w->peaks_sent);
    w->peaks_sent = json_deep_copy(w->peaks);
    srv_sse_send(e->sse, "job", watched_json(w, NULL), 0);
  }
  pthread_mutex_unlock(&e->mu);
  return running[0] ? running : NULL;
}

/* The newest jobs the store holds (what --keep-jobs left), with the peaks
 * of the ones running. */
json_t *srv_ev_hello_jobs(srv_events *e) {
  json_t *jobs = json_array();
  int64_t *ids = NULL;
  size_t n = 0;
  srv_store_newest(e->store, RECENT_JOBS, &ids, &n);
  for (size_t i = 0; i < n; i++) {
    json_t *o = NULL;
    if (srv_store_get(e->store, ids[i], &o) != 0)
      continue;
    json_t *peaks = NULL;
    pthread_mutex_lock(&e->mu);
    for (size_t k = 0; k < e->nwjobs; k++)
      if (e->wjobs[k].id == ids[i])
        peaks = json_deep_copy(e->wjobs[k].peaks);
    pthread_mutex_unlock(&e->mu);
    json_array_append_new(jobs, stored_job_json(o, peaks));
    json_decref(peaks);
    json_decref(o);
  }
  free(ids);
  return jobs;
}
