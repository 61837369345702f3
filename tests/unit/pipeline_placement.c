/* Placement rules (pipeline/placement.h) on pictures of devices: loaded and
 * idle first; best fit in free memory (other processes' memory counted as
 * taken); eviction only where the pipeline is loaded nowhere (or the job is
 * overdue), on the device losing the fewest bytes; otherwise wait; pins and
 * failed devices; a sleeping pipeline's device (awake first, a wake in
 * place before a load elsewhere, its room kept for its wake); the need:
 * measured peak, else the stages' estimate (a manager on the CPU device),
 * else expected_mib. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/placement.h"
#include "test.h"

#define MIB (1ull << 20)

static pl_place_dev dev(int ordinal, int idle, uint64_t free_mib) {
  return (pl_place_dev){.ordinal = ordinal,
                        .idle = idle,
                        .free_known = 1,
                        .free_bytes = free_mib * MIB};
}

static void loaded_and_idle_first(void) {
  pl_place_dev d[3] = {dev(0, 1, 8000), dev(1, 1, 3000), dev(2, 1, 8000)};
  d[1].loaded = 1;
  pl_place_job j = {.need = 4900 * MIB};
  pl_place_how how;
  CHECK_EQ_INT(pl_place(d, 3, &j, &how), 1);
  CHECK_EQ_INT(how, EBB_PLACE_LOADED);
}

static void best_fit(void) {
  /* 7000 free fits with 2100 over, 5000 with 100 over: the tighter one */
  pl_place_dev d[3] = {dev(0, 1, 7000), dev(1, 1, 5000), dev(2, 1, 4000)};
  pl_place_job j = {.need = 4900 * MIB};
  pl_place_how how;
  CHECK_EQ_INT(pl_place(d, 3, &j, &how), 1);
  CHECK_EQ_INT(how, EBB_PLACE_FITS);
  /* a busy device is not a candidate */
  d[1].idle = 0;
  CHECK_EQ_INT(pl_place(d, 3, &j, &how), 0);
}

static void held_by_others_does_not_fit(void) {
  /* another process holds 7 GiB of device 0: 724 MiB free, nothing fits there */
  pl_place_dev d[1] = {dev(0, 1, 724)};
  pl_place_job j = {.need = 4900 * MIB};
  pl_place_how how;
  CHECK_EQ_INT(pl_place(d, 1, &j, &how), -1);
  CHECK_EQ_INT(how, EBB_PLACE_WAIT); /* memory held elsewhere comes back: wait */
  CHECK(!pl_place_could_fit(&d[0], &j));
  d[0].free_bytes = 8000 * MIB; /* the hold ended */
  CHECK_EQ_INT(pl_place(d, 1, &j, &how), 0);
  CHECK_EQ_INT(how, EBB_PLACE_FITS);
}

static void evict_least_work_lost(void) {
  pl_place_dev d[3] = {dev(0, 1, 3000), dev(1, 1, 3000), dev(2, 1, 3000)};
  d[0].others = 1, d[0].other_bytes = 4900 * MIB;
  d[1].others = 1, d[1].other_bytes = 2000 * MIB;
  d[2].others = 2, d[2].other_bytes = 1000 * MIB; /* evicting frees too little */
  pl_place_job j = {.need = 4900 * MIB};
  pl_place_how how;
  CHECK_EQ_INT(pl_place(d, 3, &j, &how), 1);
  CHECK_EQ_INT(how, EBB_PLACE_EVICT);
}

static void no_eviction_while_loaded_elsewhere(void) {
  /* A runs on device 0; device 1 (B loaded) is idle: A waits for device 0
   * rather than throwing B out... */
  pl_place_dev d[2] = {dev(0, 0, 3000), dev(1, 1, 3000)};
  d[0].loaded = 1;
  d[1].others = 1, d[1].other_bytes = 4900 * MIB;
  pl_place_job j = {.need = 4900 * MIB};
  pl_place_how how;
  CHECK_EQ_INT(pl_place(d, 2, &j, &how), -1);
  CHECK_EQ_INT(how, EBB_PLACE_WAIT);
  /* ...unless it waited past --max-wait */
  j.overdue = 1;
  CHECK_EQ_INT(pl_place(d, 2, &j, &how), 1);
  CHECK_EQ_INT(how, EBB_PLACE_EVICT);
}

static void pins_and_failures(void) {
  pl_place_dev d[3] = {dev(0, 1, 8000), dev(1, 1, 8000), dev(2, 1, 8000)};
  pl_place_job j = {.need = 1000 * MIB, .pin_cuda = 1u << 2};
  pl_place_how how;
  CHECK_EQ_INT(pl_place(d, 3, &j, &how), 2);
  d[2].failed = 1;
  CHECK_EQ_INT(pl_place(d, 3, &j, &how), -1);
  CHECK_EQ_INT(how, EBB_PLACE_NEVER);
  j.pin_cuda = 0;
  d[0].failed = 1;
  CHECK_EQ_INT(pl_place(d, 3, &j, &how), 1);
  pl_place_dev cpu = dev(-1, 1, 8000);
  j.pin_cpu = 1;
  CHECK_EQ_INT(pl_place(&cpu, 1, &j, &how), 0);
  j.pin_cpu = 0, j.pin_cuda = 1;
  CHECK_EQ_INT(pl_place(&cpu, 1, &j, &how), -1);
}

static void unknown_need_takes_an_empty_device(void) {
  pl_place_dev d[3] = {dev(0, 1, 7000), dev(1, 1, 6000), dev(2, 1, 8000)};
  d[2].others = 1;
  pl_place_job j = {0};
  pl_place_how how;
  CHECK_EQ_INT(pl_place(d, 3, &j, &how), 0);
  CHECK_EQ_INT(how, EBB_PLACE_FITS);
}

static void asleep_wakes_in_place(void) {
  /* loaded on 0 (asleep) and on 2 (awake), room on 1: awake first */
  pl_place_dev d[3] = {dev(0, 1, 7800), dev(1, 1, 8000), dev(2, 1, 3000)};
  d[0].loaded = d[0].asleep = 1;
  d[2].loaded = 1;
  pl_place_job j = {.need = 4900 * MIB};
  pl_place_how how;
  CHECK_EQ_INT(pl_place(d, 3, &j, &how), 2);
  CHECK_EQ_INT(how, EBB_PLACE_LOADED);
  /* the awake one busy: the wake on 0 beats a load on 1 (which fits better) */
  d[2].idle = 0;
  CHECK_EQ_INT(pl_place(d, 3, &j, &how), 0);
  CHECK_EQ_INT(how, EBB_PLACE_LOADED);
  /* listed in the other order, the same answer */
  pl_place_dev r[2] = {dev(0, 1, 3000), dev(1, 1, 7800)};
  r[0].loaded = 1;
  r[1].loaded = r[1].asleep = 1;
  CHECK_EQ_INT(pl_place(r, 2, &j, &how), 0);
}

static void sleepers_keep_their_room(void) {
  /* device 0 looks empty (7800 MiB free) but a pipeline of 4900 MiB sleeps
   * there: a 4000 MiB job goes to device 1, where it fits beside nothing
   * asleep, even though device 0 would be the better fit by free memory */
  pl_place_dev d[2] = {dev(0, 1, 7800), dev(1, 1, 8000)};
  d[0].others = 1, d[0].other_bytes = 4900 * MIB, d[0].asleep_bytes = 4900 * MIB;
  pl_place_job j = {.need = 4000 * MIB};
  pl_place_how how;
  CHECK_EQ_INT(pl_place(d, 2, &j, &how), 1);
  CHECK_EQ_INT(how, EBB_PLACE_FITS);
  /* a small one fits beside the sleeper's room */
  j.need = 2000 * MIB;
  CHECK_EQ_INT(pl_place(d, 2, &j, &how), 0);
  CHECK_EQ_INT(how, EBB_PLACE_FITS);
}

static void need(void) {
  pl_def def;
  memset(&def, 0, sizeof def);
  CHECK_EQ_U64(pl_place_need(&def, 0, 0), 0);
  def.expected_bytes = 4915 * MIB;
  CHECK_EQ_U64(pl_place_need(&def, 0, 0), 4915 * MIB);
  CHECK_EQ_U64(pl_place_need(&def, 0, 4700 * MIB), 4700 * MIB);          /* the estimate next */
  CHECK_EQ_U64(pl_place_need(&def, 4800 * MIB, 4700 * MIB), 4800 * MIB); /* measured wins */
  CHECK_EQ_U64(pl_place_estimate_hook(NULL, &def), 0);
}

/* The stages' estimate through a manager on the CPU device: synthetic
 * declares weights + activations, summed over the stages; it comes before
 * expected_mib, and a load's measurement comes before both. */
static void estimate_hook(void) {
  dev_device *dev0 = NULL;
  mem_allocator *alloc = NULL;
  pl_registry *reg = NULL;
  REQUIRE(dev_open("cpu", &dev0) == 0);
  REQUIRE(mem_allocator_create(dev0, NULL, &alloc) == 0);
  REQUIRE(pl_registry_create(&reg) == 0);
  pl_config *c = NULL;
  REQUIRE(
      pl_config_load_string("{\"pipelines\": {\"p\": {\"expected_mib\": 100, \"stages\": ["
                            "{\"stage\": \"synthetic\", \"name\": \"a\", \"options\": "
                            "{\"weights_mib\": 8, "
                            "\"activations_mib\": 4}}, {\"stage\": \"synthetic\", \"name\": \"b\", "
                            "\"options\": {\"weights_mib\": 2, \"activations_mib\": 1}}]}}}",
                            "test.json", &c) == 0);
  char work[] = "/tmp/ebb-place-XXXXXX";
  REQUIRE(mkdtemp(work));
  pl_manager_opts o =
      {.size = sizeof o, .dev = dev0, .alloc = alloc, .reg = reg, .cfg = c, .work_dir = work};
  pl_manager *m = NULL;
  REQUIRE(pl_manager_create(&o, &m) == 0);
  const pl_def *p = pl_manager_pipeline(m, "p");
  REQUIRE(p);
  uint64_t est = pl_place_estimate_hook(m, p);
  CHECK_MSG(est == 15 * MIB + pl_manager_context_estimate(m),
            "estimate %llu bytes, expected 15 MiB + the context (%llu)", (unsigned long long)est,
            (unsigned long long)pl_manager_context_estimate(m));
  /* before any load: the estimate, not expected_mib (100) */
  CHECK_EQ_U64(pl_place_need(p, 0, est), est);
  uint64_t meas = 1;
  int asleep = 1;
  pl_manager_place_figures(m, "p", &meas, &asleep);
  CHECK_EQ_U64(meas, 0); /* expected_mib is no measurement */
  CHECK_EQ_INT(asleep, 0);
  CHECK_MSG(pl_manager_load(m, "p") == 0, "load: %s", ebb_errmsg());
  pl_manager_place_figures(m, "p", &meas, &asleep);
  CHECK_MSG(meas > 0, "no measured need after a load");
  pl_manager_destroy(m);
  pl_config_free(c);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
  CHECK_EQ_INT(system(cmd), 0);
  pl_registry_destroy(reg);
  mem_allocator_destroy(alloc);
  dev_close(dev0);
}

int main(void) {
  RUN(loaded_and_idle_first);
  RUN(best_fit);
  RUN(held_by_others_does_not_fit);
  RUN(evict_least_work_lost);
  RUN(no_eviction_while_loaded_elsewhere);
  RUN(pins_and_failures);
  RUN(unknown_need_takes_an_empty_device);
  RUN(asleep_wakes_in_place);
  RUN(sleepers_keep_their_room);
  RUN(need);
  RUN(estimate_hook);
  return TEST_END();
}
