/* What the scale-out files share (cluster.c, cluster_redis.c,
 * cluster_work.c, cluster_beat.c, cluster_keep.c, cluster_files.c). Names
 * start with srv_. */
#ifndef EBB_SERVER_CLUSTER_INT_H
#define EBB_SERVER_CLUSTER_INT_H

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>

#include "server/cluster/cluster.h"
#include "server/internal.h"

#define SRV_GROUP "ebb-nodes"

struct srv_cluster {
  srv_server *s;
  char host[256], password[256], prefix[64], node[128], shared[4096], url[320];
  int port, db;
  size_t inline_max;
  double lease_s;
  int max_attempts;
  char **pipes;
  size_t npipes;
  pthread_mutex_t api_lock; /* api: the HTTP handlers' connection */
  redisContext *api;
  double api_retry_at; /* no reconnect before (monotonic s) */
  atomic_int up;       /* the worker's last command reached Redis */
  atomic_int stop;
  pthread_t worker, beat;
  int started_worker, started_beat;
  pthread_mutex_t run_lock; /* the running attempt, for the lease thread */
  char run_uid[33], run_entry[64], run_pipe[128];
  int run_attempt;
  atomic_int run_cancel, run_lost, run_by_client;
  pthread_mutex_t hint_lock;
  json_t *hint; /* pipelines another idle live node has loaded (new reference) */
  atomic_ulong n_done, n_failed, n_stale, n_reclaimed, n_submitted;
  char last_err[256];
};

/* "cluster_redis.c" */
redisContext *srv_rconnect(srv_cluster *k);
redisReply *srv_rcmd(srv_cluster *k, redisContext **c, const char *fmt, ...);
redisReply *srv_rargv(srv_cluster *k, redisContext **c, int argc, const char **argv,
                      const size_t *lens);
void srv_rkey(const srv_cluster *k, char *out, size_t n, const char *kind, const char *name);
void srv_rgroups(srv_cluster *k, redisContext **c);
/* Sleeps up to s seconds, waking early when the node stops (backoff, polls). */
void srv_cluster_nap(srv_cluster *k, double s);
extern const char *SRV_LUA_START, *SRV_LUA_FINISH, *SRV_LUA_RENEW, *SRV_LUA_GIVEBACK,
    *SRV_LUA_CANCEL, *SRV_LUA_DEAD;

/* "cluster_work.c": the worker (claims, runs, writes results); starts and
 * stops both of a node's threads. */
int srv_cluster_threads_start(srv_cluster *k);
void srv_cluster_threads_stop(srv_cluster *k);

/* "cluster_beat.c": the heartbeat/lease/hint/prune thread (arg: k). */
void *srv_cluster_beat(void *arg);

/* "cluster.c": the HTTP side. The API connection (api_lock held; *NULL
 * while Redis is unreachable); the 503 answer; the job the path names as
 * the API's job object (404 when missing or not this caller's; 1 with a
 * response sent). */
redisContext **srv_cluster_api(srv_cluster *k);
enum MHD_Result srv_cluster_unavailable(srv_cluster *k, struct MHD_Connection *c, srv_req *r);
int srv_cluster_get_job(srv_server *s, struct MHD_Connection *c, srv_req *r, json_t **out,
                        enum MHD_Result *ret);

/* "cluster_extras.c": lyrics and option files sent with a job, as bytes in
 * PREFIX:extras:UID. The submitting side reads them from in (each file's
 * descriptor once; their option values are removed from in->options) into
 * x, or fails naming why (*status 413 when they do not fit in Redis). The
 * running side writes the fields the job's hash lists into dir and points
 * *options at them, after checking each against this node's config; *bad
 * when a field failed a check (the entry is dead-lettered). */
typedef struct srv_extras {
  int n;
  char field[SRV_MAX_OPTFILES + 1][160]; /* "lyrics", "opt:STAGE.OPTION" */
  char *data[SRV_MAX_OPTFILES + 1];
  size_t len[SRV_MAX_OPTFILES + 1];
} srv_extras;
int srv_cluster_extras_take(srv_cluster *k, srv_input *in, srv_extras *x, unsigned *status);
void srv_extras_free(srv_extras *x);
char *srv_extras_list(const srv_extras *x); /* the field names as JSON (malloc'd) */
int srv_cluster_extras_place(srv_cluster *k, redisContext **c, const char *uid, const char *pipe,
                             const char *dir, json_t **options, int *bad);

/* "cluster_keep.c": --keep-jobs prunes the jobs this node ended; the number
 * pruned. */
int srv_cluster_prune(srv_cluster *k, redisContext **c);

#endif
