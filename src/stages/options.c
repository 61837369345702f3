/* The reader of the stage option tables (options.h). */
#include "stages/options.h"

#include <math.h>
#include <string.h>

#include "ebb/error.h"

static int read_number(const char *stage, const stg_opt_def *d, const json_t *v, void *field) {
  double x = d->def;
  if (v) {
    if (!json_is_number(v))
      return ebb_seterr(EBB_ECONFIG, "%s: option '%s' must be a number", stage, d->name);
    x = json_number_value(v);
    if (!(x >= d->min && x <= d->max))
      return ebb_seterr(EBB_ECONFIG, "%s: option %s=%g must be in %g..%g", stage, d->name, x,
                        d->min, d->max);
    if (d->kind == EBB_OPT_INT && x != floor(x))
      return ebb_seterr(EBB_ECONFIG, "%s: option %s=%g must be a whole number", stage, d->name, x);
  }
  if (d->kind == EBB_OPT_INT)
    *(int *)field = (int)x;
  else
    *(double *)field = x;
  return 0;
}

int stg_stage_opts_read(const char *stage, const stg_opt_def *defs, size_t n, const json_t *opts,
                        void *out) {
  if (opts && !json_is_object(opts))
    return ebb_seterr(EBB_ECONFIG, "%s: options are not a JSON object", stage);
  for (size_t i = 0; i < n; i++) {
    const stg_opt_def *d = &defs[i];
    json_t *v = json_object_get(opts, d->name);
    void *field = (char *)out + d->offset;
    int rc = 0;
    if (json_is_null(v))
      v = NULL;
    switch (d->kind) {
    case EBB_OPT_NUM:
    case EBB_OPT_INT: rc = read_number(stage, d, v, field); break;
    case EBB_OPT_STR:
      if (v && !json_is_string(v))
        return ebb_seterr(EBB_ECONFIG, "%s: option '%s' must be a string", stage, d->name);
      *(const char **)field = v ? json_string_value(v) : d->def_str;
      break;
    case EBB_OPT_BOOL:
      if (v && !json_is_boolean(v))
        return ebb_seterr(EBB_ECONFIG, "%s: option '%s' must be true or false", stage, d->name);
      *(int *)field = v ? json_is_true(v) : d->def != 0;
      break;
    }
    if (rc)
      return rc;
  }
  return 0;
}

int stg_stage_opts_parse(const char *stage, const stg_opt_def *defs, size_t n,
                         const char *options_json, json_t **root, void *out) {
  json_error_t je;
  *root = NULL;
  if (options_json && *options_json && !(*root = json_loads(options_json, 0, &je)))
    return ebb_seterr(EBB_ECONFIG, "%s: options are not a JSON object (line %d: %s)", stage,
                      je.line, je.text);
  return stg_stage_opts_read(stage, defs, n, *root, out);
}
