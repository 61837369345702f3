/* A node's two threads on the queue (cluster.h): the worker, here, takes
 * one job at a time: pipelines loaded here first, only what the device can
 * place now, entries whose lease lapsed (their node died) before new ones;
 * runs it through the manager; writes the result conditional on its
 * attempt. The beat thread is cluster_beat.c's. Each has its own connection
 * and reconnects with backoff when Redis goes away; a running job keeps
 * running meanwhile. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "pipeline/sha256.h"
#include "server/cluster/cluster_int.h"

/* --- placement: a pipeline this node can run now ------------------------------------- */
static int can_place(json_t *pipes, json_t *mem, const char *name, int *loaded) {
  size_t i;
  json_t *p;
  *loaded = 0;
  json_array_foreach(pipes, i, p) {
    if (strcmp(json_string_value(json_object_get(p, "name")), name))
      continue;
    /* asleep counts as loaded: waking is cheaper than a load elsewhere */
    if (json_is_true(json_object_get(p, "loaded")) || json_is_true(json_object_get(p, "asleep"))) {
      *loaded = 1;
      return 1;
    }
    json_t *need = json_object_get(p, "need_bytes");
    if (!json_is_integer(need))
      return 1; /* never measured: the manager finds out (and waits or fails) */
    json_int_t fr =
        json_integer_value(json_object_get(json_object_get(mem, "device"), "driver_free_bytes"));
    json_int_t held =
        json_integer_value(json_object_get(json_object_get(mem, "allocator"), "reserved_bytes"));
    /* what is free plus what unloading this node's other pipelines gives back */
    return json_integer_value(need) <= fr + held;
  }
  return 0;
}

static int hinted_elsewhere(srv_cluster *k, const char *name) {
  int found = 0;
  size_t i;
  json_t *v;
  pthread_mutex_lock(&k->hint_lock);
  json_array_foreach(k->hint, i, v) found |= !strcmp(json_string_value(v), name);
  pthread_mutex_unlock(&k->hint_lock);
  return found;
}

/* --- entries nobody vouches for -------------------------------------------------------- */
/* Anyone who can write to Redis can add a stream entry or change a job's
 * hash, so nothing in them is taken on trust: the uid is one ebb makes (32
 * lowercase hex digits, srv_random_id), the input's name is a plain file
 * name, its kind is one ebb writes, a shared input is SHARED/inputs/SHA256
 * (read through the shared directory's descriptor without following a
 * symlink, copied into the job's directory and checked against its name),
 * and the options are a JSON object. An entry that fails is acknowledged,
 * moved to the dead-letter stream PREFIX:deadletter with the reason, and
 * logged; its job (when the uid is well formed) ends failed naming the
 * reason. It never stays pending and never runs with defaults. */
static int hex_ok(const char *s, size_t n) {
  if (!s || strlen(s) != n)
    return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return 0;
  return 1;
}

static int name_ok(const char *n) {
  if (!n || !*n || strlen(n) > 200 || !strcmp(n, ".") || !strcmp(n, ".."))
    return 0;
  for (const unsigned char *p = (const unsigned char *)n; *p; p++)
    if (*p == '/' || *p < 32 || *p == 127)
      return 0;
  return 1;
}

/* Acknowledges entry of stream skey and moves it to PREFIX:deadletter with
 * why; uid as the entry gave it (may be NULL). */
static void dead_letter(srv_cluster *k, redisContext **c, const char *skey, const char *entry,
                        const char *uid, const char *why) {
  char dkey[512], now[32];
  srv_rkey(k, dkey, sizeof dkey, "deadletter", "");
  dkey[strlen(dkey) - 1] = '\0'; /* PREFIX:deadletter */
  snprintf(now, sizeof now, "%.3f", base_wall_s());
  const char *argv[] = {"EVAL", SRV_LUA_DEAD,   "2", skey,    dkey, SRV_GROUP,
                        entry,  uid ? uid : "", why, k->node, now};
  size_t lens[sizeof argv / sizeof argv[0]];
  for (size_t i = 0; i < sizeof argv / sizeof argv[0]; i++)
    lens[i] = strlen(argv[i]);
  redisReply *r = srv_rargv(k, c, (int)(sizeof argv / sizeof argv[0]), argv, lens);
  base_log(EBB_LOG_WARN, "cluster", "entry %s of %s (uid '%.64s'): %s; %s %s", entry, skey,
           uid ? uid : "(none)", why, r ? "acknowledged and moved to" : "could not be moved to",
           dkey);
  freeReplyObject(r);
}

#ifndef RESOLVE_NO_SYMLINKS
#define RESOLVE_NO_SYMLINKS 0x04
#endif
/* name under the directory dfd, no symlink on the way, no escape. */
static int open_beneath(int dfd, const char *name) {
  struct open_how how = {.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY,
                         .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
  long fd = syscall(SYS_openat2, dfd, name, &how, sizeof how);
  if (fd < 0 && errno == ENOSYS) /* before Linux 5.6: each component checked by hand */
    fd = strchr(name, '/') && strncmp(name, "inputs/", 7)
             ? -1
             : openat(dfd, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY);
  return (int)fd;
}

/* Copies fd (a regular file) to path; its SHA-256 in hex. */
static int copy_hashed(int fd, const char *path, char hex[65]) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return ebb_seterr(EBB_EINPUT, "not a regular file");
  FILE *out = fopen(path, "wb");
  if (!out)
    return ebb_seterr(EBB_EIO, "cannot write %s: %s", path, strerror(errno));
  fcntl(fd, F_SETFL, 0); /* a regular file: blocking reads */
  pl_sha256 h;
  pl_sha256_init(&h);
  static _Thread_local char buf[1 << 16];
  ssize_t n;
  int ok = 1;
  while (ok && (n = read(fd, buf, sizeof buf)) > 0) {
    pl_sha256_update(&h, buf, (size_t)n);
    ok = fwrite(buf, 1, (size_t)n, out) == (size_t)n;
  }
  if (fclose(out) != 0 || n < 0)
    ok = 0;
  uint8_t d[32];
  pl_sha256_final(&h, d);
  pl_sha256_hex(d, hex);
  return ok ? 0 : ebb_seterr(EBB_EIO, "cannot copy into %s: %s", path, strerror(errno));
}

/* A shared input: SHARED/inputs/HEX, copied into the attempt's input. */
static int take_shared(srv_cluster *k, const char *ref, const char *dst) {
  char prefix[4200];
  snprintf(prefix, sizeof prefix, "%s/inputs/", k->shared);
  if (!k->shared[0])
    return ebb_seterr(EBB_EINPUT, "a shared input, and this node has no --shared-dir");
  if (!ref || strncmp(ref, prefix, strlen(prefix)) || !hex_ok(ref + strlen(prefix), 64))
    return ebb_seterr(EBB_EINPUT, "the shared input '%.300s' is not --shared-dir/inputs/SHA256",
                      ref ? ref : "");
  int dfd = open(k->shared, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int fd = dfd < 0 ? -1 : open_beneath(dfd, ref + strlen(k->shared) + 1);
  int e = errno;
  if (dfd >= 0)
    close(dfd);
  if (fd < 0)
    return ebb_seterr(EBB_EINPUT, "the shared input %s cannot be opened within --shared-dir: %s",
                      ref, strerror(e));
  char hex[65];
  int rc = copy_hashed(fd, dst, hex);
  close(fd);
  if (!rc && strcmp(hex, ref + strlen(prefix)))
    rc = ebb_seterr(EBB_EINPUT,
                    "the shared input %s does not hold what its name says (its "
                    "SHA-256 is %s)",
                    ref, hex);
  return rc;
}

/* --- one attempt ----------------------------------------------------------------------- */
typedef struct attempt {
  char uid[33], entry[64], pipe[128], skey[512], jkey[512];
  int n; /* attempt number */
  char dir[4200], input[4600], out[4300];
  json_t *options;
  int bad; /* the entry or its job's hash failed a check: dead-lettered */
} attempt;

static int write_file(const char *path, const char *data, size_t n) {
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(data, 1, n, f) == n;
  if (f && fclose(f) != 0)
    ok = 0;
  return ok ? 0 : ebb_seterr(EBB_EIO, "cannot write %s: %s", path, strerror(errno));
}

/* The job's hash checked: a kind ebb writes, a plain name, options a JSON
 * object (or none). EBB_EINPUT naming what is wrong, with a->bad set. */
static int check_job(attempt *a, const char *kind, const char *name, const char *opts) {
  json_error_t je;
  int rc = 0;
  if (!kind || (strcmp(kind, "redis") && strcmp(kind, "shared")))
    rc = ebb_seterr(EBB_EINPUT, "input_kind '%.40s' is neither redis nor shared",
                    kind ? kind : "(none)");
  else if (!name_ok(name))
    rc = ebb_seterr(EBB_EINPUT, "input_name '%.100s' is not a plain file name",
                    name ? name : "(none)");
  else if (opts && *opts && !(a->options = json_loads(opts, JSON_REJECT_DUPLICATES, &je)))
    rc = ebb_seterr(EBB_EINPUT, "options are not valid JSON: %s", je.text);
  else if (a->options && !json_is_object(a->options))
    rc = ebb_seterr(EBB_EINPUT, "options are not a JSON object");
  a->bad = rc != 0;
  return rc;
}

/* The job's input as a file of this node: DATA/jobs/UID/aN/input-NAME. */
static int materialize(srv_cluster *k, redisContext **c, attempt *a) {
  redisReply *h = srv_rcmd(k, c, "HMGET %s input_kind input_ref input_name options", a->jkey);
  if (!h)
    return ebb_seterr(EBB_EIO, "queue: %s", k->last_err);
  const char *kind = h->element[0]->str, *ref = h->element[1]->str, *name = h->element[2]->str,
             *opts = h->element[3]->str;
  snprintf(a->dir, sizeof a->dir, "%s/jobs/%s/a%d", k->s->data_dir, a->uid, a->n);
  snprintf(a->out, sizeof a->out, "%s/out", a->dir);
  int rc = check_job(a, kind, name, opts);
  if (!rc) {
    snprintf(a->input, sizeof a->input, "%s/input-%s", a->dir, name);
    rc = base_mkdirs(a->dir, 0755, "mkdir");
  }
  if (!rc && !strcmp(kind, "shared")) {
    rc = take_shared(k, ref, a->input);
    a->bad = rc == EBB_EINPUT;
  } else if (!rc && ref) {
    redisReply *d = srv_rcmd(k, c, "GET %s", ref);
    if (!d || d->type != REDIS_REPLY_STRING)
      rc = ebb_seterr(EBB_EIO, "queue: the input %s is missing%s%s", ref, d ? "" : ": ",
                      d ? "" : k->last_err);
    else
      rc = write_file(a->input, d->str, d->len);
    freeReplyObject(d);
  } else if (!rc)
    rc = ebb_seterr(EBB_EIO, "queue: job %s has no input", a->uid);
  freeReplyObject(h);
  return rc;
}

/* Outputs: to SHARED/outputs/UID/ when there is a shared dir, else into the
 * job's hash (fields out:NAME) when they are small; "where" says which. */
typedef struct outs {
  json_t *files;
  const char **argv;
  size_t *lens;
  int argc, cap;
  char **bufs;
  int nbufs;
  const char *where;
} outs;

static void push(outs *o, const char *v, size_t n) {
  if (o->argc == o->cap) {
    o->cap = o->cap ? o->cap * 2 : 32;
    o->argv = realloc(o->argv, (size_t)o->cap * sizeof *o->argv);
    o->lens = realloc(o->lens, (size_t)o->cap * sizeof *o->lens);
  }
  o->argv[o->argc] = v;
  o->lens[o->argc++] = n;
}

static char *keep(outs *o, char *s) {
  o->bufs = realloc(o->bufs, (size_t)(o->nbufs + 1) * sizeof *o->bufs);
  o->bufs[o->nbufs++] = s;
  return s;
}

static void place_outputs(srv_cluster *k, attempt *a, outs *o) {
  DIR *d = opendir(a->out);
  struct dirent *e;
  o->files = json_array();
  o->where = k->shared[0] ? "shared" : "redis";
  char dst[4600], src[4600];
  if (k->shared[0]) {
    snprintf(dst, sizeof dst, "%s/outputs/%s", k->shared, a->uid);
    base_mkdirs(dst, 0755, "mkdir");
  }
  size_t total = 0;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.')
      continue;
    snprintf(src, sizeof src, "%s/%s", a->out, e->d_name);
    FILE *f = fopen(src, "rb");
    if (!f)
      continue;
    struct stat st;
    fstat(fileno(f), &st);
    char *buf = malloc((size_t)st.st_size + 1);
    size_t n = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (!buf)
      continue;
    if (k->shared[0]) {
      snprintf(dst, sizeof dst, "%s/outputs/%s/%s", k->shared, a->uid, e->d_name);
      if (write_file(dst, buf, n) == 0)
        json_array_append_new(o->files, json_string(dst));
      free(buf);
    } else if (total + n <= k->inline_max) {
      total += n;
      char *field = keep(o, malloc(strlen(e->d_name) + 5));
      sprintf(field, "out:%s", e->d_name);
      push(o, field, strlen(field));
      push(o, keep(o, buf), n);
      json_array_append_new(o->files, json_sprintf("redis:%s#%s", a->jkey, field));
    } else {
      free(buf);
      json_array_append_new(o->files, json_string(src)); /* too large: stays on this node */
      o->where = "node";
    }
  }
  if (d)
    closedir(d);
}

static void outs_free(outs *o) {
  for (int i = 0; i < o->nbufs; i++)
    free(o->bufs[i]);
  free(o->bufs);
  free(o->argv);
  free(o->lens);
  json_decref(o->files);
}

/* The FINISH script, retried across reconnects until Redis answers (the
 * result is kept meanwhile) or the node stops. 1 written, 0 stale, -1 not
 * written (stopping). */
static int finish(srv_cluster *k, redisContext **c, attempt *a, outs *o) {
  double backoff = 0.1;
  while (!atomic_load(&k->stop) || *c) {
    if (!*c && !(*c = srv_rconnect(k))) {
      atomic_store(&k->up, 0);
      srv_cluster_nap(k, backoff);
      backoff = backoff < 2 ? backoff * 2 : 2;
      continue;
    }
    redisReply *r = srv_rargv(k, c, o->argc, o->argv, o->lens);
    if (r) {
      int v = (int)r->integer;
      freeReplyObject(r);
      return v;
    }
    if (*c) { /* an error reply: not a connection problem */
      base_log(EBB_LOG_WARN, "cluster", "job %s: the result write failed: %s", a->uid, k->last_err);
      return 0;
    }
  }
  return -1;
}

static void record(srv_cluster *k, redisContext **c, attempt *a, int rc, pl_job_result *res) {
  char att[16], now[32], rel[32];
  snprintf(att, sizeof att, "%d", a->n);
  snprintf(now, sizeof now, "%.3f", base_wall_s());
  snprintf(rel, sizeof rel, "%llu", (unsigned long long)res->released_bytes);
  int cancelled = rc == EBB_ECANCELED && atomic_load(&k->run_by_client);
  const char *state = rc == 0 ? "succeeded" : cancelled ? "cancelled" : "failed";
  outs o = {0};
  push(&o, "EVAL", 4);
  push(&o, SRV_LUA_FINISH, strlen(SRV_LUA_FINISH));
  char done[512];
  srv_rkey(k, done, sizeof done, "done", k->node);
  push(&o, "3", 1);
  push(&o, a->jkey, strlen(a->jkey));
  push(&o, a->skey, strlen(a->skey));
  push(&o, done, strlen(done));
  push(&o, SRV_GROUP, strlen(SRV_GROUP));
  push(&o, a->entry, strlen(a->entry));
  push(&o, att, strlen(att));
  char *result = NULL;
  if (rc == 0) {
    place_outputs(k, a, &o);
    char rp[4400];
    snprintf(rp, sizeof rp, "%s/result.json", a->out);
    json_t *rj = json_load_file(rp, 0, NULL);
    json_t *obj = json_pack("{s:o,s:O,s:s}", "result", rj ? rj : json_null(), "files", o.files,
                            "where", o.where);
    result = keep(&o, json_dumps(obj, JSON_COMPACT));
    json_decref(obj);
    push(&o, "result", 6);
    push(&o, result, strlen(result));
  } else {
    push(&o, "error_code", 10);
    push(&o, ebb_errname(rc), strlen(ebb_errname(rc)));
    push(&o, "error_message", 13);
    push(&o, res->message, strlen(res->message));
  }
  const char *tail[] = {"state", state, "finished", now, "released_bytes", rel};
  for (int i = 0; i < 6; i++)
    push(&o, tail[i], strlen(tail[i]));
  int w = finish(k, c, a, &o);
  if (w == 1) {
    atomic_fetch_add(rc ? &k->n_failed : &k->n_done, 1);
    base_log(rc ? EBB_LOG_WARN : EBB_LOG_INFO, "cluster",
             "job %s: %s on node %s (attempt %d); result written%s%s", a->uid, state, k->node, a->n,
             rc ? ": " : "", rc ? res->message : "");
  } else if (w == 0) {
    atomic_fetch_add(&k->n_stale, 1);
    base_log(EBB_LOG_WARN, "cluster",
             "job %s: attempt %d is no longer the job's (its lease "
             "lapsed and another node took it); result discarded",
             a->uid, a->n);
  }
  outs_free(&o);
}

/* The job on this node under the server's limits, as the one-node queue
 * runs it: its deadline (the pipeline's timeout_s, else --job-timeout)
 * counted from its start, its wait for the device bounded by --max-wait. */
static int run_limited(srv_cluster *k, const char *pipe, attempt *a, pl_job_result *res) {
  const pl_def *d = pl_manager_pipeline(k->s->m, pipe);
  const char *from = d && d->timeout_s > 0 ? "the pipeline's timeout_s" : "--job-timeout";
  pl_run_limits lim = {d && d->timeout_s > 0 ? d->timeout_s : k->s->job_timeout_s,
                       k->s->max_wait_s};
  int rc =
      pl_manager_run_job(k->s->m, pipe, a->input, a->out, a->options, &k->run_cancel, &lim, res);
  if (rc && (res->over_deadline || res->over_wait)) {
    char m[sizeof res->message];
    srv_deadline_message("job", dev_device_label(pl_manager_device(k->s->m)), &lim, from, res, m,
                         sizeof m);
    memcpy(res->message, m, sizeof m);
  }
  return rc;
}

/* Node stopping mid-job: the job goes back to the queue, not failed. */
static void give_back(srv_cluster *k, redisContext **c, attempt *a) {
  char att[16];
  snprintf(att, sizeof att, "%d", a->n);
  redisReply *r = srv_rcmd(k, c, "EVAL %s 2 %s %s %s %s %s %s", SRV_LUA_GIVEBACK, a->jkey, a->skey,
                           SRV_GROUP, a->entry, att, a->uid);
  base_log(EBB_LOG_INFO, "cluster", "job %s: node stopping; %s", a->uid,
           r ? "handed back to the queue"
             : "left pending (another node claims it after the "
               "lease)");
  freeReplyObject(r);
}

static void set_running(srv_cluster *k, const attempt *a) {
  pthread_mutex_lock(&k->run_lock);
  if (a) {
    snprintf(k->run_uid, sizeof k->run_uid, "%s", a->uid);
    snprintf(k->run_entry, sizeof k->run_entry, "%s", a->entry);
    snprintf(k->run_pipe, sizeof k->run_pipe, "%s", a->pipe);
    k->run_attempt = a->n;
  } else
    k->run_uid[0] = '\0';
  atomic_store(&k->run_cancel, atomic_load(&k->stop)); /* a stop already asked for holds */
  atomic_store(&k->run_lost, 0);
  atomic_store(&k->run_by_client, 0);
  pthread_mutex_unlock(&k->run_lock);
}

static void run_entry(srv_cluster *k, redisContext **c, const char *pipe, const char *entry,
                      const char *uid, int reclaimed) {
  if (!hex_ok(uid, 32)) {
    char skey[512];
    srv_rkey(k, skey, sizeof skey, "stream", pipe);
    dead_letter(k, c, skey, entry, uid,
                uid ? "its uid is not one ebb makes (32 lowercase hex digits)" : "it has no uid");
    return;
  }
  attempt a = {0};
  snprintf(a.uid, sizeof a.uid, "%s", uid);
  snprintf(a.entry, sizeof a.entry, "%s", entry);
  snprintf(a.pipe, sizeof a.pipe, "%s", pipe);
  srv_rkey(k, a.skey, sizeof a.skey, "stream", pipe);
  srv_rkey(k, a.jkey, sizeof a.jkey, "job", uid);
  char now[32], maxa[16], done[512];
  snprintf(now, sizeof now, "%.3f", base_wall_s());
  snprintf(maxa, sizeof maxa, "%d", k->max_attempts);
  srv_rkey(k, done, sizeof done, "done", k->node);
  redisReply *r = srv_rcmd(k, c, "EVAL %s 3 %s %s %s %s %s %s %s %s %s", SRV_LUA_START, a.jkey,
                           a.skey, done, SRV_GROUP, entry, k->node, now, maxa,
                           "stopped renewing its lease (it died or lost the queue)");
  if (!r)
    return;
  a.n = (int)r->integer;
  freeReplyObject(r);
  if (a.n <= 0) {
    if (a.n == -2)
      base_log(EBB_LOG_WARN, "cluster", "job %s: failed after %d attempts", uid, k->max_attempts);
    return;
  }
  if (reclaimed) {
    atomic_fetch_add(&k->n_reclaimed, 1);
    base_log(EBB_LOG_INFO, "cluster",
             "job %s: claimed from a node whose lease lapsed "
             "(attempt %d)",
             uid, a.n);
  }
  set_running(k, &a);
  pl_job_result res = {0};
  int rc = materialize(k, c, &a);
  if (!rc && a.options) /* an entry's options are a job's: held to the trust levels */
    rc = pl_manager_check_job(k->s->m, pipe, a.options, NULL, NULL);
  if (!rc) /* lyrics and option files sent with it, checked again here */
    rc = srv_cluster_extras_place(k, c, a.uid, pipe, a.dir, &a.options, &a.bad);
  if (rc) {
    snprintf(res.message, sizeof res.message, "%s", ebb_errmsg());
    if (a.bad) /* then recorded failed with the reason, below */
      dead_letter(k, c, a.skey, a.entry, a.uid, res.message);
  } else {
    base_log(EBB_LOG_INFO, "cluster", "job %s: running pipeline '%s' on node %s (attempt %d)", uid,
             pipe, k->node, a.n);
    srv_snapshot_dirty(k->s);
    rc = run_limited(k, pipe, &a, &res);
    srv_snapshot_dirty(k->s);
  }
  if (rc == EBB_ECANCELED && atomic_load(&k->stop) && !atomic_load(&k->run_by_client))
    give_back(k, c, &a);
  else if (atomic_load(&k->run_lost) && !atomic_load(&k->run_by_client)) {
    atomic_fetch_add(&k->n_stale, 1);
    base_log(EBB_LOG_WARN, "cluster",
             "job %s: attempt %d lost its lease; stopped, result "
             "discarded",
             uid, a.n);
  } else
    record(k, c, &a, rc, &res);
  set_running(k, NULL);
  json_decref(a.options);
}

/* One entry of a stream reply's entries array: its id and uid field (NULL
 * when it has none, or not as a string: run_entry dead-letters it). */
static int entry_of(redisReply *e, const char **id, const char **uid) {
  if (!e || e->type != REDIS_REPLY_ARRAY || e->elements < 1 ||
      e->element[0]->type != REDIS_REPLY_STRING)
    return 0;
  *id = e->element[0]->str;
  *uid = NULL;
  redisReply *f = e->elements >= 2 ? e->element[1] : NULL;
  for (size_t i = 0; f && f->type == REDIS_REPLY_ARRAY && i + 1 < f->elements; i += 2)
    if (f->element[i]->type == REDIS_REPLY_STRING && !strcmp(f->element[i]->str, "uid") &&
        f->element[i + 1]->type == REDIS_REPLY_STRING) {
      *uid = f->element[i + 1]->str;
      break;
    }
  return 1;
}

/* An entry whose node stopped renewing: XAUTOCLAIM past the lease. */
static int reclaim(srv_cluster *k, redisContext **c, const char *pipe, const char *skey) {
  redisReply *r = srv_rcmd(k, c, "XAUTOCLAIM %s %s %s %lld 0-0 COUNT 1", skey, SRV_GROUP, k->node,
                           (long long)(k->lease_s * 1000));
  const char *id, *uid;
  int got = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
            r->element[1]->type == REDIS_REPLY_ARRAY && r->element[1]->elements &&
            entry_of(r->element[1]->element[0], &id, &uid);
  if (got)
    run_entry(k, c, pipe, id, uid, 1);
  freeReplyObject(r);
  return got;
}

static int take_new(srv_cluster *k, redisContext **c, const char *pipe, const char *skey) {
  redisReply *r =
      srv_rcmd(k, c, "XREADGROUP GROUP %s %s COUNT 1 STREAMS %s >", SRV_GROUP, k->node, skey);
  const char *id, *uid;
  int got = r && r->type == REDIS_REPLY_ARRAY && r->elements && r->element[0]->elements >= 2 &&
            r->element[0]->element[1]->elements &&
            entry_of(r->element[0]->element[1]->element[0], &id, &uid);
  if (got)
    run_entry(k, c, pipe, id, uid, 0);
  freeReplyObject(r);
  return got;
}

/* Loaded pipelines first; a pipeline loaded on another idle node is left
 * to it for new jobs. 1 when a job ran. */
static int poll_once(srv_cluster *k, redisContext **c) {
  json_t *pipes = pl_manager_pipelines_json(k->s->m);
  json_t *mem = pl_manager_memory_json(k->s->m);
  int ran = 0;
  for (int pass = 0; pass < 2 && !ran && *c; pass++)
    for (size_t i = 0; i < k->npipes && !ran && *c; i++) {
      int loaded;
      if (!can_place(pipes, mem, k->pipes[i], &loaded) || loaded != (pass == 0))
        continue;
      char skey[512];
      srv_rkey(k, skey, sizeof skey, "stream", k->pipes[i]);
      ran = reclaim(k, c, k->pipes[i], skey);
      if (!ran && (loaded || !hinted_elsewhere(k, k->pipes[i])))
        ran = take_new(k, c, k->pipes[i], skey);
    }
  json_decref(pipes);
  json_decref(mem);
  return ran;
}

static void *worker(void *arg) {
  srv_cluster *k = arg;
  redisContext *c = NULL;
  double backoff = 0.1;
  while (!atomic_load(&k->stop)) {
    if (!c) {
      if (!(c = srv_rconnect(k))) {
        if (atomic_exchange(&k->up, 0))
          base_log(EBB_LOG_WARN, "cluster", "cannot reach the queue at %s (%s); retrying", k->url,
                   k->last_err);
        srv_cluster_nap(k, backoff);
        backoff = backoff < 2 ? backoff * 2 : 2;
        continue;
      }
      srv_rgroups(k, &c);
      backoff = 0.1;
    }
    if (!poll_once(k, &c))
      srv_cluster_nap(k, 0.05);
  }
  redisFree(c);
  return NULL;
}

int srv_cluster_threads_start(srv_cluster *k) {
  if (pthread_create(&k->beat, NULL, srv_cluster_beat, k) != 0)
    return ebb_seterr(EBB_ENOMEM, "cluster: cannot start the heartbeat thread");
  k->started_beat = 1;
  if (pthread_create(&k->worker, NULL, worker, k) != 0)
    return ebb_seterr(EBB_ENOMEM, "cluster: cannot start the worker thread");
  k->started_worker = 1;
  return 0;
}

void srv_cluster_threads_stop(srv_cluster *k) {
  atomic_store(&k->stop, 1);
  atomic_store(&k->run_cancel, 1);
  if (k->started_worker)
    pthread_join(k->worker, NULL);
  if (k->started_beat)
    pthread_join(k->beat, NULL);
  k->started_worker = k->started_beat = 0;
}
