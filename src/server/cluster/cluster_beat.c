/* The beat thread of a node on the queue (cluster.h): it writes the node's
 * heartbeat (a key with a TTL) and renews the running attempt's lease,
 * learns which pipelines other idle nodes hold loaded or asleep (the
 * routing hint the worker reads, cluster_work.c), and prunes the jobs this
 * node ended past --keep-jobs (cluster_keep.c). */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "server/cluster/cluster_int.h"

/* --- heartbeat, lease, hint ----------------------------------------------------------- */
static void heartbeat(srv_cluster *k, redisContext **c, double every) {
  json_t *snap = srv_snapshot(k->s), *loaded = json_array(), *asleep = json_array(), *p;
  size_t i;
  json_array_foreach(json_object_get(snap, "pipelines"), i, p) {
    int sleeping = json_is_true(json_object_get(p, "asleep"));
    if (sleeping || json_is_true(json_object_get(p, "loaded")))
      json_array_append(loaded, json_object_get(p, "name"));
    if (sleeping)
      json_array_append(asleep, json_object_get(p, "name"));
  }
  pthread_mutex_lock(&k->run_lock);
  json_t *running = k->run_uid[0] ? json_string(k->run_uid) : json_null();
  pthread_mutex_unlock(&k->run_lock);
  json_t *mem = json_object_get(snap, "memory");
  json_t *n =
      json_pack("{s:s,s:s,s:f,s:[O],s:o,s:o,s:O,s:o,s:I,s:I}", "id", k->node, "url", k->s->url,
                "heartbeat", base_wall_s(), "devices",
                json_object_get(mem, "device") ? json_object_get(mem, "device") : json_null(),
                "loaded", loaded, "asleep", asleep, "pipelines", json_object_get(snap, "pipelines"),
                "running", running, "jobs_done", (json_int_t)atomic_load(&k->n_done), "jobs_failed",
                (json_int_t)atomic_load(&k->n_failed));
  char *t = n ? json_dumps(n, JSON_COMPACT) : NULL;
  char key[512], set[512];
  srv_rkey(k, key, sizeof key, "node", k->node);
  srv_rkey(k, set, sizeof set, "nodes", "all");
  if (t) {
    freeReplyObject(srv_rcmd(k, c, "SET %s %s PX %lld", key, t, (long long)(every * 3000 + 1000)));
    freeReplyObject(srv_rcmd(k, c, "SADD %s %s", set, k->node));
  }
  free(t);
  json_decref(n);
  json_decref(snap);
}

static void renew(srv_cluster *k, redisContext **c) {
  char uid[33], entry[64], pipe[128], jkey[512], skey[512], att[16];
  pthread_mutex_lock(&k->run_lock);
  snprintf(uid, sizeof uid, "%s", k->run_uid);
  snprintf(entry, sizeof entry, "%s", k->run_entry);
  snprintf(pipe, sizeof pipe, "%s", k->run_pipe);
  snprintf(att, sizeof att, "%d", k->run_attempt);
  pthread_mutex_unlock(&k->run_lock);
  if (!uid[0])
    return;
  srv_rkey(k, jkey, sizeof jkey, "job", uid);
  srv_rkey(k, skey, sizeof skey, "stream", pipe);
  redisReply *r = srv_rcmd(k, c, "EVAL %s 2 %s %s %s %s %s %s", SRV_LUA_RENEW, jkey, skey,
                           SRV_GROUP, entry, att, k->node);
  if (r && r->integer == 1 && !atomic_exchange(&k->run_by_client, 1))
    atomic_store(&k->run_cancel, 1);
  if (r && r->integer == -1 && !atomic_exchange(&k->run_lost, 1))
    atomic_store(&k->run_cancel, 1);
  freeReplyObject(r);
}

/* Pipelines that another live, idle node has loaded (asleep included: the
 * heartbeat lists a sleeping pipeline under "loaded" too). */
static void refresh_hint(srv_cluster *k, redisContext **c) {
  char set[512], key[512];
  srv_rkey(k, set, sizeof set, "nodes", "all");
  redisReply *ids = srv_rcmd(k, c, "SMEMBERS %s", set);
  json_t *hint = json_array();
  for (size_t i = 0; ids && i < ids->elements && *c; i++) {
    if (!strcmp(ids->element[i]->str, k->node))
      continue;
    srv_rkey(k, key, sizeof key, "node", ids->element[i]->str);
    redisReply *v = srv_rcmd(k, c, "GET %s", key);
    json_t *n = v && v->type == REDIS_REPLY_STRING ? json_loads(v->str, 0, NULL) : NULL;
    if (n && json_is_null(json_object_get(n, "running")))
      json_array_extend(hint, json_object_get(n, "loaded"));
    json_decref(n);
    freeReplyObject(v);
  }
  freeReplyObject(ids);
  pthread_mutex_lock(&k->hint_lock);
  json_decref(k->hint);
  k->hint = hint;
  pthread_mutex_unlock(&k->hint_lock);
}

void *srv_cluster_beat(void *arg) {
  srv_cluster *k = arg;
  redisContext *c = NULL;
  double every = k->lease_s / 3 < 1 ? k->lease_s / 3 : 1, backoff = 0.1;
  while (!atomic_load(&k->stop)) {
    if (!c && !(c = srv_rconnect(k))) {
      srv_cluster_nap(k, backoff);
      backoff = backoff < 2 ? backoff * 2 : 2;
      continue;
    }
    backoff = 0.1;
    renew(k, &c);
    heartbeat(k, &c, every);
    refresh_hint(k, &c);
    srv_cluster_prune(k, &c);
    srv_cluster_nap(k, every);
  }
  redisFree(c);
  return NULL;
}
