/* Process-wide release callbacks (issue 17): a cache registered for nobody
 * (mem_on_release) is never dropped by a stage's release, so no stage's
 * line carries its bytes; it is the "process" owner's, released when the
 * runner vacates at the job's end, on a line of its own:
 * "[process] released N MiB of ...". On the CPU device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/runner.h"
#include "pipeline_util.h"

#define MiB (1ull << 20)

typedef struct lib_cache {
  mem_allocator *a;
  uint64_t addr;
  int dropped;
} lib_cache;
static void drop(void *arg) {
  lib_cache *c = arg;
  c->dropped++;
  mem_free(c->a, c->addr);
  c->addr = 0;
}

static void test_process_owner(void) {
  pt_open("cpu", NULL);
  ebb_owner *lib = NULL;
  REQUIRE(mem_owner_create(alloc, "a library", NULL, &lib) == 0);
  lib_cache lc = {alloc, 0, 0};
  REQUIRE(mem_alloc(lib, 24 * MiB, "lib.c:1", &lc.addr) == 0);
  uint64_t h = 0;
  REQUIRE(mem_on_release("a library's cache", drop, &lc, &h) == 0);

  pl_config *c = NULL;
  REQUIRE(pl_config_load_string(
              "{\"pipelines\": {\"p\": {\"stages\": ["
              "{\"stage\": \"synthetic\", \"name\": \"a\", \"cache\": false, \"options\": "
              "{\"weights_mib\": 30, \"activations_mib\": 0, \"cache_mib\": 12, \"touch\": "
              "\"sample\"}},"
              "{\"stage\": \"synthetic\", \"name\": \"b\", \"cache\": false, \"options\": "
              "{\"weights_mib\": 40, \"activations_mib\": 0, \"touch\": \"sample\"}}]}}}",
              "test.json", &c) == 0);
  pl_runner_opts o =
      {.size = sizeof o, .dev = dev, .alloc = alloc, .reg = reg, .hook = "", .oneshot = 1};
  pl_runner *r = NULL;
  REQUIRE(pl_runner_create(&o, &r) == 0);
  char tmp[] = "/tmp/ebb-proc-XXXXXX";
  REQUIRE(mkdtemp(tmp));
  char in[600], out[600];
  snprintf(in, sizeof in, "%s/in.txt", tmp);
  snprintf(out, sizeof out, "%s/out", tmp);
  pt_write(in, "x\n");
  pl_policy pol;
  REQUIRE(pl_policy_parse("after-job", &pol) == 0);
  pl_job job = {.size = sizeof job,
                .pipeline = pl_config_pipeline(c, "p"),
                .input = in,
                .output_dir = out,
                .policy = &pol};
  capture();
  pl_job_result res;
  int rc = pl_runner_run(r, &job, &res);
  char *log = captured();
  CHECK_EQ_INT(rc, 0);
  CHECK_EQ_INT(lc.dropped, 1);
  /* a's line: its weights + cache (30 + 12), never the library's 24 */
  CHECK_MSG(strstr(log, "[a] released 42 MiB of device memory (cpu)") != NULL, "a's line: %s", log);
  CHECK_MSG(strstr(log, "[b] released 40 MiB of device memory (cpu)") != NULL, "b's line: %s", log);
  CHECK_MSG(strstr(log, "[process] released 24 MiB of device memory (cpu)") != NULL,
            "no line of the process owner: %s", log);
  const char *pa = strstr(log, "[a] released"), *pp = strstr(log, "[process] released");
  CHECK(pa && pp && pa < pp);
  mem_off_release(h);
  pl_runner_destroy(r);
  pl_config_free(c);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  CHECK_EQ_INT(system(cmd), 0);
  free(log);
  mem_owner_destroy(lib, NULL);
  pt_close();
}

int main(void) {
  RUN(test_process_owner);
  return TEST_END();
}
