/* The runner on the fake GPU, in-process: release policies (after-stage,
 * after-job, idle with reuse, expiry and eviction on out-of-memory, never),
 * failures at load/run/unload, cancellation, timeouts, leaks, memory outside
 * ebb, the result cache, and errors found before any stage runs. After every
 * job under a releasing policy the allocator holds nothing and the context is
 * released. The result carries each stage's figures (name, the bytes of its
 * own release facts, the peak of its `done` line), for at most
 * PL_JOB_STAGES stages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ebb/events.h"
#include "pipeline/host.h"
#include "pipeline/runner.h"
#include "pipeline_util.h"

static char tmp[1024], input[1100], outdir[1100], cachedir[1100];

static pl_config *cfg_of(const char *json) {
  pl_config *c = NULL;
  if (pl_config_load_string(json, "test.json", &c) != 0) {
    fprintf(stderr, "config: %s\n", ebb_errmsg());
    exit(1);
  }
  return c;
}

static pl_runner *runner(int oneshot, const char *cache) {
  pl_runner_opts o = {.size = sizeof o,
                      .dev = dev,
                      .alloc = alloc,
                      .reg = reg,
                      .cache_dir = cache,
                      .hook = "",
                      .oneshot = oneshot,
                      .cache_default = cache != NULL};
  pl_runner *r = NULL;
  REQUIRE(pl_runner_create(&o, &r) == 0);
  return r;
}

static int run_job(pl_runner *r, pl_config *c, const char *pipe, const char *policy,
                   const atomic_int *cancel, pl_job_result *res) {
  pl_policy pol;
  if (policy)
    REQUIRE(pl_policy_parse(policy, &pol) == 0);
  const pl_def *p = pl_config_pipeline(c, pipe);
  REQUIRE(p);
  pl_job job = {.size = sizeof job,
                .pipeline = p,
                .input = input,
                .output_dir = outdir,
                .policy = policy ? &pol : NULL,
                .cancel = cancel};
  return pl_runner_run(r, &job, res);
}

static const char *two = "{\"pipelines\": {\"two\": {\"stages\": ["
                         "{\"stage\": \"synthetic\", \"name\": \"a\", \"cache\": false, "
                         "\"options\": {\"weights_mib\": 64, \"activations_mib\": 16, "
                         "\"cache_mib\": 16}},"
                         "{\"stage\": \"synthetic\", \"name\": \"b\", \"cache\": false, "
                         "\"options\": {\"weights_mib\": 96, \"activations_mib\": 16, "
                         "\"cache_mib\": 16}}]}}}";

static void test_after_stage(void) {
  pl_config *c = cfg_of(two);
  pl_runner *r = runner(1, NULL);
  pl_job_result res;
  capture();
  CHECK_EQ_INT(run_job(r, c, "two", NULL, NULL, &res), 0);
  char *log = captured();
  CHECK_EQ_INT(res.stages_run, 2);
  CHECK_EQ_INT(pl_runner_loaded(r), 0);
  CHECK_EQ_U64(reserved(), 0);
  CHECK_MSG(!dev_ctx_active(dev), "the context is released after the job");
  /* weights + activations + cache of each stage went back, and the context */
  CHECK(res.released_bytes >= (uint64_t)(96 + 32 + 64 + 32 + 300) << 20);
  CHECK(has(log, "[a] done in "));
  CHECK(has(log, "[a] released ") && has(log, "[b] released "));
  CHECK(has(log, "[pipeline two] idle: device context released, 300 MiB of GPU memory back to the "
                 "driver"));
  CHECK(!has(log, "[pipeline two] released")); /* not a stage line */
  char rj[1200];
  snprintf(rj, sizeof rj, "%s/result.json", outdir);
  json_t *j = json_load_file(rj, 0, NULL);
  CHECK_MSG(j != NULL, "result.json written");
  json_decref(j);
  free(log);
  pl_runner_destroy(r);
  pl_config_free(c);
}

/* The bus's releases while a job runs: bytes per owner (stage) name. */
typedef struct rel_sum {
  char owner[8][32];
  uint64_t bytes[8];
  int n;
} rel_sum;

static void on_release(void *ctx, const ebb_event *ev) {
  rel_sum *t = ctx;
  if (ev->kind != EBB_EVENT_RELEASED || !ev->owner)
    return;
  int i = 0;
  while (i < t->n && strcmp(t->owner[i], ev->owner))
    i++;
  if (i == t->n && t->n < 8)
    snprintf(t->owner[t->n++], sizeof t->owner[0], "%s", ev->owner);
  if (i < t->n)
    t->bytes[i] += ev->bytes;
}

static uint64_t released_by(const rel_sum *t, const char *owner) {
  for (int i = 0; i < t->n; i++)
    if (!strcmp(t->owner[i], owner))
      return t->bytes[i];
  return 0;
}

/* The MiB of stage's `[STAGE] done in S s, peak N MiB` line in log; -1: none. */
static long done_peak_mib(const char *log, const char *stage) {
  char at[64];
  snprintf(at, sizeof at, "[%s] done in ", stage);
  const char *l = log ? strstr(log, at) : NULL;
  const char *pk = l ? strstr(l, ", peak ") : NULL;
  long mib = -1;
  if (!pk || sscanf(pk, ", peak %ld MiB", &mib) != 1)
    return -1;
  return mib;
}

/* Each stage's figures in the result: its name, the bytes of its own
 * release facts (after-stage: each stage's; after-job: none, the releases
 * come at the job's end) and the peak its `done` line says. */
static void test_stage_figures(void) {
  pl_config *c = cfg_of(two);
  pl_runner *r = runner(1, NULL);
  const char *policies[] = {"after-stage", "after-job"};
  for (int k = 0; k < 2; k++) {
    pl_job_result res;
    rel_sum t = {0};
    ebb_subscription *sub = NULL;
    REQUIRE(ebb_events_subscribe(on_release, &t, &sub) == 0);
    capture();
    CHECK_EQ_INT(run_job(r, c, "two", policies[k], NULL, &res), 0);
    char *log = captured();
    ebb_events_unsubscribe(sub);
    CHECK_MSG(res.nstages == 2 && res.stages_over == 0, "%s: %d stages' figures (%d over), not 2",
              policies[k], res.nstages, res.stages_over);
    for (int i = 0; i < res.nstages && i < 2; i++) {
      const pl_stage_figures *f = &res.stages[i];
      CHECK_EQ_STR(f->name, i ? "b" : "a");
      uint64_t bus = k ? 0 : released_by(&t, f->name);
      CHECK_MSG(f->released_bytes == bus,
                "%s: stage %s released %llu bytes in the result, %llu "
                "in its release facts while it ran",
                policies[k], f->name, (unsigned long long)f->released_bytes,
                (unsigned long long)bus);
      CHECK_MSG(f->measured && (long)(f->peak_bytes >> 20) == done_peak_mib(log, f->name),
                "%s: stage %s peak %llu MiB (measured %d); its done line says %ld MiB", policies[k],
                f->name, (unsigned long long)(f->peak_bytes >> 20), f->measured,
                done_peak_mib(log, f->name));
    }
    /* after-stage: a's weights, activations and cache went back after it */
    CHECK(k || res.stages[0].released_bytes >= (uint64_t)96 << 20);
    CHECK(!k || released_by(&t, "a") >= (uint64_t)96 << 20); /* at the job's end */
    free(log);
  }
  pl_runner_destroy(r);
  pl_config_free(c);
}

/* A pipeline longer than PL_JOB_STAGES runs every stage; the result has the
 * first PL_JOB_STAGES stages' figures and counts the rest. */
static void test_stage_figures_bound(void) {
  enum { N = PL_JOB_STAGES + 2 };
  size_t cap = 64 + (size_t)N * 160, len = 0;
  char *json = malloc(cap);
  REQUIRE(json);
  len += (size_t)snprintf(json + len, cap - len, "{\"pipelines\": {\"long\": {\"stages\": [");
  for (int i = 0; i < N; i++)
    len += (size_t)snprintf(json + len, cap - len,
                            "%s{\"stage\": \"synthetic\", \"name\": \"s%d\", \"cache\": false, "
                            "\"options\": {\"weights_mib\": 1, \"activations_mib\": 0}}",
                            i ? "," : "", i);
  snprintf(json + len, cap - len, "]}}}");
  pl_config *c = cfg_of(json);
  free(json);
  pl_runner *r = runner(1, NULL);
  pl_job_result res;
  capture();
  CHECK_EQ_INT(run_job(r, c, "long", NULL, NULL, &res), 0);
  free(captured());
  CHECK_EQ_INT(res.stages_run, N);
  CHECK_MSG(res.nstages == PL_JOB_STAGES && res.stages_over == N - PL_JOB_STAGES,
            "%d stages' figures and %d over, expected %d and %d", res.nstages, res.stages_over,
            PL_JOB_STAGES, N - PL_JOB_STAGES);
  char last[16];
  snprintf(last, sizeof last, "s%d", PL_JOB_STAGES - 1);
  CHECK_EQ_STR(res.stages[PL_JOB_STAGES - 1].name, last);
  for (int i = 0; i < PL_JOB_STAGES; i++)
    CHECK_MSG(res.stages[i].measured && res.stages[i].released_bytes >= (uint64_t)1 << 20,
              "stage s%d: measured %d, released %llu bytes", i, res.stages[i].measured,
              (unsigned long long)res.stages[i].released_bytes);
  pl_runner_destroy(r);
  pl_config_free(c);
}

typedef struct probe {
  int loaded_at_b;
  uint64_t reserved_at_b;
  pl_runner *r;
} probe;
static void probe_cb(void *arg, int index, int count, const char *stage, int done) {
  probe *p = arg;
  if (index == 1 && !done) {
    p->loaded_at_b = pl_runner_loaded(p->r);
    p->reserved_at_b = reserved();
  }
}

static void test_after_job(void) {
  pl_config *c = cfg_of(two);
  pl_runner *r = runner(1, NULL);
  probe pr = {.r = r};
  pl_policy pol = {EBB_POLICY_AFTER_JOB, 0};
  pl_job job = {.size = sizeof job,
                .pipeline = pl_config_pipeline(c, "two"),
                .input = input,
                .output_dir = outdir,
                .policy = &pol,
                .progress = probe_cb,
                .progress_arg = &pr};
  pl_job_result res;
  capture();
  CHECK_EQ_INT(pl_runner_run(r, &job, &res), 0);
  char *log = captured();
  CHECK_EQ_INT(pr.loaded_at_b, 1);               /* a stayed loaded while b ran */
  CHECK(pr.reserved_at_b >= (uint64_t)64 << 20); /* its weights at least */
  CHECK_EQ_INT(pl_runner_loaded(r), 0);
  CHECK_EQ_U64(reserved(), 0);
  CHECK(!dev_ctx_active(dev));
  /* the release lines come at the job's end, in pipeline order */
  const char *ra = strstr(log, "[a] released"), *db = strstr(log, "[b] done");
  CHECK(ra && db && db < ra);
  free(log);
  pl_runner_destroy(r);
  pl_config_free(c);
}

static int runs_of(const char *item) {
  char rj[1200];
  snprintf(rj, sizeof rj, "%s/result.json", outdir);
  json_t *j = json_load_file(rj, 0, NULL), *items = json_object_get(j, "items");
  int runs = -1;
  for (size_t i = 0; i < json_array_size(items); i++) {
    json_t *it = json_array_get(items, i);
    if (!strcmp(json_string_value(json_object_get(it, "name")), item))
      runs = (int)json_integer_value(json_object_get(json_object_get(it, "value"), "runs"));
  }
  json_decref(j);
  return runs;
}

static void test_idle_reuse_and_expiry(void) {
  pl_config *c = cfg_of(two);
  pl_runner *r = runner(0, NULL); /* a server: more jobs may come */
  pl_job_result res;
  CHECK_EQ_INT(run_job(r, c, "two", "idle:1000", NULL, &res), 0);
  CHECK_EQ_INT(pl_runner_loaded(r), 2);
  CHECK(dev_ctx_active(dev));
  CHECK_EQ_INT(runs_of("a"), 1);
  CHECK_EQ_INT(run_job(r, c, "two", "idle:1000", NULL, &res), 0);
  CHECK_EQ_INT(runs_of("a"), 2); /* the same loaded instance ran again */
  uint64_t rel = 0;
  CHECK(pl_runner_evict_idle(r, base_now(), &rel) == 0);
  CHECK_EQ_INT(pl_runner_loaded(r), 2); /* not yet expired */
  CHECK_EQ_U64(rel, 0);
  CHECK(pl_runner_evict_idle(r, base_now() + 2000, &rel) == 0);
  CHECK_EQ_INT(pl_runner_loaded(r), 0);
  CHECK(rel >= (uint64_t)(160 + 300) << 20);
  CHECK_EQ_U64(reserved(), 0);
  CHECK(!dev_ctx_active(dev));
  pl_runner_destroy(r);
  pl_config_free(c);

  /* ebb run (oneshot): idle stages go at job end */
  c = cfg_of(two);
  r = runner(1, NULL);
  CHECK_EQ_INT(run_job(r, c, "two", "idle:1000", NULL, &res), 0);
  CHECK_EQ_INT(pl_runner_loaded(r), 0);
  CHECK(!dev_ctx_active(dev));
  pl_runner_destroy(r);
  pl_config_free(c);
}

static void test_idle_evicted_on_oom(void) {
  /* the device has 2048 MiB: 300 context + 1200 + 1200 does not fit */
  pl_config *c = cfg_of("{\"pipelines\": {"
                        "\"p1\": {\"release\": \"idle:1000\", \"stages\": [{\"stage\": "
                        "\"synthetic\", \"name\": \"x\", \"cache\": false, \"options\": "
                        "{\"weights_mib\": 1200, \"activations_mib\": 0, \"touch\": \"sample\"}}]},"
                        "\"p2\": {\"stages\": [{\"stage\": \"synthetic\", \"name\": \"y\", "
                        "\"cache\": false, \"options\": {\"weights_mib\": 1200, "
                        "\"activations_mib\": 0, \"touch\": \"sample\"}}]}}}");
  pl_runner *r = runner(0, NULL);
  pl_job_result res;
  CHECK_EQ_INT(run_job(r, c, "p1", NULL, NULL, &res), 0);
  CHECK_EQ_INT(pl_runner_loaded(r), 1);
  capture();
  CHECK_EQ_INT(run_job(r, c, "p2", NULL, NULL, &res), 0);
  char *log = captured();
  CHECK_MSG(res.code == 0, "p2 failed: %s", res.message);
  CHECK(has(log, "[x] evicted: y needs the memory"));
  CHECK_EQ_INT(pl_runner_loaded(r), 0);
  CHECK(!dev_ctx_active(dev));
  free(log);
  pl_runner_destroy(r);
  pl_config_free(c);
}

/* A stage kept loaded outlives its job: at its later unload it must not see
 * the job's output directory (the caller's string, freed here as a server
 * frees a finished job's; under ASan the old code's read is a
 * use-after-free), nor its cancel flag. */
static void test_kept_unbound(void) {
  const char *pdir = getenv("EBB_TEST_PLUGIN_DIR");
  REQUIRE(pdir);
  char json[2048], logp[1200];
  snprintf(json, sizeof json,
           "{\"plugin_dirs\": [\"%s/good\"], \"pipelines\": {\"e\": {\"stages\": "
           "[{\"stage\": \"echo\", \"cache\": false}]}}}",
           pdir);
  snprintf(logp, sizeof logp, "%s/unload.log", tmp);
  unlink(logp);
  setenv("EBB_TEST_ECHO_UNLOAD_LOG", logp, 1);
  pl_config *c = cfg_of(json);
  char gdir[1100];
  snprintf(gdir, sizeof gdir, "%s/good", pdir);
  if (!pl_registry_find(reg, "echo", NULL))
    REQUIRE(pl_registry_load_dir(reg, gdir) == 0);
  pl_runner *r = runner(0, NULL);
  pl_policy pol = {EBB_POLICY_NEVER, 0};
  char *dir = strdup(outdir);
  atomic_int *cancel = calloc(1, sizeof *cancel);
  pl_job job = {.size = sizeof job,
                .pipeline = pl_config_pipeline(c, "e"),
                .input = input,
                .output_dir = dir,
                .policy = &pol,
                .cancel = cancel};
  pl_job_result res;
  CHECK_EQ_INT(pl_runner_run(r, &job, &res), 0);
  CHECK_EQ_INT(pl_runner_loaded(r), 1);
  free(dir);
  free(cancel);
  CHECK_EQ_INT(pl_runner_unload_pipeline(r, "e", 0, NULL), 0);
  FILE *f = fopen(logp, "r");
  char line[1200] = "";
  CHECK_MSG(f && fgets(line, sizeof line, f), "the echo stage logged no unload to %s", logp);
  if (f)
    fclose(f);
  line[strcspn(line, "\n")] = 0;
  CHECK_MSG(!strcmp(line, "."),
            "after its job ended a kept stage's unload saw output directory '%s', expected "
            "'.' (unbound)",
            line);
  unsetenv("EBB_TEST_ECHO_UNLOAD_LOG");
  pl_runner_destroy(r);
  pl_config_free(c);
}

static void test_never(void) {
  pl_config *c = cfg_of(two);
  pl_runner *r = runner(1, NULL);
  pl_job_result res;
  capture();
  CHECK_EQ_INT(run_job(r, c, "two", "never", NULL, &res), 0);
  char *log = captured();
  CHECK_EQ_INT(pl_runner_loaded(r), 2);
  CHECK(reserved() >= (uint64_t)(64 + 96 + 32) << 20);
  CHECK(dev_ctx_active(dev));
  CHECK_MSG(!has(log, "released"), "no release line under never");
  CHECK_EQ_U64(res.released_bytes, 0);
  free(log);
  capture();
  pl_runner_destroy(r); /* quietly takes everything back */
  log = captured();
  CHECK(!has(log, "released") && !has(log, "leaked"));
  free(log);
  CHECK_EQ_U64(reserved(), 0);
  uint64_t rel;
  mem_release_result rr = {.size = sizeof rr};
  mem_release(alloc, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &rr);
  (void)rel;
  CHECK(!dev_ctx_active(dev));
  pl_config_free(c);
}

static void fail_case(const char *where, int position) {
  char json[1024];
  const char *names[] = {"a", "b", "c"};
  snprintf(json, sizeof json,
           "{\"pipelines\": {\"f\": {\"stages\": ["
           "{\"stage\": \"synthetic\", \"name\": \"a\", \"cache\": false, \"options\": "
           "{\"weights_mib\": 32, \"cache_mib\": 8, \"fail\": \"%s\"}},"
           "{\"stage\": \"synthetic\", \"name\": \"b\", \"cache\": false, \"options\": "
           "{\"weights_mib\": 48, \"cache_mib\": 8, \"fail\": \"%s\"}},"
           "{\"stage\": \"synthetic\", \"name\": \"c\", \"cache\": false, \"options\": "
           "{\"weights_mib\": 16, \"cache_mib\": 8, \"fail\": \"%s\"}}]}}}",
           position == 0 ? where : "", position == 1 ? where : "", position == 2 ? where : "");
  pl_config *c = cfg_of(json);
  const char *policies[] = {NULL, "after-job", "idle:100"};
  for (int k = 0; k < 3; k++) {
    pl_runner *r = runner(1, NULL);
    pl_job_result res;
    capture();
    int rc = run_job(r, c, "f", policies[k], NULL, &res);
    char *log = captured();
    char want[128];
    snprintf(want, sizeof want, "fail=%s", where);
    CHECK_MSG(rc == EBB_ESTAGE, "fail=%s at %s (%s): rc %d", where, names[position],
              policies[k] ? policies[k] : "after-stage", rc);
    CHECK_EQ_STR(res.stage, names[position]);
    CHECK_MSG(has(res.message, want) && has(res.message, names[position]), "message: %s",
              res.message);
    /* unload follows the run under after-stage, the job's end otherwise */
    int unload = !strcmp(where, "unload");
    CHECK_EQ_INT(res.stages_run, unload ? (k == 0 ? position + 1 : 3) : position);
    CHECK_EQ_INT(pl_runner_loaded(r), 0);
    CHECK_MSG(reserved() == 0, "fail=%s at %s: %llu bytes still reserved", where, names[position],
              (unsigned long long)reserved());
    CHECK(!dev_ctx_active(dev));
    if (!strcmp(where, "unload"))
      CHECK_MSG(has(log, "leaked 32") || has(log, "leaked 48") || has(log, "leaked 16"),
                "a broken unload's weights are a leak ebb frees");
    free(log);
    pl_runner_destroy(r);
  }
  pl_config_free(c);
}

static void test_failures(void) {
  const char *w[] = {"load", "run", "unload"};
  for (int i = 0; i < 3; i++)
    for (int pos = 0; pos < 3; pos++)
      fail_case(w[i], pos);
}

static atomic_int cancel_flag;
static void cancel_cb(void *arg, int index, int count, const char *stage, int done) {
  if (index == 1 && !done)
    atomic_store(&cancel_flag, 2);
}

static void test_cancel_and_timeout(void) {
  pl_config *c = cfg_of("{\"pipelines\": {\"slow\": {\"stages\": ["
                        "{\"stage\": \"synthetic\", \"name\": \"a\", \"cache\": false, "
                        "\"options\": {\"weights_mib\": 8}},"
                        "{\"stage\": \"synthetic\", \"name\": \"b\", \"cache\": false, "
                        "\"options\": {\"weights_mib\": 8, \"run_ms\": 20000}}]},"
                        "\"late\": {\"stages\": [{\"stage\": \"synthetic\", \"name\": \"t\", "
                        "\"cache\": false, \"timeout_s\": 0.3, \"options\": "
                        "{\"weights_mib\": 8, \"run_ms\": 20000}}]}}}");
  pl_runner *r = runner(1, NULL);
  pl_job_result res;
  atomic_store(&cancel_flag, 0);
  pl_job job = {.size = sizeof job,
                .pipeline = pl_config_pipeline(c, "slow"),
                .input = input,
                .output_dir = outdir,
                .cancel = &cancel_flag,
                .progress = cancel_cb};
  double t0 = base_now();
  CHECK_EQ_INT(pl_runner_run(r, &job, &res), EBB_ECANCELED);
  CHECK(base_now() - t0 < 5);
  CHECK_EQ_STR(res.stage, "b");
  CHECK(has(res.message, "cancelled"));
  CHECK_EQ_INT(pl_runner_loaded(r), 0);
  CHECK_EQ_U64(reserved(), 0);
  CHECK(!dev_ctx_active(dev));

  /* cancelled before the job starts: no stage runs */
  atomic_store(&cancel_flag, 1);
  job.progress = NULL;
  CHECK_EQ_INT(pl_runner_run(r, &job, &res), EBB_ECANCELED);
  CHECK_EQ_INT(res.stages_run, 0);
  CHECK(!dev_ctx_active(dev));

  t0 = base_now();
  CHECK_EQ_INT(run_job(r, c, "late", NULL, NULL, &res), EBB_ETIMEDOUT);
  CHECK(base_now() - t0 < 5);
  CHECK_EQ_STR(res.stage, "t");
  CHECK_MSG(has(res.message, "stage 't' timed out") && has(res.message, "0.3 s"), "message: %s",
            res.message);
  CHECK_EQ_U64(reserved(), 0);
  CHECK(!dev_ctx_active(dev));
  pl_runner_destroy(r);
  pl_config_free(c);
}

static void test_leak_and_outside(void) {
  pl_config *c = cfg_of("{\"pipelines\": {\"l\": {\"stages\": ["
                        "{\"stage\": \"synthetic\", \"name\": \"leaky\", \"cache\": false, "
                        "\"options\": {\"weights_mib\": 8, \"leak_mib\": 24}},"
                        "{\"stage\": \"synthetic\", \"name\": \"outsider\", \"cache\": false, "
                        "\"options\": {\"weights_mib\": 8, \"outside_mib\": 64}}]}}}");
  pl_runner *r = runner(1, NULL);
  pl_job_result res;
  capture();
  CHECK_EQ_INT(run_job(r, c, "l", NULL, NULL, &res), 0);
  char *log = captured();
  CHECK(has(log, "[leaky] leaked 24 MiB in 1 blocks; freed by ebb"));
  CHECK(has(log, "synthetic.c:")); /* the allocation site follows */
  CHECK(has(log, "[outsider] 64 MiB held outside ebb (taken from the driver directly)"));
  CHECK_EQ_U64(reserved(), 0);
  CHECK(!dev_ctx_active(dev));
  free(log);
  pl_runner_destroy(r);
  pl_config_free(c);
}

static void test_result_cache(void) {
  pl_config *c = cfg_of("{\"pipelines\": {\"k\": {\"stages\": ["
                        "{\"stage\": \"synthetic\", \"name\": \"a\", "
                        "\"options\": {\"weights_mib\": 8}}]}}}");
  pl_runner *r = runner(1, cachedir);
  pl_job_result res;
  CHECK_EQ_INT(run_job(r, c, "k", NULL, NULL, &res), 0);
  CHECK_EQ_INT(res.stages_run, 1);
  capture();
  CHECK_EQ_INT(run_job(r, c, "k", NULL, NULL, &res), 0);
  char *log = captured();
  CHECK_EQ_INT(res.stages_run, 0);
  CHECK_EQ_INT(res.stages_cached, 1);
  CHECK_MSG(res.nstages == 1 && !strcmp(res.stages[0].name, "a") && !res.stages[0].measured &&
                !res.stages[0].released_bytes,
            "a cached stage's figures: %d entries, measured %d, released %llu", res.nstages,
            res.stages[0].measured, (unsigned long long)res.stages[0].released_bytes);
  CHECK(has(log, "[a] cached"));
  CHECK_MSG(!has(log, "[a] released") && !has(log, "[a] done"), "a cached stage is neither "
                                                                "run nor released");
  CHECK(!dev_ctx_active(dev));   /* nothing touched the GPU */
  CHECK_EQ_INT(runs_of("a"), 1); /* its item came from the cache */
  free(log);
  pl_runner_destroy(r);
  pl_config_free(c);
}

static void test_errors_before_stages(void) {
  pl_config *c = cfg_of("{\"pipelines\": {"
                        "\"u\": {\"stages\": [{\"stage\": \"nonesuch\"}]},"
                        "\"i\": {\"stages\": [{\"stage\": \"synthetic\", \"isolate\": true,"
                        " \"options\": {\"weight_mib\": 1}}]},"
                        "\"o\": {\"stages\": [{\"stage\": \"synthetic\", \"options\": "
                        "{\"weights_mb\": 1}}]}}}");
  pl_runner *r = runner(1, NULL);
  pl_job_result res;
  CHECK_EQ_INT(run_job(r, c, "u", NULL, NULL, &res), EBB_ENOTFOUND);
  CHECK(has(res.message, "unknown stage 'nonesuch'") && res.stage[0] == '\0');
  /* an isolated stage's options are checked here, before any worker starts */
  CHECK_EQ_INT(run_job(r, c, "i", NULL, NULL, &res), EBB_ECONFIG);
  CHECK(has(res.message, "no option 'weight_mib'"));
  CHECK_EQ_INT(run_job(r, c, "o", NULL, NULL, &res), EBB_ECONFIG);
  CHECK(has(res.message, "no option 'weights_mb'"));
  const pl_def *p = pl_config_pipeline(c, "o");
  pl_job job = {.size = sizeof job,
                .pipeline = pl_config_pipeline(c, "synthetic"),
                .input = "/no/such/input",
                .output_dir = outdir};
  (void)p;
  CHECK_EQ_INT(pl_runner_run(r, &job, &res), EBB_EINPUT);
  CHECK(has(res.message, "/no/such/input"));
  CHECK(!dev_ctx_active(dev));
  pl_runner_destroy(r);
  pl_config_free(c);
}

int main(void) {
  const char *t = getenv("EBB_TEST_TMP");
  REQUIRE(t);
  snprintf(tmp, sizeof tmp, "%s", t);
  mkdir(tmp, 0755);
  snprintf(input, sizeof input, "%s/input.bin", tmp);
  snprintf(outdir, sizeof outdir, "%s/out", tmp);
  snprintf(cachedir, sizeof cachedir, "%s/cache", tmp);
  char cmd[1300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", cachedir); /* a fresh cache every run */
  REQUIRE(system(cmd) == 0);
  pt_write(input, "any input\n");
  pt_open("cuda", "2048");
  RUN(test_after_stage);
  RUN(test_after_job);
  RUN(test_stage_figures);
  RUN(test_stage_figures_bound);
  RUN(test_idle_reuse_and_expiry);
  RUN(test_idle_evicted_on_oom);
  RUN(test_never);
  RUN(test_kept_unbound);
  RUN(test_failures);
  RUN(test_cancel_and_timeout);
  RUN(test_leak_and_outside);
  RUN(test_result_cache);
  RUN(test_errors_before_stages);
  pt_close();
  return TEST_END();
}
