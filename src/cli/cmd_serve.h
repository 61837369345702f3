/* What cmd_serve.c (the server's start and stop) and cmd_serve_args.c
 * (its command line) share. Not for other files. */
#ifndef EBB_CLI_CMD_SERVE_H
#define EBB_CLI_CMD_SERVE_H

#include <stdint.h>

#include "pipeline/config.h"
#include "pipeline/manager.h"
#include "server/cluster/cluster.h"
#include "server/server.h"

#define MAX_LIST 32
typedef struct serve_args {
  const char *config, *listen, *data_dir, *device, *devices, *release, *logfmt, *cache_dir;
  int no_cache, verbose;
  pl_policy policy;
  const char *allow[MAX_LIST], *inputs[MAX_LIST], *origins[MAX_LIST];
  size_t nallow, ninputs, norigins;
  char dd[4096], abs_dd[4096], cd[4200], sd[4200];
  srv_opts so;
  uint64_t sleep_budget; /* --sleep-host-budget, bytes; 0: none */
  srv_cluster_opts co;
  const char *pw_file;
  char pw[256];
  double grace_s;         /* --shutdown-grace; 0: the default */
  srv_broker_opts broker; /* --broker-dir, --broker-group, --broker-timeout, --reserve */
} serve_args;

/* "cmd_serve_args.c" */
/* argv parsed into a (its strings borrowed from argv): 0 to go on, -1
 * after --help, else the exit status (a message on stderr said why). */
int cli_serve_parse_args(int argc, char **argv, serve_args *a);
/* The config file's optional "server" object into so and mo: 0, or -1
 * after naming each bad key on stderr. path NULL: 0. */
int cli_serve_server_config(const char *path, srv_opts *so, pl_manager_opts *mo);

#endif
