/* Declared needs (issue 17): a stage built against the first, shorter
 * ebb_stage (no estimate) still loads and declares nothing
 * (EBB_EUNSUPPORTED); synthetic's estimate is exact for its options;
 * pl_runner_stage_need answers the estimate before a run and the measured
 * peak after it; host_alloc counts a stage's pageable host memory (peak) and
 * frees what it leaked. On the CPU device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/host.h"
#include "pipeline/registry.h"
#include "pipeline/runner.h"
#include "pipeline_util.h"

#define MiB (1ull << 20)

static void test_old_struct_loads(void) {
  const char *pdir = getenv("EBB_TEST_PLUGIN_DIR");
  REQUIRE(pdir);
  char p[1024];
  snprintf(p, sizeof p, "%s/old_size/old_size.so", pdir);
  pl_registry *r = NULL;
  REQUIRE(pl_registry_create(&r) == 0);
  CHECK_MSG(pl_registry_load_plugin(r, p) == 0, "an old-size stage was refused: %s", ebb_errmsg());
  const ebb_stage *st = pl_registry_find(r, "echo", NULL);
  REQUIRE(st);
  CHECK_EQ_INT(st->size, EBB_STAGE_SIZE_V1);
  CHECK(!EBB_STAGE_HAS(st, estimate));
  ebb_estimate e = {.size = sizeof e};
  CHECK_EQ_INT(pl_stage_estimate(st, NULL, NULL, &e), EBB_EUNSUPPORTED);
  CHECK(strstr(ebb_errmsg(), "echo") != NULL);
  pl_registry_destroy(r);
}

static void test_synthetic_exact(void) {
  pl_registry *r = NULL;
  REQUIRE(pl_registry_create(&r) == 0);
  const ebb_stage *st = pl_registry_find(r, "synthetic", NULL);
  REQUIRE(st && EBB_STAGE_HAS(st, estimate) && st->estimate);
  ebb_estimate e = {.size = sizeof e};
  CHECK_EQ_INT(pl_stage_estimate(st,
                                 "{\"weights_mib\": 10, \"activations_mib\": 5, "
                                 "\"cache_mib\": 2, \"leak_mib\": 1}",
                                 NULL, &e),
               0);
  CHECK_EQ_U64(e.device_bytes, 18 * MiB);
  CHECK_EQ_U64(e.host_bytes, 128u << 10);
  e.size = sizeof e;
  CHECK_EQ_INT(pl_stage_estimate(st, NULL, NULL, &e), 0); /* the defaults: 256 + 64 */
  CHECK_EQ_U64(e.device_bytes, 320 * MiB);
  e.size = sizeof e;
  CHECK_EQ_INT(pl_stage_estimate(st, "{\"weights_mib\": -1}", NULL, &e), EBB_ECONFIG);
  /* an older, shorter ebb_estimate gets the prefix it knows */
  ebb_estimate small = {.size = offsetof(ebb_estimate, host_bytes)};
  CHECK_EQ_INT(pl_stage_estimate(st, NULL, NULL, &small), 0);
  CHECK_EQ_U64(small.device_bytes, 320 * MiB);
  CHECK_EQ_U64(small.host_bytes, 0);
  pl_registry_destroy(r);
}

static void test_runner_need(void) {
  pt_open("cpu", NULL);
  pl_config *c = NULL;
  REQUIRE(pl_config_load_string(
              "{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"synthetic\", \"name\": \"a\", "
              "\"cache\": false, \"options\": {\"weights_mib\": 8, \"activations_mib\": 4, "
              "\"touch\": \"sample\"}}]}}}",
              "test.json", &c) == 0);
  const pl_def *p = pl_config_pipeline(c, "p");
  REQUIRE(p);
  pl_runner_opts o =
      {.size = sizeof o, .dev = dev, .alloc = alloc, .reg = reg, .hook = "", .oneshot = 1};
  pl_runner *r = NULL;
  REQUIRE(pl_runner_create(&o, &r) == 0);
  pl_stage_need n = {.size = sizeof n};
  CHECK_EQ_INT(pl_runner_stage_need(r, p, "a", &n), 0);
  CHECK_EQ_INT(n.measured, 0);
  CHECK_EQ_U64(n.device_bytes, 12 * MiB);
  CHECK_EQ_INT(pl_runner_stage_need(r, p, "nope", &n), EBB_ENOTFOUND);

  char tmp[] = "/tmp/ebb-need-XXXXXX";
  REQUIRE(mkdtemp(tmp));
  char in[600], out[600];
  snprintf(in, sizeof in, "%s/in.txt", tmp);
  snprintf(out, sizeof out, "%s/out", tmp);
  pt_write(in, "x\n");
  pl_job job = {.size = sizeof job, .pipeline = p, .input = in, .output_dir = out};
  pl_job_result res;
  CHECK_EQ_INT(pl_runner_run(r, &job, &res), 0);
  n.size = sizeof n;
  CHECK_EQ_INT(pl_runner_stage_need(r, p, "a", &n), 0);
  CHECK_EQ_INT(n.measured, 1);
  CHECK_EQ_U64(n.device_bytes, 12 * MiB);
  CHECK_EQ_U64(n.estimate_device_bytes, 12 * MiB);
  CHECK_EQ_U64(n.host_bytes, 128u << 10); /* the pinned window buffer */
  pl_runner_destroy(r);
  pl_config_free(c);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  CHECK_EQ_INT(system(cmd), 0);
  pt_close();
}

static void test_host_alloc(void) {
  dev_device *dev = NULL;
  mem_allocator *alloc = NULL;
  ebb_owner *o = NULL;
  REQUIRE(dev_open("cpu", &dev) == 0);
  REQUIRE(mem_allocator_create(dev, NULL, &alloc) == 0);
  REQUIRE(mem_owner_create(alloc, "h", NULL, &o) == 0);
  pl_sctx c;
  pl_sctx_init(&c, dev, o, "h", ".");
  ebb_stage_ctx *ctx = &c.pub;
  char *small = ebb_host_alloc(ctx, 1000);
  char *big = ebb_host_calloc(ctx, 1, 3 * MiB); /* its own mapping */
  REQUIRE(small && big);
  CHECK(((uintptr_t)small & 15) == 0 && ((uintptr_t)big & 15) == 0);
  CHECK_EQ_INT(big[3 * MiB - 1], 0);
  memset(small, 1, 1000);
  memset(big, 2, 3 * MiB);
  CHECK_EQ_U64(c.host_bytes, 1000 + 3 * MiB);
  ebb_host_free(ctx, big);
  CHECK_EQ_U64(c.host_bytes, 1000);
  CHECK_EQ_U64(c.host_peak, 1000 + 3 * MiB);
  CHECK_EQ_U64(pl_sctx_host_peak(&c), 1000 + 3 * MiB);
  int stack = 0; /* not the stage's: refused, nothing touched */
  CHECK_EQ_INT(ctx->host->host_free(ctx, &stack), EBB_ENOTFOUND);
  void *leak = ebb_host_alloc(ctx, 5 * MiB);
  REQUIRE(leak);
  uint32_t blocks = 0;
  CHECK_EQ_U64(pl_sctx_host_reclaim(&c, 1, &blocks), 1000 + 5 * MiB);
  CHECK_EQ_INT(blocks, 2);
  CHECK_EQ_U64(c.host_bytes, 0);
  pl_sctx_cleanup(&c);
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(alloc);
  dev_close(dev);
}

int main(void) {
  RUN(test_old_struct_loads);
  RUN(test_synthetic_exact);
  RUN(test_runner_need);
  RUN(test_host_alloc);
  return TEST_END();
}
