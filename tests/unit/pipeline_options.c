/* Stage options are checked against the stage's options_schema before load:
 * unknown names and wrong types are errors naming the stage and the option;
 * defaults are filled in. */
#include <string.h>

#include "pipeline/registry.h"
#include "test.h"

static int has(const char *hay, const char *needle) { return hay && strstr(hay, needle) != NULL; }

static const ebb_stage st = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "demo",
    .options_schema = "{\"n\": {\"type\": \"integer\", \"default\": 3},"
                      " \"x\": {\"type\": \"number\", \"default\": 0.5},"
                      " \"s\": {\"type\": \"string\"},"
                      " \"b\": {\"type\": \"boolean\", \"default\": false},"
                      " \"l\": {\"type\": \"array\"}}",
};

static json_t *J(const char *s) { return json_loads(s, 0, NULL); }

static void test_defaults_and_overrides(void) {
  json_t *o = J("{\"x\": 2, \"s\": \"hi\"}"), *m = NULL;
  REQUIRE(pl_stage_validate_options(&st, o, "cfg: pipeline 'p' stage 'd'", &m) == 0);
  CHECK_EQ_INT(json_integer_value(json_object_get(m, "n")), 3);
  CHECK_NEAR(json_number_value(json_object_get(m, "x")), 2, 0);
  CHECK_EQ_STR(json_string_value(json_object_get(m, "s")), "hi");
  CHECK(json_is_false(json_object_get(m, "b")));
  CHECK(json_object_get(m, "l") == NULL); /* no default: absent */
  json_decref(m);
  json_decref(o);
  m = NULL;
  REQUIRE(pl_stage_validate_options(&st, NULL, NULL, &m) == 0);
  CHECK_EQ_INT(json_object_size(m), 3);
  json_decref(m);
}

static void expect(const char *opts, const char *m1, const char *m2) {
  json_t *o = J(opts), *m = NULL;
  REQUIRE(o);
  int rc = pl_stage_validate_options(&st, o, "cfg.json: pipeline 'p' stage 'd'", &m);
  CHECK_MSG(rc == EBB_ECONFIG, "%s: expected EBB_ECONFIG, got %d", opts, rc);
  CHECK(m == NULL);
  CHECK_MSG(has(ebb_errmsg(), m1) && has(ebb_errmsg(), m2) && has(ebb_errmsg(), "cfg.json") &&
                has(ebb_errmsg(), "'demo'"),
            "%s: message '%s' lacks '%s'/'%s'", opts, ebb_errmsg(), m1, m2);
  json_decref(o);
}

static void test_rejections(void) {
  expect("{\"m\": 1}", "no option 'm'", "n, x, s, b, l");
  expect("{\"n\": \"3\"}", "option 'n'", "must be an integer, got a string");
  expect("{\"n\": 2.5}", "option 'n'", "integer");
  expect("{\"x\": true}", "option 'x'", "must be a number, got a boolean");
  expect("{\"s\": 1}", "option 's'", "must be a string");
  expect("{\"b\": 0}", "option 'b'", "boolean");
  expect("{\"l\": {}}", "option 'l'", "array");
}

static void test_integer_accepts_whole_reals(void) {
  json_t *o = J("{\"n\": 4.0}"), *m = NULL;
  CHECK(pl_stage_validate_options(&st, o, NULL, &m) == 0);
  json_decref(m);
  json_decref(o);
}

static void test_not_an_object(void) {
  json_t *o = json_integer(1), *m = NULL;
  CHECK_EQ_INT(pl_stage_validate_options(&st, o, "w", &m), EBB_ECONFIG);
  CHECK(has(ebb_errmsg(), "must be an object"));
  json_decref(o);
}

static void test_no_schema_means_no_options(void) {
  ebb_stage bare = st;
  bare.options_schema = NULL;
  json_t *o = J("{\"a\": 1}"), *m = NULL;
  CHECK_EQ_INT(pl_stage_validate_options(&bare, o, "w", &m), EBB_ECONFIG);
  CHECK(has(ebb_errmsg(), "its options: none"));
  json_decref(o);
}

int main(void) {
  RUN(test_defaults_and_overrides);
  RUN(test_rejections);
  RUN(test_integer_accepts_whole_reals);
  RUN(test_not_an_object);
  RUN(test_no_schema_means_no_options);
  return TEST_END();
}
