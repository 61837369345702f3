/* Helpers for the device tests (header-only, static functions):
 *   dt_real_gpu()        EBB_REAL_GPU=1: run against the real driver (the
 *                        fake's EBB_LIBCUDA / EBB_LIBNVML are dropped)
 *   dt_run()             runs a program with posix_spawn (never fork: the
 *                        test may have called cuInit) and captures its output
 *   dt_run_self()        runs this test's executable again in a child mode
 *   dt_smi_proc_mib()    what fakegpu-smi (or nvidia-smi on a real GPU),
 *                        run as a separate process, says pid holds
 *   dt_maps_have()       whether /proc/self/maps mentions a library */
#ifndef EBB_TESTS_SUPPORT_DEVTEST_H
#define EBB_TESTS_SUPPORT_DEVTEST_H

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define DT_SKIP 77 /* ctest SKIP_RETURN_CODE */

static inline int dt_real_gpu(void) {
  const char *v = getenv("EBB_REAL_GPU");
  if (v && !strcmp(v, "1")) {
    unsetenv("EBB_LIBCUDA");
    unsetenv("EBB_LIBNVML");
    return 1;
  }
  return 0;
}

/* The environment plus changes: "NAME=VALUE" sets, "-NAME" unsets. The
 * result is malloc'ed (strings borrowed); free the array only. */
static inline char **dt_env_with(char *const changes[]) {
  size_t n = 0, m = 0;
  while (environ[n])
    n++;
  while (changes && changes[m])
    m++;
  char **env = calloc(n + m + 1, sizeof *env);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    int drop = 0;
    for (size_t j = 0; j < m; j++) {
      const char *c = changes[j][0] == '-' ? changes[j] + 1 : changes[j];
      size_t len = strcspn(c, "=");
      if (!strncmp(environ[i], c, len) && environ[i][len] == '=')
        drop = 1;
    }
    if (!drop)
      env[k++] = environ[i];
  }
  for (size_t j = 0; j < m; j++)
    if (changes[j][0] != '-')
      env[k++] = changes[j];
  env[k] = NULL;
  return env;
}

/* Runs argv (argv[0] a path, or a name searched in PATH) with env changes; stdout and stderr go to out
 * (NUL-terminated, truncated to len). Returns the wait status, -1 if it could
 * not start. */
static inline int dt_run(char *const argv[], char *const env_changes[], char *out, size_t len) {
  int fds[2];
  if (pipe(fds))
    return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  char **env = dt_env_with(env_changes);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, env);
  free(env);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  if (rc) {
    close(fds[0]);
    return -1;
  }
  size_t got = 0;
  char sink[4096];
  for (;;) {
    char *dst = out && got + 1 < len ? out + got : sink;
    size_t room = out && got + 1 < len ? len - 1 - got : sizeof sink;
    ssize_t r = read(fds[0], dst, room);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    if (dst != sink)
      got += (size_t)r;
  }
  if (out && len)
    out[got] = '\0';
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return st;
}

/* Runs this executable again as `self MODE` with env changes. */
static inline int dt_run_self(const char *mode, char *const env_changes[], char *out, size_t len) {
  static char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return -1;
  self[n] = '\0';
  char *argv[] = {self, (char *)mode, NULL};
  return dt_run(argv, env_changes, out, len);
}

/* The smi program: $FAKEGPU_SMI, or nvidia-smi on a real GPU. */
static inline const char *dt_smi(void) {
  const char *v = getenv("EBB_REAL_GPU");
  if (v && !strcmp(v, "1"))
    return "nvidia-smi"; /* from PATH (posix_spawnp) */
  const char *s = getenv("FAKEGPU_SMI");
  return s ? s : "fakegpu-smi";
}

/* MiB that pid holds per `smi --query-compute-apps=pid,used_memory`: 0 when
 * it is not listed, -1 when the smi could not be run. */
static inline long long dt_smi_proc_mib(pid_t pid) {
  char out[16384];
  char *argv[] = {(char *)dt_smi(), "--query-compute-apps=pid,used_memory",
                  "--format=csv,noheader,nounits", NULL};
  int st = dt_run(argv, NULL, out, sizeof out);
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "devtest: %s failed (status %d): %s\n", argv[0], st, out);
    return -1;
  }
  long long sum = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    int p;
    long long mib;
    if (sscanf(line, "%d , %lld", &p, &mib) == 2 && p == (int)pid)
      sum += mib;
  }
  return sum;
}

/* memory.used of the first GPU in MiB per the smi; -1 on failure. */
static inline long long dt_smi_used_mib(void) {
  char out[4096];
  char *argv[] = {(char *)dt_smi(), "--query-gpu=memory.used,memory.free,memory.total",
                  "--format=csv,noheader,nounits", NULL};
  int st = dt_run(argv, NULL, out, sizeof out);
  long long used;
  if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || sscanf(out, "%lld", &used) != 1)
    return -1;
  return used;
}

/* 1 when a mapping in /proc/self/maps contains needle. */
static inline int dt_maps_have(const char *needle) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f)
    return -1;
  char line[4096];
  int found = 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, needle))
      found = 1;
  fclose(f);
  return found;
}

/* A path under $EBB_TEST_TMP (created). */
static inline const char *dt_tmp(const char *name) {
  static char buf[8][4096];
  static int next;
  const char *t = getenv("EBB_TEST_TMP");
  if (!t)
    t = "/tmp";
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s", t);
  mkdir(cmd, 0777);
  char *b = buf[next++ % 8];
  snprintf(b, sizeof buf[0], "%s/%s", t, name);
  return b;
}

#endif
