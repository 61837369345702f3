/* The stages built into ebb. Each stage file defines `const ebb_stage
 * stg_stage_<id>` and adds one EBB_BUILTIN(id) line to builtin_list.h. */
#ifndef EBB_STAGES_BUILTIN_H
#define EBB_STAGES_BUILTIN_H

#include <stddef.h>

#include "ebb/stage.h"

/* The built-in stages, in builtin_list.h order; static storage. */
const ebb_stage *const *stg_builtin_stages(size_t *n);

/* The synthetic stage's work estimate (its `work` hook, synthetic.c): CPU
 * seconds for run_ms of running and touched_mib MiB touched (full: every
 * byte written and read back; else a sample). */
double stg_synthetic_work_s(double run_ms, double touched_mib, int full);

#endif
