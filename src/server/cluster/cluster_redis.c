/* The Redis side of scale-out (cluster.h): connecting with a password and a
 * database, the keys, and the Lua scripts that make a job's steps atomic.
 * Every script takes KEYS[1] = the job's hash, KEYS[2] = its stream (but
 * CANCEL, which has no stream); a script that ends a job adds it to the
 * node's set of finished jobs (PREFIX:done:NODE, scored by when), which
 * --keep-jobs prunes (srv_rprune). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "server/cluster/cluster_int.h"

int srv_cluster_parse_url(const char *url, char *host, size_t hn, int *port, int *db,
                          char *password, size_t pn) {
  const char *p = url;
  password[0] = '\0';
  *db = 0;
  if (!strncmp(p, "rediss://", 9))
    return ebb_seterr(EBB_EINVAL,
                      "--queue %s: TLS (rediss://) is not supported: ebb is built with "
                      "Debian's hiredis 0.14, which has no TLS; reach Redis through a TLS "
                      "tunnel (stunnel, spiped) and give redis://HOST:PORT",
                      url);
  if (strncmp(p, "redis://", 8))
    return ebb_seterr(EBB_EINVAL, "--queue %s: expected redis://HOST:PORT[/DB]", url);
  p += 8;
  const char *at = strchr(p, '@');
  if (at) {
    const char *pw = memchr(p, ':', (size_t)(at - p)) ? memchr(p, ':', (size_t)(at - p)) + 1 : p;
    if ((size_t)(at - pw) >= pn)
      return ebb_seterr(EBB_EINVAL, "--queue: the password is too long");
    memcpy(password, pw, (size_t)(at - pw));
    password[at - pw] = '\0';
    p = at + 1;
  }
  const char *colon = strrchr(p, ':'), *slash = strchr(p, '/');
  if (!colon || (slash && colon > slash) || colon == p)
    return ebb_seterr(EBB_EINVAL, "--queue %s: expected redis://HOST:PORT[/DB]", url);
  if ((size_t)(colon - p) >= hn)
    return ebb_seterr(EBB_EINVAL, "--queue %s: host too long", url);
  memcpy(host, p, (size_t)(colon - p));
  host[colon - p] = '\0';
  char *end;
  errno = 0;
  long pt = strtol(colon + 1, &end, 10);
  if (end == colon + 1 || errno || pt < 1 || pt > 65535 || (*end && *end != '/'))
    return ebb_seterr(EBB_EINVAL, "--queue %s: the port must be a number 1..65535", url);
  *port = (int)pt;
  if (*end == '/' && end[1]) {
    char *e2;
    long d = strtol(end + 1, &e2, 10);
    if (*e2 || d < 0 || d > 15)
      return ebb_seterr(EBB_EINVAL, "--queue %s: the database must be a number 0..15", url);
    *db = (int)d;
  }
  return 0;
}

/* A reply or NULL; a broken connection is freed and *c set NULL, so the
 * caller reconnects. An error reply is freed and NULL returned too, with
 * the message in k->last_err. */
static redisReply *checked(srv_cluster *k, redisContext **c, redisReply *r) {
  if (!r) {
    snprintf(k->last_err, sizeof k->last_err, "%s", (*c)->errstr[0] ? (*c)->errstr : "no reply");
    if (atomic_exchange(&k->up, 0))
      base_log(EBB_LOG_WARN, "cluster", "lost the queue at %s (%s); reconnecting with backoff",
               k->url, k->last_err);
    redisFree(*c);
    *c = NULL;
    return NULL;
  }
  if (r->type == REDIS_REPLY_ERROR) {
    snprintf(k->last_err, sizeof k->last_err, "%s", r->str);
    freeReplyObject(r);
    return NULL;
  }
  return r;
}

redisReply *srv_rcmd(srv_cluster *k, redisContext **c, const char *fmt, ...) {
  if (!*c)
    return NULL;
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(*c, fmt, ap);
  va_end(ap);
  return checked(k, c, r);
}

redisReply *srv_rargv(srv_cluster *k, redisContext **c, int argc, const char **argv,
                      const size_t *lens) {
  if (!*c)
    return NULL;
  return checked(k, c, redisCommandArgv(*c, argc, argv, lens));
}

redisContext *srv_rconnect(srv_cluster *k) {
  struct timeval tv = {1, 0};
  redisContext *c = redisConnectWithTimeout(k->host, k->port, tv);
  if (!c || c->err) {
    snprintf(k->last_err, sizeof k->last_err, "%s", c ? c->errstr : "out of memory");
    redisFree(c);
    return NULL;
  }
  struct timeval io = {3, 0};
  redisSetTimeout(c, io);
  redisReply *r = NULL;
  if (k->password[0] && !(r = srv_rcmd(k, &c, "AUTH %s", k->password)))
    goto fail;
  freeReplyObject(r);
  r = NULL;
  if (k->db && !(r = srv_rcmd(k, &c, "SELECT %d", k->db)))
    goto fail;
  freeReplyObject(r);
  if (!atomic_exchange(&k->up, 1))
    base_log(EBB_LOG_INFO, "cluster", "connected to the queue at %s", k->url);
  return c;
fail:
  redisFree(c);
  return NULL;
}

void srv_rkey(const srv_cluster *k, char *out, size_t n, const char *kind, const char *name) {
  snprintf(out, n, "%s:%s:%s", k->prefix, kind, name);
}

/* Creates the group of every pipeline's stream (again after a Redis that
 * lost them came back); BUSYGROUP is fine. */
void srv_rgroups(srv_cluster *k, redisContext **c) {
  for (size_t i = 0; i < k->npipes && *c; i++) {
    char key[512];
    srv_rkey(k, key, sizeof key, "stream", k->pipes[i]);
    redisReply *r = srv_rcmd(k, c, "XGROUP CREATE %s %s 0 MKSTREAM", key, SRV_GROUP);
    freeReplyObject(r);
  }
}

/* Takes an entry: the job must be queued (or running under an attempt
 * whose node lost it). KEYS[3]: this node's finished set (--keep-jobs).
 * ARGV: group, entry id, node, now, max attempts, the cause recorded for a
 * lost attempt. Returns the attempt (>0), -1 when the job is gone or
 * finished (entry acked), -2 when it just failed for running out of
 * attempts. */
const char *SRV_LUA_START =
    "local st = redis.call('HGET', KEYS[1], 'state')\n"
    "if st ~= 'queued' and st ~= 'running' then\n"
    "  redis.call('XACK', KEYS[2], ARGV[1], ARGV[2]); redis.call('XDEL', KEYS[2], ARGV[2])\n"
    "  return -1 end\n"
    "local a = tonumber(redis.call('HGET', KEYS[1], 'attempt') or '0')\n"
    "if st == 'running' then\n"
    "  redis.call('HSET', KEYS[1], 'cause:' .. a, 'node ' ..\n"
    "    (redis.call('HGET', KEYS[1], 'node') or '?') .. ': ' .. ARGV[6])\n"
    "end\n"
    "if a >= tonumber(ARGV[5]) then\n"
    "  redis.call('HSET', KEYS[1], 'state', 'failed', 'finished', ARGV[4],\n"
    "    'error_code', 'attempts_exhausted', 'error_message',\n"
    "    'the job was started ' .. a .. ' times and no attempt finished (see attempts)')\n"
    "  redis.call('XACK', KEYS[2], ARGV[1], ARGV[2]); redis.call('XDEL', KEYS[2], ARGV[2])\n"
    "  redis.call('ZADD', KEYS[3], ARGV[4], KEYS[1])\n"
    "  return -2 end\n"
    "a = a + 1\n"
    "redis.call('HSET', KEYS[1], 'state', 'running', 'attempt', a, 'node', ARGV[3],\n"
    "  'started', ARGV[4], 'entry', ARGV[2])\n"
    "return a\n";

/* A stream entry that failed a check (cluster_work.c): copied to the
 * dead-letter stream KEYS[2] (capped near 10,000 entries) with the reason,
 * acknowledged and deleted from KEYS[1]. ARGV: group, entry id, uid as
 * given, reason, node, time. */
const char *SRV_LUA_DEAD =
    "redis.call('XADD', KEYS[2], 'MAXLEN', '~', 10000, '*', 'stream', KEYS[1], 'entry',\n"
    "  ARGV[2], 'uid', ARGV[3], 'reason', ARGV[4], 'node', ARGV[5], 'time', ARGV[6])\n"
    "redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]); redis.call('XDEL', KEYS[1], ARGV[2])\n"
    "return 1\n";

/* The result of attempt ARGV[3]: written only while that attempt is the
 * job's current one and it is running, so a job completes at most once.
 * ARGV: group, entry id, attempt, then field/value pairs. 1 written, 0
 * stale (another attempt owns the job, or it has ended). The written job
 * joins KEYS[3], the writer's set of finished jobs (--keep-jobs prunes it). */
const char *SRV_LUA_FINISH =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'running' or\n"
    "   redis.call('HGET', KEYS[1], 'attempt') ~= ARGV[3] then return 0 end\n"
    "for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end\n"
    "redis.call('HINCRBY', KEYS[1], 'result_writes', 1)\n"
    "redis.call('ZADD', KEYS[3], redis.call('HGET', KEYS[1], 'finished'), KEYS[1])\n"
    "redis.call('XACK', KEYS[2], ARGV[1], ARGV[2]); redis.call('XDEL', KEYS[2], ARGV[2])\n"
    "return 1\n";

/* The lease of attempt ARGV[3] on entry ARGV[2] by node ARGV[4] (group
 * ARGV[1]): renewed (the entry's idle time back to 0) while the attempt is
 * current. -1 lost, 0 renewed, 1 renewed and a cancel was asked for. */
const char *SRV_LUA_RENEW =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'running' or\n"
    "   redis.call('HGET', KEYS[1], 'attempt') ~= ARGV[3] then return -1 end\n"
    "redis.call('XCLAIM', KEYS[2], ARGV[1], ARGV[4], 0, ARGV[2], 'JUSTID')\n"
    "if redis.call('HGET', KEYS[1], 'cancel') == '1' then return 1 end\n"
    "return 0\n";

/* A node that stops hands its running attempt back: the job is queued again
 * under a fresh entry (the attempt does not count). ARGV: group, entry,
 * attempt, uid. */
const char *SRV_LUA_GIVEBACK =
    "if redis.call('HGET', KEYS[1], 'state') ~= 'running' or\n"
    "   redis.call('HGET', KEYS[1], 'attempt') ~= ARGV[3] then return 0 end\n"
    "redis.call('HSET', KEYS[1], 'state', 'queued', 'attempt', tonumber(ARGV[3]) - 1)\n"
    "redis.call('XACK', KEYS[2], ARGV[1], ARGV[2]); redis.call('XDEL', KEYS[2], ARGV[2])\n"
    "redis.call('XADD', KEYS[2], '*', 'uid', ARGV[4])\n"
    "return 1\n";

/* DELETE /v1/jobs/ID. KEYS[2]: this node's finished set. ARGV: now. 1
 * cancelled (it was queued), 2 a running job was asked to stop, 0 it had
 * ended. */
const char *SRV_LUA_CANCEL =
    "local st = redis.call('HGET', KEYS[1], 'state')\n"
    "if st == 'queued' then redis.call('HSET', KEYS[1], 'state', 'cancelled', 'finished',\n"
    "  ARGV[1], 'error_code', 'EBB_ECANCELED', 'error_message', 'cancelled before it ran')\n"
    "  redis.call('ZADD', KEYS[2], ARGV[1], KEYS[1])\n"
    "  return 1 end\n"
    "if st == 'running' then redis.call('HSET', KEYS[1], 'cancel', '1') return 2 end\n"
    "return 0\n";

void srv_cluster_nap(srv_cluster *k, double s) {
  for (double t = 0; t < s && !atomic_load(&k->stop); t += 0.05) {
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
  }
}
