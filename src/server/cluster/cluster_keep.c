/* --keep-jobs on the queue (cluster.h): a node keeps a bounded share of the
 * store. Every script that ends a job (FINISH, START out of attempts,
 * CANCEL of a queued job) adds the job's hash to the ending node's set
 * PREFIX:done:NODE, scored by when it ended; this node prunes its own set
 * past the count or the age: the job's hash, its inline input, its outputs
 * in the shared dir and its attempt directories here. Stream entries are
 * deleted when a job ends (XDEL in the scripts), so they need nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "server/cluster/cluster_int.h"

#define PRUNE_BATCH 256 /* per pass: the beat thread must come back to its lease */

/* One finished job, named by its hash key PREFIX:job:UID. */
static void prune_job(srv_cluster *k, redisContext **c, const char *done, const char *jkey) {
  const char *uid = strrchr(jkey, ':');
  uid = uid ? uid + 1 : jkey;
  char ikey[512], xkey[512], dir[4300];
  srv_rkey(k, ikey, sizeof ikey, "input", uid);
  srv_rkey(k, xkey, sizeof xkey, "extras", uid);
  /* ZREM last: a node that dies halfway prunes the rest next time */
  freeReplyObject(srv_rcmd(k, c, "DEL %s %s %s", jkey, ikey, xkey));
  if (!*c)
    return;
  if (uid[0] && !strchr(uid, '/')) {
    if (k->shared[0]) {
      snprintf(dir, sizeof dir, "%s/outputs/%s", k->shared, uid);
      base_rm_tree(dir);
    }
    snprintf(dir, sizeof dir, "%s/jobs/%s", k->s->data_dir, uid);
    base_rm_tree(dir);
  }
  freeReplyObject(srv_rcmd(k, c, "ZREM %s %s", done, jkey));
}

/* The members past --keep-jobs: by count (the oldest beyond N) or by age. */
static redisReply *past_keep(srv_cluster *k, redisContext **c, const char *done) {
  const srv_server *s = k->s;
  if (s->keep_jobs) {
    redisReply *n = srv_rcmd(k, c, "ZCARD %s", done);
    long long over = n ? n->integer - (long long)s->keep_jobs : 0;
    freeReplyObject(n);
    if (over > 0)
      return srv_rcmd(k, c, "ZRANGE %s 0 %lld", done,
                      (over < PRUNE_BATCH ? over : PRUNE_BATCH) - 1);
  }
  if (s->keep_jobs_s > 0 && *c)
    return srv_rcmd(k, c, "ZRANGEBYSCORE %s -inf %.3f LIMIT 0 %d", done,
                    base_wall_s() - s->keep_jobs_s, PRUNE_BATCH);
  return NULL;
}

int srv_cluster_prune(srv_cluster *k, redisContext **c) {
  const srv_server *s = k->s;
  if (!*c || (!s->keep_jobs && s->keep_jobs_s <= 0))
    return 0;
  char done[512];
  srv_rkey(k, done, sizeof done, "done", k->node);
  redisReply *r = past_keep(k, c, done);
  int n = 0;
  for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements && *c; i++)
    if (r->element[i]->type == REDIS_REPLY_STRING) {
      prune_job(k, c, done, r->element[i]->str);
      n++;
    }
  freeReplyObject(r);
  if (n > 0)
    base_log(EBB_LOG_INFO, "cluster", "--keep-jobs: removed %d old job%s that node %s ended", n,
             n == 1 ? "" : "s", k->node);
  return n;
}
