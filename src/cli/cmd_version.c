#include <stdio.h>
#include "cli/commands.h"
int ebb_cmd_version(int argc, char **argv) { printf("ebb 0.1.0\n"); return 0; }
int ebb_cmd_devices(int argc, char **argv) { printf("cpu\n"); return 0; }
