/* Config files: pl_config_load_string and pl_config_load (the same bytes in
 * a file) agree; a config either loads into well-formed definitions or fails
 * with EBB_ECONFIG and a message; every loaded stage's options go through
 * pl_stage_validate_options for the built-in stage of that name. */
#include <math.h>

#include "fuzz_util.h"
#include "pipeline/config.h"
#include "pipeline/registry.h"

static pl_registry *registry(void) {
  static pl_registry *r;
  if (!r && pl_registry_create(&r) != 0) {
    fprintf(stderr, "fuzz_config: no registry: %s\n", ebb_errmsg());
    abort();
  }
  return r;
}

static void check_config(const pl_config *c) {
  FUZZ_CHECK(c->npipelines >= 1, "no pipelines (built-ins lost)");
  for (size_t i = 0; i < c->npipelines; i++) {
    const pl_def *p = &c->pipelines[i];
    FUZZ_CHECK(p->name && p->origin, "pipeline #%zu without name/origin", i);
    FUZZ_CHECK(pl_config_pipeline(c, p->name) == p, "lookup of '%s' finds another entry", p->name);
    FUZZ_CHECK(p->nstages >= 1 && p->stages, "pipeline '%s' with %zu stages", p->name, p->nstages);
    if (p->has_policy)
      FUZZ_CHECK(p->policy.kind != EBB_POLICY_IDLE ||
                     (isfinite(p->policy.idle_s) && p->policy.idle_s >= 0),
                 "pipeline '%s': idle %g", p->name, p->policy.idle_s);
    for (size_t j = 0; j < p->nstages; j++) {
      const pl_stage_def *s = &p->stages[j];
      FUZZ_CHECK(s->stage && *s->stage && s->name && *s->name, "pipeline '%s' stage #%zu: no name",
                 p->name, j);
      FUZZ_CHECK(json_is_object(s->options), "pipeline '%s' stage '%s': options not an object",
                 p->name, s->name);
      FUZZ_CHECK(isfinite(s->timeout_s) && s->timeout_s >= 0, "stage '%s': timeout_s %g", s->name,
                 s->timeout_s);
      for (size_t k = 0; k < j; k++)
        FUZZ_CHECK(strcmp(p->stages[k].name, s->name), "pipeline '%s': two stages named '%s'",
                   p->name, s->name);
      const ebb_stage *st = pl_registry_find(registry(), s->stage, NULL);
      if (!st)
        continue;
      json_t *merged = NULL;
      int rc = pl_stage_validate_options(st, s->options, "fuzz", &merged);
      FUZZ_CHECK(rc == 0 || rc == EBB_ECONFIG, "validate options of '%s': rc %d (%s)", s->stage, rc,
                 ebb_errmsg());
      if (!rc) {
        FUZZ_CHECK(json_is_object(merged), "validate options of '%s': merged not an object",
                   s->stage);
        const char *k;
        json_t *v;
        json_object_foreach(s->options, k, v)
            FUZZ_CHECK(json_object_get(merged, k) == v, "option '%s' of '%s' lost in the merge", k,
                       s->stage);
        json_decref(merged);
      }
    }
  }
}

static void same_config(const pl_config *a, const pl_config *b) {
  FUZZ_CHECK(a->npipelines == b->npipelines, "string: %zu pipelines, file: %zu", a->npipelines,
             b->npipelines);
  FUZZ_CHECK(a->nplugin_dirs == b->nplugin_dirs, "string: %zu plugin dirs, file: %zu",
             a->nplugin_dirs, b->nplugin_dirs);
  for (size_t i = 0; i < a->npipelines; i++) {
    const pl_def *p = &a->pipelines[i], *q = &b->pipelines[i];
    FUZZ_CHECK(!strcmp(p->name, q->name) && p->nstages == q->nstages,
               "pipeline #%zu: '%s' (%zu stages) vs '%s' (%zu)", i, p->name, p->nstages, q->name,
               q->nstages);
    for (size_t j = 0; j < p->nstages; j++)
      FUZZ_CHECK(!strcmp(p->stages[j].name, q->stages[j].name) &&
                     json_equal(p->stages[j].options, q->stages[j].options),
                 "pipeline '%s' stage #%zu differs between string and file", p->name, j);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_cstr(data, size);
  pl_config *c = NULL, *f = NULL;
  int rc = pl_config_load_string(text, "fuzz.json", &c);
  FUZZ_CHECK(rc == 0 || rc == EBB_ECONFIG, "load_string: rc %d (%s): %s", rc, ebb_errname(rc),
             ebb_errmsg());
  if (rc)
    FUZZ_CHECK(ebb_errmsg() && strstr(ebb_errmsg(), "fuzz.json"),
               "the message does not name the config: %s", ebb_errmsg());
  else
    check_config(c);

  char path[700];
  snprintf(path, sizeof path, "%s/config.json", fuzz_scratch("config"));
  fuzz_write_file(path, data, size);
  int rc2 = pl_config_load(path, &f);
  FUZZ_CHECK(rc2 == rc, "load_string rc %d but load(file) rc %d (%s)", rc, rc2,
             rc2 ? ebb_errmsg() : "ok");
  if (!rc && !rc2) {
    check_config(f);
    same_config(c, f);
  }
  pl_config_free(c);
  pl_config_free(f);
  free(text);
  return 0;
}
