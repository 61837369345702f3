/* Giving memory back to another process on the device (issue 35, the
 * broker's reclaim): what this process holds, how long it has been idle,
 * the plan (what would go, how fast) and the giving itself, least recently
 * used pipeline first, each by its policy (asleep or unloaded). */
#include <stdarg.h>
#include <unistd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/events.h"
#include "base/log.h"

#include "pipeline/host.h"
#include "pipeline/manager_int.h"

uint64_t pl_manager_process_bytes(pl_manager *m) {
  uint64_t b = 0;
  if (dev_process_used(m->dev, getpid(), &b) != 0)
    return 0;
  return b;
}

double pl_manager_idle_seconds(pl_manager *m) {
  pthread_mutex_lock(&m->lock);
  double t = m->used_at;
  pthread_mutex_unlock(&m->lock);
  return t > 0 ? base_now() - t : base_now(); /* never used: as idle as can be */
}

__attribute__((format(printf, 2, 3))) static void gb_reason(pl_giveback *g, const char *fmt, ...) {
  size_t n = strlen(g->reason);
  if (n + 4 >= sizeof g->reason)
    return;
  if (n)
    n += (size_t)snprintf(g->reason + n, sizeof g->reason - n, "; ");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->reason + n, sizeof g->reason - n, fmt, ap);
  va_end(ap);
}

static void gb_kept(pl_giveback *g, const char *what, uint64_t bytes, const char *why) {
  if (g->nkept == EBB_GIVEBACK_MAX_KEPT)
    return;
  pl_giveback_kept *k = &g->kept[g->nkept++];
  snprintf(k->what, sizeof k->what, "%s", what);
  k->bytes = bytes;
  snprintf(k->why, sizeof k->why, "%s", why);
}

/* Why pp may not be given (NULL: it may), under lock. */
static const char *keep_why(pl_manager *m, mpipe *pp, uint64_t held, uint64_t reserve, char *buf,
                            size_t len) {
  if (!pp->loaded)
    return "not loaded";
  if (pp->asleep)
    return "asleep (its device memory is already back)";
  if (m->running == pp)
    return "a job is running on it";
  int leases = pl_sessions_leases(m->sessions, pp->def->name);
  if (leases > 0) {
    snprintf(buf, len, "%d open session%s", leases, leases == 1 ? "" : "s");
    return buf;
  }
  if (!pp->def->evictable)
    return "\"evictable\": false in its config";
  if (reserve && (held < pp->need || held - pp->need < reserve)) {
    snprintf(buf, len, "--reserve %llu MiB (this process holds %llu MiB)", MIB(reserve), MIB(held));
    return buf;
  }
  return NULL;
}

/* The least recently used pipeline that may go, or NULL. */
static mpipe *next_victim(pl_manager *m, uint64_t held, uint64_t reserve) {
  char buf[160];
  mpipe *best = NULL;
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->npipes; i++) {
    mpipe *pp = &m->pipes[i];
    if (!keep_why(m, pp, held, reserve, buf, sizeof buf) && (!best || pp->used_at < best->used_at))
      best = pp;
  }
  pthread_mutex_unlock(&m->lock);
  return best;
}

/* Gives one pipeline back by its policy; 1: the device is busy (a job). */
static int give_pipe(pl_manager *m, mpipe *pp, pl_giveback *g) {
  const pl_policy *pol = pp->def->has_policy ? &pp->def->policy : &m->policy;
  if (pol->kind == EBB_POLICY_SLEEP) {
    mem_sleep_stats st;
    int rc = pl__mgr_sleep_in_switch(m, pp, 1, &st);
    if (rc == 0)
      gb_reason(g, "pipeline %s asleep (%llu MiB)", pp->def->name, MIB(st.device_bytes));
    if (rc == 0 && st.seconds > 0.01 && st.backup_bytes > (64u << 20))
      m->sleep_bps = (double)st.backup_bytes / st.seconds; /* under switch_lock */
    return rc == 1 ? 1 : 0;
  }
  uint64_t rel = 0;
  pl__mgr_unload_in_switch(m, pp, &rel);
  gb_reason(g, "pipeline %s unloaded (%llu MiB)", pp->def->name, MIB(rel));
  return 0;
}

static void kept_list(pl_manager *m, uint64_t held, uint64_t reserve, pl_giveback *g) {
  char buf[160], what[128];
  pthread_mutex_lock(&m->lock);
  for (size_t i = 0; i < m->npipes; i++) {
    mpipe *pp = &m->pipes[i];
    const char *why = keep_why(m, pp, held, reserve, buf, sizeof buf);
    if (why && !strcmp(why, "not loaded"))
      continue;
    snprintf(what, sizeof what, "pipeline %s", pp->def->name);
    gb_kept(g, what, pp->asleep ? 0 : pp->need, why ? why : "not needed (enough was given)");
  }
  pthread_mutex_unlock(&m->lock);
  if (held && dev_ctx_active(m->dev))
    gb_kept(g, "context", pl_manager_context_estimate(m),
            pl__mgr_loaded_count(m) ? "kept while pipelines are loaded" : "held by this process");
}

/* pl_manager_give_back's rules run dry: the pipelines it would give, least
 * recently used first, by their last measured need, until want; the
 * context when all would go. The time: a sleep at the last measured rate
 * (1 GiB/s before any), an unload at 50 ms. Nothing while the device runs
 * a job or a switch is under way (give_back gives nothing then either). */
void pl_manager_give_plan(pl_manager *m, uint64_t want, uint64_t reserve, uint64_t *bytes,
                          double *eta_ms) {
  char buf[160];
  *bytes = 0;
  *eta_ms = 0;
  if (pthread_mutex_trylock(&m->switch_lock) != 0)
    return;
  uint64_t held = pl_manager_process_bytes(m);
  double bps = m->sleep_bps > 0 ? m->sleep_bps : (double)(1u << 30);
  int loaded = pl__mgr_loaded_count(m), going = 0;
  unsigned char taken[256] = {0};
  pthread_mutex_lock(&m->lock);
  while (!m->running && *bytes < want) {
    mpipe *best = NULL;
    for (size_t i = 0; i < m->npipes && i < 256; i++) {
      mpipe *pp = &m->pipes[i];
      if (!taken[i] && !keep_why(m, pp, held, reserve, buf, sizeof buf) &&
          (!best || pp->used_at < best->used_at))
        best = pp;
    }
    if (!best)
      break;
    taken[best - m->pipes] = 1;
    const pl_policy *pol = best->def->has_policy ? &best->def->policy : &m->policy;
    *bytes += best->need;
    *eta_ms += pol->kind == EBB_POLICY_SLEEP ? 1000.0 * (double)best->need / bps : 50;
    held = held > best->need ? held - best->need : 0;
    going++;
  }
  pthread_mutex_unlock(&m->lock);
  if (going && going == loaded && *bytes < want && dev_ctx_active(m->dev))
    *bytes += pl_manager_context_estimate(m);
  pthread_mutex_unlock(&m->switch_lock);
}

int pl_manager_give_back(pl_manager *m, uint64_t want, uint64_t reserve, pl_giveback *out) {
  memset(out, 0, sizeof *out);
  uint64_t before = pl_manager_process_bytes(m), ebb_given = 0;
  out->confirmed = before > 0;
  if (pthread_mutex_trylock(&m->switch_lock) != 0) {
    gb_kept(out, "pipelines", 0, "a load or unload is under way here");
    out->busy = 1;
    return 0;
  }
  pl__mgr_release_args ra = {m, 0};
  int busy = pl__mgr_on_device_unless_job(m, pl__mgr_release_on_dev, &ra) == 1;
  if (!busy && ra.rel >> 20) {
    pl__mgr_add_released(m, ra.rel);
    gb_reason(out, "cache trimmed (%llu MiB)", MIB(ra.rel));
  }
  ebb_given += busy ? 0 : ra.rel;
  for (mpipe *pp; !busy;) {
    uint64_t held = pl_manager_process_bytes(m);
    uint64_t gone = before > held ? before - held : 0;
    if ((out->confirmed ? gone : ebb_given) >= want || !(pp = next_victim(m, held, reserve)))
      break;
    uint64_t r0 = pl_manager_released_total(m);
    busy = give_pipe(m, pp, out);
    ebb_given += pl_manager_released_total(m) - r0;
  }
  uint64_t after = pl_manager_process_bytes(m);
  if (busy) {
    pthread_mutex_lock(&m->lock);
    const char *r = m->running ? m->running->def->name : "?";
    pthread_mutex_unlock(&m->lock);
    char why[160];
    snprintf(why, sizeof why, "the device is running a job (pipeline %s)", r);
    gb_kept(out, "device", after, why);
  }
  kept_list(m, after, reserve, out);
  pthread_mutex_unlock(&m->switch_lock);
  out->given = out->confirmed ? (before > after ? before - after : 0) : ebb_given;
  return 0;
}
