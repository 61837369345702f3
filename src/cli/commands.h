/* One function per `ebb` subcommand; each parses its own options, prints its
 * own --help and returns the process exit status (0 ok, 1 job failed, 2 bad
 * usage or bad input). */
#ifndef EBB_CLI_COMMANDS_H
#define EBB_CLI_COMMANDS_H

#include <jansson.h>
#include <stdio.h>

typedef struct ebb_command {
  const char *name;
  const char *summary;
  int (*main)(int argc, char **argv); /* argv[0] is the subcommand name */
} ebb_command;

int ebb_cmd_version(int argc, char **argv);
int ebb_cmd_devices(int argc, char **argv);
int ebb_cmd_run(int argc, char **argv);
int ebb_cmd_pipelines(int argc, char **argv);
int ebb_cmd_stages(int argc, char **argv);
int ebb_cmd_serve(int argc, char **argv);
int ebb_cmd_top(int argc, char **argv);
int ebb_cmd_reclaim(int argc, char **argv);

/* Loads the config (NULL: built-ins only) and the stage registry with the
 * config's plugin_dirs and EBB_PLUGIN_PATH. On failure prints one message to
 * stderr and returns EBB_EXIT_USAGE (nothing to free); else EBB_EXIT_OK and
 * the caller frees both. (cmd_common.c) */
struct ebb_config;
struct ebb_registry;
int ebb_cli_load(const char *config_path, struct ebb_config **cfg, struct ebb_registry **reg);

/* The start `ebb pipelines` and `ebb stages` share: parses [--config FILE]
 * [--json] [--help] and loads the config and registry as ebb_cli_load does.
 * Returns -1 to go on (the caller ends with ebb_cli_list_end), else the exit
 * status to return with nothing to free (0 after --help, EBB_EXIT_USAGE with
 * a message). (cmd_common.c) */
int ebb_cli_list_begin(int argc, char **argv, void (*usage)(FILE *), int *json,
                       struct ebb_config **cfg, struct ebb_registry **reg);
/* Their end: prints arr with json_dumps(dump_flags) when json is set, then
 * frees arr, reg and cfg; returns EBB_EXIT_OK. (cmd_common.c) */
int ebb_cli_list_end(json_t *arr, int json, size_t dump_flags, struct ebb_config *cfg,
                     struct ebb_registry *reg);

#define EBB_EXIT_OK 0
#define EBB_EXIT_FAILED 1
#define EBB_EXIT_USAGE 2

#endif
