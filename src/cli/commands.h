/* One function per `ebb` subcommand; each parses its own options, prints its
 * own --help and returns the process exit status (0 ok, 1 job failed, 2 bad
 * usage or bad input). */
#ifndef EBB_CLI_COMMANDS_H
#define EBB_CLI_COMMANDS_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

typedef struct cli_command {
  const char *name;
  const char *summary;
  int (*main)(int argc, char **argv); /* argv[0] is the subcommand name */
} cli_command;

int cli_cmd_version(int argc, char **argv);
int cli_cmd_devices(int argc, char **argv);
int cli_cmd_run(int argc, char **argv);
int cli_cmd_pipelines(int argc, char **argv);
int cli_cmd_stages(int argc, char **argv);
int cli_cmd_serve(int argc, char **argv);
int cli_cmd_top(int argc, char **argv);
int cli_cmd_reclaim(int argc, char **argv);

/* Loads the config (NULL: built-ins only) and the stage registry with the
 * config's plugin_dirs and EBB_PLUGIN_PATH. On failure prints one message to
 * stderr and returns EBB_EXIT_USAGE (nothing to free); else EBB_EXIT_OK and
 * the caller frees both. (cmd_common.c) */
struct pl_config;
struct pl_registry;
int cli_load(const char *config_path, struct pl_config **cfg, struct pl_registry **reg);

/* The start `ebb pipelines` and `ebb stages` share: parses [--config FILE]
 * [--json] [--help] and loads the config and registry as cli_load does.
 * Returns -1 to go on (the caller ends with cli_list_end), else the exit
 * status to return with nothing to free (0 after --help, EBB_EXIT_USAGE with
 * a message). (cmd_common.c) */
int cli_list_begin(int argc, char **argv, void (*usage)(FILE *), int *json, struct pl_config **cfg,
                   struct pl_registry **reg);
/* Their end: prints arr with json_dumps(dump_flags) when json is set, then
 * frees arr, reg and cfg; returns EBB_EXIT_OK. (cmd_common.c) */
int cli_list_end(json_t *arr, int json, size_t dump_flags, struct pl_config *cfg,
                 struct pl_registry *reg);

/* "8G", "512MiB", "1048576" (bytes), "4 GiB"; 0 or -1. (cmd_common.c) */
int cli_parse_bytes(const char *v, uint64_t *out);

#define EBB_EXIT_OK 0
#define EBB_EXIT_FAILED 1
#define EBB_EXIT_USAGE 2

#endif
