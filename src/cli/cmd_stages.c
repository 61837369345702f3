/* `ebb stages`: the built-in stages and the plugins' (config plugin_dirs and
 * EBB_PLUGIN_PATH): name, version, where it comes from, description, options. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "pipeline/config.h"
#include "pipeline/registry.h"
#include "pipeline/trust.h"

static void usage(FILE *f) {
  fprintf(f, "usage: ebb stages [--config FILE] [--json]\n\n"
             "Lists every stage ebb can run: the built-in ones and those of the plugins\n"
             "in FILE's plugin_dirs and in EBB_PLUGIN_PATH (colon-separated), with their\n"
             "version, description and options (type, default, trust: \"job\" options a\n"
             "job may set, \"operator\" ones only the config file or the environment sets\n"
             "unless the pipeline's \"allow_options\" names them).\n");
}

static void print_default(const json_t *v) {
  char *s = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;
  if (s)
    printf(", default %s", s);
  free(s);
}

/* ", 0..1048576" from the schema's JSON-schema bounds, when it has them. */
static void print_range(const json_t *lo, const json_t *hi) {
  if (!json_is_number(lo) && !json_is_number(hi))
    return;
  printf(", ");
  if (json_is_number(lo))
    printf("%.10g", json_number_value(lo));
  printf("..");
  if (json_is_number(hi))
    printf("%.10g", json_number_value(hi));
}

/* Every option of schema with its effective "trust" (a third-party schema
 * without one gets the default that ebb applies, trust.h). */
static void add_trust(const ebb_stage *st, json_t *schema) {
  const char *k;
  json_t *spec;
  json_object_foreach(schema, k, spec) {
    pl_opt_trust t;
    pl_opt_format f;
    if (json_is_object(spec) && pl_option_trust(st->name, k, spec, &t, &f) == 0)
      json_object_set_new(spec, "trust", json_string(pl_trust_name(t)));
  }
}

/* The stage's declared needs with its default options and no input (NULL:
 * it declares none). */
static json_t *estimate_of(const ebb_stage *st) {
  ebb_estimate e = {.size = sizeof e};
  if (pl_stage_estimate(st, NULL, NULL, &e) != 0)
    return NULL;
  return json_pack("{s:I, s:I, s:f, s:f}", "device_bytes", (json_int_t)e.device_bytes, "host_bytes",
                   (json_int_t)e.host_bytes, "device_bytes_per_s", e.device_bytes_per_s,
                   "host_bytes_per_s", e.host_bytes_per_s);
}

static void print_estimate(const json_t *e) {
  double mib = 1048576.0;
  printf("  needs (declared, default options): device %.1f MiB, host %.1f MiB",
         (double)json_integer_value(json_object_get(e, "device_bytes")) / mib,
         (double)json_integer_value(json_object_get(e, "host_bytes")) / mib);
  double dps = json_real_value(json_object_get(e, "device_bytes_per_s"));
  double hps = json_real_value(json_object_get(e, "host_bytes_per_s"));
  if (dps > 0 || hps > 0)
    printf(", + %.2f MiB device and %.2f MiB host per second of audio", dps / mib, hps / mib);
  printf("\n");
}

int cli_cmd_stages(int argc, char **argv) {
  int json;
  pl_config *cfg;
  pl_registry *reg;
  int stop = cli_list_begin(argc, argv, usage, &json, &cfg, &reg);
  if (stop >= 0)
    return stop;
  json_t *arr = json_array();
  for (size_t i = 0; i < pl_registry_count(reg); i++) {
    const char *origin;
    const ebb_stage *st = pl_registry_at(reg, i, &origin);
    json_t *schema = st->options_schema ? json_loads(st->options_schema, 0, NULL) : json_object();
    json_t *est = estimate_of(st);
    add_trust(st, schema);
    if (json) {
      json_t *o = json_object();
      json_object_set_new(o, "name", json_string(st->name));
      json_object_set_new(o, "version", json_integer(st->version));
      json_object_set_new(o, "origin", json_string(origin));
      json_object_set_new(o, "description", json_string(st->description ? st->description : ""));
      json_object_set_new(o, "needs_gpu", json_boolean(st->needs_gpu));
      json_object_set_new(o, "options", schema ? json_incref(schema) : json_object());
      json_object_set(o, "estimate", est ? est : json_null());
      json_array_append_new(arr, o);
    } else {
      printf("%s  v%u  (%s)%s\n", st->name, st->version, origin, st->needs_gpu ? "  GPU" : "");
      if (st->description)
        printf("  %s\n", st->description);
      if (est)
        print_estimate(est);
      const char *k;
      json_t *spec;
      json_object_foreach(schema, k, spec) {
        json_t *t = json_object_get(spec, "type"), *d = json_object_get(spec, "description");
        printf("    %-16s %s", k, json_is_string(t) ? json_string_value(t) : "any");
        print_default(json_object_get(spec, "default"));
        print_range(json_object_get(spec, "minimum"), json_object_get(spec, "maximum"));
        json_t *tr = json_object_get(spec, "trust"), *fm = json_object_get(spec, "format");
        if (json_is_string(tr))
          printf(", %s%s%s", !strcmp(json_string_value(tr), "job") ? "job" : "operator-only",
                 json_is_string(fm) ? " " : "", json_is_string(fm) ? json_string_value(fm) : "");
        if (json_is_string(d))
          printf("  %s", json_string_value(d));
        printf("\n");
      }
    }
    json_decref(schema);
    json_decref(est);
  }
  return cli_list_end(arr, json, JSON_INDENT(2) | JSON_REAL_PRECISION(10), cfg, reg);
}
