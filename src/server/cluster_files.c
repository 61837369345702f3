/* GET /v1/jobs/ID/files/NAME: one output of a job, by the name its result
 * lists. One node: the file under the job's directory. On the queue
 * (cluster.h) any node answers: an output kept in Redis (no --shared-dir,
 * small) comes from the job's hash (field out:NAME), one in the shared dir
 * from there; one too large for Redis without a shared dir stays on the
 * node that ran the job, and another node says so. Only names the result
 * lists are served, so NAME never reaches outside the job's outputs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/cluster_int.h"

static enum MHD_Result send_bytes(struct MHD_Connection *c, char *buf /* taken */, size_t n) {
  struct MHD_Response *resp = MHD_create_response_from_buffer(n, buf, MHD_RESPMEM_MUST_FREE);
  if (!resp) {
    free(buf);
    return MHD_NO;
  }
  MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
  enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
  MHD_destroy_response(resp);
  return ret;
}

static const char *base_of(const char *p) {
  const char *h = strstr(p, "#out:");
  if (!strncmp(p, "redis:", 6) && h)
    return h + 5;
  const char *b = strrchr(p, '/');
  return b ? b + 1 : p;
}

/* The entry of files that names NAME, or NULL. */
static const char *listed(json_t *files, const char *name) {
  size_t i;
  json_t *f;
  json_array_foreach(files, i, f) {
    const char *p = json_string_value(f);
    if (p && !strcmp(base_of(p), name))
      return p;
  }
  return NULL;
}

static enum MHD_Result from_disk(struct MHD_Connection *c, srv_req *r, const char *path,
                                 const char *node) {
  FILE *f = fopen(path, "rb");
  if (!f && node)
    return srv_send_err(c, r, MHD_HTTP_NOT_FOUND, "not_here",
                        "%s is on node %s's disk (too large for Redis; start the nodes with "
                        "--shared-dir to share outputs)",
                        base_of(path), node);
  if (!f)
    return srv_send_err(c, r, MHD_HTTP_NOT_FOUND, "not_found", "output %s: %s", base_of(path),
                        strerror(errno));
  size_t cap = 1 << 16, n = 0, got;
  char *buf = malloc(cap);
  while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0)
    if ((n += got) == cap) {
      char *nb = realloc(buf, cap *= 2);
      if (!nb)
        free(buf);
      buf = nb;
    }
  fclose(f);
  if (!buf)
    return srv_send_err(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "out of host memory");
  return send_bytes(c, buf, n);
}

static enum MHD_Result from_redis(srv_server *s, struct MHD_Connection *c, srv_req *r,
                                  const char *name) {
  srv_cluster *k = s->cluster;
  char key[512], field[300];
  srv_rkey(k, key, sizeof key, "job", r->parts[2]);
  snprintf(field, sizeof field, "out:%s", name);
  pthread_mutex_lock(&k->api_lock);
  redisReply *v = srv_rcmd(k, srv_cluster_api(k), "HGET %s %s", key, field);
  pthread_mutex_unlock(&k->api_lock);
  if (!v)
    return srv_cluster_unavailable(k, c, r);
  enum MHD_Result ret;
  char *buf = v->type == REDIS_REPLY_STRING ? malloc(v->len + 1) : NULL;
  if (buf) {
    memcpy(buf, v->str, v->len);
    ret = send_bytes(c, buf, v->len);
  } else
    ret = srv_send_err(c, r, MHD_HTTP_NOT_FOUND, "not_found",
                       "job %s: output %s is gone from Redis", r->parts[2], name);
  freeReplyObject(v);
  return ret;
}

/* The job as the API shows it (1 with a response sent). */
static int job_of(srv_server *s, struct MHD_Connection *c, srv_req *r, json_t **o,
                  enum MHD_Result *ret) {
  if (s->cluster)
    return srv_cluster_get_job(s, c, r, o, ret);
  int64_t id;
  char owner[64];
  int rc = srv_store_find(s->store, r->parts[2], &id, owner, sizeof owner);
  if (!rc && r->role != SRV_ROLE_ADMIN && strcmp(owner, r->owner))
    rc = ebb_seterr(EBB_ENOTFOUND, "no job '%s'", r->parts[2]);
  if (!rc)
    rc = srv_store_get(s->store, id, o);
  if (rc)
    *ret = srv_send_ebb_err(c, r, rc, ebb_errmsg());
  return rc != 0;
}

SRV_HANDLER(srv_h_job_file) {
  (void)method;
  json_t *o;
  enum MHD_Result ret;
  if (job_of(s, c, r, &o, &ret))
    return ret;
  const char *uid = r->parts[2], *name = r->parts[4];
  const char *state = json_string_value(json_object_get(o, "state"));
  json_t *res = json_object_get(o, "result");
  const char *path = listed(json_object_get(res, "files"), name);
  const char *where = json_string_value(json_object_get(res, "where"));
  if (!state || strcmp(state, "succeeded"))
    ret = srv_send_err(c, r, MHD_HTTP_CONFLICT, "no_result",
                       "job %s is %s; its files are there once it has succeeded", uid,
                       state ? state : "unknown");
  else if (!path)
    ret = srv_send_err(c, r, MHD_HTTP_NOT_FOUND, "not_found",
                       "job %s has no output '%s' (GET /v1/jobs/%s/result lists them)", uid, name,
                       uid);
  else if (!strncmp(path, "redis:", 6))
    ret = from_redis(s, c, r, name);
  else
    ret = from_disk(c, r, path,
                    where && !strcmp(where, "node") ? json_string_value(json_object_get(o, "node"))
                                                    : NULL);
  json_decref(o);
  return ret;
}
