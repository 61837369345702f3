/* `ebb`: dispatches to one subcommand. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cli/commands.h"

static const cli_command commands[] = {
    {"version", "print ebb's version, the driver's and how it was found", cli_cmd_version},
    {"devices", "list the devices ebb can use and their memory", cli_cmd_devices},
    {"run", "run one job through a pipeline: ebb run --pipeline NAME INPUT", cli_cmd_run},
    {"pipelines", "list the pipelines (built-in and from --config) and their stages",
     cli_cmd_pipelines},
    {"stages", "list the stages (built-in and plugins) and their options", cli_cmd_stages},
    {"serve", "serve the HTTP API: jobs, pipelines, sessions, memory (docs/api.md)", cli_cmd_serve},
    {"reclaim", "ask the ebb processes sharing a GPU to give memory back (docs/broker.md)",
     cli_cmd_reclaim},
    {"top", "live device memory by owner in the terminal, like nvtop (a server's or the driver's)",
     cli_cmd_top},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
  fprintf(f, "usage: ebb COMMAND [OPTIONS]\n\n"
             "ebb runs pipelines of GPU model stages and gives device memory back\n"
             "to the driver after every stage.\n\ncommands:\n");
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "\n`ebb COMMAND --help` describes a command. EBB_LOG_LEVEL=debug|info|warn|error:\n"
             "the least a log line must be to be written (default info).\n");
}

/* EBB_LOG_LEVEL=debug|info|warn|error: the least a line must be to be
 * written (default info; -v still asks for debug). 0, or -1 naming the bad
 * value. */
static int log_level_from_env(void) {
  static const char *const names[] = {"debug", "info", "warn", "error"};
  const char *v = getenv("EBB_LOG_LEVEL");
  if (!v || !*v)
    return 0;
  for (int i = 0; i < 4; i++)
    if (!strcmp(v, names[i])) {
      base_log_set_level((base_log_level)i);
      return 0;
    }
  fprintf(stderr, "ebb: EBB_LOG_LEVEL=%s: expected debug, info, warn or error\n", v);
  return -1;
}

int main(int argc, char **argv) {
  if (log_level_from_env() != 0)
    return EBB_EXIT_USAGE;
  if (argc < 2) {
    usage(stderr);
    return EBB_EXIT_USAGE;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return EBB_EXIT_OK;
  }
  if (!strcmp(argv[1], "--version"))
    return cli_cmd_version(1, argv + 1);
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (!strcmp(argv[1], commands[i].name))
      return commands[i].main(argc - 1, argv + 1);
  fprintf(stderr, "ebb: unknown command '%s'\n\n", argv[1]);
  usage(stderr);
  return EBB_EXIT_USAGE;
}
