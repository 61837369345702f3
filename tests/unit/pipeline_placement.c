/* Placement rules (pipeline/placement.h) on pictures of devices: loaded and
 * idle first; best fit in free memory (other processes' memory counted as
 * taken); eviction only where the pipeline is loaded nowhere (or the job is
 * overdue), on the device losing the fewest bytes; otherwise wait; pins and
 * failed devices; the need: measured peak, else expected_mib. */
#include <string.h>

#include "pipeline/placement.h"
#include "test.h"

#define MIB (1ull << 20)

static ebb_place_dev dev(int ordinal, int idle, uint64_t free_mib) {
  return (ebb_place_dev){.ordinal = ordinal, .idle = idle, .free_known = 1,
                         .free_bytes = free_mib * MIB};
}

static void loaded_and_idle_first(void) {
  ebb_place_dev d[3] = {dev(0, 1, 8000), dev(1, 1, 3000), dev(2, 1, 8000)};
  d[1].loaded = 1;
  ebb_place_job j = {.need = 4900 * MIB};
  ebb_place_how how;
  CHECK_EQ_INT(ebb_place(d, 3, &j, &how), 1);
  CHECK_EQ_INT(how, EBB_PLACE_LOADED);
}

static void best_fit(void) {
  /* 7000 free fits with 2100 over, 5000 with 100 over: the tighter one */
  ebb_place_dev d[3] = {dev(0, 1, 7000), dev(1, 1, 5000), dev(2, 1, 4000)};
  ebb_place_job j = {.need = 4900 * MIB};
  ebb_place_how how;
  CHECK_EQ_INT(ebb_place(d, 3, &j, &how), 1);
  CHECK_EQ_INT(how, EBB_PLACE_FITS);
  /* a busy device is not a candidate */
  d[1].idle = 0;
  CHECK_EQ_INT(ebb_place(d, 3, &j, &how), 0);
}

static void held_by_others_does_not_fit(void) {
  /* another process holds 7 GiB of device 0: 724 MiB free, nothing fits there */
  ebb_place_dev d[1] = {dev(0, 1, 724)};
  ebb_place_job j = {.need = 4900 * MIB};
  ebb_place_how how;
  CHECK_EQ_INT(ebb_place(d, 1, &j, &how), -1);
  CHECK_EQ_INT(how, EBB_PLACE_WAIT); /* memory held elsewhere comes back: wait */
  CHECK(!ebb_place_could_fit(&d[0], &j));
  d[0].free_bytes = 8000 * MIB; /* the hold ended */
  CHECK_EQ_INT(ebb_place(d, 1, &j, &how), 0);
  CHECK_EQ_INT(how, EBB_PLACE_FITS);
}

static void evict_least_work_lost(void) {
  ebb_place_dev d[3] = {dev(0, 1, 3000), dev(1, 1, 3000), dev(2, 1, 3000)};
  d[0].others = 1, d[0].other_bytes = 4900 * MIB;
  d[1].others = 1, d[1].other_bytes = 2000 * MIB;
  d[2].others = 2, d[2].other_bytes = 1000 * MIB; /* evicting frees too little */
  ebb_place_job j = {.need = 4900 * MIB};
  ebb_place_how how;
  CHECK_EQ_INT(ebb_place(d, 3, &j, &how), 1);
  CHECK_EQ_INT(how, EBB_PLACE_EVICT);
}

static void no_eviction_while_loaded_elsewhere(void) {
  /* A runs on device 0; device 1 (B loaded) is idle: A waits for device 0
   * rather than throwing B out... */
  ebb_place_dev d[2] = {dev(0, 0, 3000), dev(1, 1, 3000)};
  d[0].loaded = 1;
  d[1].others = 1, d[1].other_bytes = 4900 * MIB;
  ebb_place_job j = {.need = 4900 * MIB};
  ebb_place_how how;
  CHECK_EQ_INT(ebb_place(d, 2, &j, &how), -1);
  CHECK_EQ_INT(how, EBB_PLACE_WAIT);
  /* ...unless it waited past --max-wait */
  j.overdue = 1;
  CHECK_EQ_INT(ebb_place(d, 2, &j, &how), 1);
  CHECK_EQ_INT(how, EBB_PLACE_EVICT);
}

static void pins_and_failures(void) {
  ebb_place_dev d[3] = {dev(0, 1, 8000), dev(1, 1, 8000), dev(2, 1, 8000)};
  ebb_place_job j = {.need = 1000 * MIB, .pin_cuda = 1u << 2};
  ebb_place_how how;
  CHECK_EQ_INT(ebb_place(d, 3, &j, &how), 2);
  d[2].failed = 1;
  CHECK_EQ_INT(ebb_place(d, 3, &j, &how), -1);
  CHECK_EQ_INT(how, EBB_PLACE_NEVER);
  j.pin_cuda = 0;
  d[0].failed = 1;
  CHECK_EQ_INT(ebb_place(d, 3, &j, &how), 1);
  ebb_place_dev cpu = dev(-1, 1, 8000);
  j.pin_cpu = 1;
  CHECK_EQ_INT(ebb_place(&cpu, 1, &j, &how), 0);
  j.pin_cpu = 0, j.pin_cuda = 1;
  CHECK_EQ_INT(ebb_place(&cpu, 1, &j, &how), -1);
}

static void unknown_need_takes_an_empty_device(void) {
  ebb_place_dev d[3] = {dev(0, 1, 7000), dev(1, 1, 6000), dev(2, 1, 8000)};
  d[2].others = 1;
  ebb_place_job j = {0};
  ebb_place_how how;
  CHECK_EQ_INT(ebb_place(d, 3, &j, &how), 0);
  CHECK_EQ_INT(how, EBB_PLACE_FITS);
}

static void need(void) {
  ebb_pipeline_def def;
  memset(&def, 0, sizeof def);
  CHECK_EQ_U64(ebb_place_need(&def, 0), 0);
  def.expected_bytes = 4915 * MIB;
  CHECK_EQ_U64(ebb_place_need(&def, 0), 4915 * MIB);
  CHECK_EQ_U64(ebb_place_need(&def, 4700 * MIB), 4700 * MIB); /* measured wins */
  CHECK_EQ_U64(ebb_place_estimate_hook(&def), 0);
}

int main(void) {
  RUN(loaded_and_idle_first);
  RUN(best_fit);
  RUN(held_by_others_does_not_fit);
  RUN(evict_least_work_lost);
  RUN(no_eviction_while_loaded_elsewhere);
  RUN(pins_and_failures);
  RUN(unknown_need_takes_an_empty_device);
  RUN(need);
  return TEST_END();
}
