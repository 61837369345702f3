/* `ebb pipelines`: the built-in pipelines and those of --config, with their
 * stages; stages this build does not have are marked. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "pipeline/config.h"
#include "pipeline/registry.h"

static void usage(FILE *f) {
  fprintf(f, "usage: ebb pipelines [--config FILE] [--json]\n\n"
             "Lists the built-in pipelines and those of FILE (which replace built-in ones\n"
             "of the same name), their release policy and stages. A stage that is neither\n"
             "built in nor in a plugin (plugin_dirs, EBB_PLUGIN_PATH) is marked missing.\n");
}

int cli_cmd_pipelines(int argc, char **argv) {
  int json;
  pl_config *cfg;
  pl_registry *reg;
  int stop = cli_list_begin(argc, argv, usage, &json, &cfg, &reg);
  if (stop >= 0)
    return stop;
  json_t *arr = json_array();
  for (size_t i = 0; i < cfg->npipelines; i++) {
    const pl_def *p = &cfg->pipelines[i];
    char pol[64];
    pl_policy def = {EBB_POLICY_AFTER_STAGE, 0};
    pl_policy_format(p->has_policy ? &p->policy : &def, pol, sizeof pol);
    json_t *jp = json_object(), *js = json_array();
    if (!json) {
      printf("%s  (%s, release %s)\n", p->name, p->origin, pol);
      if (p->description)
        printf("  %s\n", p->description);
    }
    for (size_t k = 0; k < p->nstages; k++) {
      const pl_stage_def *d = &p->stages[k];
      /* a "worker" entry's stage lives in its executable, not the registry */
      int have = d->worker || pl_registry_find(reg, d->stage, NULL) != NULL;
      if (!json) {
        printf("  %zu. %s", k + 1, d->name);
        if (strcmp(d->name, d->stage))
          printf(" (%s)", d->stage);
        if (d->timeout_s > 0)
          printf("  timeout %g s", d->timeout_s);
        if (d->worker)
          printf("  worker %s", d->worker);
        else if (d->isolate)
          printf("  isolated");
        if (!have)
          printf("  [missing: no stage '%s' in this build]", d->stage);
        printf("\n");
      }
      json_t *o = json_object();
      json_object_set_new(o, "name", json_string(d->name));
      json_object_set_new(o, "stage", json_string(d->stage));
      json_object_set_new(o, "available", json_boolean(have));
      json_object_set_new(o, "isolate", json_boolean(d->isolate));
      if (d->worker)
        json_object_set_new(o, "worker", json_string(d->worker));
      json_object_set(o, "options", d->options);
      json_array_append_new(js, o);
    }
    json_object_set_new(jp, "name", json_string(p->name));
    json_object_set_new(jp, "origin", json_string(p->origin));
    json_object_set_new(jp, "release", json_string(pol));
    if (p->description)
      json_object_set_new(jp, "description", json_string(p->description));
    json_object_set_new(jp, "stages", js);
    json_array_append_new(arr, jp);
  }
  return cli_list_end(arr, json, JSON_INDENT(2), cfg, reg);
}
