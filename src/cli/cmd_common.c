/* What `ebb run`, `ebb pipelines` and `ebb stages` share: the config file and
 * the stage registry with its plugins. */
#include <ctype.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/commands.h"
#include "pipeline/config.h"
#include "pipeline/registry.h"

int cli_load(const char *config_path, pl_config **cfg, pl_registry **reg) {
  *cfg = NULL;
  *reg = NULL;
  int rc = pl_config_load(config_path, cfg);
  if (!rc)
    rc = pl_registry_create(reg);
  for (size_t i = 0; !rc && i < (*cfg)->nplugin_dirs; i++)
    if ((rc = pl_registry_load_dir(*reg, (*cfg)->plugin_dirs[i])) && config_path)
      ebb_errctx(rc, "%s: plugin_dirs: ", config_path);
  if (!rc)
    rc = pl_registry_load_env(*reg);
  if (rc) {
    fprintf(stderr, "ebb: %s\n", ebb_errmsg());
    pl_registry_destroy(*reg);
    pl_config_free(*cfg);
    *reg = NULL;
    *cfg = NULL;
    return EBB_EXIT_USAGE;
  }
  return EBB_EXIT_OK;
}

static int cli_list_options(int argc, char **argv, void (*usage)(FILE *), const char **config,
                            int *json) {
  static const struct option longopts[] = {{"config", required_argument, NULL, 'c'},
                                           {"json", no_argument, NULL, 'j'},
                                           {"help", no_argument, NULL, 'h'},
                                           {NULL, 0, NULL, 0}};
  int c;
  *config = NULL;
  *json = 0;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    if (c == 'c')
      *config = optarg;
    else if (c == 'j')
      *json = 1;
    else if (c == 'h') {
      usage(stdout);
      return EBB_EXIT_OK;
    } else {
      fprintf(stderr, "ebb %s: bad option '%s'\n", argv[0], argv[optind - 1]);
      usage(stderr);
      return EBB_EXIT_USAGE;
    }
  }
  if (optind != argc) {
    fprintf(stderr, "ebb %s: unexpected argument '%s'\n", argv[0], argv[optind]);
    return EBB_EXIT_USAGE;
  }
  return -1;
}

int cli_list_begin(int argc, char **argv, void (*usage)(FILE *), int *json, pl_config **cfg,
                   pl_registry **reg) {
  const char *config;
  int stop = cli_list_options(argc, argv, usage, &config, json);
  if (stop >= 0)
    return stop;
  int status = cli_load(config, cfg, reg);
  return status ? status : -1;
}

int cli_list_end(json_t *arr, int json, size_t dump_flags, pl_config *cfg, pl_registry *reg) {
  if (json) {
    char *s = json_dumps(arr, dump_flags);
    printf("%s\n", s ? s : "[]");
    free(s);
  }
  json_decref(arr);
  pl_registry_destroy(reg);
  pl_config_free(cfg);
  return EBB_EXIT_OK;
}

int cli_parse_bytes(const char *v, uint64_t *out) {
  char *end = NULL;
  double x = strtod(v, &end);
  if (!end || end == v || x < 0)
    return -1;
  while (*end == ' ')
    end++;
  double mul = 1;
  switch (toupper((unsigned char)*end)) {
  case 'K':
    mul = 1024.0;
    end++;
    break;
  case 'M':
    mul = 1048576.0;
    end++;
    break;
  case 'G':
    mul = 1073741824.0;
    end++;
    break;
  case 'T':
    mul = 1099511627776.0;
    end++;
    break;
  case '\0': break;
  default: return -1;
  }
  if (mul > 1 && (*end == 'i' || *end == 'I'))
    end++;
  if (mul > 1 && (*end == 'B' || *end == 'b'))
    end++;
  if (*end || x * mul > 1.8e19)
    return -1;
  *out = (uint64_t)(x * mul);
  return 0;
}
