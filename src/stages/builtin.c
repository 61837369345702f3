/* The list of built-in stages (builtin_list.h) as the registry reads it. */
#include "stages/builtin.h"

#define EBB_BUILTIN(id) extern const ebb_stage stg_stage_##id;
#include "stages/builtin_list.h"
#undef EBB_BUILTIN

static const ebb_stage *const builtin[] = {
#define EBB_BUILTIN(id) &stg_stage_##id,
#include "stages/builtin_list.h"
#undef EBB_BUILTIN
    NULL};

const ebb_stage *const *stg_builtin_stages(size_t *n) {
  *n = sizeof builtin / sizeof builtin[0] - 1;
  return builtin;
}
