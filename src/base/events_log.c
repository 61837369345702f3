/* The log as the bus's first subscriber: the fixed lines of docs/api.md
 * ("Log lines") written from the events, word for word as the publishers
 * once wrote them themselves. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/events.h"
#include "base/log.h"
#include "base/text.h"

#define MIB(b) ((unsigned long long)((b) >> 20))

/* The process-wide owner's line (runner.c release_process). */
static void log_process_release(const ebb_event *ev) {
  base_log_field f[] = {EBB_LF_S("event", "released"),
                        EBB_LF_S("stage", ev->owner),
                        EBB_LF_U("released_bytes", ev->bytes),
                        EBB_LF_U("released_mib", ev->bytes >> 20),
                        EBB_LF_U("driver_free_before", ev->driver_free_before),
                        EBB_LF_U("driver_free_after", ev->driver_free_after),
                        EBB_LF_I("callbacks_run", ev->callbacks_run),
                        EBB_LF_I("callbacks_failed", ev->callbacks_failed)};
  if (ev->bytes >> 20)
    base_log_ev(EBB_LOG_INFO, ev->owner, f, 8, "released %llu MiB of %s", MIB(ev->bytes), ev->what);
}

/* `[STAGE] released N MiB of GPU memory` (only N > 0), then the driver's
 * own figures at debug level. */
static void log_release(const ebb_event *ev) {
  if ((ev->flags & EBB_EVENT_QUIET) || !ev->owner)
    return; /* a quiet release has no line, not even the debug one; one that
               is no owner's (a trim, the context at a job's end) is said by
               its publisher in words of its own, not the fixed line */
  if (ev->flags & EBB_EVENT_PROCESS) {
    log_process_release(ev);
    return;
  }
  const char *name = ev->owner, *note = ev->message ? ev->message : "";
  uint64_t bytes = ev->bytes, before = ev->driver_free_before, after = ev->driver_free_after;
  int64_t delta = (int64_t)after - (int64_t)before;
  base_log_field f[] = {
      EBB_LF_S("event", "released"),
      EBB_LF_S("stage", name),
      EBB_LF_U("released_bytes", bytes),
      EBB_LF_U("released_mib", bytes >> 20),
      EBB_LF_U("context_bytes", ev->context_bytes),
      EBB_LF_U("driver_free_before", before),
      EBB_LF_U("driver_free_after", after),
      EBB_LF_I("driver_freed_bytes", delta),
      EBB_LF_S("note", note),
  };
  if (bytes >> 20)
    base_log_ev(EBB_LOG_INFO, name, f, note[0] ? 9 : 8, "released %llu MiB of %s%s%s%s", MIB(bytes),
                ev->what, note[0] ? " (" : "", note, note[0] ? ")" : "");
  if (before || after)
    base_log(EBB_LOG_DEBUG, name,
             "driver confirms: free memory %.2f GiB -> %.2f GiB (%+lld MiB; ebb handed back "
             "%llu MiB)",
             (double)before / (1 << 30), (double)after / (1 << 30), (long long)(delta / (1 << 20)),
             MIB(bytes));
}

static void log_site(const ebb_event *ev, const ebb_event_site *s, base_log_level lv) {
  char sz[32];
  base_fmt_size(sz, sizeof sz, s->bytes);
  base_log(lv, ev->owner, "  %s (%llu bytes) at %s%s%s%s", sz, (unsigned long long)s->bytes,
           s->site ? s->site : "?", s->owner ? " (owner '" : "", s->owner ? s->owner : "",
           s->owner ? "')" : "");
  for (const char *p = s->backtrace; p && *p;) {
    const char *e = strchr(p, '\n');
    int k = e ? (int)(e - p) : (int)strlen(p);
    base_log(lv, ev->owner, "      %.*s", k, p);
    p += k + (e ? 1 : 0);
  }
}

/* `[OWNER] leaked N MiB in M blocks; freed by ebb` and a line per site; or
 * the bytes a stage took from the driver directly. */
static void log_leak(const ebb_event *ev) {
  base_log_level lv = ev->flags & EBB_EVENT_QUIET ? EBB_LOG_DEBUG : EBB_LOG_WARN;
  if (ev->outside) {
    base_log(lv, ev->owner,
             "%llu MiB taken from the driver directly were not given back; freed by ebb",
             MIB(ev->bytes));
    return;
  }
  base_log_field f[3] = {EBB_LF_S("event", "leak"), EBB_LF_U("leaked_bytes", ev->bytes),
                         EBB_LF_U("leaked_blocks", ev->blocks)};
  if (ev->blocks || ev->bytes)
    base_log_ev(lv, ev->owner, f, 3, "leaked %llu MiB in %llu blocks; freed by ebb", MIB(ev->bytes),
                (unsigned long long)ev->blocks);
  if (ev->pinned_bytes)
    base_log(lv, ev->owner, "leaked %llu MiB of pinned host memory in %llu buffers; freed by ebb",
             MIB(ev->pinned_bytes), (unsigned long long)ev->pinned_blocks);
  for (size_t i = 0; i < ev->nsites; i++)
    log_site(ev, &ev->sites[i], lv);
}

/* `[broker] pid P (WHAT) gave back N MiB on cuda:K in T ms: REASON`. */
static void log_grant(const ebb_event *ev) {
  if (ev->state && !strcmp(ev->state, "asked")) {
    base_log(EBB_LOG_INFO, "broker",
             "%s: %llu MiB free of %llu MiB needed after asking %llu peer%s",
             ev->device ? ev->device : "?", MIB(ev->driver_free_after), MIB(ev->bytes_asked),
             (unsigned long long)ev->peers, ev->peers == 1 ? "" : "s");
    return;
  }
  base_log(EBB_LOG_INFO, "broker", "pid %ld (%s) gave back %llu MiB on %s in %.0f ms: %s",
           (long)ev->pid, ev->owner ? ev->owner : "?", MIB(ev->bytes),
           ev->device ? ev->device : "?", ev->ms, ev->message ? ev->message : "");
}

void base_event_log(const ebb_event *ev) {
  switch (ev->kind) {
  case EBB_EVENT_RELEASED: log_release(ev); break;
  case EBB_EVENT_LEAK: log_leak(ev); break;
  case EBB_EVENT_GRANT: log_grant(ev); break;
  default: break; /* the other facts are logged where they happen, as before */
  }
}
