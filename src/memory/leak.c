/* Leak reports: backtrace capture at alloc (when enabled) and the fixed log
 * lines `[owner] leaked N MiB in M blocks; freed by ebb`. */
#include <execinfo.h>
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

char *mem_bt_symbolise(void **frames, int n) {
  char **sym = backtrace_symbols(frames, n);
  if (!sym)
    return NULL;
  size_t len = 1;
  for (int i = 0; i < n; i++)
    len += strlen(sym[i]) + 1;
  char *out = malloc(len), *p = out;
  if (out) {
    for (int i = 0; i < n; i++) {
      size_t k = strlen(sym[i]);
      memcpy(p, sym[i], k);
      p += k;
      *p++ = '\n';
    }
    *p = '\0';
  }
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
