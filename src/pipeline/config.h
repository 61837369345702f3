/* Pipeline definitions: the built-in pipelines and config files (docs/architecture.md, "pipeline"):
 *   {"pipelines": {"NAME": {"stages": [{"stage": "synthetic", "name": "a",
 *        "options": {...}, "isolate": false, "timeout_s": 30, "cache": true}],
 *      "release": "after-stage", "description": "..."}},
 *    "plugin_dirs": ["dir", ...]}
 * Stage entry keys: stage (required), name (default: the stage), options
 * (object), isolate (bool: run it in an ebb-worker process, see
 * docs/worker-protocol.md), worker (path of any executable that speaks the
 * worker protocol; implies isolate; a path with '/' is relative to the
 * config's directory, a bare name is found in PATH), worker_args (array of
 * strings, its arguments), timeout_s (number > 0: load + run deadline),
 * cache (bool; unset: off unless `ebb run --cache`). Pipeline keys: stages
 * (required, non-empty), release, description, allow_options (array of
 * "STAGE.OPTION": operator-only options a job of this pipeline may set;
 * STAGE is the stage entry's name), allow_url_hosts (array of "HOST" or
 * "HOST:PORT": where a job-set URL option may point; see pipeline/trust.h). Unknown keys inside a
 * pipeline or stage entry are errors, and so are top-level keys other than
 * pipelines, plugin_dirs and server (the server's settings, read by it). Relative plugin_dirs are relative
 * to the config file's directory. A config pipeline replaces a built-in one
 * of the same name. Every error is EBB_ECONFIG with a message naming the
 * file and, for JSON syntax, the line and column. */
#ifndef EBB_PIPELINE_CONFIG_H
#define EBB_PIPELINE_CONFIG_H

#include <stdint.h>
#include <jansson.h>
#include <stddef.h>

#include "ebb/error.h"

/* --- release policy ---------------------------------------------------------- */
typedef enum {
  EBB_POLICY_AFTER_STAGE = 0, /* default */
  EBB_POLICY_AFTER_JOB,
  EBB_POLICY_IDLE,
  EBB_POLICY_NEVER,
  EBB_POLICY_SLEEP, /* stages stay loaded idle_s seconds after the job (0: none),
                       then sleep (weights to host, device memory back) */
} pl_policy_kind;
typedef struct pl_policy {
  pl_policy_kind kind;
  double idle_s; /* EBB_POLICY_IDLE, EBB_POLICY_SLEEP */
} pl_policy;
/* "after-stage" | "after-job" | "idle:SECONDS" | "never" | "sleep" |
 * "sleep:SECONDS"; EBB_EINVAL names s. */
int pl_policy_parse(const char *s, pl_policy *out);
/* Writes the policy's text form into buf; returns buf. */
const char *pl_policy_format(const pl_policy *p, char *buf, size_t n);
/* When something idle leaves its device: the one rule, used for a stage
 * kept idle by the runner (pl_runner_evict_idle) and for a pipeline kept
 * resident on a device (pipeline/residency.h). Idle for idle_s seconds under
 * policy p: it stays until its keep time is over, the policy's seconds
 * under idle:S and sleep[:S], else keep_default_s; then it goes asleep under
 * sleep[:S] (weights to host memory, device memory back) and is released
 * (unloaded) otherwise. "never" keeps it. */
typedef enum { EBB_LEAVE_STAY, EBB_LEAVE_SLEEP, EBB_LEAVE_RELEASE } pl_leave_how;
pl_leave_how pl_policy_leave(const pl_policy *p, double idle_s, double keep_default_s);

/* --- definitions ------------------------------------------------------------------ */
typedef struct pl_stage_def {
  char *stage;         /* registry name */
  char *name;          /* instance name (log scope), unique in the pipeline */
  json_t *options;     /* object (owned reference), never NULL */
  int isolate;         /* run in a worker process */
  char *worker;        /* NULL: ebb-worker; else the executable (implies isolate) */
  json_t *worker_args; /* array of strings (owned) when worker is set, else NULL */
  double timeout_s;    /* 0: none */
  int cache;           /* 1: the result cache may serve it; 0: never; -1: unset,
                       the run decides (ebb run --cache) */
} pl_stage_def;

typedef struct pl_def {
  char *name;
  char *description; /* may be NULL */
  pl_stage_def *stages;
  size_t nstages;
  int has_policy;
  pl_policy policy;
  double timeout_s; /* a job's deadline on the server (0: --job-timeout) */
  /* Placement (ebb serve --devices, docs/architecture.md): */
  uint64_t expected_bytes; /* "expected_mib": the need before a first measured run; 0: none */
  uint32_t pin_cuda;       /* "devices": bit N pins to cuda:N; 0 with pin_cpu 0: any device */
  int pin_cpu;             /* "devices" names "cpu" */
  int evictable;           /* "evictable" (default true): another process's broker
                              request may unload or sleep it (docs/broker.md) */
  char *origin;            /* "built-in" or the config path */
  /* Trust (pipeline/trust.h): "allow_options" ("STAGE.OPTION" each) and
   * "allow_url_hosts" ("host" or "host:port", lower case). */
  char **allow_options;
  size_t nallow_options;
  char **allow_url_hosts;
  size_t nallow_url_hosts;
} pl_def;

typedef struct pl_config {
  char *path; /* NULL: built-ins only */
  pl_def *pipelines;
  size_t npipelines;
  char **plugin_dirs; /* resolved against the config's directory */
  size_t nplugin_dirs;
} pl_config;

/* The built-in pipelines plus, when path is non-NULL, the file's. */
int pl_config_load(const char *path, pl_config **out);
/* Same, from a JSON text (name is used in messages). */
int pl_config_load_string(const char *text, const char *name, pl_config **out);
void pl_config_free(pl_config *c);
const pl_def *pl_config_pipeline(const pl_config *c, const char *name);


#endif
