/* Request bodies and a job's input. A body is taken only after its route,
 * token and content type were checked (routes.c); JSON bodies go to memory
 * (max_json), uploads straight to DATA_DIR/uploads (max_upload, which the
 * whole request counts against); a multipart field that is not the file is
 * kept in memory up to max_field bytes, appended in linear time. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/internal.h"

static int open_upload(srv_server *s, srv_req *r) {
  unsigned long n = atomic_fetch_add(&s->counter, 1);
  snprintf(r->tmp, sizeof r->tmp, "%s/uploads/tmp-%ld-%lu", s->data_dir, (long)getpid(), n);
  if (!(r->f = fopen(r->tmp, "wb"))) {
    r->tmp[0] = '\0';
    r->io_error = errno;
    return -1;
  }
  return 0;
}

/* Appends to a field; 0, or -1 when it would pass max bytes. */
static int text_append(srv_text *t, const char *data, size_t n, size_t max) {
  if (t->len + n > max)
    return -1;
  if (t->len + n + 1 > t->cap) {
    size_t cap = t->cap ? t->cap : 256;
    while (cap < t->len + n + 1)
      cap *= 2;
    char *p = realloc(t->p, cap);
    if (!p)
      return -1;
    t->p = p;
    t->cap = cap;
  }
  memcpy(t->p + t->len, data, n);
  t->len += n;
  t->p[t->len] = '\0';
  return 0;
}

static enum MHD_Result file_part(srv_req *r, const char *key, const char *filename,
                                 const char *content_type, const char *data, size_t size) {
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
  if (size && fwrite(data, 1, size, r->f) != size)
    r->io_error = errno ? errno : EIO;
  return MHD_YES;
}

static enum MHD_Result post_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *filename, const char *content_type,
                                 const char *transfer_encoding, const char *data, uint64_t off,
                                 size_t size) {
  (void)kind;
  (void)transfer_encoding;
  (void)off;
  srv_req *r = cls;
  if (!key) /* a name libmicrohttpd cannot hand over (a NUL in it): no field of ours */
    key = "";
  if (filename)
    return file_part(r, key, filename, content_type, data, size);
  srv_text *t = !strcmp(key, "pipeline")  ? &r->field_pipeline
                : !strcmp(key, "options") ? &r->field_options
                : !strcmp(key, "input")   ? &r->field_input
                : !strcmp(key, "lyrics")  ? &r->field_lyrics
                                          : NULL;
  if (!t || r->too_large)
    return MHD_YES;
  if (text_append(t, data, size, r->field_limit) != 0) {
    r->too_large = 2;
    snprintf(r->big_field, sizeof r->big_field, "%s", key);
  }
  return MHD_YES;
}

static int upload_failed(srv_server *s, struct MHD_Connection *c, srv_req *r,
                         enum MHD_Result *ret) {
  *ret = srv_send_err(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                      "cannot store the upload under %s/uploads: %s", s->data_dir,
                      strerror(r->io_error));
  return 1;
}

int srv_begin_body(srv_server *s, struct MHD_Connection *c, srv_req *r, enum MHD_Result *ret) {
  const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
  const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
  if (ct)
    snprintf(r->ctype, sizeof r->ctype, "%s", ct);
  if (srv_starts_with(ct, "multipart/form-data")) {
    r->kind = BODY_MULTIPART;
    r->limit = s->max_upload;
    r->field_limit = s->max_field;
    r->pp = MHD_create_post_processor(c, 64 * 1024, post_iter, r);
    r->ctype[0] = '\0';
    if (!r->pp) {
      *ret = srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                          "multipart/form-data body without a boundary");
      return 1;
    }
  } else if (srv_starts_with(ct, "audio/") || srv_starts_with(ct, "application/octet-stream")) {
    r->kind = BODY_FILE;
    r->limit = s->max_upload;
  } else {
    r->kind = BODY_BUFFER;
    r->limit = s->max_json;
  }
  if (cl) {
    unsigned long long n = strtoull(cl, NULL, 10);
    if (n > r->limit) {
      *ret = srv_send_err(c, r, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                          "the body is %llu bytes; this server takes at most %zu bytes for %s", n,
                          r->limit, r->kind == BODY_BUFFER ? "a JSON body" : "an upload");
      return 1;
    }
  }
  if (r->kind != BODY_BUFFER && open_upload(s, r) != 0)
    return upload_failed(s, c, r, ret);
  return 0;
}

static void buffer_take(srv_req *r, const char *data, size_t n) {
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

void srv_take_body(srv_req *r, const char *data, size_t n) {
  if (r->too_large || r->io_error)
    return;
  r->total += n;
  if (r->total > r->limit) {
    r->too_large = 1;
    return;
  }
  if (r->kind == BODY_MULTIPART) {
    if (MHD_post_process(r->pp, data, n) != MHD_YES && !r->too_large)
      r->io_error = EPROTO;
  } else if (r->kind == BODY_FILE) {
    if (fwrite(data, 1, n, r->f) != n)
      r->io_error = errno ? errno : EIO;
    r->len += n;
  } else
    buffer_take(r, data, n);
}

/* --- a job's (or item's) input ------------------------------------------------ */
void srv_input_free(srv_input *in) {
  json_decref(in->options);
  json_decref(in->body);
  in->options = in->body = NULL;
  if (in->fd >= 0)
    close(in->fd);
  in->fd = -1;
  for (size_t i = 0; i < in->nfiles; i++)
    close(in->files[i].fd);
  in->nfiles = 0;
}

static int bad(struct MHD_Connection *c, srv_req *r, enum MHD_Result *ret, const char *code,
               const char *msg) {
  *ret = srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, code, "%s", msg);
  return 1;
}

/* The input a request names, opened once under --input-dir (jobfiles.c):
 * the job reads a copy of what was opened here. A file that is not there,
 * not regular or reached through a symlink gets one message (no existence
 * oracle); one over the upload limit is 413. */
static int open_input(srv_server *s, struct MHD_Connection *c, srv_req *r, srv_input *in,
                      enum MHD_Result *ret) {
  int64_t size = 0;
  int why = srv_open_confined(s, in->path, s->max_upload, &in->fd, &size);
  if (!why) {
    snprintf(in->real, sizeof in->real, "/proc/self/fd/%d", in->fd);
    return 0;
  }
  char msg[4600];
  srv_confine_message(s, why, "input", in->path, size, s->max_upload, msg, sizeof msg);
  *ret = why == SRV_CONFINE_TOO_BIG
             ? srv_send_err(c, r, MHD_HTTP_CONTENT_TOO_LARGE, "input_too_large", "%s", msg)
             : srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_input", "%s", msg);
  return 1;
}

/* Lyrics sent with the job: text, at most s->max_lyrics bytes (413). */
static int check_lyrics(const srv_server *s, struct MHD_Connection *c, srv_req *r, srv_input *in,
                        enum MHD_Result *ret) {
  if (!in->lyrics)
    return 0;
  if (in->lyrics_len > s->max_lyrics) {
    *ret = srv_send_err(c, r, MHD_HTTP_CONTENT_TOO_LARGE, "lyrics_too_large",
                        "\"lyrics\" is %zu bytes; this server takes at most %zu bytes of lyrics "
                        "with a job (max_lyrics_kib)",
                        in->lyrics_len, s->max_lyrics);
    return 1;
  }
  if (memchr(in->lyrics, '\0', in->lyrics_len))
    return bad(c, r, ret, "bad_request", "\"lyrics\" must be text (it holds a NUL byte)");
  return 0;
}

const char *srv_unknown_key(json_t *o, const char *const known[]) {
  const char *key;
  json_t *v;
  json_object_foreach(o, key, v) {
    size_t i = 0;
    while (known[i] && strcmp(key, known[i]))
      i++;
    if (!known[i])
      return key;
  }
  return NULL;
}

static int check_json_keys(json_t *body, int want_pipeline, struct MHD_Connection *c, srv_req *r,
                           enum MHD_Result *ret) {
  static const char *const job[] = {"pipeline", "input", "options", "lyrics", NULL};
  const char *key = srv_unknown_key(body, want_pipeline ? job : job + 1);
  if (key) {
    *ret = srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                        "unknown key \"%s\" in the body (known: %sinput, options, lyrics)", key,
                        want_pipeline ? "pipeline, " : "");
    return 1;
  }
  return 0;
}

static int parse_json_input(struct MHD_Connection *c, srv_req *r, int want_pipeline, srv_input *in,
                            enum MHD_Result *ret) {
  json_error_t je;
  if (!r->len) {
    *ret = srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                        "empty body: expected JSON {%s\"input\": PATH, \"options\": {...}} or an "
                        "upload (multipart/form-data field \"file\", or Content-Type audio/*)",
                        want_pipeline ? "\"pipeline\": NAME, " : "");
    return 1;
  }
  if (!(in->body = json_loadb(r->buf, r->len, 0, &je))) {
    *ret = srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_json",
                        "the body is not valid JSON: %s at line %d, column %d (byte %d)", je.text,
                        je.line, je.column, je.position);
    return 1;
  }
  if (!json_is_object(in->body))
    return bad(c, r, ret, "bad_json",
               json_is_array(in->body) ? "the body must be a JSON object, not an array"
                                       : "the body must be a JSON object, not a scalar");
  if (check_json_keys(in->body, want_pipeline, c, r, ret))
    return 1;
  json_t *p = json_object_get(in->body, "pipeline"), *i = json_object_get(in->body, "input");
  json_t *o = json_object_get(in->body, "options"), *ly = json_object_get(in->body, "lyrics");
  if (ly && !json_is_string(ly))
    return bad(c, r, ret, "bad_request", "\"lyrics\" must be a string (the lyrics' text)");
  if (ly) {
    in->lyrics = json_string_value(ly);
    in->lyrics_len = json_string_length(ly);
  }
  if (p && !json_is_string(p))
    return bad(c, r, ret, "bad_request", "\"pipeline\" must be a string");
  if (!i || !json_is_string(i))
    return bad(c, r, ret, "bad_request",
               "\"input\" must be a path (a string) on the server; to send a file, upload it "
               "(multipart/form-data or Content-Type audio/*)");
  if (o && !json_is_object(o) && !json_is_null(o))
    return bad(c, r, ret, "bad_request",
               "\"options\" must be an object {stage name: {option: value}}");
  in->pipeline = p ? json_string_value(p) : NULL;
  in->path = json_string_value(i);
  in->options = json_is_object(o) ? json_incref(o) : NULL;
  return 0;
}

static int parse_options_text(const char *opt_text, struct MHD_Connection *c, srv_req *r,
                              srv_input *in, enum MHD_Result *ret) {
  if (!opt_text || !*opt_text)
    return 0;
  json_error_t je;
  if (!(in->options = json_loads(opt_text, 0, &je))) {
    *ret = srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_json",
                        "\"options\" is not valid JSON: %s at line %d, column %d", je.text, je.line,
                        je.column);
    return 1;
  }
  if (!json_is_object(in->options))
    return bad(c, r, ret, "bad_request",
               "\"options\" must be an object {stage name: {option: value}}");
  return 0;
}

static int parse_upload_input(struct MHD_Connection *c, srv_req *r, srv_input *in,
                              enum MHD_Result *ret) {
  if (r->f) {
    if (fclose(r->f) != 0 && !r->io_error)
      r->io_error = errno;
    r->f = NULL;
  }
  const char *opt_text;
  if (r->kind == BODY_MULTIPART) {
    if (r->two_files)
      return bad(c, r, ret, "bad_request",
                 "the multipart body has more than one file; send one input per job");
    in->pipeline = r->field_pipeline.p;
    in->path = r->field_input.p;
    opt_text = r->field_options.p;
    in->lyrics = r->field_lyrics.p;
    in->lyrics_len = r->field_lyrics.len;
    if (!r->filename[0] && !in->path)
      return bad(c, r, ret, "bad_request",
                 "the multipart body has no file field (with a filename) and no \"input\" "
                 "field");
    if (r->filename[0] && in->path)
      return bad(c, r, ret, "bad_request",
                 "the multipart body has both a file and an \"input\" field; send one of "
                 "them");
    in->upload = r->filename[0] != '\0';
  } else {
    in->pipeline = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "pipeline");
    opt_text = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "options");
    in->upload = 1;
  }
  if (in->upload && r->len == 0)
    return bad(c, r, ret, "bad_request", "the uploaded file is empty");
  return parse_options_text(opt_text, c, r, in, ret);
}

int srv_parse_input(srv_server *s, struct MHD_Connection *c, srv_req *r, int want_pipeline,
                    srv_input *in, enum MHD_Result *ret) {
  memset(in, 0, sizeof *in);
  in->fd = -1;
  if (r->io_error) {
    *ret = srv_send_err(c, r, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                        "storing the request body failed: %s", strerror(r->io_error));
    return 1;
  }
  int rc = r->kind == BODY_MULTIPART || r->kind == BODY_FILE
               ? parse_upload_input(c, r, in, ret)
               : parse_json_input(c, r, want_pipeline, in, ret);
  if (rc)
    return rc;
  if (want_pipeline && (!in->pipeline || !*in->pipeline))
    return bad(c, r, ret, "bad_request", "\"pipeline\" is required (see GET /v1/pipelines)");
  if (check_lyrics(s, c, r, in, ret))
    return 1;
  return in->path ? open_input(s, c, r, in, ret) : 0;
}

int srv_lyrics_stage(srv_server *s, const char *pipeline, json_t *options, const char **stage) {
  const pl_def *d = pl_manager_pipeline(s->m, pipeline);
  for (size_t i = 0; d && i < d->nstages; i++)
    if (!strcmp(d->stages[i].stage, "align")) {
      json_t *set = json_object_get(json_object_get(options, d->stages[i].name), "lyrics");
      if (set && !json_is_null(set))
        return ebb_seterr(EBB_ECONFIG,
                          "the job sends \"lyrics\" and sets option %s.lyrics; "
                          "send one of them",
                          d->stages[i].name);
      *stage = d->stages[i].name;
      return 0;
    }
  return ebb_seterr(EBB_ECONFIG, "\"lyrics\": pipeline '%s' has no align stage to take them",
                    pipeline);
}

int srv_check_job_options(srv_server *s, const char *pipeline, srv_input *in) {
  srv_path_ctx pc = {s, in};
  int rc = pl_manager_check_job(s->m, pipeline, in->options, srv_trust_path, &pc);
  if (!rc && in->lyrics)
    rc = srv_lyrics_stage(s, pipeline, in->options, &in->lyrics_stage);
  return rc;
}

int srv_parse_job(srv_server *s, struct MHD_Connection *c, srv_req *r, srv_input *in,
                  enum MHD_Result *ret) {
  if (srv_parse_input(s, c, r, 1, in, ret)) {
    srv_input_free(in);
    return 1;
  }
  int rc = srv_check_job_options(s, in->pipeline, in);
  if (rc) {
    *ret = srv_send_ebb_err(c, r, rc, ebb_errmsg());
    srv_input_free(in);
    return 1;
  }
  return 0;
}
