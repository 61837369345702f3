/* Config keys of isolated stages: "isolate": true, "worker" (resolved
 * against the config file's directory when it has a '/', kept for PATH
 * lookup when bare; implies isolate) and "worker_args" (strings), with
 * errors that name the key; and the runner's check of such pipelines
 * (built-in stage options checked in ebb; a worker's stage needs no
 * registry entry). */
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/config.h"
#include "pipeline/registry.h"
#include "pipeline/runner.h"
#include "test.h"

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static void expect_error(const char *text, const char *what) {
  pl_config *c = NULL;
  int rc = pl_config_load_string(text, "t.json", &c);
  CHECK_MSG(rc == EBB_ECONFIG, "'%s': rc %d, expected EBB_ECONFIG", text, rc);
  CHECK_MSG(has(ebb_errmsg(), what), "'%s': message '%s' lacks '%s'", text, ebb_errmsg(), what);
  pl_config_free(c);
}

static void test_keys(void) {
  pl_config *c = NULL;
  REQUIRE(pl_config_load_string("{\"pipelines\": {\"p\": {\"stages\": ["
                                "{\"stage\": \"synthetic\", \"name\": \"a\", \"isolate\": true},"
                                "{\"stage\": \"gain\", \"worker\": \"python3\", \"worker_args\": "
                                "[\"w.py\", \"-v\"]},"
                                "{\"stage\": \"x\", \"worker\": \"/abs/w\", \"isolate\": true},"
                                "{\"stage\": \"synthetic\", \"name\": \"b\"}]}}}",
                                "t.json", &c) == 0);
  const pl_def *p = pl_config_pipeline(c, "p");
  REQUIRE(p && p->nstages == 4);
  CHECK(p->stages[0].isolate && !p->stages[0].worker && !p->stages[0].worker_args);
  CHECK(p->stages[1].isolate); /* worker implies isolate */
  CHECK_EQ_STR(p->stages[1].worker, "python3");
  CHECK_EQ_INT(json_array_size(p->stages[1].worker_args), 2);
  CHECK_EQ_STR(json_string_value(json_array_get(p->stages[1].worker_args, 1)), "-v");
  CHECK_EQ_STR(p->stages[2].worker, "/abs/w");
  CHECK_EQ_INT(json_array_size(p->stages[2].worker_args), 0);
  CHECK(!p->stages[3].isolate && !p->stages[3].worker);

  /* the runner's check: a's options are checked against synthetic's schema,
   * gain and x need no registry entry */
  pl_registry *reg = NULL;
  REQUIRE(pl_registry_create(&reg) == 0);
  CHECK_MSG(pl_check(reg, p) == 0, "check: %s", ebb_errmsg());
  pl_config_free(c);
  REQUIRE(pl_config_load_string("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"synthetic\", "
                                "\"isolate\": "
                                "true, \"options\": {\"weights_mb\": 1}}]}}}",
                                "t.json", &c) == 0);
  CHECK_EQ_INT(pl_check(reg, pl_config_pipeline(c, "p")), EBB_ECONFIG);
  CHECK(has(ebb_errmsg(), "no option 'weights_mb'"));
  pl_config_free(c);
  REQUIRE(pl_config_load_string("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"nonesuch\", "
                                "\"isolate\": "
                                "true}]}}}",
                                "t.json", &c) == 0);
  CHECK_EQ_INT(pl_check(reg, pl_config_pipeline(c, "p")), EBB_ENOTFOUND);
  CHECK(has(ebb_errmsg(), "unknown stage 'nonesuch'"));
  pl_config_free(c);
  pl_registry_destroy(reg);
}

static void test_relative_to_config(void) {
  const char *tmp = getenv("EBB_TEST_TMP");
  REQUIRE(tmp);
  char dir[512], path[600];
  snprintf(dir, sizeof dir, "%s", tmp);
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/cfg.json", dir);
  FILE *f = fopen(path, "w");
  REQUIRE(f);
  fputs("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"g\", \"worker\": \"./w/g.py\"},"
        "{\"stage\": \"h\", \"worker\": \"bin/h\"}, {\"stage\": \"i\", \"worker\": \"i\"}]}}}",
        f);
  fclose(f);
  pl_config *c = NULL;
  REQUIRE(pl_config_load(path, &c) == 0);
  const pl_def *p = pl_config_pipeline(c, "p");
  char want[700];
  snprintf(want, sizeof want, "%s/w/g.py", dir);
  CHECK_EQ_STR(p->stages[0].worker, want);
  snprintf(want, sizeof want, "%s/bin/h", dir);
  CHECK_EQ_STR(p->stages[1].worker, want);
  CHECK_EQ_STR(p->stages[2].worker, "i"); /* bare: PATH */
  pl_config_free(c);
  unlink(path);
}

static void test_errors(void) {
  expect_error("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"s\", \"worker\": 3}]}}}",
               "\"worker\" must be the path of an executable");
  expect_error("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"s\", \"worker\": \"\"}]}}}",
               "\"worker\" must be the path");
  expect_error("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"s\", \"worker_args\": []}]}}}",
               "\"worker_args\" needs \"worker\"");
  expect_error("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"s\", \"worker\": \"w\", "
               "\"worker_args\": \"-v\"}]}}}",
               "\"worker_args\" must be an array of strings");
  expect_error("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"s\", \"worker\": \"w\", "
               "\"worker_args\": [\"a\", 2]}]}}}",
               "worker_args[1] must be a string");
  expect_error("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"s\", \"worker\": \"w\", "
               "\"isolate\": false}]}}}",
               "always runs isolated");
  expect_error("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"s\", \"isolate\": \"yes\"}]}}}",
               "\"isolate\" must be true or false");
}

int main(void) {
  RUN(test_keys);
  RUN(test_relative_to_config);
  RUN(test_errors);
  return TEST_END();
}
