/* Scale-out on Redis (cluster.h): start/stop, the HTTP side (submit, job
 * state, result, cancel, GET /v1/cluster) and the node's metrics. The
 * worker and the lease thread live in cluster_work.c, the keys and scripts
 * in cluster_redis.c. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "pipeline/sha256.h"
#include "server/cluster/cluster_int.h"

/* --- start / stop --------------------------------------------------------------- */
static int set_pipes(srv_cluster *k) {
  json_t *pl = pl_manager_pipelines_json(k->s->m), *p;
  size_t i;
  k->pipes = calloc(json_array_size(pl) + 1, sizeof *k->pipes);
  json_array_foreach(pl, i, p) if (k->pipes) {
    const char *n = json_string_value(json_object_get(p, "name"));
    if (n && (k->pipes[k->npipes] = strdup(n)))
      k->npipes++;
  }
  json_decref(pl);
  return k->pipes ? 0 : ebb_seterr(EBB_ENOMEM, "cluster: out of host memory");
}

static int set_opts(srv_cluster *k, const srv_cluster_opts *o) {
  char pw[256];
  int rc = srv_cluster_parse_url(o->url, k->host, sizeof k->host, &k->port, &k->db, pw, sizeof pw);
  if (rc)
    return rc;
  snprintf(k->password, sizeof k->password, "%s", o->password ? o->password : pw);
  snprintf(k->url, sizeof k->url, "redis://%s:%d/%d", k->host, k->port, k->db);
  snprintf(k->prefix, sizeof k->prefix, "%s", o->prefix && *o->prefix ? o->prefix : "ebb");
  if (o->node_id && *o->node_id)
    snprintf(k->node, sizeof k->node, "%s", o->node_id);
  else {
    char h[64] = "node";
    gethostname(h, sizeof h - 1);
    snprintf(k->node, sizeof k->node, "%s-%d", h, (int)getpid());
  }
  if (o->shared_dir) {
    if (!realpath(o->shared_dir, k->shared))
      return ebb_seterr(EBB_EINVAL, "--shared-dir %s: %s", o->shared_dir, strerror(errno));
    char d[4200];
    snprintf(d, sizeof d, "%s/inputs", k->shared);
    base_mkdirs(d, 0755, "mkdir");
    snprintf(d, sizeof d, "%s/outputs", k->shared);
    base_mkdirs(d, 0755, "mkdir");
  }
  k->inline_max = o->inline_max ? o->inline_max : (16u << 20);
  k->lease_s = o->lease_s > 0 ? o->lease_s : 15;
  k->max_attempts = o->max_attempts > 0 ? o->max_attempts : 3;
  return 0;
}

static void cluster_free(srv_cluster *k) {
  for (size_t i = 0; i < k->npipes; i++)
    free(k->pipes[i]);
  free(k->pipes);
  redisFree(k->api);
  json_decref(k->hint);
  pthread_mutex_destroy(&k->api_lock);
  pthread_mutex_destroy(&k->run_lock);
  pthread_mutex_destroy(&k->hint_lock);
  free(k);
}

int srv_cluster_start(srv_server *s, const srv_cluster_opts *o) {
  srv_cluster *k = calloc(1, sizeof *k);
  if (!k)
    return ebb_seterr(EBB_ENOMEM, "cluster: out of host memory");
  k->s = s;
  pthread_mutex_init(&k->api_lock, NULL);
  pthread_mutex_init(&k->run_lock, NULL);
  pthread_mutex_init(&k->hint_lock, NULL);
  int rc = set_opts(k, o);
  if (!rc)
    rc = set_pipes(k);
  if (rc) {
    cluster_free(k);
    return rc;
  }
  /* Redis down at start is not fatal: the node serves what it can and
   * reconnects (docs/scale-out.md). */
  if (!(k->api = srv_rconnect(k)))
    base_log(EBB_LOG_WARN, "cluster", "Redis at %s unreachable (%s); retrying", k->url,
             k->last_err);
  else
    srv_rgroups(k, &k->api);
  if ((rc = srv_cluster_threads_start(k)) != 0) {
    srv_cluster_threads_stop(k);
    cluster_free(k);
    return rc;
  }
  s->cluster = k;
  base_log(EBB_LOG_INFO, "cluster", "node %s on %s (prefix '%s', lease %.1f s, %d attempts%s%s)",
           k->node, k->url, k->prefix, k->lease_s, k->max_attempts,
           k->shared[0] ? ", shared dir " : "", k->shared);
  return 0;
}

void srv_cluster_stop(srv_server *s) {
  srv_cluster *k = s->cluster;
  if (!k)
    return;
  srv_cluster_threads_stop(k);
  char key[512];
  srv_rkey(k, key, sizeof key, "node", k->node);
  pthread_mutex_lock(&k->api_lock);
  freeReplyObject(srv_rcmd(k, &k->api, "DEL %s", key));
  pthread_mutex_unlock(&k->api_lock);
  s->cluster = NULL;
  cluster_free(k);
}

/* The API connection, reconnected at most every 0.5 s; NULL while Redis is
 * unreachable. Called with api_lock held. */
redisContext **srv_cluster_api(srv_cluster *k) {
  if (!k->api && base_now() >= k->api_retry_at) {
    k->api = srv_rconnect(k);
    k->api_retry_at = base_now() + 0.5;
  }
  return &k->api;
}

enum MHD_Result srv_cluster_unavailable(srv_cluster *k, struct MHD_Connection *c, srv_req *r) {
  return srv_send_err(c, r, MHD_HTTP_SERVICE_UNAVAILABLE, "queue_unavailable",
                      "the job queue (Redis at %s) is unreachable: %s; try again shortly", k->url,
                      k->last_err[0] ? k->last_err : "not connected");
}

/* --- submit ---------------------------------------------------------------------- */
static int read_file(const char *path, char **buf, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return ebb_seterr(EBB_EIO, "cannot open the input %s: %s", path, strerror(errno));
  struct stat st;
  fstat(fileno(f), &st);
  *n = (size_t)st.st_size;
  *buf = malloc(*n + 1);
  int ok = *buf && fread(*buf, 1, *n, f) == *n;
  fclose(f);
  if (!ok) {
    free(*buf);
    *buf = NULL;
    return ebb_seterr(EBB_EIO, "cannot read the input %s", path);
  }
  return 0;
}

/* A large input goes to SHARED/inputs/SHA256 (written once, by rename). */
static int to_shared(srv_cluster *k, const char *path, char *out, size_t on) {
  char *buf = NULL;
  size_t n = 0;
  int rc = read_file(path, &buf, &n);
  if (rc)
    return rc;
  pl_sha256 h;
  uint8_t d[32];
  char hex[65], tmp[4500];
  pl_sha256_init(&h);
  pl_sha256_update(&h, buf, n);
  pl_sha256_final(&h, d);
  pl_sha256_hex(d, hex);
  snprintf(out, on, "%s/inputs/%s", k->shared, hex);
  struct stat st;
  if (stat(out, &st) != 0 || (size_t)st.st_size != n) {
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", out, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(buf, 1, n, f) == n;
    if (f && fclose(f) != 0)
      ok = 0;
    if (!ok || rename(tmp, out) != 0) {
      unlink(tmp);
      free(buf);
      return ebb_seterr(EBB_EIO, "cannot write %s: %s", out, strerror(errno));
    }
  }
  free(buf);
  return 0;
}

static const char *base_name(const char *p) {
  const char *b = strrchr(p, '/');
  return b ? b + 1 : p;
}

typedef struct sub_input {
  char kind[8];   /* "redis" or "shared" */
  char ref[4400]; /* the shared path ("" for redis) */
  char name[256];
  char *data; /* kind redis: the bytes */
  size_t n;
} sub_input;

static int take_input(srv_cluster *k, srv_req *r, const srv_input *in, sub_input *si,
                      unsigned *status) {
  const char *path = in->upload ? r->tmp : in->real[0] ? in->real : in->path;
  struct stat st;
  if (stat(path, &st) != 0)
    return ebb_seterr(EBB_EINPUT, "input %s: %s", path, strerror(errno));
  snprintf(si->name, sizeof si->name, "%.200s",
           in->upload ? (r->filename[0] ? base_name(r->filename) : "upload") : base_name(in->path));
  for (char *q = si->name; *q; q++)
    if (*q == '/' || *q < 32)
      *q = '_';
  if ((size_t)st.st_size <= k->inline_max) {
    snprintf(si->kind, sizeof si->kind, "redis");
    return read_file(path, &si->data, &si->n);
  }
  if (!k->shared[0]) {
    *status = MHD_HTTP_CONTENT_TOO_LARGE;
    return ebb_seterr(EBB_EINPUT,
                      "the input is %lld bytes, more than the %zu that travel in "
                      "Redis; start the nodes with --shared-dir for larger inputs",
                      (long long)st.st_size, k->inline_max);
  }
  snprintf(si->kind, sizeof si->kind, "shared");
  return to_shared(k, path, si->ref, sizeof si->ref);
}

/* The extras' hash (cluster_extras.c) and their list in the job's hash;
 * the number of commands appended. */
static int append_extras(redisContext *c, const char *jkey, const char *uid, const srv_cluster *k,
                         const srv_extras *x) {
  if (!x->n)
    return 0;
  char xkey[512], *list = srv_extras_list(x);
  srv_rkey(k, xkey, sizeof xkey, "extras", uid);
  const char *argv[2 + 2 * (SRV_MAX_OPTFILES + 1)] = {"HSET", xkey};
  size_t lens[2 + 2 * (SRV_MAX_OPTFILES + 1)] = {4, strlen(xkey)};
  for (int i = 0; i < x->n; i++) {
    argv[2 + 2 * i] = x->field[i];
    lens[2 + 2 * i] = strlen(x->field[i]);
    argv[3 + 2 * i] = x->data[i];
    lens[3 + 2 * i] = x->len[i];
  }
  redisAppendCommandArgv(c, 2 + 2 * x->n, argv, lens);
  redisAppendCommand(c, "HSET %s extras %s", jkey, list ? list : "[]");
  free(list);
  return 2;
}

/* MULTI: the input (when inline), the extras, the job's hash, the stream
 * entry. */
static int enqueue(srv_cluster *k, srv_req *r, const char *pipeline, const char *opts,
                   const char *uid, const sub_input *si, const srv_extras *x) {
  char jkey[512], skey[512], ikey[512], now[32];
  srv_rkey(k, jkey, sizeof jkey, "job", uid);
  srv_rkey(k, skey, sizeof skey, "stream", pipeline);
  srv_rkey(k, ikey, sizeof ikey, "input", uid);
  snprintf(now, sizeof now, "%.3f", base_wall_s());
  redisContext **c = srv_cluster_api(k);
  if (!*c)
    return -1;
  redisAppendCommand(*c, "MULTI");
  if (!strcmp(si->kind, "redis"))
    redisAppendCommand(*c, "SET %s %b", ikey, si->data, si->n);
  int nx = append_extras(*c, jkey, uid, k, x);
  redisAppendCommand(*c,
                     "HSET %s pipeline %s owner %s options %s input_kind %s input_ref %s "
                     "input_name %s state queued attempt 0 created %s submitted_on %s",
                     jkey, pipeline, r->owner, opts ? opts : "", si->kind,
                     !strcmp(si->kind, "redis") ? ikey : si->ref, si->name, now, k->node);
  redisAppendCommand(*c, "XADD %s * uid %s", skey, uid);
  redisAppendCommand(*c, "EXEC");
  int n = (!strcmp(si->kind, "redis") ? 5 : 4) + nx, ok = 1;
  for (int i = 0; i < n; i++) {
    redisReply *rep = NULL;
    if (redisGetReply(*c, (void **)&rep) != REDIS_OK) {
      snprintf(k->last_err, sizeof k->last_err, "%s", (*c)->errstr);
      redisFree(*c);
      *c = NULL;
      return -1;
    }
    if (i == n - 1 && (!rep || rep->type != REDIS_REPLY_ARRAY))
      ok = 0;
    if (rep && rep->type == REDIS_REPLY_ERROR) {
      snprintf(k->last_err, sizeof k->last_err, "%s", rep->str);
      ok = 0;
    }
    freeReplyObject(rep);
  }
  return ok ? 0 : -1;
}

SRV_HANDLER(srv_cluster_jobs_post) {
  (void)method;
  srv_cluster *k = s->cluster;
  srv_input in;
  enum MHD_Result ret;
  if (srv_parse_job(s, c, r, &in, &ret))
    return ret;
  int rc;
  sub_input si = {0};
  srv_extras x = {0};
  unsigned status = MHD_HTTP_BAD_REQUEST;
  char uid[33];
  if ((rc = srv_random_id(uid)) == 0 &&
      ((rc = take_input(k, r, &in, &si, &status)) != 0 ||
       (rc = srv_cluster_extras_take(k, &in, &x, &status)) != 0)) {
    ret = srv_send_err(c, r, status,
                       status == MHD_HTTP_BAD_REQUEST ? "bad_request" : "input_too_large", "%s",
                       ebb_errmsg());
    goto out;
  }
  if (rc) {
    ret = srv_send_ebb_err(c, r, rc, ebb_errmsg());
    goto out;
  }
  char *opts = in.options ? json_dumps(in.options, JSON_COMPACT) : NULL;
  pthread_mutex_lock(&k->api_lock);
  rc = enqueue(k, r, in.pipeline, opts, uid, &si, &x);
  if (rc)
    ret = srv_cluster_unavailable(k, c, r);
  pthread_mutex_unlock(&k->api_lock);
  free(opts);
  if (!rc) {
    atomic_fetch_add(&k->n_submitted, 1);
    char url[64];
    snprintf(url, sizeof url, "/v1/jobs/%s", uid);
    base_log(EBB_LOG_INFO, "cluster", "job %s: queued (pipeline '%s', input in %s%s)", uid,
             in.pipeline, si.kind, x.n ? ", lyrics/option files in redis" : "");
    ret = srv_send_json(c, r, MHD_HTTP_ACCEPTED,
                        json_pack("{s:s,s:s,s:s}", "id", uid, "state", "queued", "url", url));
  }
out:
  free(si.data);
  srv_extras_free(&x);
  srv_input_free(&in);
  return ret;
}

/* --- job state --------------------------------------------------------------------- */
static int uid_ok(const char *uid) {
  size_t n = strlen(uid);
  if (n != 32)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (!strchr("0123456789abcdef", uid[i]))
      return 0;
  return 1;
}

static json_t *num_or_null(const char *v) { return v && *v ? json_real(atof(v)) : json_null(); }

/* The job's hash as the API's job object (new reference). */
static json_t *job_json(const char *uid, redisReply *h) {
  json_t *f = json_object(), *attempts = json_array();
  for (size_t i = 0; i + 1 < h->elements; i += 2) {
    const char *name = h->element[i]->str, *v = h->element[i + 1]->str;
    if (!strncmp(name, "cause:", 6))
      json_array_append_new(attempts,
                            json_pack("{s:i,s:s}", "attempt", atoi(name + 6), "cause", v));
    else if (strncmp(name, "out:", 4))
      json_object_set_new(f, name, json_string(v));
  }
#define F(n) json_string_value(json_object_get(f, n))
  const char *code = F("error_code");
  json_t *res = F("result") ? json_loads(F("result"), 0, NULL) : NULL;
  json_t *opts = F("options") && *F("options") ? json_loads(F("options"), 0, NULL) : NULL;
  json_t *o =
      json_pack("{s:s,s:s,s:s,s:o,s:o,s:o,s:o,s:s?,s:i,s:o,s:o,s:o,s:o,s:o,s:{s:s,s:s?}}", "id",
                uid, "pipeline", F("pipeline") ? F("pipeline") : "", "state",
                F("state") ? F("state") : "?", "created", num_or_null(F("created")), "started",
                num_or_null(F("started")), "finished", num_or_null(F("finished")), "error",
                code ? json_pack("{s:s,s:s}", "code", code, "message",
                                 F("error_message") ? F("error_message") : "")
                     : json_null(),
                "node", F("node"), "attempt", F("attempt") ? atoi(F("attempt")) : 0, "attempts",
                attempts, "result", res ? res : json_null(), "options", opts ? opts : json_null(),
                "released_bytes",
                F("released_bytes") ? json_integer(atoll(F("released_bytes"))) : json_null(),
                "released_stages",
                F("released_stages") ? json_loads(F("released_stages"), 0, NULL) : json_array(),
                "input", "where", F("input_kind") ? F("input_kind") : "?", "ref", F("input_ref"));
  if (o)
    json_object_set_new(o, "result_writes",
                        json_integer(F("result_writes") ? atoll(F("result_writes")) : 0));
  const char *owner = F("owner");
  if (o)
    json_object_set_new(o, "_owner", json_string(owner ? owner : ""));
#undef F
  json_decref(f);
  return o;
}

int srv_cluster_get_job(srv_server *s, struct MHD_Connection *c, srv_req *r, json_t **out,
                        enum MHD_Result *ret) {
  srv_cluster *k = s->cluster;
  const char *uid = r->parts[2];
  if (!uid_ok(uid)) {
    *ret = srv_send_err(c, r, MHD_HTTP_NOT_FOUND, "not_found", "no job '%s'", uid);
    return 1;
  }
  char key[512];
  srv_rkey(k, key, sizeof key, "job", uid);
  pthread_mutex_lock(&k->api_lock);
  redisReply *h = srv_rcmd(k, srv_cluster_api(k), "HGETALL %s", key);
  pthread_mutex_unlock(&k->api_lock);
  if (!h) {
    *ret = srv_cluster_unavailable(k, c, r);
    return 1;
  }
  json_t *o = h->type == REDIS_REPLY_ARRAY && h->elements ? job_json(uid, h) : NULL;
  freeReplyObject(h);
  const char *owner = json_string_value(json_object_get(o, "_owner"));
  if (!o || (r->role != SRV_ROLE_ADMIN && strcmp(owner ? owner : "", r->owner))) {
    json_decref(o);
    *ret = srv_send_err(c, r, MHD_HTTP_NOT_FOUND, "not_found", "no job '%s'", uid);
    return 1;
  }
  json_object_del(o, "_owner");
  *out = o;
  return 0;
}

static enum MHD_Result cancel(srv_server *s, struct MHD_Connection *c, srv_req *r, json_t *o) {
  srv_cluster *k = s->cluster;
  const char *uid = r->parts[2];
  char key[512], done[512], now[32];
  srv_rkey(k, key, sizeof key, "job", uid);
  srv_rkey(k, done, sizeof done, "done", k->node);
  snprintf(now, sizeof now, "%.3f", base_wall_s());
  pthread_mutex_lock(&k->api_lock);
  redisReply *rep =
      srv_rcmd(k, srv_cluster_api(k), "EVAL %s 2 %s %s %s", SRV_LUA_CANCEL, key, done, now);
  pthread_mutex_unlock(&k->api_lock);
  if (!rep) {
    json_decref(o);
    return srv_cluster_unavailable(k, c, r);
  }
  long long v = rep->integer;
  freeReplyObject(rep);
  enum MHD_Result ret;
  if (v == 0)
    ret = srv_send_err(c, r, MHD_HTTP_CONFLICT, "already_finished",
                       "job %s has already finished (%s); nothing to cancel", uid,
                       json_string_value(json_object_get(o, "state")));
  else
    ret = srv_send_json(c, r, MHD_HTTP_ACCEPTED,
                        json_pack("{s:s,s:s}", "id", uid, "state",
                                  v == 2 ? "cancelling" : "cancelled"));
  json_decref(o);
  return ret;
}

SRV_HANDLER(srv_cluster_job) {
  json_t *o;
  enum MHD_Result ret;
  if (srv_cluster_get_job(s, c, r, &o, &ret))
    return ret;
  if (!strcmp(method, "DELETE"))
    return cancel(s, c, r, o);
  return srv_send_json(c, r, MHD_HTTP_OK, o);
}

SRV_HANDLER(srv_cluster_job_result) {
  (void)method;
  json_t *o;
  enum MHD_Result ret;
  if (srv_cluster_get_job(s, c, r, &o, &ret))
    return ret;
  const char *uid = r->parts[2], *state = json_string_value(json_object_get(o, "state"));
  if (!strcmp(state, "succeeded")) {
    json_t *res = json_object_get(o, "result");
    ret = srv_send_json(c, r, MHD_HTTP_OK,
                        json_pack("{s:s,s:s,s:O,s:O,s:O,s:O}", "id", uid, "state", state, "result",
                                  json_object_get(res, "result") ? json_object_get(res, "result")
                                                                 : json_null(),
                                  "files",
                                  json_object_get(res, "files") ? json_object_get(res, "files")
                                                                : json_array(),
                                  "where",
                                  json_object_get(res, "where") ? json_object_get(res, "where")
                                                                : json_null(),
                                  "node", json_object_get(o, "node")));
  } else if (!strcmp(state, "queued") || !strcmp(state, "running"))
    ret = srv_send_err(c, r, MHD_HTTP_CONFLICT, "not_finished",
                       "job %s is %s; its result is there once it has succeeded", uid, state);
  else {
    const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
    ret = srv_send_err(c, r, MHD_HTTP_CONFLICT, "no_result", "job %s %s and has no result: %s", uid,
                       state, msg ? msg : "(no message)");
  }
  json_decref(o);
  return ret;
}

/* --- GET /v1/cluster and /metrics ------------------------------------------------- */
SRV_HANDLER(srv_h_cluster) {
  (void)method;
  srv_cluster *k = s->cluster;
  if (!k) {
    json_t *snap = srv_snapshot(s);
    json_t *body = json_pack("{s:n,s:[{s:s,s:s,s:O,s:O}]}", "queue", "nodes", "id", "local", "url",
                             s->url, "memory", json_object_get(snap, "memory"), "pipelines",
                             json_object_get(snap, "pipelines"));
    json_decref(snap);
    return srv_send_json(c, r, MHD_HTTP_OK, body);
  }
  char key[512];
  srv_rkey(k, key, sizeof key, "nodes", "all");
  pthread_mutex_lock(&k->api_lock);
  redisReply *ids = srv_rcmd(k, srv_cluster_api(k), "SMEMBERS %s", key);
  json_t *nodes = json_array();
  for (size_t i = 0; ids && i < ids->elements; i++) {
    srv_rkey(k, key, sizeof key, "node", ids->element[i]->str);
    redisReply *v = srv_rcmd(k, srv_cluster_api(k), "GET %s", key);
    json_t *n = v && v->type == REDIS_REPLY_STRING ? json_loads(v->str, 0, NULL) : NULL;
    if (!n)
      n = json_pack("{s:s,s:b}", "id", ids->element[i]->str, "alive", 0);
    else
      json_object_set_new(n, "alive", json_true());
    json_array_append_new(nodes, n);
    freeReplyObject(v);
  }
  pthread_mutex_unlock(&k->api_lock);
  if (!ids) {
    json_decref(nodes);
    return srv_cluster_unavailable(k, c, r);
  }
  freeReplyObject(ids);
  return srv_send_json(c, r, MHD_HTTP_OK,
                       json_pack("{s:s,s:s,s:s,s:o}", "queue", k->url, "prefix", k->prefix, "node",
                                 k->node, "nodes", nodes));
}

/* Every series of a node's /metrics carries node="ID" (first label), so one
 * Prometheus scraping three nodes keeps their series apart; a line that
 * already starts with it (the cluster families above) is left as is. */
char *srv_cluster_label_metrics(srv_server *s, char *text /* taken */) {
  srv_cluster *k = s->cluster;
  if (!k || !text)
    return text;
  char *out = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&out, &n);
  if (!f)
    return text;
  for (char *line = text, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next)
      *next++ = '\0';
    size_t name = strcspn(line, "{ ");
    if (line[0] == '#' || !line[0] || !strncmp(line + name, "{node=\"", 7))
      fprintf(f, "%s\n", line);
    else if (line[name] != '{') /* NAME VALUE */
      fprintf(f, "%.*s{node=\"%s\"}%s\n", (int)name, line, k->node, line + name);
    else /* NAME{LABELS} VALUE */
      fprintf(f, "%.*s{node=\"%s\"%s%s\n", (int)name, line, k->node,
              line[name + 1] == '}' ? "" : ",", line + name + 1);
  }
  if (fclose(f) != 0 || !out) {
    free(out);
    return text;
  }
  free(text);
  return out;
}

void srv_cluster_metrics(srv_server *s, FILE *f) {
  srv_cluster *k = s->cluster;
  if (!k)
    return;
  fprintf(f,
          "# HELP ebb_node_info This node's id in the cluster (--queue).\n"
          "# TYPE ebb_node_info gauge\nebb_node_info{node=\"%s\"} 1\n",
          k->node);
  fprintf(f,
          "# HELP ebb_queue_up 1 while this node reaches the queue (Redis).\n"
          "# TYPE ebb_queue_up gauge\nebb_queue_up{node=\"%s\"} %d\n",
          k->node, atomic_load(&k->up));
  fprintf(f, "# HELP ebb_cluster_jobs_total Jobs this node submitted, ran and finished, "
             "by outcome.\n# TYPE ebb_cluster_jobs_total counter\n");
  const char *names[] = {"submitted", "succeeded", "failed", "stale", "reclaimed"};
  unsigned long v[] = {atomic_load(&k->n_submitted), atomic_load(&k->n_done),
                       atomic_load(&k->n_failed), atomic_load(&k->n_stale),
                       atomic_load(&k->n_reclaimed)};
  for (int i = 0; i < 5; i++)
    fprintf(f, "ebb_cluster_jobs_total{node=\"%s\",outcome=\"%s\"} %lu\n", k->node, names[i], v[i]);
}
