/* Responses: every answer of the server, errors as
 *   {"error": {"code": "...", "message": "..."}}
 * with the status and code of the error's row in EBB_ERRORS. */
#include <errno.h>
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "server/internal.h"

void srv_req_free(srv_req *r) {
  if (!r)
    return;
  if (r->pp)
    MHD_destroy_post_processor(r->pp);
  if (r->f)
    fclose(r->f);
  if (r->tmp[0])
    unlink(r->tmp); /* not moved into a job: drop it */
  free(r->buf);
  free(r->field_pipeline.p);
  free(r->field_options.p);
  free(r->field_input.p);
  free(r->field_lyrics.p);
  free(r);
}

int srv_starts_with(const char *s, const char *p) { return s && !strncasecmp(s, p, strlen(p)); }

/* The Allow header of a 405: the methods of the route. */
static const char *allow_of(unsigned status, const srv_req *r) {
  if (status != MHD_HTTP_METHOD_NOT_ALLOWED)
    return NULL;
  const char *a = r ? r->allow : NULL;
  return a ? a : "GET, HEAD, POST, DELETE";
}

enum MHD_Result srv_send_text(struct MHD_Connection *c, srv_req *r, unsigned status,
                              const char *ctype, char *text /* taken */) {
  /* HEAD: libmicrohttpd sends the headers of this answer without its body */
  struct MHD_Response *resp =
      MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
  if (!resp)
    return MHD_NO;
  MHD_add_response_header(resp, "Content-Type", ctype);
  const char *allow = allow_of(status, r);
  if (allow)
    MHD_add_response_header(resp, "Allow", allow);
  if (status == MHD_HTTP_UNAUTHORIZED)
    MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
  if (r && r->retry_after_s) {
    char ra[16];
    snprintf(ra, sizeof ra, "%u", r->retry_after_s);
    MHD_add_response_header(resp, "Retry-After", ra);
  }
  if (r && r->close) /* a request whose framing cannot be trusted: nothing more is read */
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
  enum MHD_Result ret = MHD_queue_response(c, status, resp);
  MHD_destroy_response(resp);
  return ret;
}

enum MHD_Result srv_send_json(struct MHD_Connection *c, srv_req *r, unsigned status,
                              json_t *o /* taken */) {
  char *t = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!t)
    t = strdup("{\"error\":{\"code\":\"internal\",\"message\":\"out of host memory\"}}");
  if (!t)
    return MHD_NO;
  size_t n = strlen(t);
  char *nl = realloc(t, n + 2);
  if (nl) {
    nl[n] = '\n';
    nl[n + 1] = '\0';
    t = nl;
  }
  return srv_send_text(c, r, status, "application/json", t);
}

enum MHD_Result srv_send_err(struct MHD_Connection *c, srv_req *r, unsigned status,
                             const char *code, const char *fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  json_t *o = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
  if (!o) { /* the message quotes bytes that are not UTF-8 (a header, a path) */
    for (char *p = msg; *p; p++)
      if ((unsigned char)*p >= 0x80)
        *p = '?';
    o = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", msg);
  }
  return srv_send_json(c, r, status, o);
}

enum MHD_Result srv_send_ebb_err(struct MHD_Connection *c, srv_req *r, int rc, const char *msg) {
  return srv_send_err(c, r, base_http_status(rc), base_wire_name(rc), "%s", msg);
}
