/* ebb-worker: runs one stage instance (built-in or plugin) in a process of
 * its own, driven by ebb over the worker protocol (docs/worker-protocol.md).
 * It opens its own device from the spec the host sends and has its own
 * allocator, so everything it takes on the device, its context included,
 * goes back when it exits.
 *
 * Started by ebb with the protocol socket as fd $EBB_WORKER_FD (3) and
 * $EBB_WORKER_PARENT; it dies with its parent (PR_SET_PDEATHSIG) and exits
 * when the socket closes. Not meant to be run by hand. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "base/log.h"
#include "pipeline/host.h"
#include "pipeline/instance.h"
#include "pipeline/items.h"
#include "pipeline/registry.h"
#include "worker/wire.h"

#ifndef EBB_VERSION
#define EBB_VERSION "0.0.0-unknown"
#endif

typedef struct wk {
  int fd;
  wrk_wire_reader rd; /* on fd: a request costs one recv */
  char prefix[128];   /* shm names of our outputs */
  char name[128];     /* instance name (log scope) */
  unsigned seq;
  pl_registry *reg;
  dev_device *dev;
  mem_allocator *alloc;
  const ebb_stage *st;
  pl_instance *inst;  /* the stage: its load, run and release (instance.h) */
  char outdir[4096];  /* the directory the instance is bound to */
  char loaddir[4096]; /* load's (a private one under ebb): between runs, at release and exit */
} wk;

static int send_msg(wk *w, json_t *m) {
  int rc = m ? wrk_wire_send(w->fd, m) : EBB_ENOMEM;
  json_decref(m);
  return rc;
}

static int send_error(wk *w, int code, const char *msg) {
  if (code >= 0)
    code = EBB_ESTAGE;
  return send_msg(w, json_pack("{s:s, s:s, s:s}", "type", "error", "code", ebb_errname(code),
                               "message", msg && *msg ? msg : ebb_strerror(code)));
}

static json_t *memory(wk *w) {
  mem_owner_stats os = {.size = sizeof os};
  mem_alloc_stats as = {.size = sizeof as};
  ebb_owner *owner = w->inst ? pl_instance_owner(w->inst) : NULL;
  if (owner)
    mem_owner_get_stats(owner, &os);
  if (w->alloc)
    mem_allocator_get_stats(w->alloc, &as);
  json_t *m = json_pack("{s:I, s:I, s:I, s:I}", "peak_bytes", (json_int_t)os.bytes.peak,
                        "allocated_bytes", (json_int_t)os.bytes.current, "reserved_bytes",
                        (json_int_t)as.reserved.current, "host_peak_bytes",
                        (json_int_t)(owner ? pl_sctx_host_peak(pl_instance_ctx(w->inst)) : 0));
  uint64_t used;
  if (w->dev && dev_kind_of(w->dev) == EBB_DEVICE_CUDA &&
      dev_process_used(w->dev, getpid(), &used) == 0)
    json_object_set_new(m, "process_bytes", json_integer((json_int_t)used));
  return m;
}

/* Points the instance at this request (msg NULL: at none, between runs):
 * the output directory (the run's job's, else load's) and the request's
 * deadline; clears a previous timeout and error. */
static void bind(wk *w, json_t *msg) {
  json_t *left = json_object_get(msg, "seconds_left");
  const char *dir = json_string_value(json_object_get(msg, "output_dir"));
  snprintf(w->outdir, sizeof w->outdir, "%s", dir ? dir : w->loaddir);
  pl_instance_bind(w->inst, NULL, w->outdir,
                   json_is_number(left) ? base_now() + json_number_value(left) : 0);
}

/* --- load --------------------------------------------------------------------- */
/* Opens the device and the allocator, and creates the stage instance. */
static int open_instance(wk *w, const char *device, const char *opts) {
  mem_alloc_opts ao = {.size = sizeof ao, .seg_kind = EBB_SEG_AUTO, .backtraces = -1};
  int rc = dev_open(device ? device : "cpu", &w->dev);
  if (!rc)
    rc = mem_allocator_create(w->dev, &ao, &w->alloc);
  if (rc)
    return rc;
  pl_instance_spec spec = {.size = sizeof spec,
                           .dev = w->dev,
                           .alloc = w->alloc,
                           .stage = w->st,
                           .pipeline = "ebb-worker",
                           .name = w->name,
                           .options = opts,
                           .output_dir = w->outdir};
  return pl_instance_create(&spec, &w->inst);
}

static int on_load(wk *w, json_t *msg) {
  if (w->inst)
    return send_error(w, EBB_ESTATE, "ebb-worker: a stage is already loaded");
  const char *stage = json_string_value(json_object_get(msg, "stage"));
  const char *device = json_string_value(json_object_get(msg, "device"));
  const char *plugin = json_string_value(json_object_get(msg, "plugin"));
  const char *outdir = json_string_value(json_object_get(msg, "output_dir"));
  const char *logfmt = json_string_value(json_object_get(msg, "log_format"));
  json_t *options = json_object_get(msg, "options"), *merged = NULL;
  if (!stage)
    return send_error(w, EBB_EPROTO, "ebb-worker: load needs a string \"stage\"");
  if (logfmt)
    base_log_set_format(!strcmp(logfmt, "json") ? EBB_LOG_JSON : EBB_LOG_TEXT);
  snprintf(w->loaddir, sizeof w->loaddir, "%s", outdir ? outdir : ".");
  snprintf(w->outdir, sizeof w->outdir, "%s", w->loaddir);
  int rc = pl_registry_create(&w->reg);
  if (!rc && plugin)
    rc = pl_registry_load_plugin(w->reg, plugin);
  if (!rc)
    rc = pl_registry_load_env(w->reg);
  if (rc)
    return send_error(w, rc, ebb_errmsg());
  w->st = pl_registry_find(w->reg, stage, NULL);
  if (!w->st) {
    char m[512];
    snprintf(m, sizeof m, "ebb-worker: unknown stage '%s'", stage);
    return send_error(w, EBB_ENOTFOUND, m);
  }
  char where[300];
  snprintf(where, sizeof where, "ebb-worker: stage '%s'", w->name);
  if ((rc = pl_stage_validate_options(w->st, options, where, &merged)))
    return send_error(w, rc, ebb_errmsg());
  char *opts = json_dumps(merged, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(merged);
  if (!opts)
    return send_error(w, EBB_ENOMEM, "ebb-worker: out of host memory");
  rc = open_instance(w, device, opts);
  free(opts);
  if (rc)
    return send_error(w, rc, ebb_errmsg());
  bind(w, msg);
  if ((rc = pl_instance_load(w->inst)))
    return send_error(w, rc, pl_instance_error(w->inst));
  return send_msg(w, json_pack("{s:s, s:o}", "type", "loaded", "memory", memory(w)));
}

/* --- run ------------------------------------------------------------------------ */
/* Adds input item #i of a run to in (the protocol's item codec checks it;
 * its payload must carry the hello's shm_prefix, as ebb names them). The
 * payload is mapped from ebb's file, not copied. */
static int read_item(wk *w, json_t *o, size_t i, ebb_items *in) {
  int rc = pl_item_from_wire(in, o, i, w->prefix, 0);
  if (rc == EBB_EPROTO)
    return ebb_errctx(rc, "ebb-worker: protocol error: input ");
  return rc;
}

/* An output's payload, written once into a new file under our prefix. */
static int put_out(void *arg, const char *shm, size_t n, json_t *o, void **dst) {
  wk *w = arg;
  char name[200];
  snprintf(name, sizeof name, "%so%u", w->prefix, w->seq++);
  return pl_item_put_shm(name, shm, n, o, dst);
}

static int on_run(wk *w, json_t *msg) {
  if (!w->inst || !pl_instance_is_loaded(w->inst))
    return send_error(w, EBB_ESTATE, "ebb-worker: run before a successful load");
  ebb_items *in = NULL, *out = NULL;
  json_t *items = json_object_get(msg, "items"), *res = NULL;
  int rc = pl_items_create(NULL, NULL, &in);
  for (size_t i = 0; !rc && i < json_array_size(items); i++)
    rc = read_item(w, json_array_get(items, i), i, in);
  if (!rc)
    rc = pl_items_create(pl_instance_owner(w->inst), in, &out);
  if (rc) {
    rc = send_error(w, rc, ebb_errmsg());
    goto out;
  }
  bind(w, msg);
  if ((rc = pl_instance_run(w->inst, in, out))) {
    rc = send_error(w, rc, pl_instance_error(w->inst));
    goto out;
  }
  json_t *arr = json_array();
  for (int i = 0; !rc && i < pl_items_count(out); i++)
    rc = pl_item_to_wire(pl_items_rec(out, i), w->dev, put_out, w, arr);
  if (rc) {
    json_decref(arr);
    rc = send_error(w, rc, ebb_errmsg());
    goto out;
  }
  pl_items_destroy(out); /* device tensors back before the memory figures */
  out = NULL;
  res = json_pack("{s:s, s:o, s:o}", "type", "result", "items", arr, "memory", memory(w));
  rc = send_msg(w, res);
out:
  pl_items_destroy(out);
  pl_items_destroy(in);
  if (w->inst)
    bind(w, NULL); /* the job's directory is not the stage's once the run is over */
  return rc;
}

/* --- release / exit --------------------------------------------------------- */
/* The stage's release is its instance's (instance.c: drop, unload, leaks,
 * hand back); what is left here is the process's, as the runner's vacate
 * does it: the process-wide release callbacks, then trim, the pinned pool
 * and, at exit, the device context. Returns the bytes handed back. */
static uint64_t release_process(wk *w, unsigned context) {
  if (!w->alloc)
    return 0;
  mem_release_callbacks_of(NULL, NULL, NULL);
  mem_release_result rr = {.size = sizeof rr};
  mem_release(w->alloc, EBB_RELEASE_TRIM | EBB_RELEASE_PINNED | context, &rr);
  return rr.released_bytes;
}

/* The protocol's release: the stage drops its caches and stays loaded. */
static int on_release(wk *w) {
  pl_instance_report rep = {.size = sizeof rep};
  if (w->inst && pl_instance_is_loaded(w->inst))
    pl_instance_drop(w->inst, &rep); /* a failing stage release is logged there */
  uint64_t released = rep.released_bytes + release_process(w, 0);
  return send_msg(w, json_pack("{s:s, s:I, s:o}", "type", "released", "released_bytes",
                               (json_int_t)released, "memory", memory(w)));
}

/* Releases the instance (its whole sequence; the host says the release
 * line), then the process's part with the context; answers bye (or the
 * unload's error). */
static int on_exit_msg(wk *w) {
  pl_instance_report rep = {.size = sizeof rep};
  if (w->inst && pl_instance_state_of(w->inst) != EBB_INSTANCE_RELEASED)
    pl_instance_release(w->inst, &(pl_instance_plan){.no_line = 1}, &rep);
  uint64_t released = rep.released_bytes + release_process(w, EBB_RELEASE_CONTEXT);
  if (rep.unload_error)
    return send_error(w, rep.unload_error, rep.unload_message);
  return send_msg(w, json_pack("{s:s, s:I, s:I}", "type", "bye", "released_bytes",
                               (json_int_t)released, "leaked_bytes", (json_int_t)rep.leaked_bytes));
}

static void teardown(wk *w) {
  pl_instance_destroy(w->inst); /* released quietly if the host never said exit */
  mem_allocator_destroy(w->alloc);
  dev_close(w->dev);
  pl_registry_destroy(w->reg);
}

static int on_hello(wk *w, json_t *msg) {
  const char *prefix = json_string_value(json_object_get(msg, "shm_prefix"));
  const char *name = json_string_value(json_object_get(msg, "name"));
  const char *stage = json_string_value(json_object_get(msg, "stage"));
  snprintf(w->prefix, sizeof w->prefix, "%s",
           prefix && wrk_shm_name_ok(prefix) ? prefix : "ebb-worker-");
  snprintf(w->name, sizeof w->name, "%s", name ? name : stage ? stage : "worker");
  return send_msg(w, json_pack("{s:s, s:i, s:s, s:s, s:I, s:{s:[ssss], s:[ss]}}", "type", "hello",
                               "protocol", EBB_WORKER_PROTOCOL, "worker", "ebb-worker", "version",
                               EBB_VERSION, "pid", (json_int_t)getpid(), "capabilities", "items",
                               "audio", "tensor", "json", "file", "devices", "cpu", "cuda"));
}

static void usage(FILE *f) {
  fprintf(f, "usage: ebb-worker  (started by ebb for stages with \"isolate\": true)\n\n"
             "Runs one stage instance in a process of its own, driven over the worker\n"
             "protocol (docs/worker-protocol.md) on the socket $EBB_WORKER_FD.\n");
}

int main(int argc, char **argv) {
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    usage(stdout);
    return 0;
  }
  if (argc > 1 && !strcmp(argv[1], "--version")) {
    printf("ebb-worker %s (protocol %d)\n", EBB_VERSION, EBB_WORKER_PROTOCOL);
    return 0;
  }
  const char *fds = getenv("EBB_WORKER_FD"), *parent = getenv("EBB_WORKER_PARENT");
  if (!fds) {
    fprintf(stderr, "ebb-worker: EBB_WORKER_FD is not set: ebb starts this program itself\n");
    usage(stderr);
    return 2;
  }
  /* die with the host, even when it is SIGKILLed; it may have died already */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (parent && atol(parent) != (long)getppid())
    return 1;
  signal(SIGPIPE, SIG_IGN);
  static wk w; /* the reader's buffer is 64 KiB: not on the stack */
  w.fd = atoi(fds);
  wrk_wire_reader_init(&w.rd, w.fd);
  w.rd.spin_us = wrk_wire_spin_us(NULL); /* the host checked the value */
  snprintf(w.name, sizeof w.name, "worker");
  int status = 0;
  for (;;) {
    json_t *msg = NULL;
    int rc = wrk_wire_read(&w.rd, 0, NULL, &msg);
    if (rc == EBB_EIO) /* the host closed: we are done */
      break;
    if (rc) {
      fprintf(stderr, "ebb-worker: %s\n", ebb_errmsg());
      send_error(&w, EBB_EPROTO, ebb_errmsg());
      status = 1;
      break;
    }
    const char *type = json_string_value(json_object_get(msg, "type"));
    int done = 0;
    if (!strcmp(type, "hello"))
      rc = on_hello(&w, msg);
    else if (!strcmp(type, "load"))
      rc = on_load(&w, msg);
    else if (!strcmp(type, "run"))
      rc = on_run(&w, msg);
    else if (!strcmp(type, "release"))
      rc = on_release(&w);
    else if (!strcmp(type, "exit"))
      rc = on_exit_msg(&w), done = 1;
    else {
      char m[200];
      snprintf(m, sizeof m, "ebb-worker: unknown message type '%.64s'", type);
      rc = send_error(&w, EBB_EPROTO, m);
    }
    json_decref(msg);
    if (done || (rc && rc != EBB_EPROTO)) /* cannot answer: the host is gone */
      break;
  }
  teardown(&w);
  return status;
}
