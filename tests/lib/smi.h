/* What fakegpu-smi (a separate process, $FAKEGPU_SMI) says this process
 * holds, for the programs under tests/lib/ that are built against the
 * installed libebb (so they include nothing of ebb's internals). */
#ifndef EBB_TEST_LIB_SMI_H
#define EBB_TEST_LIB_SMI_H

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1024ull * 1024ull)
#define GiB (1024ull * MiB)

/* MiB pid holds (context included); 0 when not listed; -1 on failure. Uses
 * posix_spawn, never fork: the process has a CUDA context. */
static inline long smi_used_mib(pid_t pid) {
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

static inline long smi_me(void) { return smi_used_mib(getpid()); }

#endif
