/* Sleep in the pipeline room (issue 12) on the fake GPU, in-process: the
 * policies sleep and sleep:SECONDS parse (and bad ones name themselves); a
 * kept pipeline sleeps (weights backed up, the context released), a second
 * sleep or a wake of an awake pipeline is refused with a clear message; a job
 * wakes a sleeping pipeline in place (the synthetic stage checks its weights'
 * pattern in every run); policy sleep puts the stages to sleep at the job's
 * end, sleep:S when pl_runner_evict_idle finds them due; an unload of a
 * sleeping pipeline frees its backup. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/runner.h"
#include "pipeline_util.h"

#define MiB (1024ull * 1024ull)

static char input[1100], outdir[1100];

static void test_policy_parse(void) {
  pl_policy p;
  char buf[64];
  CHECK_EQ_INT(pl_policy_parse("sleep", &p), 0);
  CHECK(p.kind == EBB_POLICY_SLEEP && p.idle_s == 0);
  CHECK_EQ_STR(pl_policy_format(&p, buf, sizeof buf), "sleep");
  CHECK_EQ_INT(pl_policy_parse("sleep:2.5", &p), 0);
  CHECK(p.kind == EBB_POLICY_SLEEP && p.idle_s == 2.5);
  CHECK_EQ_STR(pl_policy_format(&p, buf, sizeof buf), "sleep:2.5");
  static const char *bad[] = {"sleep:", "sleep:-1", "sleep:x", "sleeps", "sleep:1s"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECK_EQ_INT(pl_policy_parse(bad[i], &p), EBB_EINVAL);
    CHECK_MSG(has(ebb_errmsg(), bad[i]) && has(ebb_errmsg(), "sleep:SECONDS"),
              "message for '%s': %s", bad[i], ebb_errmsg());
  }
}

static const char *cfg_json =
    "{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"synthetic\", \"name\": \"a\", "
    "\"cache\": false, \"options\": {\"weights_mib\": 64, \"activations_mib\": 16, "
    "\"cache_mib\": 8}}]}}}";

static pl_runner *runner(void) {
  pl_runner_opts o = {.size = sizeof o, .dev = dev, .alloc = alloc, .reg = reg, .hook = ""};
  pl_runner *r = NULL;
  REQUIRE(pl_runner_create(&o, &r) == 0);
  return r;
}

static int job(pl_runner *r, const pl_def *p, const char *policy) {
  pl_policy pol;
  REQUIRE(pl_policy_parse(policy, &pol) == 0);
  pl_job j = {.size = sizeof j,
              .pipeline = p,
              .input = input,
              .output_dir = outdir,
              .policy = &pol};
  pl_job_result res;
  int rc = pl_runner_run(r, &j, &res);
  CHECK_MSG(rc == 0, "job under %s failed: %s", policy, res.message);
  return rc;
}

static void test_kept_pipeline(void) {
  pl_config *c = NULL;
  REQUIRE(pl_config_load_string(cfg_json, "test.json", &c) == 0);
  const pl_def *p = pl_config_pipeline(c, "p");
  pl_runner *r = runner();
  pl_job_result res;
  REQUIRE(pl_runner_load_pipeline(r, p, outdir, &res) == 0);
  mem_sleep_stats st = {.size = sizeof st};
  CHECK_EQ_INT(pl_runner_wake_pipeline(r, "p", &st), EBB_ESTATE);
  CHECK_MSG(has(ebb_errmsg(), "'p' is not asleep"), "wake of an awake pipeline: %s", ebb_errmsg());
  CHECK_EQ_INT(pl_runner_sleep_pipeline(r, "p", &st), 0);
  CHECK_EQ_U64(st.backup_bytes, 64 * MiB);
  CHECK(st.device_bytes >= 64 * MiB);
  CHECK(pl_runner_pipeline_asleep(r, "p"));
  CHECK_MSG(!dev_ctx_active(dev), "the context was kept while everything is asleep");
  CHECK_EQ_INT(pl_runner_sleep_pipeline(r, "p", &st), EBB_ESTATE);
  CHECK_MSG(has(ebb_errmsg(), "asleep already"), "double sleep: %s", ebb_errmsg());
  CHECK_EQ_INT(pl_runner_sleep_pipeline(r, "nope", &st), EBB_ENOTFOUND);
  CHECK_EQ_INT(pl_runner_wake_pipeline(r, "p", &st), 0);
  CHECK_EQ_U64(st.backup_bytes, 64 * MiB);
  CHECK(!pl_runner_pipeline_asleep(r, "p"));
  CHECK_EQ_U64(mem_allocator_backup_bytes(alloc), 0);
  /* asleep again; a job (policy never, as for a kept pipeline) wakes it */
  CHECK_EQ_INT(pl_runner_sleep_pipeline(r, "p", &st), 0);
  job(r, p, "never");
  CHECK(!pl_runner_pipeline_asleep(r, "p"));
  /* unload while asleep: the backup goes */
  CHECK_EQ_INT(pl_runner_sleep_pipeline(r, "p", &st), 0);
  CHECK_EQ_INT(pl_runner_unload_pipeline(r, "p", 1, NULL), 0);
  CHECK_EQ_U64(mem_allocator_backup_bytes(alloc), 0);
  CHECK_EQ_INT(pl_runner_loaded(r), 0);
  pl_runner_destroy(r);
  pl_config_free(c);
}

static void test_policies(void) {
  pl_config *c = NULL;
  REQUIRE(pl_config_load_string(cfg_json, "test.json", &c) == 0);
  const pl_def *p = pl_config_pipeline(c, "p");
  pl_runner *r = runner();
  job(r, p, "sleep");
  CHECK_MSG(pl_runner_pipeline_asleep(r, "p"), "policy sleep: not asleep after the job");
  CHECK(!dev_ctx_active(dev));
  CHECK_EQ_U64(mem_allocator_backup_bytes(alloc), 64 * MiB);
  job(r, p, "sleep"); /* wakes in place, runs, sleeps again */
  CHECK(pl_runner_pipeline_asleep(r, "p"));
  job(r, p, "sleep:100");
  CHECK_MSG(!pl_runner_pipeline_asleep(r, "p"), "sleep:100 slept at once");
  CHECK_EQ_INT(pl_runner_loaded(r), 1);
  pl_runner_evict_idle(r, 1.0, NULL); /* not due yet */
  CHECK(!pl_runner_pipeline_asleep(r, "p"));
  pl_runner_evict_idle(r, 1e12, NULL);
  CHECK_MSG(pl_runner_pipeline_asleep(r, "p"), "sleep:100: not asleep when due");
  CHECK(!dev_ctx_active(dev));
  pl_runner_destroy(r);
  CHECK_EQ_U64(mem_allocator_backup_bytes(alloc), 0);
  pl_config_free(c);
}

int main(void) {
  const char *t = getenv("EBB_TEST_TMP");
  REQUIRE(t);
  mkdir(t, 0755);
  snprintf(input, sizeof input, "%s/input.bin", t);
  snprintf(outdir, sizeof outdir, "%s/out", t);
  pt_write(input, "any input\n");
  pt_open("cuda", "2048");
  RUN(test_policy_parse);
  RUN(test_kept_pipeline);
  RUN(test_policies);
  pt_close();
  return TEST_END();
}
