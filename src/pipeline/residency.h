/* Residency: a pipeline a job loaded stays on its device while jobs use it,
 * so the next job of it runs without a load (when the residency is on:
 * pl_residency_keeps; the same for one device as for several). Once no
 * job of it is queued and it has been idle for its keep time, it goes the
 * way its release policy says (pl_policy_leave, pipeline/config.h, the
 * rule the runner's idle stages follow too): asleep under sleep / sleep:S
 * (a later job wakes it in place), unloaded otherwise; "never" keeps it. Keep time: the policy's
 * seconds (idle:S, sleep:S; plain sleep: none), else the residency's
 * default (ebb serve --keep-resident, 300 s). A pipeline with open sessions
 * stays. One loaded through the API (POST .../load) is not tracked: whoever
 * loaded it unloads it. So an idle server comes back to 0 bytes too.
 *
 * How a pipeline leaves a device, and the only places it does:
 *   - idle (time): here, for a job-loaded pipeline (the queue's device
 *     thread asks pl_residency_due when it has no job, then
 *     pl_residency_leave); the runner's idle stages (idle:S, sleep:S) by
 *     pl_manager_tick; both by pl_policy_leave's rule;
 *   - room (memory): the manager, when a load does not fit (a switch), when
 *     sleeping backups pass the host budget, when a peer asks (giving back);
 *   - on request: POST .../unload, .../sleep, a failed device.
 *
 * One residency per device (manager), used from that device's queue thread. */
#ifndef EBB_PIPELINE_RESIDENCY_H
#define EBB_PIPELINE_RESIDENCY_H

#include "pipeline/config.h"
#include "pipeline/manager.h"

typedef struct pl_residency pl_residency;

/* Over m (borrowed); keep_default_s 0: 300 s (1e-9: at once); < 0: off,
 * a job's pipeline does not stay (pl_residency_keeps) and nothing is
 * tracked. */
int pl_residency_create(pl_manager *m, double keep_default_s, pl_residency **out);
/* NULL: no-op. Leaves the pipelines where they are. */
void pl_residency_destroy(pl_residency *r);
/* Whether a job loads its pipeline to stay on the device after the job
 * (the residency is on); else the job runs it under its release policy and
 * leaves nothing loaded (after-stage: each stage's memory goes back as the
 * stage ends). */
int pl_residency_keeps(const pl_residency *r);
/* After a job of name ended here: a load by the job (loaded_by_job) starts
 * its residency, a job of a resident pipeline renews it (and wakes it, if it
 * slept). Pipelines under "never" are not tracked. */
void pl_residency_note(pl_residency *r, const char *name, int loaded_by_job);

/* A resident pipeline whose keep time is over. */
typedef struct pl_resident_due {
  char name[128];
  pl_policy policy;
  double idle_s; /* idle this long */
} pl_resident_due;
/* Whether a resident pipeline is due to leave, and which (*due). queued
 * (arg, name) says whether a job of name waits; it is called here and now
 * (the caller may hold its queue's lock over this call, which does not
 * wait on the device). */
int pl_residency_due(pl_residency *r, int (*queued)(void *arg, const char *name), void *arg,
                     pl_resident_due *due);
/* Makes due leave its device (sleep or unload, logged "pipeline NAME on
 * DEV: idle S s with no job of it queued: asleep|unloaded, N MiB
 * released"); one with sessions stays for another keep time. Waits on the
 * device: call it without the queue's lock. */
void pl_residency_leave(pl_residency *r, const pl_resident_due *due);

#endif
