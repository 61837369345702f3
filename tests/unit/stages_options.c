/* Stage option tables (src/stages/options.h): the generated schema is the
 * JSON the table says (types, defaults, minimum/maximum, descriptions); the
 * reader gives the table's defaults for absent or null options, takes given
 * values, and refuses wrong types, values outside the bounds and fractional
 * integers with EBB_ECONFIG naming the stage and the option. And every
 * built-in stage's schema parses, and gives each numeric option a minimum
 * and a maximum around its default. */
#include <math.h>

#include "ebb/error.h"
#include "stages/builtin.h"
#include "stages/options.h"
#include "test.h"

#define T_OPTIONS(NUM, INT, STR, BOOL, SEP, ...)                                     \
  NUM(gain, 0.5, 0, 4, "linear gain")                                                \
  SEP INT(hop, 256, 1, 65536, "STFT hop in samples") SEP NUM(floor_db, -55, -160, 0, \
                                                             "level floor") SEP      \
  STR(mode, "fast", "fast or exact") SEP                                             \
  BOOL(hpss, 1, "apply the harmonic mask") SEP                                       \
  BOOL(quiet, 0, "say less")
EBB_STAGE_OPTIONS(T_OPTIONS)

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static void test_schema(void) {
  json_error_t je;
  json_t *s = json_loads(stage_opts_schema, 0, &je);
  CHECK_MSG(s, "the generated schema is not JSON: %s in %s", je.text, stage_opts_schema);
  REQUIRE(s);
  CHECK_EQ_INT(json_object_size(s), 6);
  json_t *g = json_object_get(s, "gain"), *h = json_object_get(s, "hop");
  CHECK_EQ_STR(json_string_value(json_object_get(g, "type")), "number");
  CHECK_NEAR(json_number_value(json_object_get(g, "default")), 0.5, 0);
  CHECK_NEAR(json_number_value(json_object_get(g, "minimum")), 0, 0);
  CHECK_NEAR(json_number_value(json_object_get(g, "maximum")), 4, 0);
  CHECK_EQ_STR(json_string_value(json_object_get(g, "description")), "linear gain");
  CHECK_EQ_STR(json_string_value(json_object_get(h, "type")), "integer");
  CHECK(json_is_integer(json_object_get(h, "default")));
  CHECK_NEAR(json_number_value(json_object_get(json_object_get(s, "floor_db"), "minimum")), -160,
             0);
  json_t *m = json_object_get(s, "mode");
  CHECK_EQ_STR(json_string_value(json_object_get(m, "default")), "fast");
  CHECK(json_object_get(m, "minimum") == NULL);
  CHECK(json_is_true(json_object_get(json_object_get(s, "hpss"), "default")));
  CHECK(json_is_false(json_object_get(json_object_get(s, "quiet"), "default")));
  json_decref(s);
}

static void test_read(void) {
  stage_opts v;
  memset(&v, 0xff, sizeof v);
  REQUIRE(stage_opts_read("t", NULL, &v) == 0);
  CHECK_NEAR(v.gain, 0.5, 0);
  CHECK_EQ_INT(v.hop, 256);
  CHECK_NEAR(v.floor_db, -55, 0);
  CHECK_EQ_STR(v.mode, "fast");
  CHECK(v.hpss == 1 && v.quiet == 0);
  json_t *o = json_loads("{\"gain\": 4, \"hop\": 2.0, \"mode\": \"exact\", \"hpss\": false, "
                         "\"floor_db\": null}",
                         0, NULL);
  REQUIRE(stage_opts_read("t", o, &v) == 0);
  CHECK_NEAR(v.gain, 4, 0);
  CHECK_EQ_INT(v.hop, 2);
  CHECK_NEAR(v.floor_db, -55, 0); /* null: the default */
  CHECK_EQ_STR(v.mode, "exact");
  CHECK(v.hpss == 0);
  json_decref(o);
  /* from text, as a stage's load gets it */
  json_t *root = (json_t *)1;
  REQUIRE(stage_opts_parse("t", "", &root, &v) == 0);
  CHECK(root == NULL && v.hop == 256);
  CHECK_EQ_INT(stage_opts_parse("t", "{\"hop\": ", &root, &v), EBB_ECONFIG);
  CHECK_MSG(has(ebb_errmsg(), "t: options are not a JSON object"), "got '%s'", ebb_errmsg());
  CHECK(root == NULL);
  CHECK_EQ_INT(stage_opts_parse("t", "[1]", &root, &v), EBB_ECONFIG);
  json_decref(root);
}

static void test_refused(void) {
  const struct {
    const char *json, *want;
  } bad[] = {
      {"{\"gain\": 4.01}", "t: option gain=4.01 must be in 0..4"},
      {"{\"gain\": -1}", "option gain=-1 must be in 0..4"},
      {"{\"hop\": 0}", "option hop=0 must be in 1..65536"},
      {"{\"hop\": 1.5}", "option hop=1.5 must be a whole number"},
      {"{\"floor_db\": 1}", "option floor_db=1 must be in -160..0"},
      {"{\"gain\": \"1\"}", "option 'gain' must be a number"},
      {"{\"mode\": 1}", "option 'mode' must be a string"},
      {"{\"hpss\": 1}", "option 'hpss' must be true or false"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
    json_t *o = json_loads(bad[k].json, 0, NULL);
    stage_opts v;
    CHECK_MSG(stage_opts_read("t", o, &v) == EBB_ECONFIG, "%s was accepted", bad[k].json);
    CHECK_MSG(has(ebb_errmsg(), bad[k].want), "%s: message '%s' lacks '%s'", bad[k].json,
              ebb_errmsg(), bad[k].want);
    json_decref(o);
  }
}

static void test_builtin_schemas_bounded(void) {
  size_t n;
  const ebb_stage *const *st = stg_builtin_stages(&n);
  int numeric = 0;
  for (size_t i = 0; i < n; i++) {
    json_error_t je;
    json_t *s = json_loads(st[i]->options_schema, 0, &je);
    CHECK_MSG(json_is_object(s), "stage %s: schema is not a JSON object: %s", st[i]->name, je.text);
    const char *k;
    json_t *spec;
    json_object_foreach(s, k, spec) {
      const char *type = json_string_value(json_object_get(spec, "type"));
      CHECK_MSG(type && json_object_get(spec, "default") &&
                    json_is_string(json_object_get(spec, "description")),
                "stage %s option %s: needs a type, a default and a description", st[i]->name, k);
      if (!type || (strcmp(type, "number") && strcmp(type, "integer")))
        continue;
      numeric++;
      json_t *lo = json_object_get(spec, "minimum"), *hi = json_object_get(spec, "maximum");
      double d = json_number_value(json_object_get(spec, "default"));
      CHECK_MSG(json_is_number(lo) && json_is_number(hi), "stage %s option %s: no minimum/maximum",
                st[i]->name, k);
      CHECK_MSG(json_number_value(lo) <= d && d <= json_number_value(hi),
                "stage %s option %s: default %g outside %g..%g", st[i]->name, k, d,
                json_number_value(lo), json_number_value(hi));
    }
    json_decref(s);
  }
  CHECK(numeric >= 30); /* the audio stages and synthetic have that many */
}

int main(void) {
  RUN(test_schema);
  RUN(test_read);
  RUN(test_refused);
  RUN(test_builtin_schemas_bounded);
  return TEST_END();
}
