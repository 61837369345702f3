/* pl_stage_validate_options against the built-in stages' option schemas.
 * Input: byte 0 picks the stage (modulo the registry's count), the rest is
 * JSON (any value). Valid options give an object holding every given option
 * and every schema default; invalid ones fail with EBB_ECONFIG naming the
 * stage. */
#include "fuzz_util.h"
#include "pipeline/registry.h"

static pl_registry *registry(void) {
  static pl_registry *r;
  if (!r && pl_registry_create(&r) != 0) {
    fprintf(stderr, "fuzz_options: no registry: %s\n", ebb_errmsg());
    abort();
  }
  return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  pl_registry *r = registry();
  size_t n = pl_registry_count(r);
  FUZZ_CHECK(n > 0, "no built-in stages");
  const ebb_stage *st = pl_registry_at(r, data[0] % n, NULL);
  FUZZ_CHECK(st && st->name, "registry entry %zu", (size_t)(data[0] % n));
  json_error_t e;
  json_t *opts = json_loadb((const char *)data + 1, size - 1, JSON_DECODE_ANY, &e);
  if (!opts)
    return 0;
  json_t *merged = NULL;
  int rc = pl_stage_validate_options(st, opts, "fuzz", &merged);
  if (rc) {
    FUZZ_CHECK(rc == EBB_ECONFIG, "stage '%s': rc %d (%s): %s", st->name, rc, ebb_errname(rc),
               ebb_errmsg());
    FUZZ_CHECK(strstr(ebb_errmsg(), st->name), "message does not name stage '%s': %s", st->name,
               ebb_errmsg());
    FUZZ_CHECK(!merged, "merged set on failure");
  } else {
    FUZZ_CHECK(json_is_object(opts), "stage '%s' accepted options that are not an object",
               st->name);
    FUZZ_CHECK(json_is_object(merged), "stage '%s': merged is not an object", st->name);
    const char *k;
    json_t *v;
    json_object_foreach(opts, k, v)
        FUZZ_CHECK(json_object_get(merged, k) == v, "stage '%s': option '%s' lost", st->name, k);
    json_t *schema = st->options_schema ? json_loads(st->options_schema, 0, &e) : json_object();
    FUZZ_CHECK(json_is_object(schema), "stage '%s': schema does not parse", st->name);
    json_object_foreach(schema, k, v) {
      json_t *def = json_is_object(v) ? json_object_get(v, "default") : NULL;
      if (def)
        FUZZ_CHECK(json_object_get(merged, k), "stage '%s': default of '%s' missing", st->name, k);
    }
    json_object_foreach(merged, k, v)
        FUZZ_CHECK(json_object_get(schema, k), "stage '%s': merged has '%s', not in the schema",
                   st->name, k);
    json_decref(schema);
    json_decref(merged);
  }
  json_decref(opts);
  return 0;
}
