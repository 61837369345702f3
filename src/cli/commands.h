/* One function per `ebb` subcommand; each parses its own options, prints its
 * own --help and returns the process exit status (0 ok, 1 job failed, 2 bad
 * usage or bad input). */
#ifndef EBB_CLI_COMMANDS_H
#define EBB_CLI_COMMANDS_H

typedef struct ebb_command {
  const char *name;
  const char *summary;
  int (*main)(int argc, char **argv); /* argv[0] is the subcommand name */
} ebb_command;

int ebb_cmd_version(int argc, char **argv);
int ebb_cmd_devices(int argc, char **argv);

#define EBB_EXIT_OK 0
#define EBB_EXIT_FAILED 1
#define EBB_EXIT_USAGE 2

#endif
