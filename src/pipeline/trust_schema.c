/* Option trust levels (trust.h): the level and format of each option of a
 * stage's schema, which the registry checks when a stage registers; trust.c
 * checks pipelines and jobs against them. */
#include "pipeline/trust.h"

#include <string.h>

#include "ebb/error.h"

const char *pl_trust_name(pl_opt_trust t) { return t == EBB_TRUST_JOB ? "job" : "operator"; }

int pl_has_control_char(const char *s) {
  for (; s && *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f)
      return 1;
  return 0;
}

static int parse_format(const char *stage, const char *option, const json_t *f,
                        pl_opt_format *fmt) {
  const char *v = json_string_value(f);
  *fmt = EBB_OPT_FMT_NONE;
  if (!f)
    return 0;
  if (v && !strcmp(v, "path"))
    *fmt = EBB_OPT_FMT_PATH;
  else if (v && !strcmp(v, "url"))
    *fmt = EBB_OPT_FMT_URL;
  else if (v && !strcmp(v, "secret"))
    *fmt = EBB_OPT_FMT_SECRET;
  else
    return ebb_seterr(EBB_EABI,
                      "stage '%s' option '%s': \"format\" must be \"path\", \"url\" "
                      "or \"secret\"",
                      stage, option);
  return 0;
}

/* No "trust": what the host can check itself is the job's; anything that
 * may name a file, a host or a secret, or an amount of work without a
 * bound, is the operator's. */
static pl_opt_trust default_trust(const json_t *spec, pl_opt_format fmt) {
  const char *type = json_string_value(json_object_get(spec, "type"));
  if (fmt != EBB_OPT_FMT_NONE || !type)
    return EBB_TRUST_OPERATOR;
  if (!strcmp(type, "boolean"))
    return EBB_TRUST_JOB;
  if (!strcmp(type, "number") || !strcmp(type, "integer"))
    return json_is_number(json_object_get(spec, "minimum")) &&
                   json_is_number(json_object_get(spec, "maximum"))
               ? EBB_TRUST_JOB
               : EBB_TRUST_OPERATOR;
  return EBB_TRUST_OPERATOR;
}

int pl_option_trust(const char *stage, const char *option, const json_t *spec, pl_opt_trust *trust,
                    pl_opt_format *fmt) {
  *trust = EBB_TRUST_OPERATOR;
  *fmt = EBB_OPT_FMT_NONE;
  if (!json_is_object(spec))
    return 0; /* "any": the operator's */
  int rc = parse_format(stage, option, json_object_get(spec, "format"), fmt);
  if (rc)
    return rc;
  json_t *t = json_object_get(spec, "trust");
  const char *v = json_string_value(t);
  if (!t)
    *trust = default_trust(spec, *fmt);
  else if (v && !strcmp(v, "job"))
    *trust = EBB_TRUST_JOB;
  else if (v && !strcmp(v, "operator"))
    *trust = EBB_TRUST_OPERATOR;
  else
    return ebb_seterr(EBB_EABI,
                      "stage '%s' option '%s': \"trust\" must be \"job\" or "
                      "\"operator\"",
                      stage, option);
  if (*trust == EBB_TRUST_JOB && *fmt != EBB_OPT_FMT_NONE)
    return ebb_seterr(EBB_EABI,
                      "stage '%s' option '%s': a \"%s\" option is operator-only "
                      "(\"trust\": \"operator\"); the operator allows it per pipeline",
                      stage, option, json_string_value(json_object_get(spec, "format")));
  return 0;
}

int pl_schema_check_trust(const ebb_stage *st, const char *origin) {
  if (!st->options_schema)
    return 0;
  json_t *schema = json_loads(st->options_schema, 0, NULL);
  const char *k;
  json_t *spec;
  int rc = 0;
  json_object_foreach(schema, k, spec) {
    pl_opt_trust t;
    pl_opt_format f;
    if ((rc = pl_option_trust(st->name, k, spec, &t, &f)) != 0) {
      rc = ebb_errctx(rc, "%s: ", origin);
      break;
    }
  }
  json_decref(schema);
  return rc;
}
