/* Helpers shared by the memory room's tests (tests/unit/memory_*.c). */
#ifndef EBB_TEST_MEMORY_UTIL_H
#define EBB_TEST_MEMORY_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device/device.h"
#include "memory/memory.h"
#include "../lib/smi.h"

#ifndef MiB
#define MiB (1024ull * 1024ull)
#endif

/* Opens the fake GPU ("cuda:0" through EBB_LIBCUDA) or exits the test with a
 * message: these tests are about the fake, a missing fake is a failure. */
static inline dev_device *mt_open(const char *spec) {
  dev_device *d = NULL;
  int rc = dev_open(spec, &d);
  if (rc) {
    fprintf(stderr, "cannot open device %s: %s (%s); EBB_LIBCUDA=%s\n", spec, ebb_errmsg(),
            ebb_errname(rc), getenv("EBB_LIBCUDA") ? getenv("EBB_LIBCUDA") : "(unset)");
    exit(1);
  }
  return d;
}

/* What fakegpu-smi (run as a separate process) says pid holds, in MiB; 0 when
 * pid is not listed; -1 when the tool could not be run (tests/lib/smi.h). */
#define mt_smi_used_mib smi_used_mib

/* main() of a test that runs all of fn(spec) on the CPU device and then on
 * the fake GPU, as the two tests test_cpu and test_fake (tests/test.h). */
#define MT_MAIN_CPU_AND_FAKE(fn)                \
  static void test_cpu(void) { fn("cpu"); }     \
  static void test_fake(void) { fn("cuda:0"); } \
  int main(void) {                              \
    RUN(test_cpu);                              \
    RUN(test_fake);                             \
    return TEST_END();                          \
  }

static inline uint64_t mt_reserved(mem_allocator *a) {
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(a, &st);
  return st.reserved.current;
}

#endif
