/* Leak reports: backtrace capture at alloc (when enabled) and the fixed log
 * lines `[owner] leaked N MiB in M blocks; freed by ebb`. */
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "memory/internal.h"

/* Captures return addresses, skipping ebb_mem_alloc's own frames. glibc's
 * backtrace() walks the stack with the unwinder: about a microsecond (see
 * bench/memory_alloc.c), so it is off unless EBB_MEM_BACKTRACE=1 or the
 * allocator was created with backtraces = 1. */
int mem_bt_capture(void ***frames) {
  void *buf[EBB_MEM_BT_MAX + 2];
  int n = backtrace(buf, EBB_MEM_BT_MAX + 2);
  int skip = n > 2 ? 2 : 0; /* mem_bt_capture, ebb_mem_alloc */
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

/* Frames as text, one per line: "function at file:line" from addr2line when
 * it is installed (EBB_MEM_ADDR2LINE=0 turns it off), else what
 * backtrace_symbols says ("module(symbol+off) [addr]"). Only called for
 * leak reports, so the cost of spawning addr2line is paid only on a leak. */
char *mem_bt_symbolise(void **frames, int n) {
  char **sym = backtrace_symbols(frames, n);
  if (!sym)
    return NULL;
  char **better = calloc((size_t)n, sizeof *better);
  const char *e = getenv("EBB_MEM_ADDR2LINE");
  if (better && !(e && strcmp(e, "0") == 0)) {
    uintptr_t *offs = calloc((size_t)n, sizeof *offs);
    int *idx = calloc((size_t)n, sizeof *idx);
    char **tmp = calloc((size_t)n, sizeof *tmp);
    int *done = calloc((size_t)n, sizeof *done);
    for (int i = 0; offs && idx && tmp && done && i < n; i++) {
      Dl_info di;
      if (done[i] || !dladdr(frames[i], &di) || !di.dli_fname || !di.dli_fname[0])
        continue;
      /* every frame of the same module in one addr2line call */
      int m = 0;
      for (int j = i; j < n; j++) {
        Dl_info dj;
        if (!done[j] && dladdr(frames[j], &dj) && dj.dli_fname &&
            strcmp(dj.dli_fname, di.dli_fname) == 0) {
          /* return address - 1: the line of the call, not the next one */
          offs[m] = (uintptr_t)frames[j] - 1 - (uintptr_t)dj.dli_fbase;
          idx[m++] = j;
          done[j] = 1;
        }
      }
      memset(tmp, 0, sizeof *tmp * (size_t)n);
      if (addr2line(di.dli_fname, offs, m, tmp) == 0)
        for (int k = 0; k < m; k++)
          better[idx[k]] = tmp[k];
      else
        for (int k = 0; k < m; k++)
          free(tmp[k]);
    }
    free(offs);
    free(idx);
    free(tmp);
    free(done);
  }
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

void ebb_leak_report_log(const ebb_leak_report *r) {
  if (!r || (!r->nleaks && !r->bytes && !r->pinned_bytes))
    return;
  size_t ndev = 0;
  for (size_t i = 0; i < r->nleaks; i++)
    ndev += !r->leaks[i].pinned;
  ebb_log_field f[3] = {EBB_LF_S("event", "leak"), EBB_LF_U("leaked_bytes", r->bytes),
                        EBB_LF_U("leaked_blocks", ndev)};
  if (ndev || r->bytes)
    ebb_log_ev(EBB_LOG_WARN, r->owner, f, 3, "leaked %llu MiB in %zu blocks; freed by ebb",
               (unsigned long long)(r->bytes >> 20), ndev);
  if (r->pinned_bytes)
    ebb_log(EBB_LOG_WARN, r->owner, "leaked %llu MiB of pinned host memory in %zu buffers; freed by ebb",
            (unsigned long long)(r->pinned_bytes >> 20), r->nleaks - ndev);
  for (size_t i = 0; i < r->nleaks; i++) {
    const ebb_leak *l = &r->leaks[i];
    char sz[32];
    mem_fmt_bytes(sz, sizeof sz, l->size);
    int child = l->owner && r->owner && strcmp(l->owner, r->owner) != 0;
    ebb_log(EBB_LOG_WARN, r->owner, "  %s (%zu bytes) at %s%s%s%s", sz, l->size,
            l->site ? l->site : "?", child ? " (owner '" : "", child ? l->owner : "",
            child ? "')" : "");
    if (l->backtrace) {
      const char *p = l->backtrace;
      while (*p) {
        const char *e = strchr(p, '\n');
        int k = e ? (int)(e - p) : (int)strlen(p);
        ebb_log(EBB_LOG_WARN, r->owner, "      %.*s", k, p);
        p += k + (e ? 1 : 0);
      }
    }
  }
}

void ebb_leak_report_free(ebb_leak_report *r) {
  if (!r)
    return;
  for (size_t i = 0; i < r->nleaks; i++) {
    free((char *)r->leaks[i].owner);
    free((char *)r->leaks[i].site);
    free((char *)r->leaks[i].backtrace);
  }
  free(r->leaks);
  free((char *)r->owner);
  free(r);
}
