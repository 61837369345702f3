/* POST /v1/pipelines/NAME/sleep and /wake (issue 12), and the sleep
 * families of /metrics. The manager does the work (manager.h); this file
 * says what happened: bytes released or restored, weights kept in host
 * memory, and the time. */
#include <string.h>

#include "pipeline/manager.h"
#include "server/internal.h"

/* The device a sleep or wake of name acts on: the first where it is loaded
 * (asleep counts as loaded); device 0 when none, whose manager then says
 * what is wrong. */
static size_t sleep_device(srv_server *s, const char *name) {
  for (size_t i = 0; i < s->ndev; i++)
    if (pl_manager_is_loaded(s->ms[i], name))
      return i;
  return 0;
}

SRV_HANDLER(srv_h_pipeline_sleep) {
  (void)method;
  const char *name = r->parts[2], *action = r->parts[3];
  int wake = !strcmp(action, "wake");
  if (!pl_manager_pipeline(s->m, name)) {
    pl_manager_load(s->m, name); /* sets the message naming the known ones */
    return srv_send_err(c, r, MHD_HTTP_NOT_FOUND, "not_found", "%s", ebb_errmsg());
  }
  pl_manager *m = s->ms[sleep_device(s, name)];
  mem_sleep_stats st = {.size = sizeof st};
  int rc = wake ? pl_manager_wake(m, name, &st) : pl_manager_sleep(m, name, &st);
  srv_snapshot_changed(s);
  if (rc)
    return srv_send_ebb_err(c, r, rc, ebb_errmsg());
  dev_meminfo mi = {0};
  dev_mem_info(pl_manager_device(m), &mi);
  return srv_send_json(c, r, MHD_HTTP_OK,
                       json_pack("{s:s,s:s,s:b,s:I,s:I,s:I,s:f,s:I}", "pipeline", name, "device",
                                 dev_device_label(pl_manager_device(m)), "asleep", !wake,
                                 wake ? "restored_bytes" : "released_bytes",
                                 (json_int_t)st.device_bytes, "backup_bytes",
                                 (json_int_t)st.backup_bytes, "dropped_bytes",
                                 (json_int_t)st.dropped_bytes, "seconds", st.seconds,
                                 "driver_free_bytes", (json_int_t)mi.free_bytes));
}

void srv_sleep_metrics(srv_server *s, FILE *f) {
  /* summed over the devices; the budget is each device's (--sleep-host-budget) */
  pl_manager_sleep_info si = {0};
  for (size_t i = 0; i < s->ndev; i++) {
    pl_manager_sleep_info d;
    pl_manager_sleep_figures(s->ms[i], &d);
    si.sleeping += d.sleeping;
    si.backup_bytes += d.backup_bytes;
    si.budget_bytes = d.budget_bytes;
    si.wakes += d.wakes;
    si.wake_seconds += d.wake_seconds;
  }
  fprintf(f,
          "# HELP ebb_pipelines_sleeping Pipelines asleep (weights in host memory).\n"
          "# TYPE ebb_pipelines_sleeping gauge\nebb_pipelines_sleeping %d\n",
          si.sleeping);
  fprintf(f,
          "# HELP ebb_sleep_backup_bytes Host bytes holding sleeping pipelines' weights.\n"
          "# TYPE ebb_sleep_backup_bytes gauge\nebb_sleep_backup_bytes %llu\n",
          (unsigned long long)si.backup_bytes);
  fprintf(f,
          "# HELP ebb_sleep_host_budget_bytes Host bytes backups may hold, per device (0: no "
          "limit).\n"
          "# TYPE ebb_sleep_host_budget_bytes gauge\nebb_sleep_host_budget_bytes %llu\n",
          (unsigned long long)si.budget_bytes);
  fprintf(f,
          "# HELP ebb_wakes_total Wakes of sleeping pipelines.\n"
          "# TYPE ebb_wakes_total counter\nebb_wakes_total %llu\n",
          (unsigned long long)si.wakes);
  fprintf(f,
          "# HELP ebb_wake_seconds_total Seconds spent waking pipelines.\n"
          "# TYPE ebb_wake_seconds_total counter\nebb_wake_seconds_total %.6f\n",
          si.wake_seconds);
}
