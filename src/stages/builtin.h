/* The stages built into ebb. Each stage file defines `const ebb_stage
 * ebb_stage_<id>` and adds one EBB_BUILTIN(id) line to builtin_list.h. */
#ifndef EBB_STAGES_BUILTIN_H
#define EBB_STAGES_BUILTIN_H

#include <stddef.h>

#include "ebb/stage.h"

/* The built-in stages, in builtin_list.h order; static storage. */
const ebb_stage *const *ebb_builtin_stages(size_t *n);

#endif
