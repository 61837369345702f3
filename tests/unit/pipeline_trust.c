/* Option trust levels (src/pipeline/trust.h, docs/stage-abi.md): what each
 * schema entry declares, the safe default for a third-party schema without
 * "trust", bad values refused; every built-in option declares its level,
 * and the ones that name a path, a URL or a credential are operator-only;
 * a job's options are refused naming STAGE.OPTION unless "allow_options"
 * names them, allowed URLs go only to "allow_url_hosts", no control
 * character passes in a path, URL or secret, and an allowed path goes to the
 * caller's hook; the config's allow_options / allow_url_hosts are parsed
 * and checked against the stages. */
#include <string.h>

#include "pipeline/config.h"
#include "pipeline/registry.h"
#include "pipeline/runner.h"
#include "pipeline/trust.h"
#include "stages/builtin.h"
#include "test.h"

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static int trust_of(const char *spec_json, pl_opt_trust *t, pl_opt_format *f) {
  json_t *spec = json_loads(spec_json, 0, NULL);
  int rc = pl_option_trust("plug", "opt", spec, t, f);
  json_decref(spec);
  return rc;
}

static void test_declared_and_defaults(void) {
  static const struct {
    const char *spec;
    pl_opt_trust want;
    pl_opt_format fmt;
  } cases[] = {
      {"{\"type\": \"number\", \"trust\": \"job\"}", EBB_TRUST_JOB, EBB_OPT_FMT_NONE},
      {"{\"type\": \"string\", \"trust\": \"operator\"}", EBB_TRUST_OPERATOR, EBB_OPT_FMT_NONE},
      /* no "trust": the safe default */
      {"{\"type\": \"string\"}", EBB_TRUST_OPERATOR, EBB_OPT_FMT_NONE},
      {"{\"type\": \"string\", \"format\": \"path\"}", EBB_TRUST_OPERATOR, EBB_OPT_FMT_PATH},
      {"{\"type\": \"string\", \"format\": \"url\"}", EBB_TRUST_OPERATOR, EBB_OPT_FMT_URL},
      {"{\"type\": \"string\", \"format\": \"secret\"}", EBB_TRUST_OPERATOR, EBB_OPT_FMT_SECRET},
      {"{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 8}", EBB_TRUST_JOB, EBB_OPT_FMT_NONE},
      {"{\"type\": \"integer\", \"minimum\": 1}", EBB_TRUST_OPERATOR, EBB_OPT_FMT_NONE},
      {"{\"type\": \"number\"}", EBB_TRUST_OPERATOR, EBB_OPT_FMT_NONE},
      {"{\"type\": \"boolean\"}", EBB_TRUST_JOB, EBB_OPT_FMT_NONE},
      {"{\"type\": \"object\"}", EBB_TRUST_OPERATOR, EBB_OPT_FMT_NONE},
      {"{}", EBB_TRUST_OPERATOR, EBB_OPT_FMT_NONE},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pl_opt_trust t = 99;
    pl_opt_format f = 99;
    CHECK_MSG(trust_of(cases[i].spec, &t, &f) == 0, "%s: refused: %s", cases[i].spec, ebb_errmsg());
    CHECK_MSG(t == cases[i].want && f == cases[i].fmt, "%s: trust %s format %d, expected %s %d",
              cases[i].spec, pl_trust_name(t), (int)f, pl_trust_name(cases[i].want),
              (int)cases[i].fmt);
  }
  static const char *const bad[] = {
      "{\"type\": \"number\", \"trust\": \"anyone\"}",
      "{\"type\": \"number\", \"trust\": true}",
      "{\"type\": \"string\", \"format\": \"filename\"}",
      /* a path cannot be job-settable: the operator allows it per pipeline */
      "{\"type\": \"string\", \"format\": \"path\", \"trust\": \"job\"}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    pl_opt_trust t;
    pl_opt_format f;
    CHECK_MSG(trust_of(bad[i], &t, &f) == EBB_EABI, "%s: accepted", bad[i]);
    CHECK_MSG(has(ebb_errmsg(), "stage 'plug' option 'opt'"), "%s: message '%s' names neither",
              bad[i], ebb_errmsg());
  }
}

/* Every built-in option says its level; the ones the issue names are the operator's. */
static void test_builtins(void) {
  static const char *const operator_only[] = {
      "align.lyrics",       "transcribe.url",       "transcribe.api_key",
      "transcribe.retries", "transcribe.timeout_s", "decode.max_seconds",
  };
  size_t n;
  const ebb_stage *const *st = stg_builtin_stages(&n);
  int seen = 0;
  for (size_t i = 0; i < n; i++) {
    json_t *schema = json_loads(st[i]->options_schema, 0, NULL);
    const char *k;
    json_t *spec;
    json_object_foreach(schema, k, spec) {
      CHECK_MSG(json_is_string(json_object_get(spec, "trust")), "%s.%s declares no trust",
                st[i]->name, k);
      pl_opt_trust t;
      pl_opt_format f;
      CHECK(pl_option_trust(st[i]->name, k, spec, &t, &f) == 0);
      char full[128];
      snprintf(full, sizeof full, "%s.%s", st[i]->name, k);
      int want_op = 0;
      for (size_t j = 0; j < sizeof operator_only / sizeof operator_only[0]; j++)
        want_op |= !strcmp(full, operator_only[j]);
      seen += want_op;
      if (want_op)
        CHECK_MSG(t == EBB_TRUST_OPERATOR, "%s is job-settable", full);
      /* a string that is neither path, URL nor secret must not be one in disguise */
      if (t == EBB_TRUST_JOB && json_is_string(json_object_get(spec, "default")))
        CHECK_MSG(!has(k, "path") && !has(k, "url") && !has(k, "key") && !has(k, "file"),
                  "%s is job-settable but looks like a path, URL or key", full);
    }
    json_decref(schema);
  }
  CHECK_EQ_INT(seen, 6);
  const ebb_stage *al = NULL;
  for (size_t i = 0; i < n; i++)
    if (!strcmp(st[i]->name, "align"))
      al = st[i];
  REQUIRE(al);
  json_t *schema = json_loads(al->options_schema, 0, NULL);
  CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(schema, "lyrics"), "format")),
               "path");
  json_decref(schema);
}

static const char cfg_text[] =
    "{\"pipelines\": {\"p\": {\"allow_options\": [\"al.lyrics\", \"tr.url\", \"tr.api_key\"],"
    " \"allow_url_hosts\": [\"Whisper.internal:8080\", \"10.0.0.9\"],"
    " \"stages\": [{\"stage\": \"align\", \"name\": \"al\"}, {\"stage\": \"transcribe\", "
    "\"name\": \"tr\"}]},"
    " \"closed\": {\"stages\": [{\"stage\": \"align\"}, {\"stage\": \"transcribe\"}]}}}";

typedef struct hook {
  int calls;
  char last[256];
} hook;

static int path_hook(void *arg, const char *stage, const char *option, const char *value,
                     json_t *opts) {
  hook *h = arg;
  h->calls++;
  snprintf(h->last, sizeof h->last, "%s.%s=%s", stage, option, value);
  return json_object_set_new(opts, option, json_string("/data/jobs/x/option-al.lyrics"));
}

/* pl_job_options_trust on pipeline name with options text: rc, message. */
static int job_check(const pl_config *c, const pl_registry *reg, const char *name,
                     const char *opts_text, hook *h, json_t **opts_out) {
  json_t *o = json_loads(opts_text, 0, NULL);
  int rc = pl_job_options_trust(reg, pl_config_pipeline(c, name), o, h ? path_hook : NULL, h);
  if (opts_out)
    *opts_out = o;
  else
    json_decref(o);
  return rc;
}

static void test_job_options(void) {
  pl_config *c = NULL;
  pl_registry *reg = NULL;
  REQUIRE(pl_config_load_string(cfg_text, "cfg", &c) == 0);
  REQUIRE(pl_registry_create(&reg) == 0);
  const pl_def *p = pl_config_pipeline(c, "p");
  REQUIRE(p);
  CHECK_EQ_INT((int)p->nallow_options, 3);
  CHECK_EQ_STR(p->allow_url_hosts[0], "whisper.internal:8080"); /* lower-cased */
  CHECK(pl_check(reg, p) == 0);
  hook h = {0};
  /* refused, naming STAGE.OPTION, where nothing is allowed */
  static const struct {
    const char *opts, *want;
  } refused[] = {
      {"{\"align\": {\"lyrics\": \"/etc/passwd\"}}", "option align.lyrics is operator-only"},
      {"{\"transcribe\": {\"url\": \"http://x/\"}}", "option transcribe.url is operator-only"},
      {"{\"transcribe\": {\"api_key\": \"k\"}}", "option transcribe.api_key is operator-only"},
      {"{\"transcribe\": {\"retries\": 20}}", "option transcribe.retries is operator-only"},
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    CHECK_MSG(job_check(c, reg, "closed", refused[i].opts, &h, NULL) == EBB_ECONFIG, "%s accepted",
              refused[i].opts);
    CHECK_MSG(has(ebb_errmsg(), refused[i].want) && has(ebb_errmsg(), "allow_options"),
              "%s: message '%s'", refused[i].opts, ebb_errmsg());
  }
  CHECK(job_check(c, reg, "closed", "{\"align\": {\"snap_ms\": 10}, \"nosuch\": {\"a\": 1}}", &h,
                  NULL) == 0);
  CHECK_EQ_INT(h.calls, 0);
  /* allowed: URLs to the listed hosts only, no control characters */
  static const struct {
    const char *opts;
    int ok;
    const char *want;
  } allowed[] = {
      {"{\"tr\": {\"url\": \"http://whisper.internal:8080/inference\"}}", 1, NULL},
      {"{\"tr\": {\"url\": \"https://10.0.0.9:443/v1\"}}", 1, NULL},
      {"{\"tr\": {\"url\": \"http://WHISPER.internal:8080\"}}", 1, NULL},
      {"{\"tr\": {\"url\": \"http://whisper.internal/inference\"}}", 0, "host whisper.internal"},
      {"{\"tr\": {\"url\": \"http://whisper.internal:8081/\"}}", 0, "is not one this server"},
      {"{\"tr\": {\"url\": \"http://whisper.internal:8080@evil.example/\"}}", 0, "user@"},
      {"{\"tr\": {\"url\": \"file:///etc/passwd\"}}", 0, "not an http"},
      {"{\"tr\": {\"url\": \"http://10.0.0.9/\\r\\nX-A: b\"}}", 0, "control character"},
      {"{\"tr\": {\"api_key\": \"k\\r\\nX-Injected: yes\"}}", 0, "tr.api_key: the value holds"},
      {"{\"tr\": {\"api_key\": \"sk-fine\"}}", 1, NULL},
      {"{\"al\": {\"lyrics\": \"/in/a\\nb\"}}", 0, "control character"},
  };
  for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
    int rc = job_check(c, reg, "p", allowed[i].opts, &h, NULL);
    CHECK_MSG(allowed[i].ok ? rc == 0 : rc == EBB_ECONFIG, "%s: rc %d (%s)", allowed[i].opts, rc,
              rc ? ebb_errmsg() : "accepted");
    if (!allowed[i].ok)
      CHECK_MSG(has(ebb_errmsg(), allowed[i].want), "%s: message '%s' lacks '%s'", allowed[i].opts,
                ebb_errmsg(), allowed[i].want);
  }
  /* an allowed path goes to the hook, which may replace it */
  json_t *o = NULL;
  h.calls = 0;
  CHECK(job_check(c, reg, "p", "{\"al\": {\"lyrics\": \"/in/words.txt\"}}", &h, &o) == 0);
  CHECK_EQ_INT(h.calls, 1);
  CHECK_EQ_STR(h.last, "al.lyrics=/in/words.txt");
  CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(o, "al"), "lyrics")),
               "/data/jobs/x/option-al.lyrics");
  json_decref(o);
  /* no hook (a server without the confinement): refused */
  CHECK(job_check(c, reg, "p", "{\"al\": {\"lyrics\": \"/in/words.txt\"}}", NULL, NULL) ==
        EBB_ECONFIG);
  CHECK(has(ebb_errmsg(), "al.lyrics"));
  pl_registry_destroy(reg);
  pl_config_free(c);
}

static void test_config_errors(void) {
  static const struct {
    const char *cfg, *want;
  } bad[] = {
      {"{\"pipelines\": {\"p\": {\"allow_options\": \"align.lyrics\", \"stages\": [{\"stage\": "
       "\"align\"}]}}}",
       "\"allow_options\" must be an array"},
      {"{\"pipelines\": {\"p\": {\"allow_options\": [\"lyrics\"], \"stages\": [{\"stage\": "
       "\"align\"}]}}}",
       "expected \"STAGE.OPTION\""},
      {"{\"pipelines\": {\"p\": {\"allow_options\": [\"pitch.hop\"], \"stages\": [{\"stage\": "
       "\"align\"}]}}}",
       "'pitch.hop' names no stage"},
      {"{\"pipelines\": {\"p\": {\"allow_url_hosts\": [\"http://x/\"], \"stages\": [{\"stage\": "
       "\"align\"}]}}}",
       "\"allow_url_hosts\" #1"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    pl_config *c = NULL;
    CHECK_MSG(pl_config_load_string(bad[i].cfg, "cfg", &c) == EBB_ECONFIG, "accepted: %s",
              bad[i].cfg);
    CHECK_MSG(has(ebb_errmsg(), bad[i].want), "message '%s' lacks '%s'", ebb_errmsg(), bad[i].want);
    pl_config_free(c);
  }
  /* an option the stage does not have: the pipeline check names it */
  pl_config *c = NULL;
  pl_registry *reg = NULL;
  REQUIRE(pl_config_load_string("{\"pipelines\": {\"p\": {\"allow_options\": [\"align.lyrix\"], "
                                "\"stages\": [{\"stage\": \"align\"}]}}}",
                                "cfg", &c) == 0);
  REQUIRE(pl_registry_create(&reg) == 0);
  CHECK(pl_check(reg, pl_config_pipeline(c, "p")) == EBB_ECONFIG);
  CHECK_MSG(has(ebb_errmsg(), "has no option 'lyrix'"), "message '%s'", ebb_errmsg());
  pl_registry_destroy(reg);
  pl_config_free(c);
}

/* A plugin-style stage with a bad trust value is refused by the schema check. */
static void test_schema_check(void) {
  ebb_stage st = {.abi_version = EBB_STAGE_ABI_VERSION,
                  .size = sizeof st,
                  .name = "plug",
                  .options_schema = "{\"n\": {\"type\": \"integer\", \"trust\": \"everyone\"}}"};
  CHECK(pl_schema_check_trust(&st, "plug.so") == EBB_EABI);
  CHECK_MSG(has(ebb_errmsg(), "plug.so") && has(ebb_errmsg(), "'n'"), "message '%s'", ebb_errmsg());
  st.options_schema = "{\"n\": {\"type\": \"integer\"}, \"dir\": {\"type\": \"string\"}}";
  CHECK(pl_schema_check_trust(&st, "plug.so") == 0);
}

int main(void) {
  RUN(test_declared_and_defaults);
  RUN(test_builtins);
  RUN(test_job_options);
  RUN(test_config_errors);
  RUN(test_schema_check);
  return TEST_END();
}
