/* A room at the device's level (tests/support/layering/CMakeLists.txt). */
#include "ebb/error.h"
#include "memory/memory.h"

int probe_call(void);
int probe_call(void) {
#if PROBE_UP
  mem_allocator *a = NULL; /* upward: the memory room is above this one */
  return mem_allocator_create(NULL, NULL, &a);
#else
  return ebb_seterr(EBB_EINVAL, "probe: a downward call"); /* the base room */
#endif
}
