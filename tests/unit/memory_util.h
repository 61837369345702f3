/* Helpers shared by the memory room's tests (tests/unit/memory_*.c). */
#ifndef EBB_TEST_MEMORY_UTIL_H
#define EBB_TEST_MEMORY_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/device.h"
#include "memory/memory.h"

#define MiB (1024ull * 1024ull)

/* Opens the fake GPU ("cuda:0" through EBB_LIBCUDA) or exits the test with a
 * message: these tests are about the fake, a missing fake is a failure. */
static inline ebb_device *mt_open(const char *spec) {
  ebb_device *d = NULL;
  int rc = ebb_device_open(spec, &d);
  if (rc) {
    fprintf(stderr, "cannot open device %s: %s (%s); EBB_LIBCUDA=%s\n", spec, ebb_errmsg(),
            ebb_errname(rc), getenv("EBB_LIBCUDA") ? getenv("EBB_LIBCUDA") : "(unset)");
    exit(1);
  }
  return d;
}

/* What fakegpu-smi (run as a separate process) says pid holds, in MiB; 0 when
 * pid is not listed; -1 when the tool could not be run. */
static inline long mt_smi_used_mib(pid_t pid) {
  const char *smi = getenv("FAKEGPU_SMI");
  if (!smi)
    return -1;
  int fds[2];
  if (pipe(fds))
    return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  char *argv[] = {(char *)smi, "--query-compute-apps=pid,used_memory",
                  "--format=csv,noheader,nounits", NULL};
  extern char **environ;
  pid_t child;
  int rc = posix_spawn(&child, smi, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc) {
    close(fds[0]);
    return -1;
  }
  FILE *p = fdopen(fds[0], "r");
  char line[256];
  long used = 0;
  while (p && fgets(line, sizeof line, p)) {
    long lp = 0, mib = 0;
    if (sscanf(line, "%ld , %ld", &lp, &mib) == 2 && lp == (long)pid)
      used = mib;
  }
  if (p)
    fclose(p);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return -1;
  return used;
}

static inline uint64_t mt_reserved(ebb_allocator *a) {
  ebb_alloc_stats st = {.size = sizeof st};
  ebb_allocator_get_stats(a, &st);
  return st.reserved.current;
}

#endif
