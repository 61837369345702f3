/* The after-stage hook: observation from outside. If EBB_STAGE_HOOK is set
 * (or a runner is given a hook command), the runner runs it with /bin/sh -c
 * through posix_spawn (never fork: the process may have called cuInit) and
 * waits for it, with these variables added to ebb's environment:
 *   EBB_HOOK_EVENT   before-release | after-stage | after-job
 *   EBB_HOOK_STAGE   the stage instance name (after-job: the pipeline name)
 *   EBB_HOOK_PID     ebb's pid
 *   EBB_HOOK_RELEASED_BYTES  bytes ebb handed back to the driver at this point
 * before-release runs after a stage's run, before it is released (so a
 * script can measure the drop); after-stage after the stage's release (also
 * under policies that release nothing then, with 0); after-job after the
 * job's final release. The hook's exit status is logged, never fatal. */
#ifndef EBB_PIPELINE_HOOK_H
#define EBB_PIPELINE_HOOK_H

#include <stdint.h>

/* Runs cmd (NULL or empty: nothing) and waits. Returns its exit status, or
 * a negative EBB_E... if it could not be started. */
int pl_hook_run(const char *cmd, const char *event, const char *stage, uint64_t released_bytes);

#endif
