/* The after-stage hook (hook.h): EBB_STAGE_HOOK run through posix_spawn
 * with the stage's figures in its environment. */
#include "pipeline/hook.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "ebb/error.h"

extern char **environ;

int pl_hook_run(const char *cmd, const char *event, const char *stage, uint64_t released) {
  if (!cmd || !*cmd)
    return 0;
  size_t n = 0;
  while (environ[n])
    n++;
  char **env = calloc(n + 5, sizeof *env);
  char e1[160], e2[300], e3[64], e4[64];
  if (!env)
    return ebb_seterr(EBB_ENOMEM, "hook: out of host memory");
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "EBB_HOOK_", 9) != 0)
      env[k++] = environ[i];
  snprintf(e1, sizeof e1, "EBB_HOOK_EVENT=%s", event);
  snprintf(e2, sizeof e2, "EBB_HOOK_STAGE=%s", stage ? stage : "");
  snprintf(e3, sizeof e3, "EBB_HOOK_PID=%d", (int)getpid());
  snprintf(e4, sizeof e4, "EBB_HOOK_RELEASED_BYTES=%llu", (unsigned long long)released);
  env[k++] = e1;
  env[k++] = e2;
  env[k++] = e3;
  env[k++] = e4;
  env[k] = NULL;
  char *argv[] = {"sh", "-c", (char *)cmd, NULL};
  pid_t pid;
  fflush(stdout);
  fflush(stderr);
  int rc = posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, env);
  free(env);
  if (rc != 0)
    return ebb_seterr(EBB_EIO, "EBB_STAGE_HOOK: cannot start /bin/sh: %s", strerror(rc));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      return ebb_seterr(EBB_EIO, "EBB_STAGE_HOOK: waitpid: %s", strerror(errno));
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code)
    base_log(EBB_LOG_WARN, stage, "EBB_STAGE_HOOK (%s) exited with status %d", event, code);
  return code;
}
