#include "server/server.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "server/events.h"
#include "server/page.h"
#include "server/queue.h"
#include "server/store.h"

struct ebb_server {
  struct MHD_Daemon *d;
  ebb_manager *m;
  ebb_allocator *alloc;
  ebb_store *store;
  ebb_queue *queue;
  ebb_events *events; /* GET /v1/events (events.h) */
  char *data_dir;
  char url[320];
  size_t max_json, max_upload;
  atomic_int stop;       /* session items see it as their cancel flag */
  atomic_ulong counter;  /* upload temp files, session item numbers */
};

/* --- one request -------------------------------------------------------------- */
enum { BODY_BUFFER, BODY_FILE, BODY_MULTIPART };

typedef struct req {
  int kind;
  char *buf; /* BODY_BUFFER: the body (NUL-terminated) */
  size_t len, cap, limit;
  int too_large;
  int io_error;
  FILE *f;   /* BODY_FILE / the multipart file field */
  char tmp[4096];   /* the upload's temp path ("" if none) */
  char filename[256];
  char file_key[64]; /* the multipart field the file came in */
  int two_files;     /* a second file field: refused */
  char ctype[128];
  struct MHD_PostProcessor *pp;
  char *field_pipeline, *field_options, *field_input;
} req;

static void req_free(req *r) {
  if (!r)
    return;
  if (r->pp)
    MHD_destroy_post_processor(r->pp);
  if (r->f)
    fclose(r->f);
  if (r->tmp[0])
    unlink(r->tmp); /* not moved into a job: drop it */
  free(r->buf);
  free(r->field_pipeline);
  free(r->field_options);
  free(r->field_input);
  free(r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)c;
  (void)toe;
  req_free(*con_cls);
  *con_cls = NULL;
}

/* --- responses ------------------------------------------------------------------ */
static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *ctype,
                                 char *text /* taken */) {
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
  MHD_add_response_header(resp, "Content-Type", ctype);
  if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
    MHD_add_response_header(resp, "Allow", "GET, POST, DELETE");
  enum MHD_Result ret = MHD_queue_response(c, status, resp);
  MHD_destroy_response(resp);
  return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *o /* taken */) {
  char *t = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!t)
    t = strdup("{\"error\":{\"code\":\"internal\",\"message\":\"out of host memory\"}}");
  size_t n = strlen(t);
  char *nl = realloc(t, n + 2);
  if (nl) {
    nl[n] = '\n';
    nl[n + 1] = '\0';
    t = nl;
  }
  return send_text(c, status, "application/json", t);
}

static enum MHD_Result send_err(struct MHD_Connection *c, unsigned status, const char *code,
                                const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result send_err(struct MHD_Connection *c, unsigned status, const char *code,
                                const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return send_json(c, status, json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg));
}

/* An ebb error code as an HTTP status and error code. */
static enum MHD_Result send_ebb_err(struct MHD_Connection *c, int rc, const char *msg) {
  switch (rc) {
  case EBB_ENOTFOUND: return send_err(c, MHD_HTTP_NOT_FOUND, "not_found", "%s", msg);
  case EBB_ECONFIG:
  case EBB_EINVAL:
  case EBB_EINPUT:
  case EBB_EUNSUPPORTED: return send_err(c, MHD_HTTP_BAD_REQUEST, "bad_request", "%s", msg);
  case EBB_EBUSY:
  case EBB_ESTATE: return send_err(c, MHD_HTTP_CONFLICT, "conflict", "%s", msg);
  case EBB_EOOM:
  case EBB_EQUOTA:
    return send_err(c, MHD_HTTP_SERVICE_UNAVAILABLE, "out_of_memory", "%s", msg);
  default: return send_err(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "%s", msg);
  }
}

/* --- bodies ------------------------------------------------------------------- */
static int starts_with(const char *s, const char *p) {
  return s && !strncasecmp(s, p, strlen(p));
}

static int open_upload(ebb_server *s, req *r) {
  unsigned long n = atomic_fetch_add(&s->counter, 1);
  snprintf(r->tmp, sizeof r->tmp, "%s/uploads/tmp-%ld-%lu", s->data_dir, (long)getpid(), n);
  if (!(r->f = fopen(r->tmp, "wb"))) {
    r->tmp[0] = '\0';
    r->io_error = errno;
    return -1;
  }
  return 0;
}

static void append(char **dst, const char *data, size_t n) {
  size_t old = *dst ? strlen(*dst) : 0;
  char *p = realloc(*dst, old + n + 1);
  if (!p)
    return;
  memcpy(p + old, data, n);
  p[old + n] = '\0';
  *dst = p;
}

static enum MHD_Result post_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *filename, const char *content_type,
                                 const char *transfer_encoding, const char *data, uint64_t off,
                                 size_t size) {
  (void)kind;
  (void)transfer_encoding;
  (void)off;
  req *r = cls;
  if (filename) {
    if (r->too_large || r->io_error || !r->f)
      return MHD_YES;
    if (r->filename[0] && (strcmp(r->file_key, key) || strcmp(r->filename, filename))) {
      r->two_files = 1;
      return MHD_YES;
    }
    if (!r->filename[0]) {
      snprintf(r->filename, sizeof r->filename, "%s", filename[0] ? filename : "upload");
      snprintf(r->file_key, sizeof r->file_key, "%s", key);
      if (content_type)
        snprintf(r->ctype, sizeof r->ctype, "%s", content_type);
    }
    r->len += size;
    if (r->len > r->limit) {
      r->too_large = 1;
      return MHD_YES;
    }
    if (size && fwrite(data, 1, size, r->f) != size)
      r->io_error = errno ? errno : EIO;
    return MHD_YES;
  }
  if (!strcmp(key, "pipeline"))
    append(&r->field_pipeline, data, size);
  else if (!strcmp(key, "options"))
    append(&r->field_options, data, size);
  else if (!strcmp(key, "input"))
    append(&r->field_input, data, size);
  return MHD_YES;
}

/* First call for a request: decide how to take its body. Returns 0 to go on,
 * 1 when a response was queued (body too large). */
static int begin_body(ebb_server *s, struct MHD_Connection *c, req *r, enum MHD_Result *ret) {
  const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
  if (ct)
    snprintf(r->ctype, sizeof r->ctype, "%s", ct);
  if (starts_with(ct, "multipart/form-data")) {
    r->kind = BODY_MULTIPART;
    r->limit = s->max_upload;
    r->pp = MHD_create_post_processor(c, 64 * 1024, post_iter, r);
    r->ctype[0] = '\0';
    if (!r->pp) {
      *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_request",
                      "multipart/form-data body without a boundary");
      return 1;
    }
    if (open_upload(s, r) != 0) {
      *ret = send_err(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "cannot store the upload "
                      "under %s/uploads: %s", s->data_dir, strerror(r->io_error));
      return 1;
    }
  } else if (starts_with(ct, "audio/") || starts_with(ct, "application/octet-stream")) {
    r->kind = BODY_FILE;
    r->limit = s->max_upload;
    if (open_upload(s, r) != 0) {
      *ret = send_err(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "cannot store the upload "
                      "under %s/uploads: %s", s->data_dir, strerror(r->io_error));
      return 1;
    }
  } else {
    r->kind = BODY_BUFFER;
    r->limit = s->max_json;
  }
  if (cl) {
    unsigned long long n = strtoull(cl, NULL, 10);
    if (n > r->limit) {
      *ret = send_err(c, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                      "the body is %llu bytes; this server takes at most %zu bytes for %s", n,
                      r->limit, r->kind == BODY_BUFFER ? "a JSON body" : "an upload");
      return 1;
    }
  }
  return 0;
}

static void take_body(req *r, const char *data, size_t n) {
  if (r->too_large)
    return;
  if (r->kind == BODY_MULTIPART) {
    MHD_post_process(r->pp, data, n);
    return;
  }
  if (r->len + n > r->limit) {
    r->too_large = 1;
    return;
  }
  if (r->kind == BODY_FILE) {
    if (fwrite(data, 1, n, r->f) != n)
      r->io_error = errno ? errno : EIO;
    r->len += n;
    return;
  }
  if (r->len + n + 1 > r->cap) {
    size_t cap = (r->len + n + 1) * 2;
    char *p = realloc(r->buf, cap);
    if (!p) {
      r->io_error = ENOMEM;
      return;
    }
    r->buf = p;
    r->cap = cap;
  }
  memcpy(r->buf + r->len, data, n);
  r->len += n;
  r->buf[r->len] = '\0';
}

/* --- a job's (or item's) input: JSON {"input": PATH} or an upload ------------ */
typedef struct input_spec {
  const char *pipeline; /* borrowed from body or fields */
  const char *path;     /* a server-side path, or NULL with an upload */
  json_t *options;      /* new reference or NULL */
  json_t *body;         /* the parsed JSON body (keeps the strings alive) */
  int upload;           /* r->tmp holds the file */
} input_spec;

static void spec_free(input_spec *in) {
  json_decref(in->options);
  json_decref(in->body);
}

/* Returns 0, or 1 with a response queued. */
static int parse_input(ebb_server *s, struct MHD_Connection *c, req *r, int want_pipeline,
                       input_spec *in, enum MHD_Result *ret) {
  memset(in, 0, sizeof *in);
  if (r->io_error) {
    *ret = send_err(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                    "storing the request body failed: %s", strerror(r->io_error));
    return 1;
  }
  json_error_t je;
  if (r->kind == BODY_BUFFER) {
    if (!r->len) {
      *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_request",
                      "empty body: expected JSON {%s\"input\": PATH, \"options\": {...}} or an "
                      "upload (multipart/form-data field \"file\", or Content-Type audio/*)",
                      want_pipeline ? "\"pipeline\": NAME, " : "");
      return 1;
    }
    if (!(in->body = json_loadb(r->buf, r->len, 0, &je))) {
      *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_json",
                      "the body is not valid JSON: %s at line %d, column %d (byte %d)", je.text,
                      je.line, je.column, je.position);
      return 1;
    }
    if (!json_is_object(in->body)) {
      *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_json",
                      "the body must be a JSON object, not %s",
                      json_is_array(in->body) ? "an array" : "a scalar");
      return 1;
    }
    json_t *p = json_object_get(in->body, "pipeline"), *i = json_object_get(in->body, "input");
    json_t *o = json_object_get(in->body, "options");
    const char *key;
    json_t *v;
    json_object_foreach(in->body, key, v) {
      if (strcmp(key, "pipeline") && strcmp(key, "input") && strcmp(key, "options")) {
        *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_request",
                        "unknown key \"%s\" in the body (known: %sinput, options)", key,
                        want_pipeline ? "pipeline, " : "");
        return 1;
      }
    }
    if (p && !json_is_string(p)) {
      *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_request", "\"pipeline\" must be a string");
      return 1;
    }
    if (!i || !json_is_string(i)) {
      *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_request",
                      "\"input\" must be a path (a string) on the server; to send a file, "
                      "upload it (multipart/form-data or Content-Type audio/*)");
      return 1;
    }
    if (o && !json_is_object(o) && !json_is_null(o)) {
      *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_request",
                      "\"options\" must be an object {stage name: {option: value}}");
      return 1;
    }
    in->pipeline = p ? json_string_value(p) : NULL;
    in->path = json_string_value(i);
    in->options = o ? json_incref(o) : NULL;
  } else {
    if (r->f) {
      if (fclose(r->f) != 0 && !r->io_error)
        r->io_error = errno;
      r->f = NULL;
    }
    const char *opt_text;
    if (r->kind == BODY_MULTIPART) {
      if (r->two_files) {
        *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_request",
                        "the multipart body has more than one file; send one input per job");
        return 1;
      }
      in->pipeline = r->field_pipeline;
      in->path = r->field_input;
      opt_text = r->field_options;
      if (!r->filename[0] && !in->path) {
        *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_request",
                        "the multipart body has no file field (with a filename) and no "
                        "\"input\" field");
        return 1;
      }
      in->upload = r->filename[0] != '\0';
      if (in->upload)
        in->path = NULL;
    } else {
      in->pipeline = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pipeline");
      opt_text = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "options");
      in->upload = 1;
    }
    if (in->upload && r->len == 0) {
      *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_request", "the uploaded file is empty");
      return 1;
    }
    if (opt_text && *opt_text) {
      if (!(in->options = json_loads(opt_text, 0, &je))) {
        *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_json",
                        "\"options\" is not valid JSON: %s at line %d, column %d", je.text,
                        je.line, je.column);
        return 1;
      }
      if (!json_is_object(in->options)) {
        *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_request",
                        "\"options\" must be an object {stage name: {option: value}}");
        return 1;
      }
    }
  }
  if (want_pipeline && (!in->pipeline || !*in->pipeline)) {
    *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_request",
                    "\"pipeline\" is required (see GET /v1/pipelines)");
    return 1;
  }
  if (in->path && access(in->path, R_OK) != 0) {
    *ret = send_err(c, MHD_HTTP_BAD_REQUEST, "bad_input", "input %s: %s (a path on the server)",
                    in->path, strerror(errno));
    return 1;
  }
  (void)s;
  return 0;
}

static const char *ext_of(const char *ctype) {
  if (starts_with(ctype, "audio/wav") || starts_with(ctype, "audio/x-wav") ||
      starts_with(ctype, "audio/wave") || starts_with(ctype, "audio/vnd.wave"))
    return ".wav";
  if (starts_with(ctype, "audio/flac") || starts_with(ctype, "audio/x-flac"))
    return ".flac";
  if (starts_with(ctype, "audio/mpeg") || starts_with(ctype, "audio/mp3"))
    return ".mp3";
  if (starts_with(ctype, "audio/ogg"))
    return ".ogg";
  return ".bin";
}

/* Moves the upload into dir as input-NAME; path gets where. */
static int place_upload(req *r, const char *dir, char *path, size_t n) {
  char name[256];
  size_t k = 0;
  const char *base = strrchr(r->filename, '/');
  base = base ? base + 1 : r->filename;
  for (const char *p = base; *p && k + 1 < sizeof name; p++)
    name[k++] = (isalnum((unsigned char)*p) || *p == '.' || *p == '-' || *p == '_') ? *p : '_';
  name[k] = '\0';
  if (!k || name[0] == '.')
    snprintf(name, sizeof name, "upload%s", ext_of(r->ctype));
  snprintf(path, n, "%s/input-%s", dir, name);
  if (rename(r->tmp, path) != 0)
    return ebb_seterr(EBB_EIO, "moving the upload to %s: %s", path, strerror(errno));
  r->tmp[0] = '\0';
  return 0;
}

static int mkdirs(const char *dir) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s", dir);
  for (char *q = tmp + 1; *q; q++)
    if (*q == '/') {
      *q = '\0';
      if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return ebb_seterr(EBB_EIO, "mkdir %s: %s", tmp, strerror(errno));
      *q = '/';
    }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
    return ebb_seterr(EBB_EIO, "mkdir %s: %s", tmp, strerror(errno));
  return 0;
}

/* --- handlers ------------------------------------------------------------------ */
static enum MHD_Result h_jobs_post(ebb_server *s, struct MHD_Connection *c, req *r) {
  input_spec in;
  enum MHD_Result ret;
  if (parse_input(s, c, r, 1, &in, &ret)) {
    spec_free(&in);
    return ret;
  }
  int rc = ebb_manager_check_job(s->m, in.pipeline, in.options);
  if (rc) {
    ret = send_ebb_err(c, rc, ebb_errmsg());
    spec_free(&in);
    return ret;
  }
  char *opts = in.options ? json_dumps(in.options, JSON_COMPACT) : NULL;
  int64_t id = 0;
  char dir[4096], out[4200], path[4400];
  rc = ebb_store_insert(s->store, in.pipeline, in.path, opts, &id);
  free(opts);
  if (!rc) {
    snprintf(dir, sizeof dir, "%s/jobs/%lld", s->data_dir, (long long)id);
    snprintf(out, sizeof out, "%s/out", dir);
    rc = mkdirs(dir);
  }
  if (!rc && in.upload)
    rc = place_upload(r, dir, path, sizeof path);
  else if (!rc)
    snprintf(path, sizeof path, "%s", in.path);
  if (!rc)
    rc = ebb_store_set_input(s->store, id, path, out);
  if (!rc)
    rc = ebb_queue_push(s->queue, id, in.pipeline, path, out, in.options);
  if (!rc)
    ebb_events_watch_job(s->events, id);
  if (rc) {
    if (id)
      ebb_store_finish(s->store, id, EBB_JOB_FAILED, ebb_errname(rc), ebb_errmsg(), NULL, 0,
                       "[]");
    ret = send_ebb_err(c, EBB_EIO, ebb_errmsg());
  } else {
    char ids[32], url[64];
    snprintf(ids, sizeof ids, "%lld", (long long)id);
    snprintf(url, sizeof url, "/v1/jobs/%lld", (long long)id);
    ebb_log(EBB_LOG_INFO, "server", "job %s: queued (pipeline '%s', input %s)", ids, in.pipeline,
            path);
    ret = send_json(c, MHD_HTTP_ACCEPTED,
                    json_pack("{s:s,s:s,s:s}", "id", ids, "state", "queued", "url", url));
  }
  spec_free(&in);
  return ret;
}

static int parse_id(const char *s, int64_t *id) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!*s || *end || errno || v <= 0)
    return -1;
  *id = v;
  return 0;
}

static enum MHD_Result h_job(ebb_server *s, struct MHD_Connection *c, const char *method,
                             const char *ids, const char *sub) {
  int64_t id;
  if (parse_id(ids, &id) != 0)
    return send_err(c, MHD_HTTP_NOT_FOUND, "not_found", "no job '%s' (job ids are numbers)", ids);
  if (sub && strcmp(sub, "result"))
    return send_err(c, MHD_HTTP_NOT_FOUND, "not_found", "no route /v1/jobs/%s/%s", ids, sub);
  if (sub) {
    if (strcmp(method, "GET"))
      return send_err(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                      "%s /v1/jobs/%s/result: only GET", method, ids);
    json_t *o = NULL;
    int rc = ebb_store_get(s->store, id, &o);
    if (rc)
      return send_ebb_err(c, rc, ebb_errmsg());
    const char *state = json_string_value(json_object_get(o, "state"));
    enum MHD_Result ret;
    if (state && !strcmp(state, "succeeded")) {
      json_t *res = json_object_get(o, "result");
      json_t *body = json_pack("{s:s,s:s,s:O,s:O}", "id", ids, "state", state, "result",
                               json_object_get(res, "result") ? json_object_get(res, "result")
                                                              : json_null(),
                               "files",
                               json_object_get(res, "files") ? json_object_get(res, "files")
                                                             : json_array());
      ret = send_json(c, MHD_HTTP_OK, body);
    } else if (state && (!strcmp(state, "queued") || !strcmp(state, "running"))) {
      ret = send_err(c, MHD_HTTP_CONFLICT, "not_finished",
                     "job %s is %s; its result is there once it has succeeded", ids, state);
    } else {
      const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
      ret = send_err(c, MHD_HTTP_CONFLICT, "no_result", "job %s %s and has no result: %s", ids,
                     state ? state : "ended", msg ? msg : "(no message)");
    }
    json_decref(o);
    return ret;
  }
  if (!strcmp(method, "GET")) {
    json_t *o = NULL;
    int rc = ebb_store_get(s->store, id, &o);
    if (rc)
      return send_ebb_err(c, rc, ebb_errmsg());
    return send_json(c, MHD_HTTP_OK, o);
  }
  if (!strcmp(method, "DELETE")) {
    ebb_job_state st;
    int rc = ebb_store_state(s->store, id, &st);
    if (rc)
      return send_ebb_err(c, rc, ebb_errmsg());
    int running = 0;
    if (st == EBB_JOB_QUEUED || st == EBB_JOB_RUNNING)
      rc = ebb_queue_cancel(s->queue, id, &running);
    if (rc || (st != EBB_JOB_QUEUED && st != EBB_JOB_RUNNING)) {
      ebb_store_state(s->store, id, &st);
      return send_err(c, MHD_HTTP_CONFLICT, "already_finished",
                      "job %s has already finished (%s); nothing to cancel", ids,
                      ebb_job_state_name(st));
    }
    ebb_log(EBB_LOG_INFO, "server", "job %s: %s", ids,
            running ? "cancelling (the running stage stops, ebb releases)" : "cancelled");
    return send_json(c, MHD_HTTP_ACCEPTED, json_pack("{s:s,s:s}", "id", ids, "state",
                                                     running ? "cancelling" : "cancelled"));
  }
  return send_err(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                  "%s /v1/jobs/%s: use GET (state) or DELETE (cancel)", method, ids);
}

static enum MHD_Result h_pipeline(ebb_server *s, struct MHD_Connection *c, const char *method,
                                  const char *name, const char *action) {
  if (!action || (strcmp(action, "load") && strcmp(action, "unload")))
    return send_err(c, MHD_HTTP_NOT_FOUND, "not_found",
                    "no route /v1/pipelines/%s%s%s (use /load or /unload)", name,
                    action ? "/" : "", action ? action : "");
  if (strcmp(method, "POST"))
    return send_err(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                    "%s /v1/pipelines/%s/%s: only POST", method, name, action);
  if (!ebb_manager_pipeline(s->m, name)) {
    ebb_manager_load(s->m, name); /* sets the message naming the known ones */
    return send_err(c, MHD_HTTP_NOT_FOUND, "not_found", "%s", ebb_errmsg());
  }
  ebb_dev_meminfo mi = {0};
  if (!strcmp(action, "load")) {
    int rc = ebb_manager_load(s->m, name);
    if (rc)
      return send_ebb_err(c, rc, ebb_errmsg());
    ebb_device_mem_info(ebb_allocator_device(s->alloc), &mi);
    return send_json(c, MHD_HTTP_OK, json_pack("{s:s,s:b,s:I}", "pipeline", name, "loaded", 1,
                                               "driver_free_bytes", (json_int_t)mi.free_bytes));
  }
  uint64_t rel = 0;
  int rc = ebb_manager_unload(s->m, name, &rel);
  if (rc)
    return send_ebb_err(c, rc, ebb_errmsg());
  ebb_device_mem_info(ebb_allocator_device(s->alloc), &mi);
  return send_json(c, MHD_HTTP_OK,
                   json_pack("{s:s,s:b,s:I,s:I}", "pipeline", name, "loaded", 0,
                             "released_bytes", (json_int_t)rel, "driver_free_bytes",
                             (json_int_t)mi.free_bytes));
}

static enum MHD_Result h_sessions_post(ebb_server *s, struct MHD_Connection *c, req *r) {
  if (r->kind != BODY_BUFFER || !r->len)
    return send_err(c, MHD_HTTP_BAD_REQUEST, "bad_request",
                    "expected a JSON body {\"pipeline\": NAME}");
  json_error_t je;
  json_t *b = json_loadb(r->buf, r->len, 0, &je);
  if (!b)
    return send_err(c, MHD_HTTP_BAD_REQUEST, "bad_json",
                    "the body is not valid JSON: %s at line %d, column %d (byte %d)", je.text,
                    je.line, je.column, je.position);
  json_t *p = json_object_get(b, "pipeline");
  if (!json_is_string(p)) {
    json_decref(b);
    return send_err(c, MHD_HTTP_BAD_REQUEST, "bad_request",
                    "\"pipeline\" (a string) is required: {\"pipeline\": NAME}");
  }
  char id[40];
  int rc = ebb_manager_session_open(s->m, json_string_value(p), id);
  enum MHD_Result ret;
  if (rc)
    ret = send_ebb_err(c, rc, ebb_errmsg());
  else {
    ebb_events_watch_session(s->events, id);
    ebb_log(EBB_LOG_INFO, "server", "session %s: opened on pipeline '%s'", id,
            json_string_value(p));
    ret = send_json(c, MHD_HTTP_CREATED,
                    json_pack("{s:s,s:s}", "id", id, "pipeline", json_string_value(p)));
  }
  json_decref(b);
  return ret;
}

static enum MHD_Result h_session(ebb_server *s, struct MHD_Connection *c, req *r,
                                 const char *method, const char *id, const char *sub) {
  if (sub && strcmp(sub, "items"))
    return send_err(c, MHD_HTTP_NOT_FOUND, "not_found", "no route /v1/sessions/%s/%s", id, sub);
  if (!sub) {
    if (!strcmp(method, "DELETE")) {
      int rc = ebb_manager_session_close(s->m, id);
      if (rc)
        return send_ebb_err(c, rc, ebb_errmsg());
      ebb_log(EBB_LOG_INFO, "server", "session %s: closed", id);
      return send_json(c, MHD_HTTP_OK, json_pack("{s:s,s:b}", "id", id, "closed", 1));
    }
    if (!strcmp(method, "GET")) {
      ebb_session_info si;
      int rc = ebb_sessions_info(ebb_manager_sessions(s->m), id, &si);
      if (rc)
        return send_ebb_err(c, rc, ebb_errmsg());
      return send_json(c, MHD_HTTP_OK,
                       json_pack("{s:s,s:s,s:s,s:s,s:i,s:I,s:I,s:f}", "id", si.id, "pipeline",
                                 si.pipeline, "state",
                                 si.state == EBB_SESSION_OPEN ? "open" : "stopped", "stop_reason",
                                 si.stop_reason, "inflight", si.inflight, "items_done",
                                 (json_int_t)si.items_done, "items_failed",
                                 (json_int_t)si.items_failed, "created", si.created));
    }
    return send_err(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                    "%s /v1/sessions/%s: use GET or DELETE", method, id);
  }
  if (strcmp(method, "POST"))
    return send_err(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                    "%s /v1/sessions/%s/items: only POST", method, id);
  ebb_session_info si;
  int rc = ebb_sessions_info(ebb_manager_sessions(s->m), id, &si);
  if (rc)
    return send_ebb_err(c, rc, ebb_errmsg());
  input_spec in;
  enum MHD_Result ret;
  if (parse_input(s, c, r, 0, &in, &ret)) {
    spec_free(&in);
    return ret;
  }
  unsigned long n = atomic_fetch_add(&s->counter, 1);
  char dir[4096], path[4400];
  snprintf(dir, sizeof dir, "%s/sessions/%s/%lu", s->data_dir, id, n);
  rc = mkdirs(dir);
  if (!rc && in.upload)
    rc = place_upload(r, dir, path, sizeof path);
  else if (!rc)
    snprintf(path, sizeof path, "%s", in.path);
  if (rc) {
    spec_free(&in);
    return send_ebb_err(c, EBB_EIO, ebb_errmsg());
  }
  ebb_job_result res;
  rc = ebb_manager_session_item(s->m, id, path, dir, in.options, &s->stop, &res);
  spec_free(&in);
  if (rc == EBB_ENOTFOUND || rc == EBB_EBUSY || rc == EBB_ECONFIG)
    return send_ebb_err(c, rc, res.message);
  if (rc)
    return send_err(c, 422, "item_failed", "session %s: the item failed: %s", id, res.message);
  char rp[4500];
  snprintf(rp, sizeof rp, "%s/result.json", dir);
  json_t *result = json_load_file(rp, 0, NULL);
  return send_json(c, MHD_HTTP_OK,
                   json_pack("{s:s,s:s,s:s,s:o,s:I,s:f,s:s}", "session", id, "pipeline",
                             si.pipeline, "state", "succeeded", "result",
                             result ? result : json_null(), "released_bytes",
                             (json_int_t)res.released_bytes, "seconds", res.seconds, "output_dir",
                             dir));
}

/* Prometheus text format. */
static enum MHD_Result h_metrics(ebb_server *s, struct MHD_Connection *c) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  if (!f)
    return send_err(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "out of host memory");
  uint64_t counts[EBB_JOB_NSTATES];
  ebb_store_counts(s->store, counts);
  fprintf(f, "# HELP ebb_jobs Jobs in the store by state.\n# TYPE ebb_jobs gauge\n");
  for (int i = 0; i < EBB_JOB_NSTATES; i++)
    fprintf(f, "ebb_jobs{state=\"%s\"} %llu\n", ebb_job_state_name(i),
            (unsigned long long)counts[i]);
  fprintf(f, "# HELP ebb_released_bytes_total Device bytes ebb handed back to the driver.\n"
             "# TYPE ebb_released_bytes_total counter\nebb_released_bytes_total %llu\n",
          (unsigned long long)ebb_manager_released_total(s->m));
  json_t *mem = ebb_manager_memory_json(s->m);
  json_t *al = json_object_get(mem, "allocator"), *dev = json_object_get(mem, "device");
  static const char *gauges[][3] = {
      {"ebb_device_reserved_bytes", "allocator", "reserved_bytes"},
      {"ebb_device_allocated_bytes", "allocator", "allocated_bytes"},
      {"ebb_device_cached_bytes", "allocator", "cached_bytes"},
      {"ebb_device_free_bytes", "device", "driver_free_bytes"},
      {"ebb_device_total_bytes", "device", "driver_total_bytes"},
  };
  for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++) {
    json_t *src = !strcmp(gauges[i][1], "allocator") ? al : dev;
    fprintf(f, "# TYPE %s gauge\n%s{device=\"%s\"} %lld\n", gauges[i][0], gauges[i][0],
            json_string_value(json_object_get(dev, "label")),
            (long long)json_integer_value(json_object_get(src, gauges[i][2])));
  }
  fprintf(f, "# HELP ebb_context_held 1 while this process holds the device context.\n"
             "# TYPE ebb_context_held gauge\nebb_context_held %d\n",
          json_is_true(json_object_get(json_object_get(mem, "context"), "held")));
  fprintf(f, "# HELP ebb_owner_bytes Device bytes each owner holds now.\n"
             "# TYPE ebb_owner_bytes gauge\n");
  size_t i;
  json_t *o;
  json_array_foreach(json_object_get(mem, "owners"), i, o) {
    fprintf(f, "ebb_owner_bytes{owner=\"");
    for (const char *p = json_string_value(json_object_get(o, "name")); p && *p; p++)
      fprintf(f, *p == '"' || *p == '\\' ? "\\%c" : (*p == '\n' ? "\\n" : "%c"), *p);
    fprintf(f, "\"} %lld\n", (long long)json_integer_value(json_object_get(o, "bytes")));
  }
  json_t *pl = ebb_manager_pipelines_json(s->m);
  fprintf(f, "# HELP ebb_pipeline_loaded 1 while the pipeline is loaded.\n"
             "# TYPE ebb_pipeline_loaded gauge\n");
  json_array_foreach(pl, i, o)
    fprintf(f, "ebb_pipeline_loaded{pipeline=\"%s\"} %d\n",
            json_string_value(json_object_get(o, "name")),
            json_is_true(json_object_get(o, "loaded")));
  fprintf(f, "# TYPE ebb_sessions gauge\nebb_sessions %d\n",
          ebb_sessions_leases(ebb_manager_sessions(s->m), NULL));
  json_decref(pl);
  json_decref(mem);
  fclose(f);
  return send_text(c, MHD_HTTP_OK, "text/plain; version=0.0.4", buf);
}

/* --- routing --------------------------------------------------------------------- */
static enum MHD_Result route(ebb_server *s, struct MHD_Connection *c, req *r, const char *url,
                             const char *method) {
  char path[1024];
  snprintf(path, sizeof path, "%s", url);
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/')
    path[--len] = '\0';
  char *parts[6] = {0};
  int np = 0;
  char *save = NULL;
  for (char *t = strtok_r(path, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
    if (np == 6)
      return send_err(c, MHD_HTTP_NOT_FOUND, "not_found", "no route %s", url);
    parts[np++] = t;
  }
  int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
#define ONLY(cond, what)                                                                       \
  if (!(cond))                                                                                 \
  return send_err(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed", "%s %s: only %s",     \
                  method, url, what)
  if (np == 0 || (np == 2 && !strcmp(parts[0], "page"))) { /* the live page (page.h) */
    ONLY(get, "GET");
    return ebb_page_serve(c, np ? parts[1] : "index.html");
  }
  if (np == 1 && !strcmp(parts[0], "healthz")) {
    ONLY(get, "GET");
    return send_json(c, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"));
  }
  if (np == 1 && !strcmp(parts[0], "metrics")) {
    ONLY(get, "GET");
    return h_metrics(s, c);
  }
  if (np >= 2 && !strcmp(parts[0], "v1")) {
    const char *what = parts[1];
    if (!strcmp(what, "jobs") && np == 2) {
      ONLY(post, "POST");
      return h_jobs_post(s, c, r);
    }
    if (!strcmp(what, "jobs") && (np == 3 || np == 4))
      return h_job(s, c, method, parts[2], np == 4 ? parts[3] : NULL);
    if (!strcmp(what, "pipelines") && np == 2) {
      ONLY(get, "GET");
      return send_json(c, MHD_HTTP_OK,
                       json_pack("{s:o}", "pipelines", ebb_manager_pipelines_json(s->m)));
    }
    if (!strcmp(what, "pipelines") && (np == 3 || np == 4))
      return h_pipeline(s, c, method, parts[2], np == 4 ? parts[3] : NULL);
    if (!strcmp(what, "sessions") && np == 2) {
      ONLY(post, "POST");
      return h_sessions_post(s, c, r);
    }
    if (!strcmp(what, "sessions") && (np == 3 || np == 4))
      return h_session(s, c, r, method, parts[2], np == 4 ? parts[3] : NULL);
    if (!strcmp(what, "events") && np == 2) {
      ONLY(get, "GET");
      return ebb_events_serve(s->events, c);
    }
    if (!strcmp(what, "memory") && np == 2) {
      ONLY(get, "GET");
      return send_json(c, MHD_HTTP_OK, ebb_manager_memory_json(s->m));
    }
    if (!strcmp(what, "release") && np == 2) {
      ONLY(post, "POST");
      uint64_t rel = 0;
      ebb_manager_release(s->m, &rel);
      return send_json(c, MHD_HTTP_OK, json_pack("{s:I}", "released_bytes", (json_int_t)rel));
    }
  }
#undef ONLY
  return send_err(c, MHD_HTTP_NOT_FOUND, "not_found",
                  "no route %s %s (see docs/api.md: /healthz, /metrics, /v1/jobs, "
                  "/v1/pipelines, /v1/sessions, /v1/memory, /v1/release)",
                  method, url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
  (void)version;
  ebb_server *s = cls;
  req *r = *con_cls;
  if (!r) {
    if (!(r = calloc(1, sizeof *r)))
      return MHD_NO;
    *con_cls = r;
    enum MHD_Result ret;
    if (begin_body(s, c, r, &ret))
      return ret;
    return MHD_YES;
  }
  if (*upload_data_size) {
    take_body(r, upload_data, *upload_data_size);
    *upload_data_size = 0;
    return MHD_YES;
  }
  if (r->too_large)
    return send_err(c, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                    "the body is larger than the %zu bytes this server takes for %s", r->limit,
                    r->kind == BODY_BUFFER ? "a JSON body" : "an upload");
  return route(s, c, r, url, method);
}

/* --- start / stop ------------------------------------------------------------------- */
static int parse_listen(const char *listen, struct sockaddr_storage *ss, char *host, size_t hn,
                        int *port) {
  const char *colon = strrchr(listen, ':');
  if (!colon)
    return ebb_seterr(EBB_EINVAL, "--listen %s: expected HOST:PORT (e.g. 127.0.0.1:8470)",
                      listen);
  size_t n = (size_t)(colon - listen);
  if (n >= hn)
    return ebb_seterr(EBB_EINVAL, "--listen %s: host too long", listen);
  memcpy(host, listen, n);
  host[n] = '\0';
  if (host[0] == '[' && n > 1 && host[n - 1] == ']') {
    memmove(host, host + 1, n - 2);
    host[n - 2] = '\0';
  }
  char *end;
  long p = strtol(colon + 1, &end, 10);
  if (!colon[1] || *end || p < 0 || p > 65535)
    return ebb_seterr(EBB_EINVAL, "--listen %s: the port must be a number 0..65535", listen);
  *port = (int)p;
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  int g = getaddrinfo(host[0] ? host : "0.0.0.0", NULL, &hints, &ai);
  if (g != 0 || !ai)
    return ebb_seterr(EBB_EINVAL, "--listen %s: cannot resolve '%s': %s", listen, host,
                      gai_strerror(g));
  memset(ss, 0, sizeof *ss);
  memcpy(ss, ai->ai_addr, ai->ai_addrlen);
  freeaddrinfo(ai);
  if (ss->ss_family == AF_INET)
    ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)p);
  else
    ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)p);
  return 0;
}

static void requeue(ebb_server *s) {
  int64_t *ids = NULL;
  size_t n = 0;
  ebb_store_queued(s->store, &ids, &n);
  for (size_t i = 0; i < n; i++) {
    json_t *o = NULL;
    if (ebb_store_get(s->store, ids[i], &o) != 0)
      continue;
    const char *p = json_string_value(json_object_get(o, "pipeline"));
    const char *in = json_string_value(json_object_get(o, "input"));
    const char *out = json_string_value(json_object_get(o, "output_dir"));
    json_t *opts = json_object_get(o, "options");
    if (p && in && out && ebb_queue_push(s->queue, ids[i], p, in, out,
                                         json_is_object(opts) ? opts : NULL) == 0)
      ebb_log(EBB_LOG_INFO, "server", "job %lld: queued again (left queued by the last server)",
              (long long)ids[i]);
    else
      ebb_store_finish(s->store, ids[i], EBB_JOB_FAILED, "EBB_ECANCELED",
                       "server restarted before the job was ready to run", NULL, 0, "[]");
    json_decref(o);
  }
  free(ids);
}

int ebb_server_start(const ebb_server_opts *o, ebb_server **out) {
  if (!o || !o->listen || !o->data_dir || !o->manager || !o->alloc)
    return ebb_seterr(EBB_EINVAL, "server: listen address, data directory and manager are "
                                  "required");
  struct sockaddr_storage ss;
  char host[256];
  int port = 0, rc;
  if ((rc = parse_listen(o->listen, &ss, host, sizeof host, &port)) != 0)
    return rc;
  ebb_server *s = calloc(1, sizeof *s);
  if (!s || !(s->data_dir = strdup(o->data_dir))) {
    free(s);
    return ebb_seterr(EBB_ENOMEM, "server: out of host memory");
  }
  s->m = o->manager;
  s->alloc = o->alloc;
  s->max_json = o->max_json_bytes ? o->max_json_bytes : (1u << 20);
  s->max_upload = o->max_upload_bytes ? o->max_upload_bytes : (1ull << 30);
  char p[4200];
  snprintf(p, sizeof p, "%s/uploads", s->data_dir);
  if ((rc = mkdirs(p)) != 0) {
    ebb_errctx(rc, "data directory: ");
    goto fail;
  }
  snprintf(p, sizeof p, "%s/jobs.db", s->data_dir);
  int interrupted = 0;
  if ((rc = ebb_store_open(p, &s->store, &interrupted)) != 0)
    goto fail;
  if ((rc = ebb_queue_create(s->store, s->m, s->alloc, &s->queue)) != 0)
    goto fail;
  if ((rc = ebb_events_create(&(ebb_events_opts){.size = sizeof(ebb_events_opts), .manager = s->m,
                                                 .alloc = s->alloc, .store = s->store},
                              &s->events)) != 0)
    goto fail;
  s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                              MHD_USE_ERROR_LOG | MHD_USE_ITC | (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
                          (uint16_t)port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                          (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
                          NULL, MHD_OPTION_END);
  if (!s->d) {
    rc = ebb_seterr(EBB_EIO, "cannot listen on %s: %s", o->listen,
                    errno ? strerror(errno) : "libmicrohttpd refused");
    goto fail;
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
  int bound = di ? di->port : port;
  snprintf(s->url, sizeof s->url, ss.ss_family == AF_INET6 ? "http://[%s]:%d" : "http://%s:%d",
           host[0] ? host : "0.0.0.0", bound);
  if (o->on_listen)
    o->on_listen(s->url);
  requeue(s);
  *out = s;
  if (interrupted)
    ebb_log(EBB_LOG_INFO, "server", "%d job%s left running by the last server marked failed",
            interrupted, interrupted == 1 ? "" : "s");
  return 0;
fail:
  ebb_server_stop(s);
  return rc;
}

const char *ebb_server_url(const ebb_server *s) { return s->url; }

void ebb_server_stop(ebb_server *s) {
  if (!s)
    return;
  atomic_store(&s->stop, 1);
  if (s->d) {
    MHD_socket fd = MHD_quiesce_daemon(s->d); /* no new connections; ours to close */
    if (fd != MHD_INVALID_SOCKET)
      close(fd);
  }
  ebb_events_stop(s->events); /* ends the event streams */
  ebb_queue_destroy(s->queue); /* cancels the running job */
  s->queue = NULL;
  if (s->d)
    MHD_stop_daemon(s->d); /* waits for the connection threads (items see s->stop) */
  ebb_events_destroy(s->events);
  ebb_store_close(s->store);
  free(s->data_dir);
  free(s);
}
