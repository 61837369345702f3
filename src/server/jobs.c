/* Jobs and sessions over HTTP. A job's public id is 128 random bits; a job
 * is visible to the token that made it and to admin tokens (to anyone else
 * it does not exist: 404). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "server/internal.h"

/* The job's files: DATA_DIR/jobs/UID (its input, lyrics and path options,
 * out/): what it reads is the server's copy, made from what was checked. */
static int job_files(srv_server *s, srv_req *r, srv_input *in, const char *uid, char *path,
                     size_t pn, char *out, size_t on) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/jobs/%s", s->data_dir, uid);
  snprintf(out, on, "%s/out", dir);
  int rc = base_mkdirs(dir, 0755, "mkdir");
  if (!rc)
    rc = srv_place_input(s, r, in, dir, path, pn);
  if (!rc)
    rc = srv_place_extras(s, in, dir);
  return rc;
}

static int enqueue(srv_server *s, srv_req *r, srv_input *in, const char *uid, uint64_t bytes,
                   int64_t *id, char *path, size_t pn) {
  char out[4200];
  /* the files first: the options stored (and run again after a restart)
   * are the ones that name the job's copies, not what the caller named */
  int rc = job_files(s, r, in, uid, path, pn, out, sizeof out);
  char *opts = !rc && in->options ? json_dumps(in->options, JSON_COMPACT) : NULL;
  if (!rc)
    rc = srv_store_insert(s->store, uid, r->owner, in->pipeline, in->path, opts, id);
  free(opts);
  if (rc && !*id) { /* nothing refers to the directory: remove it */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/jobs/%s", s->data_dir, uid);
    base_rm_tree(dir);
  }
  if (!rc)
    rc = srv_store_set_input(s->store, *id, path, out);
  if (!rc)
    rc = srv_queue_push(s->queue, *id, uid, r->owner, bytes, in->pipeline, path, out, in->options);
  return rc;
}

enum MHD_Result srv_h_jobs_post(srv_server *s, struct MHD_Connection *c, srv_req *r,
                                const char *method) {
  srv_input in;
  enum MHD_Result ret;
  if (srv_parse_job(s, c, r, &in, &ret))
    return ret;
  if (srv_check_work(s, c, r, &in, &ret)) {
    srv_input_free(&in);
    return ret;
  }
  char uid[33], path[4400];
  int64_t id = 0;
  uint64_t bytes = srv_job_bytes(r, &in);
  pthread_mutex_lock(&s->submit_lock); /* the fair limits' check and the push as one */
  if (srv_queue_full(s, c, r, bytes, &ret)) {
    pthread_mutex_unlock(&s->submit_lock);
    srv_input_free(&in);
    return ret;
  }
  int rc = srv_random_id(uid);
  if (!rc)
    rc = enqueue(s, r, &in, uid, bytes, &id, path, sizeof path);
  pthread_mutex_unlock(&s->submit_lock);
  if (rc) {
    if (id)
      srv_store_finish(s->store, id, EBB_JOB_FAILED, ebb_errname(rc), ebb_errmsg(), NULL, 0, "[]");
    ret = srv_send_ebb_err(c, r, EBB_EIO, ebb_errmsg());
  } else {
    char url[64];
    snprintf(url, sizeof url, "/v1/jobs/%s", uid);
    base_log(EBB_LOG_INFO, "server", "job %s: queued (pipeline '%s', input %s)", uid, in.pipeline,
             path);
    ret = srv_send_json(c, r, MHD_HTTP_ACCEPTED,
                        json_pack("{s:s,s:s,s:s}", "id", uid, "state", "queued", "url", url));
  }
  srv_input_free(&in);
  return ret;
}

/* The job the path names, if this caller may see it. */
static int find_job(srv_server *s, srv_req *r, int64_t *id) {
  char owner[64];
  const char *uid = r->parts[2];
  if (srv_store_find(s->store, uid, id, owner, sizeof owner) != 0 ||
      (r->role != SRV_ROLE_ADMIN && strcmp(owner, r->owner)))
    return ebb_seterr(EBB_ENOTFOUND, "no job '%s'", uid);
  return 0;
}

static enum MHD_Result result_of(struct MHD_Connection *c, srv_req *r, const char *uid, json_t *o) {
  const char *state = json_string_value(json_object_get(o, "state"));
  if (state && !strcmp(state, "succeeded")) {
    json_t *res = json_object_get(o, "result");
    json_t *v = json_object_get(res, "result"), *files = json_object_get(res, "files");
    return srv_send_json(c, r, MHD_HTTP_OK,
                         json_pack("{s:s,s:s,s:O,s:O}", "id", uid, "state", state, "result",
                                   v ? v : json_null(), "files", files ? files : json_array()));
  }
  if (state && (!strcmp(state, "queued") || !strcmp(state, "running")))
    return srv_send_err(c, r, MHD_HTTP_CONFLICT, "not_finished",
                        "job %s is %s; its result is there once it has succeeded", uid, state);
  const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
  return srv_send_err(c, r, MHD_HTTP_CONFLICT, "no_result", "job %s %s and has no result: %s", uid,
                      state ? state : "ended", msg ? msg : "(no message)");
}

enum MHD_Result srv_h_job_result(srv_server *s, struct MHD_Connection *c, srv_req *r,
                                 const char *method) {
  int64_t id;
  json_t *o = NULL;
  int rc = find_job(s, r, &id);
  if (!rc)
    rc = srv_store_get(s->store, id, &o);
  if (rc)
    return srv_send_ebb_err(c, r, rc, ebb_errmsg());
  enum MHD_Result ret = result_of(c, r, r->parts[2], o);
  json_decref(o);
  return ret;
}

static enum MHD_Result cancel_job(srv_server *s, struct MHD_Connection *c, srv_req *r, int64_t id) {
  const char *uid = r->parts[2];
  srv_job_state st;
  int rc = srv_store_state(s->store, id, &st);
  if (rc)
    return srv_send_ebb_err(c, r, rc, ebb_errmsg());
  int running = 0;
  if (st == EBB_JOB_QUEUED || st == EBB_JOB_RUNNING)
    rc = srv_queue_cancel(s->queue, id, &running);
  if (rc || (st != EBB_JOB_QUEUED && st != EBB_JOB_RUNNING)) {
    srv_store_state(s->store, id, &st);
    return srv_send_err(c, r, MHD_HTTP_CONFLICT, "already_finished",
                        "job %s has already finished (%s); nothing to cancel", uid,
                        srv_job_state_name(st));
  }
  base_log(EBB_LOG_INFO, "server", "job %s: %s", uid,
           running ? "cancelling (the running stage stops, ebb releases)" : "cancelled");
  return srv_send_json(c, r, MHD_HTTP_ACCEPTED,
                       json_pack("{s:s,s:s}", "id", uid, "state",
                                 running ? "cancelling" : "cancelled"));
}

enum MHD_Result srv_h_job(srv_server *s, struct MHD_Connection *c, srv_req *r, const char *method) {
  int64_t id;
  int rc = find_job(s, r, &id);
  if (rc)
    return srv_send_ebb_err(c, r, rc, ebb_errmsg());
  if (!strcmp(method, "DELETE"))
    return cancel_job(s, c, r, id);
  json_t *o = NULL;
  if ((rc = srv_store_get(s->store, id, &o)) != 0)
    return srv_send_ebb_err(c, r, rc, ebb_errmsg());
  return srv_send_json(c, r, MHD_HTTP_OK, o);
}

/* --- sessions ---------------------------------------------------------------------- */
typedef struct srv_owner {
  struct srv_owner *next;
  char id[40], owner[24];
} srv_owner;

static void owner_add(srv_server *s, const char *id, const char *owner) {
  srv_owner *o = calloc(1, sizeof *o);
  if (!o)
    return; /* then only admins see it */
  snprintf(o->id, sizeof o->id, "%s", id);
  snprintf(o->owner, sizeof o->owner, "%s", owner);
  pthread_mutex_lock(&s->owners_lock);
  o->next = s->session_owners;
  s->session_owners = o;
  pthread_mutex_unlock(&s->owners_lock);
}

static void owner_drop(srv_server *s, const char *id) {
  pthread_mutex_lock(&s->owners_lock);
  for (srv_owner **p = &s->session_owners; *p; p = &(*p)->next)
    if (!strcmp((*p)->id, id)) {
      srv_owner *o = *p;
      *p = o->next;
      free(o);
      break;
    }
  pthread_mutex_unlock(&s->owners_lock);
}

/* 0 when this caller may use the session; else EBB_ENOTFOUND as if it did
 * not exist. */
static int session_visible(srv_server *s, srv_req *r, const char *id) {
  if (r->role == SRV_ROLE_ADMIN)
    return 0;
  int ok = 0;
  pthread_mutex_lock(&s->owners_lock);
  for (srv_owner *o = s->session_owners; o; o = o->next)
    if (!strcmp(o->id, id))
      ok = !strcmp(o->owner, r->owner);
  pthread_mutex_unlock(&s->owners_lock);
  return ok ? 0 : ebb_seterr(EBB_ENOTFOUND, "no session '%s'", id);
}

void srv_session_owners_free(srv_server *s) {
  for (srv_owner *o = s->session_owners, *n; o; o = n) {
    n = o->next;
    free(o);
  }
  s->session_owners = NULL;
}

/* Roles hold through sessions: a session that would load, wake or switch a
 * pipeline needs the admin role; any caller may open one on a pipeline that
 * is loaded and awake on some device. An unknown pipeline goes on to its 404. */
static int may_open_session(srv_server *s, const srv_req *r, const char *name) {
  if (r->role >= SRV_ROLE_ADMIN || !pl_manager_pipeline(s->m, name))
    return 1;
  for (size_t i = 0; i < s->ndev; i++) {
    uint64_t measured;
    int asleep = 0;
    if (!pl_manager_is_loaded(s->ms[i], name))
      continue;
    pl_manager_place_figures(s->ms[i], name, &measured, &asleep);
    if (!asleep)
      return 1;
  }
  return 0;
}

enum MHD_Result srv_h_sessions_post(srv_server *s, struct MHD_Connection *c, srv_req *r,
                                    const char *method) {
  (void)method;
  if (r->kind != BODY_BUFFER || !r->len)
    return srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                        "expected a JSON body {\"pipeline\": NAME}");
  json_error_t je;
  json_t *b = json_loadb(r->buf, r->len, 0, &je);
  if (!b)
    return srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_json",
                        "the body is not valid JSON: %s at line %d, column %d (byte %d)", je.text,
                        je.line, je.column, je.position);
  static const char *const known[] = {"pipeline", NULL};
  json_t *p = json_object_get(b, "pipeline");
  const char *extra = srv_unknown_key(b, known);
  if (!json_is_string(p) || extra) {
    enum MHD_Result ret =
        extra ? srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                             "unknown key \"%s\" in the body (known: pipeline)", extra)
              : srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                             "\"pipeline\" (a string) is required: {\"pipeline\": NAME}");
    json_decref(b);
    return ret;
  }
  if (!may_open_session(s, r, json_string_value(p))) {
    enum MHD_Result ret =
        srv_send_err(c, r, MHD_HTTP_FORBIDDEN, "forbidden",
                     "pipeline '%s' is not loaded (or is asleep): opening a session on it would "
                     "load it, "
                     "which needs an admin token; this token's role is submit (an admin may POST "
                     "/v1/pipelines/%s/load first)",
                     json_string_value(p), json_string_value(p));
    json_decref(b);
    return ret;
  }
  char id[40];
  size_t at = 0; /* where the pipeline is loaded, else placed */
  int rc = srv_queue_place_load(s->queue, json_string_value(p), &at);
  if (!rc)
    rc = pl_manager_session_open(s->ms[at], json_string_value(p), id);
  srv_snapshot_changed(s);
  enum MHD_Result ret;
  if (rc)
    ret = srv_send_ebb_err(c, r, rc, ebb_errmsg());
  else {
    owner_add(s, id, r->owner);
    base_log(EBB_LOG_INFO, "server", "session %s: opened on pipeline '%s'", id,
             json_string_value(p));
    ret = srv_send_json(c, r, MHD_HTTP_CREATED,
                        json_pack("{s:s,s:s,s:s}", "id", id, "pipeline", json_string_value(p),
                                  "device", dev_device_label(pl_manager_device(s->ms[at]))));
  }
  json_decref(b);
  return ret;
}

/* The manager (device) a session lives on; the first when none knows it. */
static pl_manager *session_manager(srv_server *s, const char *id) {
  for (size_t i = 1; i < s->ndev; i++) {
    pl_session_info si;
    if (pl_sessions_info(pl_manager_sessions(s->ms[i]), id, &si) == 0)
      return s->ms[i];
  }
  ebb_clearerr();
  return s->m;
}

enum MHD_Result srv_h_session(srv_server *s, struct MHD_Connection *c, srv_req *r,
                              const char *method) {
  const char *id = r->parts[2];
  if (session_visible(s, r, id) != 0)
    return srv_send_ebb_err(c, r, EBB_ENOTFOUND, ebb_errmsg());
  if (!strcmp(method, "DELETE")) {
    int rc = pl_manager_session_close(session_manager(s, id), id);
    srv_snapshot_changed(s);
    if (rc)
      return srv_send_ebb_err(c, r, rc, ebb_errmsg());
    owner_drop(s, id);
    base_log(EBB_LOG_INFO, "server", "session %s: closed", id);
    return srv_send_json(c, r, MHD_HTTP_OK, json_pack("{s:s,s:b}", "id", id, "closed", 1));
  }
  pl_session_info si;
  int rc = pl_sessions_info(pl_manager_sessions(session_manager(s, id)), id, &si);
  if (rc)
    return srv_send_ebb_err(c, r, rc, ebb_errmsg());
  return srv_send_json(c, r, MHD_HTTP_OK,
                       json_pack("{s:s,s:s,s:s,s:s,s:i,s:I,s:I,s:f}", "id", si.id, "pipeline",
                                 si.pipeline, "state",
                                 si.state == EBB_SESSION_OPEN ? "open" : "stopped", "stop_reason",
                                 si.stop_reason, "inflight", si.inflight, "items_done",
                                 (json_int_t)si.items_done, "items_failed",
                                 (json_int_t)si.items_failed, "created", si.created));
}

static enum MHD_Result item_done(struct MHD_Connection *c, srv_req *r, const char *id,
                                 const char *pipeline, const char *dir, const pl_job_result *res) {
  char rp[4500];
  snprintf(rp, sizeof rp, "%s/result.json", dir);
  json_t *result = json_load_file(rp, 0, NULL);
  return srv_send_json(c, r, MHD_HTTP_OK,
                       json_pack("{s:s,s:s,s:s,s:o,s:I,s:f,s:s}", "session", id, "pipeline",
                                 pipeline, "state", "succeeded", "result",
                                 result ? result : json_null(), "released_bytes",
                                 (json_int_t)res->released_bytes, "seconds", res->seconds,
                                 "output_dir", dir));
}

/* An item's limits (pl_run_limits): its pipeline's deadline (timeout_s,
 * else --job-timeout), or a shorter one the caller asks for with
 * ?timeout_s=S; its wait for the device, --max-wait. Returns 0, or 1 with a
 * 400 queued naming what was wrong. */
static int item_limits(srv_server *s, struct MHD_Connection *c, srv_req *r, const char *pipeline,
                       pl_run_limits *lim, const char **from, enum MHD_Result *ret) {
  const pl_def *d = pl_manager_pipeline(s->m, pipeline);
  *from = d && d->timeout_s > 0 ? "the pipeline's timeout_s" : "--job-timeout";
  *lim = (pl_run_limits){d && d->timeout_s > 0 ? d->timeout_s : s->job_timeout_s, s->max_wait_s};
  const char *ask = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "timeout_s");
  if (!ask)
    return 0;
  char *end = NULL;
  double v = strtod(ask, &end);
  if (end == ask || *end || !(v > 0) || v > lim->timeout_s) {
    *ret = srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                        "timeout_s=%s: an item's deadline is seconds > 0 and at most this "
                        "server's %g s (%s)",
                        ask, lim->timeout_s, *from);
    return 1;
  }
  lim->timeout_s = v;
  *from = "the item's timeout_s";
  return 0;
}

static enum MHD_Result item_failed(struct MHD_Connection *c, srv_req *r, const char *id, int rc,
                                   const char *device, const pl_run_limits *lim, const char *from,
                                   const pl_job_result *res) {
  if (!res->over_deadline && !res->over_wait)
    return srv_send_err(c, r, 422, "item_failed", "session %s: the item failed: %s", id,
                        res->message);
  char msg[1400];
  srv_deadline_message("item", device, lim, from, res, msg, sizeof msg);
  return res->over_wait ? srv_send_ebb_err(c, r, rc, msg)
                        : srv_send_err(c, r, 504, "timed_out", "session %s: %s", id, msg);
}

enum MHD_Result srv_h_session_item(srv_server *s, struct MHD_Connection *c, srv_req *r,
                                   const char *method) {
  (void)method;
  const char *id = r->parts[2];
  pl_session_info si;
  int rc = session_visible(s, r, id);
  pl_manager *sm = session_manager(s, id);
  if (!rc)
    rc = pl_sessions_info(pl_manager_sessions(sm), id, &si);
  if (rc)
    return srv_send_ebb_err(c, r, rc, ebb_errmsg());
  srv_input in;
  enum MHD_Result ret;
  if (srv_parse_input(s, c, r, 0, &in, &ret)) {
    srv_input_free(&in);
    return ret;
  }
  if ((rc = srv_check_job_options(s, si.pipeline, &in)) != 0) {
    srv_input_free(&in);
    return srv_send_ebb_err(c, r, rc, ebb_errmsg());
  }
  in.pipeline = si.pipeline; /* an item's work is held to the limit as a job's */
  pl_run_limits lim;
  const char *from;
  if (item_limits(s, c, r, si.pipeline, &lim, &from, &ret) || srv_check_work(s, c, r, &in, &ret)) {
    srv_input_free(&in);
    return ret;
  }
  unsigned long n = atomic_fetch_add(&s->counter, 1);
  char dir[4096], path[4400];
  snprintf(dir, sizeof dir, "%s/sessions/%s/%lu", s->data_dir, id, n);
  rc = base_mkdirs(dir, 0755, "mkdir");
  if (!rc)
    rc = srv_place_input(s, r, &in, dir, path, sizeof path);
  if (!rc)
    rc = srv_place_extras(s, &in, dir);
  if (rc) {
    srv_input_free(&in);
    return srv_send_ebb_err(c, r, EBB_EIO, ebb_errmsg());
  }
  pl_job_result res;
  rc = pl_manager_session_item(sm, id, path, dir, in.options, &s->stop, &lim, &res);
  srv_input_free(&in);
  srv_snapshot_changed(s);
  if (!res.over_wait && (rc == EBB_ENOTFOUND || rc == EBB_EBUSY || rc == EBB_ECONFIG))
    return srv_send_ebb_err(c, r, rc, res.message);
  if (rc)
    return item_failed(c, r, id, rc, dev_device_label(pl_manager_device(sm)), &lim, from, &res);
  return item_done(c, r, id, si.pipeline, dir, &res);
}
