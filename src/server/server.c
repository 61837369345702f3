/* The server's life: start (lock the data directory, open the store, queue
 * what a previous server left, listen), the request entry point, stop.
 * Routes live in routes.c, bodies in body.c, who may call in auth.c,
 * connection deadlines in conns.c. */
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "server/internal.h"

/* --- one request -------------------------------------------------------------- */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)toe;
  srv_server *s = cls;
  srv_conn_answered(s->conns, c);
  srv_req_free(*con_cls);
  *con_cls = NULL;
}

static enum MHD_Result too_large(struct MHD_Connection *c, srv_req *r) {
  if (r->too_large == 2)
    return srv_send_err(c, r, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                        "the multipart field \"%s\" is larger than the %zu bytes this server "
                        "takes for a field other than the file",
                        r->big_field, r->field_limit);
  return srv_send_err(c, r, MHD_HTTP_CONTENT_TOO_LARGE, "body_too_large",
                      "the body is larger than the %zu bytes this server takes for %s", r->limit,
                      r->kind == BODY_BUFFER ? "a JSON body" : "a request with an upload");
}

/* --- framing (RFC 9112): what a proxy in front might read differently ----------- */
static int tchar(unsigned char ch) {
  return (ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z') ||
         (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

typedef struct framing {
  const char *bad_name;
  int cl, te;
} framing;

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
  (void)kind;
  (void)value;
  framing *f = cls;
  const char *k = key ? key : "";
  int ok = *k != '\0';
  for (const char *p = k; ok && *p; p++)
    ok = tchar((unsigned char)*p);
  if (!ok && !f->bad_name)
    f->bad_name = k;
  f->cl += !strcasecmp(k, "Content-Length");
  f->te += !strcasecmp(k, "Transfer-Encoding");
  return MHD_YES;
}

/* 1 with a 400 queued (and the connection closed after it) when the head
 * is framed ambiguously: a header name that is not a token (a space before
 * its colon: "Content-Length : 2"), or Content-Length with
 * Transfer-Encoding (RFC 9112 6.3: a request a proxy and this server could
 * split differently, so nothing after it on the connection is trusted). */
static int bad_framing(struct MHD_Connection *c, srv_req *r, enum MHD_Result *ret) {
  framing f = {0};
  MHD_get_connection_values(c, MHD_HEADER_KIND, scan_header, &f);
  if (!f.bad_name && !(f.cl && f.te))
    return 0;
  r->close = 1;
  if (f.bad_name)
    *ret = srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                        "header name '%.100s' is not a token (RFC 9112 5.1: no space before "
                        "the colon); the connection is closed",
                        f.bad_name);
  else
    *ret = srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                        "a request may not carry both Content-Length and Transfer-Encoding "
                        "(RFC 9112 6.3); the connection is closed");
  return 1;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  srv_server *s = cls;
  srv_req *r = *con_cls;
  if (!r) {
    if (!(r = calloc(1, sizeof *r)))
      return MHD_NO;
    *con_cls = r;
    srv_conn_headers_done(s->conns, c);
    /* RFC 9112 3.2; libmicrohttpd checks it only in its strict mode, which
     * also closes without an answer on a space in the URI */
    if (strcmp(version, MHD_HTTP_VERSION_1_0) &&
        !MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host")) {
      r->close = 1;
      return srv_send_err(c, r, MHD_HTTP_BAD_REQUEST, "bad_request",
                          "an %s request needs a Host header (HTTP/1.0 may leave it out)", version);
    }
    enum MHD_Result ret;
    if (bad_framing(c, r, &ret))
      return ret;
    if (srv_route_begin(s, c, r, url, method, &ret))
      return ret;
    return MHD_YES;
  }
  if (*upload_data_size) {
    srv_conn_body_bytes(s->conns, c, *upload_data_size);
    srv_take_body(r, upload_data, *upload_data_size);
    *upload_data_size = 0;
    return MHD_YES;
  }
  srv_conn_handling(s->conns, c);
  if (r->too_large)
    return too_large(c, r);
  return srv_route_run(s, c, r, method);
}

/* --- URLs: %-escapes that decode to a NUL or to bytes that are not UTF-8
 * are left as sent, so /v1/jobs/1%00 names no job (not job 1) and /%ff is a
 * plain 404. ---------------------------------------------------------------- */
static int utf8_ok(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned char b = p[i];
    size_t k = b < 0x80 ? 0 : (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 ? 3 : 9;
    if (b == 0 || k == 9 || i + k >= n + (k ? 0 : 1))
      return 0;
    for (size_t j = 1; j <= k; j++)
      if ((p[i + j] & 0xc0) != 0x80)
        return 0;
    i += k + 1;
  }
  return 1;
}

static size_t unescape(void *cls, struct MHD_Connection *c, char *s) {
  (void)cls;
  (void)c;
  size_t n = strlen(s);
  char *copy = strdup(s);
  if (!copy)
    return n;
  size_t m = MHD_http_unescape(copy);
  if (utf8_ok((unsigned char *)copy, m)) {
    memcpy(s, copy, m + 1);
    n = m;
  }
  free(copy);
  return n;
}

/* --- start / stop ------------------------------------------------------------------- */
static int is_loopback(const struct sockaddr_storage *ss) {
  if (ss->ss_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
  if (ss->ss_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
  }
  return 0;
}

static int parse_listen(const char *listen, struct sockaddr_storage *ss, char *host, size_t hn,
                        int *port) {
  const char *colon = strrchr(listen, ':');
  if (!colon)
    return ebb_seterr(EBB_EINVAL, "--listen %s: expected HOST:PORT (e.g. 127.0.0.1:8470)", listen);
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

static uint64_t input_bytes(const char *path) {
  struct stat st;
  return path && stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* The jobs the last server left queued, queued again (owner and bytes for
 * the fair limits: fairness.c). */
static void requeue(srv_server *s) {
  int64_t *ids = NULL;
  size_t n = 0;
  srv_store_queued(s->store, &ids, &n);
  for (size_t i = 0; i < n; i++) {
    json_t *o = NULL;
    if (srv_store_get(s->store, ids[i], &o) != 0)
      continue;
    const char *p = json_string_value(json_object_get(o, "pipeline"));
    const char *in = json_string_value(json_object_get(o, "input"));
    const char *out = json_string_value(json_object_get(o, "output_dir"));
    const char *uid = json_string_value(json_object_get(o, "id"));
    json_t *opts = json_object_get(o, "options");
    char owner[64] = "";
    int64_t rid;
    if (uid)
      srv_store_find(s->store, uid, &rid, owner, sizeof owner);
    if (p && in && out &&
        srv_queue_push(s->queue, ids[i], uid, owner, input_bytes(in), p, in, out,
                       json_is_object(opts) ? opts : NULL) == 0)
      base_log(EBB_LOG_INFO, "server", "job %s: queued again (left queued by the last server)",
               uid ? uid : "?");
    else
      srv_store_finish(s->store, ids[i], EBB_JOB_FAILED, "EBB_ECANCELED",
                       "server restarted before the job was ready to run", NULL, 0, "[]");
    json_decref(o);
  }
  free(ids);
}

/* The descriptors the connection cap needs: the soft limit goes up to the
 * hard one, and the cap stays below what is there. */
static unsigned fit_connections(unsigned want) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return want;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)want + 128)
    want = rl.rlim_cur > 256 ? (unsigned)(rl.rlim_cur - 128) : 128;
  return want;
}

static int set_inputs(srv_server *s, const srv_opts *o) {
  if (!o->ninput_dirs)
    return 0;
  if (!(s->input_dirs = calloc(o->ninput_dirs, sizeof *s->input_dirs)))
    return ebb_seterr(EBB_ENOMEM, "server: out of host memory");
  for (size_t i = 0; i < o->ninput_dirs; i++) {
    char real[PATH_MAX];
    if (!realpath(o->input_dirs[i], real))
      return ebb_seterr(EBB_EINVAL, "--input-dir %s: %s", o->input_dirs[i], strerror(errno));
    if (!(s->input_dirs[i] = strdup(real)))
      return ebb_seterr(EBB_ENOMEM, "server: out of host memory");
    s->ninput_dirs++;
  }
  return 0;
}

static int set_callers(srv_server *s, const srv_opts *o, const char *listen) {
  int rc = srv_auth_load(o->token_file, o->token, &s->auth);
  for (size_t i = 0; !rc && i < o->nallow_hosts; i++)
    rc = srv_auth_add_host(s->auth, o->allow_hosts[i]);
  for (size_t i = 0; !rc && i < o->nallow_origins; i++)
    rc = srv_auth_add_origin(s->auth, o->allow_origins[i]);
  if (rc)
    return rc;
  if (!s->loopback && !srv_auth_enabled(s->auth))
    return ebb_seterr(EBB_EINVAL,
                      "--listen %s: a server reachable from other machines needs a token. "
                      "Make one and start with it:\n"
                      "  (umask 077; head -c 24 /dev/urandom | base64 > ebb.token)\n"
                      "  ebb serve --listen %s --token-file ebb.token\n"
                      "(or set EBB_TOKEN); clients send 'Authorization: Bearer TOKEN'",
                      listen, listen);
  s->metrics_public = o->metrics_public;
  return 0;
}

static void on_job_state(void *arg) { srv_snapshot_dirty(arg); }

static int open_data(srv_server *s, const srv_opts *o) {
  char p[4200];
  int rc = base_mkdirs(s->data_dir, 0755, "mkdir");
  if (!rc)
    rc = srv_datadir_lock(s->data_dir, &s->lock_fd);
  if (rc)
    return rc;
  snprintf(p, sizeof p, "%s/uploads", s->data_dir);
  if ((rc = base_mkdirs(p, 0755, "mkdir")) != 0)
    return ebb_errctx(rc, "data directory: ");
  srv_datadir_clean_uploads(s->data_dir);
  srv_datadir_clean_scratch(s->data_dir);
  snprintf(p, sizeof p, "%s/jobs.db", s->data_dir);
  int interrupted = 0;
  if ((rc = srv_store_open(p, &s->store, &interrupted)) != 0)
    return rc;
  if (interrupted)
    base_log(EBB_LOG_INFO, "server", "%d job%s left running by the last server marked failed",
             interrupted, interrupted == 1 ? "" : "s");
  /* every job has a deadline: a day unless told otherwise */
  srv_queue_opts qo = {.timeout_s = o->job_timeout_s > 0 ? o->job_timeout_s : 86400,
                       .on_state = on_job_state,
                       .arg = s};
  qo.max_wait_s = o->max_wait_s;
  /* --keep-resident's default, the one place the device count enters the
   * queue: with several devices a job's pipeline stays where it ran (300 s)
   * so that placement sends its next jobs there; with one there is no
   * choice to make and the memory goes back after every job (off) */
  qo.keep_resident_s = o->keep_resident_s ? o->keep_resident_s : s->ndev > 1 ? 300 : -1;
  if ((rc = srv_fact_counts_create(&s->facts)) != 0 ||
      (rc = srv_queue_create(s->store, s->ms, s->allocs, s->ndev, &qo, &s->queue)) != 0)
    return rc;
  return srv_events_create(&(srv_events_opts){.size = sizeof(srv_events_opts),
                                              .manager = s->m,
                                              .alloc = s->alloc,
                                              .managers = s->ms,
                                              .allocs = s->allocs,
                                              .ndevices = s->ndev,
                                              .store = s->store},
                           &s->events);
}

static int start_daemon(srv_server *s, const srv_opts *o, struct sockaddr_storage *ss, int port) {
  unsigned maxc = fit_connections(o->max_connections ? o->max_connections : 1024);
  srv_conn_limits cl = {.max_connections = maxc,
                        .max_per_ip = o->max_per_ip ? o->max_per_ip : 64,
                        .header_timeout_s = o->header_timeout_s > 0 ? o->header_timeout_s : 10,
                        .min_body_rate = o->min_body_rate > 0 ? o->min_body_rate : 4096,
                        .idle_pressure_s = 2};
  int rc = srv_conns_create(&cl, &s->conns);
  if (rc)
    return rc;
  unsigned idle = o->idle_timeout_s > 0 ? (unsigned)(o->idle_timeout_s + 0.999) : 60;
  /* libmicrohttpd's own cap stops accepting when reached, so it sits above
   * ours with room for evicted connections still closing (conns.c) */
  unsigned mhd_max = fit_connections(maxc * 2 + 64);
  /* thread per connection with poll(): no FD_SETSIZE ceiling (select() stops
   * accepting past descriptor 1024); a load or a session item answers when
   * it is done without holding up other connections */
  s->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
                              MHD_USE_ERROR_LOG | MHD_USE_ITC |
                              (ss->ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
                          (uint16_t)port, srv_conn_accept, s->conns, on_request, s,
                          MHD_OPTION_SOCK_ADDR, (struct sockaddr *)ss, MHD_OPTION_NOTIFY_COMPLETED,
                          on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, srv_conn_notify, s->conns,
                          MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL, MHD_OPTION_CONNECTION_LIMIT,
                          mhd_max, MHD_OPTION_CONNECTION_TIMEOUT, idle,
                          MHD_OPTION_LISTEN_BACKLOG_SIZE, 4096u, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                          (size_t)SRV_HEAD_KIB * 1024, MHD_OPTION_END);
  if (!s->d)
    return ebb_seterr(EBB_EIO, "cannot listen on %s: %s", o->listen,
                      errno ? strerror(errno) : "libmicrohttpd refused");
  return 0;
}

static int init(srv_server *s, const srv_opts *o) {
  struct sockaddr_storage ss;
  int port = 0, rc;
  if ((rc = parse_listen(o->listen, &ss, s->host, sizeof s->host, &port)) != 0)
    return rc;
  s->loopback = is_loopback(&ss);
  if ((rc = set_callers(s, o, o->listen)) != 0 || (rc = set_inputs(s, o)) != 0)
    return rc;
  if ((rc = open_data(s, o)) != 0 || (rc = srv_snapshot_start(s)) != 0)
    return rc;
  if (o->cluster && (rc = srv_cluster_start(s, o->cluster)) != 0)
    return rc;
  srv_routes_choose(s);
  if ((rc = start_daemon(s, o, &ss, port)) != 0)
    return rc;
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
  int bound = di ? di->port : port;
  s->port = bound;
  snprintf(s->url, sizeof s->url, ss.ss_family == AF_INET6 ? "http://[%s]:%d" : "http://%s:%d",
           s->host[0] ? s->host : "0.0.0.0", bound);
  return 0;
}

int srv_start(const srv_opts *o, srv_server **out) {
  if (!o || !o->listen || !o->data_dir || !o->manager || !o->alloc)
    return ebb_seterr(EBB_EINVAL, "server: listen address, data directory and manager are "
                                  "required");
  srv_server *s = calloc(1, sizeof *s);
  if (!s || !(s->data_dir = strdup(o->data_dir))) {
    free(s);
    return ebb_seterr(EBB_ENOMEM, "server: out of host memory");
  }
  s->lock_fd = -1;
  pthread_mutex_init(&s->owners_lock, NULL);
  pthread_mutex_init(&s->queue_lock, NULL);
  pthread_mutex_init(&s->submit_lock, NULL);
  s->m = o->manager;
  s->alloc = o->alloc;
  s->broker = o->broker; /* docs/broker.md */
  s->ndev = o->ndevices ? o->ndevices : 1;
  s->ms = calloc(s->ndev, sizeof *s->ms);
  s->allocs = calloc(s->ndev, sizeof *s->allocs);
  if (!s->ms || !s->allocs) {
    free(s->ms);
    free(s->allocs);
    free(s->data_dir);
    free(s);
    return ebb_seterr(EBB_ENOMEM, "server: out of host memory");
  }
  for (size_t i = 0; i < s->ndev; i++) {
    s->ms[i] = o->ndevices ? o->managers[i] : o->manager;
    s->allocs[i] = o->ndevices ? o->allocs[i] : o->alloc;
  }
  s->max_json = o->max_json_bytes ? o->max_json_bytes : (1u << 20);
  s->max_upload = o->max_upload_bytes ? o->max_upload_bytes : (1ull << 30);
  s->max_field = o->max_field_bytes ? o->max_field_bytes : (1u << 20);
  s->max_lyrics = o->max_lyrics_bytes ? o->max_lyrics_bytes : SRV_MAX_LYRICS;
  s->max_queued = o->max_queued ? o->max_queued : 10000;
  s->max_queued_per_token = o->max_queued_per_token ? o->max_queued_per_token : 1000;
  s->queued_bytes = o->queued_bytes ? o->queued_bytes : (32ull << 30);
  s->queued_bytes_per_token = o->queued_bytes_per_token ? o->queued_bytes_per_token : (8ull << 30);
  s->keep_jobs = o->keep_jobs;
  s->keep_jobs_s = o->keep_jobs_s;
  s->job_timeout_s = o->job_timeout_s > 0 ? o->job_timeout_s : 86400;
  s->max_wait_s = o->max_wait_s > 0 ? o->max_wait_s : 60;
  s->max_job_s = o->max_job_s;
  int rc = init(s, o);
  if (rc) {
    srv_stop(s);
    return rc;
  }
  if (o->on_listen)
    o->on_listen(s->url);
  requeue(s);
  srv_retention(s);
  *out = s;
  return 0;
}

void srv_tick(srv_server *s) {
  if (!s)
    return;
  srv_snapshot_dirty(s); /* idle releases may have run */
  srv_retention(s);
}

void srv_stop(srv_server *s) {
  if (!s)
    return;
  atomic_store(&s->stop, 1);
  if (s->d) {
    MHD_socket fd = MHD_quiesce_daemon(s->d); /* no new connections; ours to close */
    if (fd != MHD_INVALID_SOCKET)
      close(fd);
  }
  srv_events_stop(s->events); /* ends the event streams */
  pthread_mutex_lock(&s->queue_lock);
  srv_queue *q = s->queue;
  s->queue = NULL;
  pthread_mutex_unlock(&s->queue_lock);
  srv_queue_destroy(q); /* the running jobs stop and are queued again */
  if (s->d)
    MHD_stop_daemon(s->d); /* waits for the connection threads (items see s->stop) */
  srv_cluster_stop(s);     /* the running job goes back to the Redis queue */
  srv_conns_destroy(s->conns);
  srv_snapshot_stop(s);
  srv_events_destroy(s->events);
  srv_fact_counts_destroy(s->facts);
  srv_store_close(s->store);
  srv_auth_free(s->auth);
  srv_session_owners_free(s);
  pthread_mutex_destroy(&s->owners_lock);
  pthread_mutex_destroy(&s->queue_lock);
  pthread_mutex_destroy(&s->submit_lock);
  for (size_t i = 0; i < s->ninput_dirs; i++)
    free(s->input_dirs[i]);
  free(s->input_dirs);
  if (s->lock_fd >= 0)
    close(s->lock_fd);
  free(s->data_dir);
  free(s->ms);
  free(s->allocs);
  free(s);
}
