/* GET /v1/jobs/ID/files/NAME: one output of a job, by the name its result
 * lists: the file under the job's directory (on the queue,
 * cluster/cluster_files.c answers, from Redis or the shared directory
 * through srv_send_output). Only names the result lists are served, so
 * NAME never reaches outside the job's outputs. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

enum MHD_Result srv_send_octets(struct MHD_Connection *c, char *buf /* taken */, size_t n) {
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
  return srv_send_octets(c, buf, n);
}

const char *srv_output_listed(json_t *o, const char *name) {
  return listed(json_object_get(json_object_get(o, "result"), "files"), name);
}

enum MHD_Result srv_send_output(struct MHD_Connection *c, srv_req *r, json_t *o) {
  const char *uid = r->parts[2], *name = r->parts[4];
  const char *state = json_string_value(json_object_get(o, "state"));
  const char *path = srv_output_listed(o, name);
  const char *where = json_string_value(json_object_get(json_object_get(o, "result"), "where"));
  if (!state || strcmp(state, "succeeded"))
    return srv_send_err(c, r, MHD_HTTP_CONFLICT, "no_result",
                        "job %s is %s; its files are there once it has succeeded", uid,
                        state ? state : "unknown");
  if (!path)
    return srv_send_err(c, r, MHD_HTTP_NOT_FOUND, "not_found",
                        "job %s has no output '%s' (GET /v1/jobs/%s/result lists them)", uid, name,
                        uid);
  return from_disk(c, r, path,
                   where && !strcmp(where, "node") ? json_string_value(json_object_get(o, "node"))
                                                   : NULL);
}

/* The job as the API shows it (1 with a response sent). */
static int job_of(srv_server *s, struct MHD_Connection *c, srv_req *r, json_t **o,
                  enum MHD_Result *ret) {
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
  ret = srv_send_output(c, r, o);
  json_decref(o);
  return ret;
}
