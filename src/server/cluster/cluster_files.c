/* GET /v1/jobs/ID/files/NAME on the queue (cluster.h): any node answers.
 * An output kept in Redis (no --shared-dir, small) comes from the job's
 * hash (field out:NAME); one in the shared dir from there; one too large
 * for Redis without a shared dir stays on the node that ran the job, and
 * another node says so (those two: srv_send_output, joboutputs.c). Only
 * names the result lists are served. */
#include <stdlib.h>
#include <string.h>

#include "server/cluster/cluster_int.h"

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
    ret = srv_send_octets(c, buf, v->len);
  } else
    ret = srv_send_err(c, r, MHD_HTTP_NOT_FOUND, "not_found",
                       "job %s: output %s is gone from Redis", r->parts[2], name);
  freeReplyObject(v);
  return ret;
}

SRV_HANDLER(srv_cluster_job_file) {
  (void)method;
  json_t *o;
  enum MHD_Result ret;
  if (srv_cluster_get_job(s, c, r, &o, &ret))
    return ret;
  const char *state = json_string_value(json_object_get(o, "state"));
  const char *path = srv_output_listed(o, r->parts[4]);
  if (state && !strcmp(state, "succeeded") && path && !strncmp(path, "redis:", 6))
    ret = from_redis(s, c, r, r->parts[4]);
  else
    ret = srv_send_output(c, r, o);
  json_decref(o);
  return ret;
}
