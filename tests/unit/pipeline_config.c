/* Config files: the built-in pipelines, the format's checks and their
 * messages (file, line and column for JSON syntax; pipeline, stage and key
 * otherwise), release policies, plugin_dirs resolution. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/config.h"
#include "test.h"

static int has(const char *hay, const char *needle) { return hay && strstr(hay, needle) != NULL; }

static int load_str(const char *text, pl_config **c) {
  return pl_config_load_string(text, "test.json", c);
}

static void test_builtins(void) {
  pl_config *c = NULL;
  REQUIRE(pl_config_load(NULL, &c) == 0);
  const pl_def *s = pl_config_pipeline(c, "synthetic");
  REQUIRE(s != NULL);
  CHECK_EQ_INT(s->nstages, 3);
  CHECK_EQ_STR(s->stages[0].name, "a");
  CHECK_EQ_STR(s->stages[1].name, "b");
  CHECK_EQ_STR(s->stages[2].name, "c");
  CHECK_EQ_STR(s->stages[0].stage, "synthetic");
  CHECK_EQ_INT(s->stages[0].cache, 0); /* a diagnostic runs every time */
  CHECK(json_integer_value(json_object_get(s->stages[1].options, "weights_mib")) > 0);
  const pl_def *t = pl_config_pipeline(c, "songtrace");
  REQUIRE(t != NULL);
  const char *want[] = {"decode", "separate", "transcribe", "align", "pitch", "export"};
  CHECK_EQ_INT(t->nstages, 6);
  for (size_t i = 0; i < 6 && i < t->nstages; i++) {
    CHECK_EQ_STR(t->stages[i].stage, want[i]);
    CHECK_EQ_STR(t->stages[i].name, want[i]); /* name defaults to the stage */
  }
  CHECK(pl_config_pipeline(c, "nope") == NULL);
  pl_config_free(c);
}

static void test_full_entry(void) {
  pl_config *c = NULL;
  int rc = load_str("{\"pipelines\": {\"p\": {\"release\": \"idle:2.5\", \"stages\": ["
                    "{\"stage\": \"synthetic\", \"name\": \"x\", \"options\": {\"weights_mib\": 8},"
                    " \"isolate\": false, \"timeout_s\": 30, \"cache\": false},"
                    "{\"stage\": \"synthetic\"}]}}}",
                    &c);
  REQUIRE(rc == 0);
  const pl_def *p = pl_config_pipeline(c, "p");
  REQUIRE(p && p->nstages == 2);
  CHECK_EQ_INT(p->has_policy, 1);
  CHECK_EQ_INT(p->policy.kind, EBB_POLICY_IDLE);
  CHECK_NEAR(p->policy.idle_s, 2.5, 1e-9);
  CHECK_EQ_STR(p->stages[0].name, "x");
  CHECK_NEAR(p->stages[0].timeout_s, 30, 1e-9);
  CHECK_EQ_INT(p->stages[0].cache, 0);
  CHECK_EQ_STR(p->stages[1].name, "synthetic");
  CHECK_EQ_INT(p->stages[1].cache, -1); /* unset: the run decides */
  CHECK(json_is_object(p->stages[1].options));
  CHECK_EQ_STR(p->origin, "test.json");
  CHECK(pl_config_pipeline(c, "synthetic") != NULL); /* built-ins stay */
  pl_config_free(c);
}

static void test_override_builtin(void) {
  pl_config *c = NULL;
  REQUIRE(load_str("{\"pipelines\": {\"synthetic\": {\"stages\": [{\"stage\": \"synthetic\","
                   "\"name\": \"only\"}]}}}",
                   &c) == 0);
  const pl_def *p = pl_config_pipeline(c, "synthetic");
  REQUIRE(p);
  CHECK_EQ_INT(p->nstages, 1);
  CHECK_EQ_STR(p->stages[0].name, "only");
  pl_config_free(c);
}

static void expect_error(const char *text, const char *m1, const char *m2) {
  pl_config *c = NULL;
  int rc = load_str(text, &c);
  CHECK_MSG(rc == EBB_ECONFIG, "config %s: expected EBB_ECONFIG, got %d", text, rc);
  CHECK_MSG(c == NULL, "config %s: no config on error", text);
  CHECK_MSG(has(ebb_errmsg(), m1), "message '%s' lacks '%s'", ebb_errmsg(), m1);
  if (m2)
    CHECK_MSG(has(ebb_errmsg(), m2), "message '%s' lacks '%s'", ebb_errmsg(), m2);
  pl_config_free(c);
}

static void test_errors(void) {
  /* JSON syntax: file, line and column */
  expect_error("{\"pipelines\": {\n  \"p\": {\"stages\": [}\n}}", "test.json:2:", "syntax");
  expect_error("[1, 2]", "test.json", "top level");
  expect_error("{\"pipelines\": []}", "\"pipelines\"", NULL);
  expect_error("{\"pipelines\": {\"p\": {\"stages\": []}}}", "pipeline 'p'", "non-empty");
  expect_error("{\"pipelines\": {\"p\": {\"stages\": [{\"name\": \"x\"}]}}}", "stage #1",
               "\"stage\"");
  expect_error("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"s\", \"colour\": 1}]}}}",
               "unknown key \"colour\"", "stage #1");
  expect_error("{\"pipelines\": {\"p\": {\"stagez\": []}}}", "unknown key \"stagez\"", "'p'");
  expect_error("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"s\", \"options\": 3}]}}}",
               "\"options\"", "object");
  expect_error("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"s\", \"timeout_s\": -1}]}}}",
               "timeout_s", NULL);
  expect_error("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"s\", \"isolate\": 1}]}}}",
               "isolate", NULL);
  expect_error("{\"pipelines\": {\"p\": {\"release\": \"sometimes\", \"stages\": "
               "[{\"stage\": \"s\"}]}}}",
               "'sometimes'", "pipeline 'p'");
  expect_error("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"s\"}, {\"stage\": \"s\"}]}}}",
               "two stages are named 's'", NULL);
  expect_error("{\"plugin_dirs\": \"x\"}", "plugin_dirs", NULL);
  expect_error("{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"s\"}]}, "
               "\"p\": {\"stages\": [{\"stage\": \"s\"}]}}}",
               "test.json", "duplicate");
}

static void test_policy(void) {
  pl_policy p;
  char buf[64];
  CHECK(pl_policy_parse("after-stage", &p) == 0 && p.kind == EBB_POLICY_AFTER_STAGE);
  CHECK(pl_policy_parse("after-job", &p) == 0 && p.kind == EBB_POLICY_AFTER_JOB);
  CHECK(pl_policy_parse("never", &p) == 0 && p.kind == EBB_POLICY_NEVER);
  CHECK(pl_policy_parse("idle:30", &p) == 0 && p.kind == EBB_POLICY_IDLE && p.idle_s == 30);
  CHECK_EQ_STR(pl_policy_format(&p, buf, sizeof buf), "idle:30");
  CHECK(pl_policy_parse("idle:0", &p) == 0 && p.idle_s == 0);
  const char *bad[] = {"idle:", "idle:x", "idle:-1", "afterstage", "", "idle:1s", "never "};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    CHECK_MSG(pl_policy_parse(bad[i], &p) == EBB_EINVAL, "'%s' accepted", bad[i]);
    CHECK_MSG(has(ebb_errmsg(), "idle:SECONDS"), "message for '%s': %s", bad[i], ebb_errmsg());
  }
}

static void test_file_and_plugin_dirs(void) {
  const char *tmp = getenv("EBB_TEST_TMP");
  REQUIRE(tmp);
  mkdir(tmp, 0755);
  char path[1024];
  snprintf(path, sizeof path, "%s/cfg.json", tmp);
  FILE *f = fopen(path, "w");
  REQUIRE(f);
  fputs("{\"plugin_dirs\": [\"plugins\", \"/abs/dir\"], \"server\": {\"x\": 1},\n"
        " \"pipelines\": {\"q\": {\"stages\": [{\"stage\": \"synthetic\"}]}}}\n",
        f);
  fclose(f);
  pl_config *c = NULL;
  REQUIRE(pl_config_load(path, &c) == 0);
  REQUIRE(c->nplugin_dirs == 2);
  char want[1100];
  snprintf(want, sizeof want, "%s/plugins", tmp);
  CHECK_EQ_STR(c->plugin_dirs[0], want); /* relative to the config's directory */
  CHECK_EQ_STR(c->plugin_dirs[1], "/abs/dir");
  CHECK_EQ_STR(pl_config_pipeline(c, "q")->origin, path);
  pl_config_free(c);

  snprintf(path, sizeof path, "%s/missing.json", tmp);
  c = NULL;
  CHECK_EQ_INT(pl_config_load(path, &c), EBB_ECONFIG);
  CHECK(has(ebb_errmsg(), path) && has(ebb_errmsg(), "cannot open"));
}

int main(void) {
  RUN(test_builtins);
  RUN(test_full_entry);
  RUN(test_override_builtin);
  RUN(test_errors);
  RUN(test_policy);
  RUN(test_file_and_plugin_dirs);
  return TEST_END();
}
