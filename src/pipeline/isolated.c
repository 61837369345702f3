/* The proxy stage that runs a stage in a worker process (isolated.h). */
#include "pipeline/isolated.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fs.h"
#include "base/log.h"
#include "pipeline/host.h"
#include "pipeline/items.h"
#include "worker/proc.h"
#include "worker/wire.h"

#ifndef EBB_VERSION
#define EBB_VERSION "0.0.0-unknown"
#endif

#define HELLO_S 30.0 /* a worker that does not say hello by then is hung */
#define EXIT_GRACE_S 5.0

typedef struct iso {
  wrk_wproc *w;
  long pid;
  char exe[PATH_MAX];
  char label[128];
  uint64_t peak;      /* as the worker reported it */
  uint64_t host_peak; /* likewise, host (pageable + pinned) */
  int measured;       /* usage taken before the release began */
  int used_known;
  uint64_t used;        /* the worker process's usage then (NVML) */
  uint64_t free_before; /* the driver's free memory then (0: unknown) */
  uint64_t reported;    /* bytes the worker says it handed back */
  unsigned seq;         /* shm names */
  /* while a request is in flight, a sampler thread notes what the worker
   * holds (NVML per-process usage), so that what a worker's death gives back
   * can be said: the driver frees it as the process dies, before any reap */
  pthread_mutex_t mu;
  uint64_t last_used; /* the last sample (guarded by mu) */
  uint64_t last_free; /* the driver's free memory at that sample */
  int last_known;
  int died;               /* the worker ended without being asked */
  uint64_t death_bytes;   /* what its death gave back */
  char loaddir[PATH_MAX]; /* the worker's private load directory ("" none): load_dir */
  int can_sleep;          /* its hello offered "sleep" (keeps its weights in host memory) */
} iso;

#define SAMPLE_MS 50

/* --- small helpers ------------------------------------------------------- */
static const char *pl_isolated_worker_path(char *buf, size_t n) {
  const char *env = getenv("EBB_WORKER");
  if (env && *env) {
    snprintf(buf, n, "%s", env);
    return buf;
  }
  char self[PATH_MAX];
  ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
  if (k > 0) {
    self[k] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) {
      *slash = '\0';
      int w = snprintf(buf, n, "%s/ebb-worker", self);
      if (w > 0 && (size_t)w < n && access(buf, X_OK) == 0)
        return buf;
    }
  }
  snprintf(buf, n, "ebb-worker");
  return buf;
}

static double default_timeout(void) {
  const char *e = getenv("EBB_WORKER_TIMEOUT_S");
  double v = e ? strtod(e, NULL) : 0;
  return v > 0 ? v : 300.0;
}

static double deadline_of(pl_sctx *c, double cap_s) {
  double now = base_now();
  double d = c->deadline > 0 ? c->deadline : now + default_timeout();
  if (cap_s > 0 && d > now + cap_s)
    d = now + cap_s;
  return d;
}

static int cuda(pl_sctx *c) { return dev_kind_of(c->dev) == EBB_DEVICE_CUDA; }

static uint64_t driver_free(pl_sctx *c) {
  dev_meminfo mi;
  if (!cuda(c) || dev_mem_info(c->dev, &mi) != 0 || mi.source == EBB_MEMINFO_NONE)
    return 0;
  return mi.free_bytes;
}

static uint64_t u64_of(json_t *o, const char *k) {
  json_t *v = json_object_get(o, k);
  return json_is_integer(v) && json_integer_value(v) > 0 ? (uint64_t)json_integer_value(v) : 0;
}

static void note_memory(iso *s, json_t *reply) {
  json_t *m = json_object_get(reply, "memory");
  uint64_t pk = u64_of(m, "peak_bytes"), hp = u64_of(m, "host_peak_bytes");
  if (pk > s->peak)
    s->peak = pk;
  if (hp > s->host_peak)
    s->host_peak = hp;
}

/* Fails the stage with the worker room's message (it names the pid). */
static int fail_with(ebb_stage_ctx *ctx, int rc) {
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", ebb_errmsg());
  return ebb_set_error(ctx, rc, msg);
}

/* Takes the worker's usage once, before anything is released. */
static void measure(pl_sctx *c, iso *s) {
  if (s->measured || !s->w)
    return;
  s->measured = 1;
  s->free_before = driver_free(c);
  if (cuda(c) && dev_process_used(c->dev, (pid_t)s->pid, &s->used) == 0)
    s->used_known = 1;
}

/* --- what a worker holds while it works, and what its death gave back --------- */
static void sample(pl_sctx *c, iso *s) {
  uint64_t used = 0;
  if (!cuda(c) || dev_process_used(c->dev, (pid_t)s->pid, &used) != 0 || !used)
    return; /* a dead worker is no longer listed: keep the last figure */
  uint64_t fr = driver_free(c);
  pthread_mutex_lock(&s->mu);
  s->last_used = used;
  s->last_free = fr;
  s->last_known = 1;
  pthread_mutex_unlock(&s->mu);
}

typedef struct sampler {
  pl_sctx *c;
  iso *s;
  atomic_int stop;
} sampler;

static void *sampler_main(void *arg) {
  sampler *sp = arg;
  while (!atomic_load(&sp->stop)) {
    sample(sp->c, sp->s);
    struct timespec ts = {0, SAMPLE_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

/* The worker ended without being asked (crashed, killed from outside, or by
 * the worker room on a timeout or cancel): what it held at its last sample
 * went back to the driver with it (else the driver's free memory from that
 * sample to now says it), counted and noted for the release line. */
static void note_death(pl_sctx *c, iso *s) {
  int status = 0;
  if (s->died || !wrk_wproc_reaped(s->w, &status))
    return;
  s->died = 1;
  pthread_mutex_lock(&s->mu);
  uint64_t used = s->last_used, fr = s->last_free;
  int known = s->last_known;
  pthread_mutex_unlock(&s->mu);
  uint64_t now = driver_free(c);
  uint64_t delta = fr && now > fr ? now - fr : 0;
  s->death_bytes = known ? used : delta;
  char how[96];
  wrk_wait_status_short(status, how, sizeof how);
  snprintf(c->release_note, sizeof c->release_note, "worker exited: %s", how);
  base_log(EBB_LOG_DEBUG, c->name,
           "worker pid %ld %s; it held %llu MiB (NVML, last sample%s); the driver's free memory "
           "rose %llu MiB since",
           s->pid, how, (unsigned long long)(used >> 20), known ? "" : ": none",
           (unsigned long long)(delta >> 20));
}

/* wrk_wproc_call with the sampler running; notes the worker's death. */
static int watched_call(pl_sctx *c, iso *s, const json_t *m, double deadline,
                        const atomic_int *cancel, json_t **r) {
  sampler sp = {.c = c, .s = s};
  atomic_init(&sp.stop, 0);
  pthread_t th;
  int started = cuda(c) && pthread_create(&th, NULL, sampler_main, &sp) == 0;
  int rc = wrk_wproc_call(s->w, m, deadline, cancel, r);
  if (started) {
    atomic_store(&sp.stop, 1);
    pthread_join(th, NULL);
  }
  if (rc)
    note_death(c, s);
  return rc;
}

/* Ends the worker (asking it to exit when ask), and counts what its exit
 * handed back in c->raw_freed (see isolated.h). */
static void finish(pl_sctx *c, iso *s, int ask, int log_line) {
  if (!s->w)
    return;
  note_death(c, s);
  if (s->died) { /* its death gave it back already: counted once, noted */
    char how[256];
    wrk_wproc_stop(s->w, 0, how);
    s->w = NULL;
    c->raw_freed += s->death_bytes;
    if (log_line && s->death_bytes >> 20)
      base_log_ev(EBB_LOG_INFO, c->name,
                  (base_log_field[]){EBB_LF_S("event", "released"), EBB_LF_S("stage", c->name),
                                     EBB_LF_U("released_bytes", s->death_bytes),
                                     EBB_LF_U("released_mib", s->death_bytes >> 20),
                                     EBB_LF_S("note", c->release_note)},
                  5, "released %llu MiB of GPU memory (%s)",
                  (unsigned long long)(s->death_bytes >> 20), c->release_note);
    if (log_line) /* said here: the instance's own release has nothing of it */
      c->release_note[0] = '\0';
    return;
  }
  measure(c, s);
  if (ask && wrk_wproc_alive(s->w)) {
    json_t *m = json_pack("{s:s}", "type", "exit"), *r = NULL;
    int rc = m ? wrk_wproc_call(s->w, m, base_now() + EXIT_GRACE_S + 30, NULL, &r) : EBB_ENOMEM;
    if (rc && r) { /* the stage's unload failed in the worker: the runner reports it */
      char msg[1024];
      snprintf(msg, sizeof msg, "%s (worker pid %ld)", ebb_errmsg(), s->pid);
      ebb_set_error(&c->pub, rc, msg);
    } else if (rc) {
      base_log(EBB_LOG_WARN, c->name, "%s", ebb_errmsg());
    }
    if (r)
      s->reported += u64_of(r, "released_bytes");
    json_decref(r);
    json_decref(m);
  }
  char how[256];
  int was_alive = wrk_wproc_alive(s->w);
  int unclean = wrk_wproc_stop(s->w, ask ? EXIT_GRACE_S : 0, how);
  s->w = NULL;
  if (ask && was_alive && unclean)
    base_log(EBB_LOG_WARN, c->name, "worker pid %ld %s at exit", s->pid, how);
  else
    base_log(EBB_LOG_DEBUG, c->name, "worker pid %ld %s", s->pid, how);
  uint64_t back = 0;
  if (s->used_known) {
    back = s->used;
  } else if (s->free_before) {
    uint64_t after = driver_free(c);
    back = after > s->free_before ? after - s->free_before : 0;
  } else if (!cuda(c)) {
    back = s->reported;
  }
  c->raw_freed += back;
  if (log_line && back >> 20) /* a failed load: the runner has no instance to log */
    base_log_ev(EBB_LOG_INFO, c->name,
                (base_log_field[]){EBB_LF_S("event", "released"), EBB_LF_S("stage", c->name),
                                   EBB_LF_U("released_bytes", back),
                                   EBB_LF_U("released_mib", back >> 20)},
                4, "released %llu MiB of %s", (unsigned long long)(back >> 20),
                cuda(c) ? "GPU memory" : "device memory (cpu)");
}

/* --- the private load directory ------------------------------------------ */
/* A load has no job of its own (a pipeline loaded over HTTP, kept loaded,
 * woken): what the worker writes while loading goes to a directory of its
 * own, ROOT/NAME-XXXXXX made 0700 (ROOT: the runner's scratch_dir, else
 * $TMPDIR, else /tmp), never to the server's working directory nor to a
 * job's; it lasts as long as the worker and goes with it (drop_load_dir).
 * Each run names its job's own directory. */
static int make_load_dir(ebb_stage_ctx *ctx, iso *s) {
  pl_sctx *c = pl_sctx_of(ctx);
  const char *root = c->scratch_dir, *tmpdir = getenv("TMPDIR");
  if (!root || !*root)
    root = tmpdir && *tmpdir ? tmpdir : "/tmp";
  char name[64]; /* the instance name, kept to what a file name may hold */
  snprintf(name, sizeof name, "%.63s", c->name[0] ? c->name : "stage");
  for (char *q = name; *q; q++)
    if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') ||
          *q == '-' || *q == '_' || *q == '.'))
      *q = '_';
  int n = snprintf(s->loaddir, sizeof s->loaddir, "%s/%s-XXXXXX", root, name);
  if (n < 0 || (size_t)n >= sizeof s->loaddir || base_mkdirs(root, 0700, "mkdir") != 0 ||
      !mkdtemp(s->loaddir)) {
    char msg[PATH_MAX + 200];
    snprintf(msg, sizeof msg,
             "isolated stage '%s': cannot make its private load directory "
             "under %s: %s",
             c->name, root,
             n < 0 || (size_t)n >= sizeof s->loaddir ? "path too long" : strerror(errno));
    s->loaddir[0] = '\0';
    return ebb_set_error(ctx, EBB_EIO, msg);
  }
  return 0;
}

/* Removes the load directory and all the worker left in it (the worker is gone). */
static void drop_load_dir(pl_sctx *c, iso *s) {
  if (!s->loaddir[0])
    return;
  if (base_rm_tree(s->loaddir) != 0)
    base_log(EBB_LOG_WARN, c->name, "could not remove its load directory %s", s->loaddir);
  s->loaddir[0] = '\0';
}

/* --- load --------------------------------------------------------------- */
/* Starts the worker named by the spec (or ebb-worker) with its arguments. */
static int spawn_worker(ebb_stage_ctx *ctx, iso *s, const json_t *spec) {
  pl_sctx *c = pl_sctx_of(ctx);
  const char *worker = json_string_value(json_object_get(spec, "worker"));
  json_t *wargs = json_object_get(spec, "worker_args");
  if (worker)
    snprintf(s->exe, sizeof s->exe, "%s", worker);
  else
    pl_isolated_worker_path(s->exe, sizeof s->exe);
  const char *base = strrchr(s->exe, '/');
  snprintf(s->label, sizeof s->label, "%.100s", base ? base + 1 : s->exe);
  size_t nargs = json_array_size(wargs);
  const char **args = NULL;
  if (nargs && !(args = calloc(nargs, sizeof *args)))
    return ebb_set_error(ctx, EBB_ENOMEM, "isolated stage: out of host memory");
  for (size_t i = 0; i < nargs; i++)
    args[i] = json_string_value(json_array_get(wargs, i));
  int rc = wrk_wproc_spawn(s->exe, args, nargs, s->label, &s->w);
  free(args);
  if (rc)
    return fail_with(ctx, rc);
  s->pid = (long)wrk_wproc_pid(s->w);
  base_log(EBB_LOG_DEBUG, c->name, "running in worker pid %ld (%s)", s->pid, s->exe);
  return 0;
}

/* The hello exchange: both ends must speak EBB_WORKER_PROTOCOL. */
static int say_hello(ebb_stage_ctx *ctx, iso *s, const char *stage) {
  pl_sctx *c = pl_sctx_of(ctx);
  json_t *r = NULL;
  json_t *m = json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:I}", "type", "hello", "protocol",
                        EBB_WORKER_PROTOCOL, "ebb_version", EBB_VERSION, "stage", stage, "name",
                        c->name, "shm_prefix", wrk_wproc_shm_prefix(s->w), "host_pid",
                        (json_int_t)getpid());
  if (!m)
    return ebb_set_error(ctx, EBB_ENOMEM, "isolated stage: out of host memory");
  int rc = watched_call(c, s, m, deadline_of(c, HELLO_S), c->cancel, &r);
  json_decref(m);
  if (rc) {
    json_decref(r);
    return fail_with(ctx, rc);
  }
  json_t *proto = json_object_get(r, "protocol");
  if (strcmp(json_string_value(json_object_get(r, "type")), "hello") ||
      json_integer_value(proto) != EBB_WORKER_PROTOCOL) {
    char msg[1024];
    snprintf(msg, sizeof msg,
             "worker pid %ld (%s): protocol error: expected a hello for protocol %d, got "
             "type '%s' protocol %lld",
             s->pid, s->label, EBB_WORKER_PROTOCOL, json_string_value(json_object_get(r, "type")),
             (long long)json_integer_value(proto));
    rc = ebb_set_error(ctx, EBB_EPROTO, msg);
  }
  s->can_sleep = json_is_true(json_object_get(json_object_get(r, "capabilities"), "sleep"));
  json_decref(r);
  return rc;
}

/* Asks the worker to load the stage with the spec's options; notes the memory it reports. */
static int send_load(ebb_stage_ctx *ctx, iso *s, const json_t *spec, const char *stage) {
  pl_sctx *c = pl_sctx_of(ctx);
  json_t *r = NULL;
  json_t *opts = json_object_get(spec, "options");
  json_t *m = json_pack("{s:s, s:s, s:o, s:s, s:s, s:s}", "type", "load", "stage", stage, "options",
                        opts ? json_incref(opts) : json_object(), "device",
                        dev_device_label(c->dev), "output_dir", s->loaddir, "log_format",
                        base_log_get_format() == EBB_LOG_JSON ? "json" : "text");
  if (!m)
    return ebb_set_error(ctx, EBB_ENOMEM, "isolated stage: out of host memory");
  if (c->deadline > 0)
    json_object_set_new(m, "seconds_left", json_real(c->deadline - base_now()));
  if (json_is_string(json_object_get(spec, "plugin")))
    json_object_set(m, "plugin", json_object_get(spec, "plugin"));
  int rc = watched_call(c, s, m, deadline_of(c, 0), c->cancel, &r);
  json_decref(m);
  if (rc && r) { /* the stage's own error, answered */
    char msg[1024];
    snprintf(msg, sizeof msg, "%s (worker pid %ld)", ebb_errmsg(), s->pid);
    rc = ebb_set_error(ctx, rc, msg);
  } else if (rc) {
    rc = fail_with(ctx, rc);
  } else {
    note_memory(s, r);
  }
  json_decref(r);
  return rc;
}

static int iso_load(ebb_stage_ctx *ctx, const char *spec_json, void **state) {
  pl_sctx *c = pl_sctx_of(ctx);
  json_error_t je;
  json_t *spec = json_loads(spec_json ? spec_json : "", 0, &je);
  iso *s = calloc(1, sizeof *s);
  if (s)
    pthread_mutex_init(&s->mu, NULL);
  int rc = 0;
  if (!s || !spec) {
    rc = ebb_set_error(ctx, s ? EBB_EINVAL : EBB_ENOMEM,
                       s ? "isolated stage: bad spec" : "isolated stage: out of host memory");
    goto out;
  }
  const char *stage = json_string_value(json_object_get(spec, "stage"));
  if (!(rc = make_load_dir(ctx, s)) && !(rc = spawn_worker(ctx, s, spec)) &&
      !(rc = say_hello(ctx, s, stage)))
    rc = send_load(ctx, s, spec, stage);
out:
  json_decref(spec);
  if (rc && s) {
    /* no instance is loaded, so no release follows: end the worker now */
    int code = c->err_code;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", c->err_msg);
    finish(c, s, wrk_wproc_alive(s->w), 1);
    drop_load_dir(c, s);
    c->err_code = code;
    snprintf(c->err_msg, sizeof c->err_msg, "%s", msg);
    pthread_mutex_destroy(&s->mu);
    free(s);
    s = NULL;
  }
  *state = s;
  return rc;
}

/* --- run ------------------------------------------------------------------ */
/* Stores an input's payload under this worker's prefix (pl_item_put_shm):
 * an item that already owns a shared-memory file (a previous worker's
 * output) is handed over by name with no copy, any other is written once
 * into a new file; every name is unlinked once the run is answered. */
typedef struct put_ctx {
  iso *s;
  json_t *names;
} put_ctx;

static int put_input(void *arg, const char *shm, size_t n, json_t *item, void **dst) {
  put_ctx *pc = arg;
  char name[128];
  snprintf(name, sizeof name, "%si%u", wrk_wproc_shm_prefix(pc->s->w), pc->s->seq++);
  int rc = pl_item_put_shm(name, shm, n, item, dst);
  if (!rc)
    json_array_append_new(pc->names, json_string(name));
  return rc;
}

/* Adds output item #i of the worker's result to out (the protocol's item
 * codec checks it; its payload must carry the hello's shm_prefix). The
 * payload is not copied: ebb takes the worker's file over. */
static int decode_item(iso *s, json_t *o, size_t i, ebb_items *out) {
  int rc = pl_item_from_wire(out, o, i, wrk_wproc_shm_prefix(s->w), 1);
  if (rc == EBB_EPROTO)
    return ebb_errctx(EBB_EPROTO, "worker pid %ld (%s): protocol error: result ", s->pid, s->label);
  return rc;
}

static int iso_run(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out) {
  pl_sctx *c = pl_sctx_of(ctx);
  iso *s = state;
  if (!wrk_wproc_alive(s->w)) {
    char msg[1024];
    snprintf(msg, sizeof msg, "worker pid %ld (%s) is no longer running", s->pid, s->label);
    return ebb_set_error(ctx, EBB_ESTATE, msg);
  }
  json_t *items = json_array(), *names = json_array(), *m = NULL, *r = NULL;
  int rc = 0;
  for (int i = 0; !rc && i < pl_items_count(in); i++)
    rc = pl_item_to_wire(pl_items_rec(in, i), c->dev, put_input, &(put_ctx){s, names}, items);
  if (rc) {
    rc = fail_with(ctx, rc);
    goto out;
  }
  /* this job's output directory: a stage kept loaded serves many jobs */
  m = json_pack("{s:s, s:O, s:s}", "type", "run", "items", items, "output_dir",
                c->output_dir ? c->output_dir : ".");
  if (c->deadline > 0)
    json_object_set_new(m, "seconds_left", json_real(c->deadline - base_now()));
  rc = watched_call(c, s, m, deadline_of(c, 0), c->cancel, &r);
  if (rc && r) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s (worker pid %ld)", ebb_errmsg(), s->pid);
    rc = ebb_set_error(ctx, rc, msg);
    goto out;
  } else if (rc) {
    rc = fail_with(ctx, rc);
    goto out;
  }
  note_memory(s, r);
  json_t *outs = json_object_get(r, "items");
  if (strcmp(json_string_value(json_object_get(r, "type")), "result") ||
      (outs && !json_is_array(outs))) {
    char msg[1024];
    snprintf(msg, sizeof msg,
             "worker pid %ld (%s): protocol error: expected a result with an "
             "\"items\" array, got type '%s'",
             s->pid, s->label, json_string_value(json_object_get(r, "type")));
    rc = ebb_set_error(ctx, EBB_EPROTO, msg);
    goto out;
  }
  for (size_t i = 0; !rc && i < json_array_size(outs); i++)
    if ((rc = decode_item(s, json_array_get(outs, i), i, out)))
      rc = fail_with(ctx, rc);
out:
  for (size_t i = 0; i < json_array_size(names); i++)
    wrk_shm_unlink(json_string_value(json_array_get(names, i)));
  json_decref(items);
  json_decref(names);
  json_decref(m);
  json_decref(r);
  return rc;
}

/* --- release / unload ----------------------------------------------------- */
static int iso_release(ebb_stage_ctx *ctx, void *state) {
  pl_sctx *c = pl_sctx_of(ctx);
  iso *s = state;
  if (!wrk_wproc_alive(s->w))
    return 0;
  measure(c, s);
  json_t *m = json_pack("{s:s}", "type", "release"), *r = NULL;
  int rc = watched_call(c, s, m, base_now() + 30, NULL, &r);
  if (!rc)
    s->reported += u64_of(r, "released_bytes");
  else if (r)
    rc = fail_with(ctx, rc);
  else
    base_log(EBB_LOG_WARN, c->name, "%s", ebb_errmsg());
  int answered = r != NULL;
  json_decref(m);
  json_decref(r);
  return answered ? rc : 0;
}

static void iso_unload(ebb_stage_ctx *ctx, void *state) {
  iso *s = state;
  if (!s)
    return;
  finish(pl_sctx_of(ctx), s, 1, 0);
  drop_load_dir(pl_sctx_of(ctx), s); /* the worker is gone: nothing writes there now */
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* --- sleep and wake in the worker -------------------------------------------- */
int pl_isolated_can_sleep(const void *state) {
  const iso *s = state;
  return s && s->w && s->can_sleep && wrk_wproc_alive(s->w);
}

/* One sleep or wake request; *answer is the reply (the caller's). */
static int ask_worker(ebb_stage_ctx *ctx, iso *s, const char *type, const char *want,
                      json_t **answer) {
  pl_sctx *c = pl_sctx_of(ctx);
  json_t *m = json_pack("{s:s}", "type", type), *r = NULL;
  if (!m)
    return ebb_set_error(ctx, EBB_ENOMEM, "isolated stage: out of host memory");
  int rc = watched_call(c, s, m, base_now() + default_timeout(), NULL, &r);
  json_decref(m);
  if (!rc && strcmp(json_string_value(json_object_get(r, "type")), want))
    rc = ebb_seterr(EBB_EPROTO, "worker pid %ld (%s): protocol error: expected '%s' after %s",
                    s->pid, s->label, want, type);
  if (rc) {
    json_decref(r);
    return fail_with(ctx, rc);
  }
  *answer = r;
  s->measured = 0; /* what it holds changed: a later release measures again */
  return 0;
}

static uint64_t worker_used(pl_sctx *c, iso *s, int *known) {
  uint64_t used = 0;
  *known = cuda(c) && dev_process_used(c->dev, (pid_t)s->pid, &used) == 0;
  return used;
}

int pl_isolated_sleep(ebb_stage_ctx *ctx, void *state, uint64_t *released, uint64_t *backup) {
  pl_sctx *c = pl_sctx_of(ctx);
  iso *s = state;
  int k0 = 0, k1 = 0;
  uint64_t before = worker_used(c, s, &k0);
  json_t *r = NULL;
  int rc = ask_worker(ctx, s, "sleep", "asleep", &r);
  if (rc)
    return rc;
  uint64_t after = worker_used(c, s, &k1);
  *released = k0 && k1 ? (before > after ? before - after : 0) : u64_of(r, "released_bytes");
  *backup = u64_of(r, "backup_bytes");
  json_decref(r);
  return 0;
}

int pl_isolated_wake(ebb_stage_ctx *ctx, void *state, uint64_t *restored) {
  json_t *r = NULL;
  int rc = ask_worker(ctx, state, "wake", "awake", &r);
  if (rc)
    return rc;
  *restored = u64_of(r, "restored_bytes");
  note_memory(state, r);
  json_decref(r);
  return 0;
}

uint64_t pl_isolated_peak(const void *state) { return state ? ((const iso *)state)->peak : 0; }
uint64_t pl_isolated_host_peak(const void *state) {
  return state ? ((const iso *)state)->host_peak : 0;
}
long pl_isolated_pid(const void *state) {
  const iso *s = state;
  return s && s->w ? s->pid : 0;
}

static const ebb_stage proxy = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "isolated",
    .version = 1,
    .description = "runs a stage in a worker process (docs/worker-protocol.md)",
    .options_schema = "{}",
    .needs_gpu = 0, /* this process needs no GPU for it: the worker does */
    .load = iso_load,
    .run = iso_run,
    .unload = iso_unload,
    .release = iso_release,
};

const ebb_stage *pl_isolated_stage(void) { return &proxy; }

json_t *pl_isolated_spec(const pl_stage_def *d, const ebb_stage *real, json_t *merged) {
  json_t *o = json_pack("{s:s, s:O, s:I}", "stage", d->stage, "options",
                        merged ? merged : d->options, "version",
                        (json_int_t)(real ? real->version : 0));
  if (o && d->worker) {
    json_object_set_new(o, "worker", json_string(d->worker));
    json_object_set_new(o, "worker_args",
                        d->worker_args ? json_incref(d->worker_args) : json_array());
  }
  return o;
}
