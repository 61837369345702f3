/* libmicrohttpd's own answers, as JSON like every other error.
 *
 * libmicrohttpd (0.9.75) rejects some requests before ebb sees them: a URI
 * or headers that do not fit its buffer (414/431), a malformed request or
 * header line (400), an HTTP version it does not speak (505), a
 * Content-Length or chunked framing it cannot read (413/400). It answers
 * those with small HTML pages built from compile-time strings and offers no
 * hook. Two public seams give one:
 *  - its error log (MHD_OPTION_EXTERNAL_LOGGER, srv_mhd_log) says, in the
 *    connection's own thread and just before the answer is queued, "Error
 *    processing request (HTTP response code is %u ('%s'))" with the status
 *    and the HTML text; srv_mhd_log notes both in a thread-local;
 *  - it queues that answer by calling MHD_queue_response through its PLT
 *    (Debian's build binds its MHD_create_response_* calls inside the
 *    library, but not this one), and the executable's definition below,
 *    exported because the library defines the same name, is the one
 *    reached. When the thread-local names this status, the answer is swapped
 *    for a JSON one; every other call goes straight to the library's
 *    MHD_queue_response.
 * 0.9.75 builds the headers of an answer it queues while parsing the
 * Content-Length header twice (the client reads the second copy as the
 * body): those two answers are written here and the connection is closed.
 * Only a daemon started with srv_mhd_log sets the thread-local, so other
 * users of libmicrohttpd in the process are untouched. If a libmicrohttpd
 * build binds the call locally, its HTML comes back: server_http_errors
 * fails on that. */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "server/internal.h"

#define MHD_ERROR_LINE "Error processing request (HTTP response code is %u ('%s')). " \
                       "Closing connection.\n"

/* The answer libmicrohttpd is about to queue on this thread. */
static _Thread_local struct {
  unsigned status;
  const char *html;
} pending;

/* One row per text libmicrohttpd sends: a phrase of its HTML (NULL: any),
 * the status, our code and message, and whether it is written here (the
 * Content-Length answers, see above). First match wins. */
static const struct {
  unsigned status;
  const char *phrase;
  const char *code, *message;
  int direct;
} answers[] = {
    {414, NULL, "uri_too_long",
     "the request line (method, URI and version) does not fit in the " SRV_STR(SRV_HEAD_KIB)
     " KiB this server reads for a request's head; send a shorter URI", 0},
    {431, NULL, "headers_too_large",
     "the request headers do not fit in the " SRV_STR(SRV_HEAD_KIB)
     " KiB this server reads for a request's head; send fewer or smaller headers", 0},
    {400, "chunked encoding", "bad_request",
     "the chunked body is malformed: each chunk is a hexadecimal size line, the data and "
     "CRLF, ending with a 0 chunk", 0},
    {400, "Content-Length", "bad_request", "the Content-Length header is not a number", 1},
    {400, NULL, "bad_request",
     "the request is malformed: expected a request line 'METHOD /path HTTP/1.1' "
     "(HTTP/1.0 and 1.1 only) and header lines 'Name: value'", 0},
    {413, "chunk size", "body_too_large",
     "a chunk size in the chunked body is too large for this server", 0},
    {413, "Content-Length", "body_too_large", "the Content-Length header is too large a number",
     1},
    {505, NULL, "http_version_not_supported",
     "this server speaks HTTP/1.1 and HTTP/1.0; send one of those versions", 0},
    {500, NULL, "internal", "the HTTP layer failed to answer the request", 0},
};

void srv_mhd_log(void *cls, const char *fmt, va_list ap) {
  (void)cls;
  if (!strcmp(fmt, MHD_ERROR_LINE)) {
    va_list cp;
    va_copy(cp, ap);
    pending.status = va_arg(cp, unsigned);
    pending.html = va_arg(cp, const char *);
    va_end(cp);
  }
  vfprintf(stderr, fmt, ap); /* what MHD_USE_ERROR_LOG printed without a logger */
}

typedef enum MHD_Result (*queue_fn)(struct MHD_Connection *, unsigned int,
                                    struct MHD_Response *);
static queue_fn real_queue;
static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void find_real(void) {
  /* the next definition after this executable's: libmicrohttpd's */
  *(void **)&real_queue = dlsym(RTLD_NEXT, "MHD_queue_response");
}

static int find_answer(unsigned status, const char *html) {
  for (size_t i = 0; i < sizeof answers / sizeof answers[0]; i++)
    if (answers[i].status == status &&
        (!answers[i].phrase || (html && strstr(html, answers[i].phrase))))
      return (int)i;
  return -1;
}

/* The answer's JSON body with its newline (malloc'd), or NULL. */
static char *answer_text(int i) {
  char *t = srv_err_text(answers[i].code, answers[i].message);
  char *nl = t ? realloc(t, strlen(t) + 2) : NULL;
  if (!nl) {
    free(t);
    return NULL;
  }
  strcat(nl, "\n");
  return nl;
}

/* Writes the whole answer on the connection's socket (non-blocking; an empty
 * send buffer takes it at once, a peer that reads nothing gets 1 s). */
static void write_answer(struct MHD_Connection *c, unsigned status, const char *json) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  char buf[1024];
  int n = snprintf(buf, sizeof buf,
                   "HTTP/1.1 %u %s\r\nConnection: close\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\n\r\n%s",
                   status, MHD_get_reason_phrase_for(status), strlen(json), json);
  if (!ci || n <= 0 || (size_t)n >= sizeof buf)
    return;
  for (size_t off = 0, tries = 0; off < (size_t)n && tries < 10;) {
    ssize_t k = send(ci->connect_fd, buf + off, (size_t)n - off, MSG_NOSIGNAL);
    if (k > 0) {
      off += (size_t)k;
      continue;
    }
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
      return;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLOUT};
    poll(&p, 1, 100);
    tries++;
  }
}

enum MHD_Result MHD_queue_response(struct MHD_Connection *c, unsigned int status,
                                   struct MHD_Response *resp) {
  pthread_once(&real_once, find_real);
  if (!real_queue)
    return MHD_NO; /* no libmicrohttpd after us: cannot happen in a linked server */
  int i = pending.status == status && pending.html ? find_answer(status, pending.html) : -1;
  pending.status = 0;
  pending.html = NULL;
  char *t = i >= 0 ? answer_text(i) : NULL; /* libmicrohttpd's own answer, as JSON */
  if (!t)
    return real_queue(c, status, resp);
  if (answers[i].direct) {
    write_answer(c, status, t);
    free(t);
    return MHD_NO; /* libmicrohttpd closes the connection */
  }
  struct MHD_Response *j =
      MHD_create_response_from_buffer(strlen(t), t, MHD_RESPMEM_MUST_FREE);
  if (!j) {
    free(t);
    return real_queue(c, status, resp);
  }
  MHD_add_response_header(j, "Content-Type", "application/json");
  enum MHD_Result ret = real_queue(c, status, j);
  MHD_destroy_response(j); /* the connection holds its own reference */
  return ret;
}
