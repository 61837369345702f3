/* The routes of the API (docs/api.md) and who may call them. A request's
 * route, Host/Origin, token and content type are checked on its first call,
 * before any of its body is read or stored. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"
#include "server/events.h"
#include "server/internal.h"
#include "server/page.h"

enum { M_GET = 1, M_POST = 2, M_DELETE = 4 };
enum { B_NONE, B_JSON, B_UPLOAD }; /* the body a route takes */

typedef enum MHD_Result (*handler_fn)(srv_server *s, struct MHD_Connection *c, srv_req *r,
                                      const char *method);

struct srv_route {
  const char *pattern; /* segments; "*" matches one */
  int methods;
  const char *allow;
  srv_role role; /* at least; NONE: open */
  int body;
  handler_fn fn;
};

/* --- handlers ------------------------------------------------------------------- */
static enum MHD_Result h_healthz(srv_server *s, struct MHD_Connection *c, srv_req *r,
                                 const char *method) {
  (void)s;
  (void)method;
  return srv_send_json(c, r, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"));
}

static enum MHD_Result h_metrics(srv_server *s, struct MHD_Connection *c, srv_req *r,
                                 const char *method) {
  (void)method;
  return srv_metrics(s, c, r);
}

static enum MHD_Result h_pipelines(srv_server *s, struct MHD_Connection *c, srv_req *r,
                                   const char *method) {
  (void)method;
  json_t *snap = srv_snapshot(s);
  json_t *p = json_object_get(snap, "pipelines");
  json_t *body = json_pack("{s:O}", "pipelines", p ? p : json_array());
  json_decref(snap);
  return srv_send_json(c, r, MHD_HTTP_OK, body);
}

static enum MHD_Result h_memory(srv_server *s, struct MHD_Connection *c, srv_req *r,
                                const char *method) {
  (void)method;
  json_t *snap = srv_snapshot(s);
  json_t *mem = json_incref(json_object_get(snap, "memory"));
  json_decref(snap);
  return srv_send_json(c, r, MHD_HTTP_OK, mem ? mem : json_object());
}

/* The live page (page.h): open like /healthz; its API calls carry the token. */
static enum MHD_Result h_page(srv_server *s, struct MHD_Connection *c, srv_req *r,
                              const char *method) {
  (void)s;
  (void)method;
  const char *name = r->np ? r->parts[1] : "index.html";
  const srv_page_asset *a = srv_page_find(name);
  if (!a) /* the name as JSON escapes it (it may hold control bytes) */
    return srv_send_err(c, r, MHD_HTTP_NOT_FOUND, "not_found",
                        "no page file '%.200s' (the page is at /)", name);
  return srv_page_send(c, a);
}

static enum MHD_Result h_events(srv_server *s, struct MHD_Connection *c, srv_req *r,
                                const char *method) {
  (void)r;
  (void)method;
  return srv_events_serve(s->events, c);
}

static enum MHD_Result h_release(srv_server *s, struct MHD_Connection *c, srv_req *r,
                                 const char *method) {
  (void)method;
  uint64_t rel = 0;
  for (size_t i = 0; i < s->ndev; i++) {
    uint64_t b = 0;
    pl_manager_release(s->ms[i], &b);
    rel += b;
  }
  srv_snapshot_changed(s);
  return srv_send_json(c, r, MHD_HTTP_OK, json_pack("{s:I}", "released_bytes", (json_int_t)rel));
}

static enum MHD_Result h_pipeline(srv_server *s, struct MHD_Connection *c, srv_req *r,
                                  const char *method) {
  (void)method;
  const char *name = r->parts[2], *action = r->parts[3];
  if (!pl_manager_pipeline(s->m, name)) {
    pl_manager_load(s->m, name); /* sets the message naming the known ones */
    return srv_send_err(c, r, MHD_HTTP_NOT_FOUND, "not_found", "%s", ebb_errmsg());
  }
  dev_meminfo mi = {0};
  uint64_t rel = 0;
  int load = !strcmp(action, "load");
  size_t at = 0; /* load where placement says, unload everywhere */
  int rc = load ? srv_queue_place_load(s->queue, name, &at) : 0;
  if (!rc && load)
    rc = pl_manager_load(s->ms[at], name);
  for (size_t i = 0; !load && !rc && i < s->ndev; i++) {
    uint64_t b = 0;
    if (i == 0 || pl_manager_is_loaded(s->ms[i], name))
      rc = pl_manager_unload(s->ms[i], name, &b);
    rel += b;
  }
  srv_snapshot_changed(s);
  if (rc)
    return srv_send_ebb_err(c, r, rc, ebb_errmsg());
  dev_mem_info(pl_manager_device(s->ms[at]), &mi);
  if (load)
    return srv_send_json(c, r, MHD_HTTP_OK,
                         json_pack("{s:s,s:b,s:s,s:I}", "pipeline", name, "loaded", 1, "device",
                                   dev_device_label(pl_manager_device(s->ms[at])),
                                   "driver_free_bytes", (json_int_t)mi.free_bytes));
  return srv_send_json(c, r, MHD_HTTP_OK,
                       json_pack("{s:s,s:b,s:I,s:I}", "pipeline", name, "loaded", 0,
                                 "released_bytes", (json_int_t)rel, "driver_free_bytes",
                                 (json_int_t)mi.free_bytes));
}

static const srv_route routes[] = {
    {"", M_GET, "GET, HEAD", SRV_ROLE_NONE, B_NONE, h_page},
    {"page/*", M_GET, "GET, HEAD", SRV_ROLE_NONE, B_NONE, h_page},
    {"healthz", M_GET, "GET, HEAD", SRV_ROLE_NONE, B_NONE, h_healthz},
    {"metrics", M_GET, "GET, HEAD", SRV_ROLE_SUBMIT, B_NONE, h_metrics},
    {"v1/jobs", M_POST, "POST", SRV_ROLE_SUBMIT, B_UPLOAD, srv_h_jobs_post},
    {"v1/jobs/*", M_GET | M_DELETE, "GET, HEAD, DELETE", SRV_ROLE_SUBMIT, B_NONE, srv_h_job},
    {"v1/jobs/*/result", M_GET, "GET, HEAD", SRV_ROLE_SUBMIT, B_NONE, srv_h_job_result},
    {"v1/jobs/*/files/*", M_GET, "GET, HEAD", SRV_ROLE_SUBMIT, B_NONE, srv_h_job_file},
    {"v1/pipelines", M_GET, "GET, HEAD", SRV_ROLE_SUBMIT, B_NONE, h_pipelines},
    {"v1/pipelines/*/load", M_POST, "POST", SRV_ROLE_ADMIN, B_NONE, h_pipeline},
    {"v1/pipelines/*/unload", M_POST, "POST", SRV_ROLE_ADMIN, B_NONE, h_pipeline},
    {"v1/pipelines/*/sleep", M_POST, "POST", SRV_ROLE_ADMIN, B_NONE, srv_h_pipeline_sleep},
    {"v1/pipelines/*/wake", M_POST, "POST", SRV_ROLE_ADMIN, B_NONE, srv_h_pipeline_sleep},
    {"v1/sessions", M_POST, "POST", SRV_ROLE_SUBMIT, B_JSON, srv_h_sessions_post},
    {"v1/sessions/*", M_GET | M_DELETE, "GET, HEAD, DELETE", SRV_ROLE_SUBMIT, B_NONE,
     srv_h_session},
    {"v1/sessions/*/items", M_POST, "POST", SRV_ROLE_SUBMIT, B_UPLOAD, srv_h_session_item},
    {"v1/memory", M_GET, "GET, HEAD", SRV_ROLE_SUBMIT, B_NONE, h_memory},
    {"v1/events", M_GET, "GET", SRV_ROLE_ADMIN, B_NONE, h_events}, /* every job and owner */
    {"v1/cluster", M_GET, "GET, HEAD", SRV_ROLE_SUBMIT, B_NONE, srv_h_cluster},
    {"v1/release", M_POST, "POST", SRV_ROLE_ADMIN, B_NONE, h_release},
    {"v1/memory/reclaim", M_POST, "POST", SRV_ROLE_ADMIN, B_JSON, srv_h_memory_reclaim},
};

/* Cluster mode (--queue redis://, cluster/): the same table with the job
 * routes answered from Redis. Made once; a server takes one of the two at
 * its start (srv_routes_choose), so no handler asks which mode it is in. */
static const struct {
  handler_fn local, cluster;
} cluster_handlers[] = {{srv_h_jobs_post, srv_cluster_jobs_post},
                        {srv_h_job, srv_cluster_job},
                        {srv_h_job_result, srv_cluster_job_result},
                        {srv_h_job_file, srv_cluster_job_file}};
#define NROUTES (sizeof routes / sizeof routes[0])
static srv_route cluster_routes[NROUTES];
static pthread_once_t cluster_once = PTHREAD_ONCE_INIT;

static void make_cluster_routes(void) {
  for (size_t i = 0; i < NROUTES; i++) {
    cluster_routes[i] = routes[i];
    for (size_t k = 0; k < sizeof cluster_handlers / sizeof cluster_handlers[0]; k++)
      if (routes[i].fn == cluster_handlers[k].local)
        cluster_routes[i].fn = cluster_handlers[k].cluster;
  }
}

void srv_routes_choose(srv_server *s) {
  if (s->cluster)
    pthread_once(&cluster_once, make_cluster_routes);
  s->routes = s->cluster ? cluster_routes : routes;
}

/* --- matching ------------------------------------------------------------------- */
static int split(srv_req *r, const char *url) {
  snprintf(r->path_buf, sizeof r->path_buf, "%s", url);
  size_t len = strlen(r->path_buf);
  if (len != strlen(url))
    return -1; /* longer than any route */
  while (len > 1 && r->path_buf[len - 1] == '/')
    r->path_buf[--len] = '\0';
  char *save = NULL;
  r->np = 0;
  for (char *t = strtok_r(r->path_buf, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
    if (r->np == 6)
      return -1;
    r->parts[r->np++] = t;
  }
  return 0;
}

static int matches(const srv_req *r, const char *pattern) {
  char pat[64];
  snprintf(pat, sizeof pat, "%s", pattern);
  char *save = NULL;
  int i = 0;
  for (char *t = strtok_r(pat, "/", &save); t; t = strtok_r(NULL, "/", &save), i++)
    if (i >= r->np || (strcmp(t, "*") && strcmp(t, r->parts[i])))
      return 0;
  return i == r->np;
}

/* HEAD is a GET whose body libmicrohttpd leaves out. */
static int method_bit(const char *method) {
  if (!strcmp(method, "GET") || !strcmp(method, "HEAD"))
    return M_GET;
  if (!strcmp(method, "POST"))
    return M_POST;
  if (!strcmp(method, "DELETE"))
    return M_DELETE;
  return 0;
}

static int find_route(const srv_server *s, struct MHD_Connection *c, srv_req *r, const char *url,
                      const char *method, enum MHD_Result *ret) {
  int bit = method_bit(method);
  const srv_route *table = s->routes ? s->routes : routes;
  if (split(r, url) == 0)
    for (size_t i = 0; i < NROUTES; i++)
      if (matches(r, table[i].pattern)) {
        r->route = &table[i];
        r->allow = table[i].allow; /* the answers (http.c) say it without a call back here */
        if (bit & table[i].methods)
          return 0;
        *ret = srv_send_err(c, r, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                            "%s %s: only %s", method, url, table[i].allow);
        return 1;
      }
  *ret = srv_send_err(c, r, MHD_HTTP_NOT_FOUND, "not_found",
                      "no route %s %s (see docs/api.md: /healthz, /metrics, /v1/jobs, "
                      "/v1/pipelines, /v1/sessions, /v1/memory, /v1/events, /v1/release)",
                      method, url);
  return 1;
}

/* --- the checks before a body ------------------------------------------------------- */
typedef struct cl_scan {
  const char *first;
  int differ;
} cl_scan;

static enum MHD_Result scan_cl(void *cls, enum MHD_ValueKind kind, const char *key,
                               const char *value) {
  (void)kind;
  cl_scan *sc = cls;
  if (strcasecmp(key, "Content-Length"))
    return MHD_YES;
  if (sc->first && strcmp(sc->first, value))
    sc->differ = 1;
  if (!sc->first)
    sc->first = value;
  return MHD_YES;
}

static int has_body(struct MHD_Connection *c) {
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
  const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
  return te || (cl && strtoull(cl, NULL, 10) > 0);
}

/* The types a browser cannot send to another site without asking first (a
 * CORS preflight this server never grants) plus multipart, whose Origin is
 * checked: text/plain and form-urlencoded bodies are refused. */
static int type_ok(const srv_route *rt, const char *ct) {
  if (srv_starts_with(ct, "application/json"))
    return 1;
  if (rt->body != B_UPLOAD)
    return 0;
  return srv_starts_with(ct, "multipart/form-data") || srv_starts_with(ct, "audio/") ||
         srv_starts_with(ct, "application/octet-stream");
}

static int check_headers(struct MHD_Connection *c, srv_req *r, enum MHD_Result *ret) {
  cl_scan sc = {0};
  MHD_get_connection_values(c, MHD_HEADER_KIND, scan_cl, &sc);
  if (sc.differ) {
    *ret = srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                        "two different Content-Length headers");
    return 1;
  }
  if (!has_body(c))
    return 0;
  const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
  if (r->route->body == B_NONE || !type_ok(r->route, ct)) {
    *ret = srv_send_err(c, r, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                        r->route->body == B_NONE ? "this route takes no body (Content-Type %s)"
                        : r->route->body == B_JSON
                            ? "Content-Type %s: send application/json"
                            : "Content-Type %s: send application/json, multipart/form-data, "
                              "audio/* or application/octet-stream",
                        ct ? ct : "(none)");
    return 1;
  }
  return 0;
}

static int check_caller(srv_server *s, struct MHD_Connection *c, srv_req *r, enum MHD_Result *ret) {
  char msg[512];
  if (!srv_host_ok(s, c, msg, sizeof msg)) {
    *ret = srv_send_err(c, r, MHD_HTTP_FORBIDDEN, "forbidden", "%s", msg);
    return 1;
  }
  r->role = srv_auth_check(s->auth, c, r->owner, sizeof r->owner);
  srv_role need = r->route->role;
  if (r->route->fn == h_metrics && s->metrics_public)
    need = SRV_ROLE_NONE;
  if (r->role >= need)
    return 0;
  if (r->role == SRV_ROLE_NONE)
    *ret = srv_send_err(c, r, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                        "this server needs a token: send 'Authorization: Bearer TOKEN'");
  else
    *ret = srv_send_err(c, r, MHD_HTTP_FORBIDDEN, "forbidden",
                        "this token's role (submit) may not call %s; an admin token may",
                        r->route->pattern);
  return 1;
}

int srv_route_begin(srv_server *s, struct MHD_Connection *c, srv_req *r, const char *url,
                    const char *method, enum MHD_Result *ret) {
  if (find_route(s, c, r, url, method, ret))
    return 1;
  if (r->route->fn != h_healthz && r->route->fn != h_page && check_caller(s, c, r, ret))
    return 1;
  if (check_headers(c, r, ret))
    return 1;
  /* a full queue refuses a job before its body is read (checked again, with
   * the push, once it is) */
  if (r->route->fn == srv_h_jobs_post && srv_queue_full(s, c, r, 0, ret)) {
    r->close = has_body(c); /* the unread body is not taken for a request */
    return 1;
  }
  if (r->route->body != B_NONE && has_body(c))
    return srv_begin_body(s, c, r, ret);
  r->kind = r->route->body == B_NONE ? BODY_NONE : BODY_BUFFER;
  r->limit = s->max_json;
  return 0;
}

enum MHD_Result srv_route_run(srv_server *s, struct MHD_Connection *c, srv_req *r,
                              const char *method) {
  return r->route->fn(s, c, r, method);
}
