/* Backtraces for leak reports: return addresses captured at allocation
 * (when enabled) and turned into "function at file:line" text only when a
 * leak is reported. */
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memory/internal.h"

/* Captures return addresses, skipping mem_alloc's own frames. glibc's
 * backtrace() walks the stack with the unwinder: about a microsecond (see
 * bench/memory_alloc.c), so it is off unless EBB_MEM_BACKTRACE=1 or the
 * allocator was created with backtraces = 1. */
int mem__bt_capture(void ***frames) {
  void *buf[EBB_MEM_BT_MAX + 2];
  int n = backtrace(buf, EBB_MEM_BT_MAX + 2);
  int skip = n > 2 ? 2 : 0; /* mem__bt_capture, mem_alloc */
  *frames = NULL;
  if (n <= skip)
    return 0;
  void **f = malloc(sizeof(void *) * (size_t)(n - skip));
  if (!f)
    return 0;
  memcpy(f, buf + skip, sizeof(void *) * (size_t)(n - skip));
  *frames = f;
  return n - skip;
}

/* Runs `addr2line -f -C -p -e module addr...` (posix_spawn: never fork in a
 * process that may hold a CUDA context) and fills lines[i] for each address
 * with "function at file:line". Returns 0 when it answered. */
static int addr2line(const char *module, const uintptr_t *offs, int n, char **lines) {
  int fds[2];
  if (n <= 0 || pipe(fds))
    return -1;
  char **argv = calloc((size_t)n + 7, sizeof *argv);
  char(*hex)[24] = calloc((size_t)n, sizeof *hex);
  if (!argv || !hex) {
    free(argv);
    free(hex);
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  int k = 0;
  argv[k++] = "addr2line";
  argv[k++] = "-f";
  argv[k++] = "-C";
  argv[k++] = "-p";
  argv[k++] = "-e";
  argv[k++] = (char *)module;
  for (int i = 0; i < n; i++) {
    snprintf(hex[i], sizeof hex[i], "0x%lx", (unsigned long)offs[i]);
    argv[k++] = hex[i];
  }
  argv[k] = NULL;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  extern char **environ;
  pid_t pid;
  int rc = posix_spawnp(&pid, "addr2line", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  free(argv);
  free(hex);
  if (rc) {
    close(fds[0]);
    return -1;
  }
  FILE *f = fdopen(fds[0], "r");
  char buf[1024];
  int i = 0;
  while (f && i < n && fgets(buf, sizeof buf, f)) {
    buf[strcspn(buf, "\n")] = 0;
    if (strncmp(buf, "??", 2) != 0)
      lines[i] = strdup(buf);
    i++;
  }
  if (f)
    fclose(f);
  else
    close(fds[0]);
  int status;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* One addr2line call for every frame not done yet of the module that holds
 * frames[i]: better[j] = its "function at file:line" when addr2line knew. */
static void symbolise_module(void **frames, int n, int i, int *done, char **better) {
  Dl_info di;
  if (done[i] || !dladdr(frames[i], &di) || !di.dli_fname || !di.dli_fname[0])
    return;
  uintptr_t *offs = calloc((size_t)n, sizeof *offs);
  int *idx = calloc((size_t)n, sizeof *idx);
  char **tmp = calloc((size_t)n, sizeof *tmp);
  int m = 0;
  for (int j = i; offs && idx && tmp && j < n; j++) {
    Dl_info dj;
    if (!done[j] && dladdr(frames[j], &dj) && dj.dli_fname &&
        strcmp(dj.dli_fname, di.dli_fname) == 0) {
      /* return address - 1: the line of the call, not the next one */
      offs[m] = (uintptr_t)frames[j] - 1 - (uintptr_t)dj.dli_fbase;
      idx[m++] = j;
      done[j] = 1;
    }
  }
  if (m && addr2line(di.dli_fname, offs, m, tmp) == 0)
    for (int k = 0; k < m; k++)
      better[idx[k]] = tmp[k];
  else
    for (int k = 0; tmp && k < m; k++)
      free(tmp[k]);
  free(offs);
  free(idx);
  free(tmp);
}

/* Frames as text, one per line: "function at file:line" from addr2line when
 * it is installed (EBB_MEM_ADDR2LINE=0 turns it off), else what
 * backtrace_symbols says ("module(symbol+off) [addr]"). Only called for
 * leak reports, so the cost of spawning addr2line is paid only on a leak. */
char *mem__bt_symbolise(void **frames, int n) {
  char **sym = backtrace_symbols(frames, n);
  if (!sym)
    return NULL;
  char **better = calloc((size_t)n, sizeof *better);
  int *done = calloc((size_t)n, sizeof *done);
  const char *e = getenv("EBB_MEM_ADDR2LINE");
  for (int i = 0; better && done && !(e && strcmp(e, "0") == 0) && i < n; i++)
    symbolise_module(frames, n, i, done, better);
  free(done);
  size_t len = 1;
  for (int i = 0; i < n; i++)
    len += strlen(better && better[i] ? better[i] : sym[i]) + 1;
  char *out = malloc(len), *p = out;
  for (int i = 0; out && i < n; i++) {
    const char *t = better && better[i] ? better[i] : sym[i];
    size_t k = strlen(t);
    memcpy(p, t, k);
    p += k;
    *p++ = '\n';
  }
  if (out)
    *p = '\0';
  for (int i = 0; better && i < n; i++)
    free(better[i]);
  free(better);
  free(sym);
  return out;
}
