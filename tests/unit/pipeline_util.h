/* Helpers shared by the pipeline room's tests (tests/unit/pipeline_*.c,
 * manager_*.c), header-only like tests/unit/memory_util.h:
 *   dev, alloc, reg       the fixture of a test on one device: pt_open(SPEC,
 *                         MIB) opens SPEC ("cuda": the fake GPU, with
 *                         FAKEGPU_MEMORY_MIB=MIB unless MIB is NULL; "cpu"),
 *                         its allocator and a registry; pt_close() undoes it
 *   capture(), captured() what ebb logs from capture() on, as a malloc'ed
 *                         string (also copied to stderr: the test's output
 *                         shows it)
 *   has(hay, needle)      strstr that takes a NULL hay
 *   reserved(), allocated()  alloc's current figures
 *   pt_write(path, text)  writes a small file (a job's input) */
#ifndef EBB_TEST_PIPELINE_UTIL_H
#define EBB_TEST_PIPELINE_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "device/device.h"
#include "memory/memory.h"
#include "pipeline/registry.h"
#include "test.h"

static dev_device *dev;
static mem_allocator *alloc;
static pl_registry *reg;

static inline void pt_open(const char *spec, const char *mib) {
  if (mib)
    setenv("FAKEGPU_MEMORY_MIB", mib, 1);
  REQUIRE(dev_open(spec, &dev) == 0);
  REQUIRE(mem_allocator_create(dev, NULL, &alloc) == 0);
  REQUIRE(pl_registry_create(&reg) == 0);
}

static inline void pt_close(void) {
  pl_registry_destroy(reg);
  mem_allocator_destroy(alloc);
  dev_close(dev);
}

static FILE *pt_cap_;

static inline void capture(void) {
  pt_cap_ = tmpfile();
  REQUIRE(pt_cap_);
  base_log_set_stream(pt_cap_);
}

static inline char *captured(void) {
  base_log_set_stream(NULL);
  long n = ftell(pt_cap_);
  char *s = calloc(1, (size_t)n + 1);
  rewind(pt_cap_);
  if (n > 0 && fread(s, 1, (size_t)n, pt_cap_) != (size_t)n)
    s[0] = '\0';
  fclose(pt_cap_);
  fputs(s, stderr);
  return s;
}

static inline int has(const char *hay, const char *needle) {
  return hay && strstr(hay, needle) != NULL;
}

static inline uint64_t reserved(void) {
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(alloc, &st);
  return st.reserved.current;
}

static inline uint64_t allocated(void) {
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(alloc, &st);
  return st.allocated.current;
}

static inline void pt_write(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  REQUIRE(f);
  fputs(text, f);
  fclose(f);
}

#endif
