/* What the files of the server room share. Every name here starts with srv_
 * (file-local names are static); the names are grouped by the file that
 * defines them. Nothing outside src/server/ includes this header. */
#ifndef EBB_SERVER_INTERNAL_H
#define EBB_SERVER_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/fs.h"
#include "server/cluster.h"
#include "server/events.h"
#include "server/queue.h"
#include "server/server.h"
#include "server/store.h"

/* Roles a token grants (auth.c). Without tokens every caller is admin. */
typedef enum { SRV_ROLE_NONE, SRV_ROLE_SUBMIT, SRV_ROLE_ADMIN } srv_role;

typedef struct srv_auth srv_auth;
typedef struct srv_conns srv_conns;

struct ebb_server {
  struct MHD_Daemon *d;
  int (*broker_reclaim)(void *, const char *, uint64_t, json_t **); /* "broker.c" */
  void (*broker_metrics)(void *, FILE *);
  void *broker_arg;
  ebb_manager *m;       /* devices[0]'s: pipelines, sessions, loads */
  ebb_allocator *alloc;
  ebb_manager **ms;     /* one per device (ndev; ms[0] == m) */
  ebb_allocator **allocs;
  size_t ndev;
  ebb_store *store;
  ebb_queue *queue;
  pthread_mutex_t queue_lock; /* the snapshot's reads of queue vs. its destroy */
  ebb_events *events; /* GET /v1/events (events.h) */
  srv_auth *auth;
  srv_conns *conns;
  struct srv_snap *snap;
  struct srv_cluster *cluster; /* --queue redis://: jobs live in Redis (cluster.c) */
  pthread_mutex_t owners_lock; /* guards session_owners */
  struct srv_owner *session_owners;
  char *data_dir;
  char url[320];
  char host[256];   /* the listen host, as given */
  int loopback;     /* the listen address is a loopback one */
  int lock_fd;      /* holds the data directory's flock; -1 none */
  size_t max_json, max_upload, max_field;
  char **input_dirs; /* realpath()s */
  size_t ninput_dirs;
  int metrics_public;
  uint64_t keep_jobs;   /* --keep-jobs COUNT (0: no count limit) */
  double keep_jobs_s;   /* --keep-jobs DURATION (0: no age limit) */
  atomic_int stop;      /* session items see it as their cancel flag */
  atomic_ulong counter; /* upload temp files, session item numbers */
};

/* --- one request ------------------------------------------------------------ */
enum { BODY_NONE, BODY_BUFFER, BODY_FILE, BODY_MULTIPART };

/* A route the first call of a request found (routes.c). */
typedef struct srv_route srv_route;

/* A growing text with its own length (multipart fields: appends are
 * linear, never a strlen of what came before). */
typedef struct srv_text {
  char *p;
  size_t len, cap;
} srv_text;

typedef struct srv_req {
  const srv_route *route;
  char *parts[6]; /* the path's segments (in path_buf) */
  int np;
  char path_buf[1024];
  srv_role role;
  char owner[24]; /* the token's owner tag ("" without tokens) */
  int kind;
  char *buf;      /* BODY_BUFFER: the body (NUL-terminated) */
  size_t len, cap, limit;
  size_t field_limit; /* a multipart field that is not the file */
  size_t total;   /* every body byte received, files and fields */
  int too_large;  /* 1 the whole body, 2 a field */
  char big_field[64];
  int io_error;
  FILE *f;        /* BODY_FILE / the multipart file field */
  char tmp[4096]; /* the upload's temp path ("" if none) */
  char filename[256];
  char file_key[64];
  int two_files;
  char ctype[128];
  struct MHD_PostProcessor *pp;
  srv_text field_pipeline, field_options, field_input;
} srv_req;

/* --- "http.c": responses ---------------------------------------------------- */
enum MHD_Result srv_send_text(struct MHD_Connection *c, srv_req *r, unsigned status,
                              const char *ctype, char *text /* taken */);
enum MHD_Result srv_send_json(struct MHD_Connection *c, srv_req *r, unsigned status,
                              json_t *o /* taken */);
enum MHD_Result srv_send_err(struct MHD_Connection *c, srv_req *r, unsigned status,
                             const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* An ebb error code answered with the HTTP status and wire name of its row
 * in EBB_ERRORS. */
enum MHD_Result srv_send_ebb_err(struct MHD_Connection *c, srv_req *r, int rc, const char *msg);
/* The JSON body of an error (for libmicrohttpd's own answers too). */
char *srv_err_text(const char *code, const char *msg);
void srv_req_free(srv_req *r);
int srv_starts_with(const char *s, const char *prefix);

/* --- "http_mhd.c": libmicrohttpd's own answers as JSON ----------------------- */
/* What a connection's head (request line and headers) may take: the
 * connection's memory in libmicrohttpd (MHD_OPTION_CONNECTION_MEMORY_LIMIT). */
#define SRV_HEAD_KIB 32
#define SRV_STR_(x) #x
#define SRV_STR(x) SRV_STR_(x)
/* The daemon's MHD_OPTION_EXTERNAL_LOGGER: prints to stderr as libmicrohttpd
 * does, and notes the error answer it is about to queue so that
 * MHD_queue_response (defined there) sends it as JSON. */
void srv_mhd_log(void *cls, const char *fmt, va_list ap);

/* --- "body.c": bodies and a job's input --------------------------------------- */
/* First call of a request whose route takes a body: decide how to take it.
 * 0 to go on, 1 when a response was queued. */
int srv_begin_body(ebb_server *s, struct MHD_Connection *c, srv_req *r, enum MHD_Result *ret);
void srv_take_body(srv_req *r, const char *data, size_t n);

typedef struct srv_input {
  const char *pipeline; /* borrowed from the body or the fields */
  const char *path;     /* a checked server-side path, or NULL with an upload */
  json_t *options;      /* new reference or NULL */
  json_t *body;         /* the parsed JSON body (keeps the strings alive) */
  int upload;           /* r->tmp holds the file */
  char real[4096];      /* the resolved path */
} srv_input;
/* The first key of JSON object o that is not in known (NULL-terminated),
 * or NULL when there is none. */
const char *srv_unknown_key(json_t *o, const char *const known[]);
/* Returns 0, or 1 with a response queued. */
int srv_parse_input(ebb_server *s, struct MHD_Connection *c, srv_req *r, int want_pipeline,
                    srv_input *in, enum MHD_Result *ret);
void srv_input_free(srv_input *in);
/* srv_parse_input for a job (a pipeline is required) and the manager's check
 * of its pipeline and options. Returns 0, or 1 with a response queued and in
 * freed. */
int srv_parse_job(ebb_server *s, struct MHD_Connection *c, srv_req *r, srv_input *in,
                  enum MHD_Result *ret);
/* Moves the upload into dir as input-NAME (NAME: the sent filename made safe
 * and short); path gets where. */
int srv_place_upload(srv_req *r, const char *dir, char *path, size_t n);

/* --- "auth.c": tokens, roles, Host/Origin, ids --------------------------------- */
/* token_file (may be NULL), env_token (may be NULL or ""). *out has no token
 * when neither gives one. Errors name the file and line. */
int srv_auth_load(const char *token_file, const char *env_token, srv_auth **out);
void srv_auth_free(srv_auth *a);
int srv_auth_add_host(srv_auth *a, const char *host);
/* The role the request's Authorization header grants and the token's owner
 * tag; admin with owner "" when no token is configured. */
srv_role srv_auth_check(const srv_auth *a, struct MHD_Connection *c, char *owner, size_t n);
int srv_auth_enabled(const srv_auth *a);
/* 1 when the Host header (and the Origin header, when sent) names this
 * server; else 0 with why in msg. */
int srv_host_ok(const ebb_server *s, struct MHD_Connection *c, char *msg, size_t n);
/* 32 hex digits from the kernel's random source (128 bits). */
int srv_random_id(char out[33]);

/* --- "conns.c": connection limits and deadlines -------------------------------- */
typedef struct srv_conn_limits {
  double header_timeout_s; /* from accept (or the last answer) to complete headers */
  double min_body_rate;    /* bytes/s a body must average after header_timeout_s */
} srv_conn_limits;
int srv_conns_create(const srv_conn_limits *l, srv_conns **out);
void srv_conns_destroy(srv_conns *cs);
void srv_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode code);
/* The request's phases, for the deadlines. */
void srv_conn_headers_done(srv_conns *cs, struct MHD_Connection *c);
void srv_conn_body_bytes(srv_conns *cs, struct MHD_Connection *c, size_t n);
void srv_conn_handling(srv_conns *cs, struct MHD_Connection *c);
void srv_conn_answered(srv_conns *cs, struct MHD_Connection *c);

/* --- "routes.c": the API ----------------------------------------------------- */
/* First call: finds the route (404/405 otherwise), checks Host/Origin, the
 * token and its role, the content type. 0 to go on; 1 with a response. */
int srv_route_begin(ebb_server *s, struct MHD_Connection *c, srv_req *r, const char *url,
                    const char *method, enum MHD_Result *ret);
int srv_route_takes_body(const srv_req *r);
/* "GET, HEAD" for the route the request found; NULL when none. */
const char *srv_route_allow(const srv_req *r);
enum MHD_Result srv_route_run(ebb_server *s, struct MHD_Connection *c, srv_req *r,
                              const char *method);

/* --- "jobs.c": jobs and sessions -------------------------------------------------- */
#define SRV_HANDLER(name)                                                                  \
  enum MHD_Result name(ebb_server *s, struct MHD_Connection *c, srv_req *r, const char *method)
SRV_HANDLER(srv_h_jobs_post);
SRV_HANDLER(srv_h_job);
SRV_HANDLER(srv_h_job_result);
SRV_HANDLER(srv_h_job_file); /* GET /v1/jobs/ID/files/NAME ("cluster_files.c") */
SRV_HANDLER(srv_h_sessions_post);
SRV_HANDLER(srv_h_session);
SRV_HANDLER(srv_h_session_item);
/* --- "sleep.c": POST /v1/pipelines/NAME/sleep|wake, the sleep metrics ------------- */
SRV_HANDLER(srv_h_pipeline_sleep);
void srv_sleep_metrics(ebb_server *s, FILE *f);
/* --- "broker.c": POST /v1/memory/reclaim (docs/broker.md) ------------------------- */
SRV_HANDLER(srv_h_memory_reclaim);

/* --- "cluster.c": scale-out on Redis (cluster.h); the job handlers above
 * hand over to these when s->cluster is set ------------------------------------ */
typedef struct srv_cluster srv_cluster;
int srv_cluster_start(ebb_server *s, const ebb_cluster_opts *o);
void srv_cluster_stop(ebb_server *s); /* no-op without a cluster */
SRV_HANDLER(srv_cluster_jobs_post);
SRV_HANDLER(srv_cluster_job);
SRV_HANDLER(srv_cluster_job_result);
SRV_HANDLER(srv_h_cluster); /* GET /v1/cluster (one node without --queue) */
void srv_cluster_metrics(ebb_server *s, FILE *f);
/* /metrics with node="ID" on every series under --queue; text is taken and
 * the answer is the caller's (text itself without a cluster). */
char *srv_cluster_label_metrics(ebb_server *s, char *text);
/* Sessions belong to the token that opened them (and to admins). */
void srv_session_owners_free(ebb_server *s);

/* --- "snapshot.c": what the read side shows ---------------------------------------- */
/* The read side (/metrics, /v1/memory, /v1/pipelines) never waits on the
 * manager or the allocator: a thread takes a snapshot on request and a
 * reader waits at most 30 ms for a fresh one (none while the thread has
 * been stuck taking one for 20 ms), else it gets the last one. A snapshot
 * younger than 100 ms with no change marked since serves without waiting.
 * {"memory": ..., "pipelines": [...], "sessions": N, "released_total": N,
 *  "taken": unix seconds} (new reference). */
json_t *srv_snapshot(ebb_server *s);
/* After a change (load, unload, release, a job's end): the next snapshot is
 * taken before a reader gets one (waits up to 1 s). */
void srv_snapshot_changed(ebb_server *s);
/* Marks a change (a job ended, a second passed) without waiting. */
void srv_snapshot_dirty(ebb_server *s);
int srv_snapshot_start(ebb_server *s);
void srv_snapshot_stop(ebb_server *s);

/* --- "metrics.c" ------------------------------------------------------------- */
enum MHD_Result srv_metrics(ebb_server *s, struct MHD_Connection *c, srv_req *r);

/* --- "datadir.c": the data directory ------------------------------------------ */
/* Takes the exclusive lock of dir (DATA_DIR/lock holds the pid); EBB_EBUSY
 * naming the holder's pid when another process has it. */
int srv_datadir_lock(const char *dir, int *fd);
/* Removes partial uploads a killed server left in DATA_DIR/uploads. */
void srv_datadir_clean_uploads(const char *dir);
/* Empties DATA_DIR/scratch (EBB_SERVER_SCRATCH): load directories of workers
 * a killed server left; made 0700 if absent. */
void srv_datadir_clean_scratch(const char *dir);
/* --keep-jobs: removes finished jobs past the count or the age, rows and
 * directories. */
void srv_retention(ebb_server *s);

#endif
