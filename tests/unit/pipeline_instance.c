/* A stage instance's state machine and its one release (src/pipeline/instance.h),
 * in-process on the fake GPU: every change the diagram does not draw is
 * refused with EBB_ESTATE and a message naming the instance and both states;
 * release runs from every state that allows it (new, loaded, idle, parked)
 * and is refused while running or once released; the report carries what the
 * release did (bytes, context, leaks, unattributed, the driver before/after,
 * errors of the stage's drop and unload) and matches the fake driver. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/instance.h"
#include "pipeline/items.h"
#include "pipeline_util.h"

#define MIB_ (1ull << 20)

/* --- a probe stage: tries to release itself from inside its run, its drop
 * (the ABI's release) fails, and it never gives back 2 MiB it took from the
 * driver directly -------------------------------------------------------------- */
static pl_instance *probe_self;
static int probe_rc_inside = 1;
static char probe_msg_inside[512];

static int probe_load(ebb_stage_ctx *ctx, const char *opts, void **state) {
  (void)opts;
  uint64_t p = 0;
  int rc = ctx->host->dev_alloc(ctx, 4 << 20, "probe weights", &p);
  *state = (void *)(uintptr_t)p;
  uint64_t raw = 0; /* taken behind the allocator's back and never given back */
  return rc ? rc : ctx->host->raw_driver_alloc(ctx, 2 << 20, &raw);
}
static int probe_run(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out) {
  (void)ctx, (void)state, (void)in, (void)out;
  probe_rc_inside = pl_instance_release(probe_self, NULL, NULL);
  snprintf(probe_msg_inside, sizeof probe_msg_inside, "%s", ebb_errmsg());
  return 0;
}
static void probe_unload(ebb_stage_ctx *ctx, void *state) {
  ctx->host->dev_free(ctx, (uint64_t)(uintptr_t)state);
}
static int probe_drop(ebb_stage_ctx *ctx, void *state) {
  (void)state;
  return ebb_set_error(ctx, EBB_ESTAGE, "probe: nothing to drop, failing as asked");
}
static const ebb_stage probe_stage = {.abi_version = EBB_STAGE_ABI_VERSION,
                                      .size = sizeof(ebb_stage),
                                      .name = "probe",
                                      .version = 1,
                                      .options_schema = "{}",
                                      .needs_gpu = 1,
                                      .load = probe_load,
                                      .run = probe_run,
                                      .unload = probe_unload,
                                      .release = probe_drop};

/* --- helpers ------------------------------------------------------------------ */
/* A synthetic instance with these options (validated and merged as the runner does). */
static pl_instance *synthetic(const char *name, const char *options) {
  const ebb_stage *st = pl_registry_find(reg, "synthetic", NULL);
  REQUIRE(st);
  json_t *o = json_loads(options, 0, NULL), *merged = NULL;
  REQUIRE(o);
  REQUIRE(pl_stage_validate_options(st, o, "test", &merged) == 0);
  char *opts = json_dumps(merged, JSON_COMPACT | JSON_SORT_KEYS);
  pl_instance_spec spec = {.size = sizeof spec,
                           .dev = dev,
                           .alloc = alloc,
                           .stage = st,
                           .pipeline = "p",
                           .name = name,
                           .options = opts,
                           .output_dir = "."};
  pl_instance *in = NULL;
  REQUIRE(pl_instance_create(&spec, &in) == 0);
  free(opts);
  json_decref(merged);
  json_decref(o);
  return in;
}

static int run_once(pl_instance *in) {
  ebb_items *inputs = NULL, *outputs = NULL;
  REQUIRE(pl_items_create(NULL, NULL, &inputs) == 0);
  REQUIRE(pl_items_create(NULL, inputs, &outputs) == 0);
  int rc = pl_instance_run(in, inputs, outputs);
  pl_items_destroy(outputs);
  pl_items_destroy(inputs);
  return rc;
}

/* A refused change: EBB_ESTATE, the state unchanged, and a message that
 * names the instance and contains want. */
#define CHECK_REFUSED(call, in, want)                                    \
  do {                                                                   \
    pl_instance_state before_ = pl_instance_state_of(in);                \
    int rc_ = (call);                                                    \
    CHECK_EQ_INT(rc_, EBB_ESTATE);                                       \
    CHECK_EQ_INT(pl_instance_state_of(in), before_);                     \
    CHECK_MSG(has(ebb_errmsg(), "stage '") && has(ebb_errmsg(), want),   \
              "%s: message '%s' lacks '%s'", #call, ebb_errmsg(), want); \
  } while (0)

/* --- tests -------------------------------------------------------------------- */
static void test_state_names(void) {
  CHECK_EQ_STR(pl_instance_state_name(EBB_INSTANCE_NEW), "new");
  CHECK_EQ_STR(pl_instance_state_name(EBB_INSTANCE_LOADED), "loaded");
  CHECK_EQ_STR(pl_instance_state_name(EBB_INSTANCE_RUNNING), "running");
  CHECK_EQ_STR(pl_instance_state_name(EBB_INSTANCE_IDLE), "idle");
  CHECK_EQ_STR(pl_instance_state_name(EBB_INSTANCE_PARKED), "parked");
  CHECK_EQ_STR(pl_instance_state_name(EBB_INSTANCE_RELEASED), "released");
  CHECK_EQ_STR(pl_instance_state_name((pl_instance_state)42), "?");
}

static void test_legal_path(void) {
  pl_instance *in = synthetic("a", "{\"weights_mib\": 8, \"activations_mib\": 4}");
  CHECK_EQ_INT(pl_instance_state_of(in), EBB_INSTANCE_NEW);
  CHECK(!pl_instance_is_loaded(in));
  CHECK_EQ_STR(pl_instance_name(in), "a");
  CHECK_EQ_STR(pl_instance_pipeline(in), "p");
  CHECK(pl_instance_owner(in) != NULL);
  CHECK_EQ_INT(pl_instance_load(in), 0);
  CHECK_EQ_INT(pl_instance_state_of(in), EBB_INSTANCE_LOADED);
  CHECK(pl_instance_is_loaded(in) && pl_instance_stage_state(in) != NULL);
  CHECK_EQ_INT(run_once(in), 0);
  CHECK_EQ_INT(pl_instance_state_of(in), EBB_INSTANCE_LOADED);
  CHECK_EQ_INT(pl_instance_idle(in), 0);
  CHECK_EQ_INT(pl_instance_state_of(in), EBB_INSTANCE_IDLE);
  CHECK_EQ_INT(run_once(in), 0); /* an idle instance is claimed by a run */
  CHECK_EQ_INT(pl_instance_state_of(in), EBB_INSTANCE_LOADED);
  CHECK_EQ_INT(pl_instance_enter(in, EBB_INSTANCE_PARKED), 0);
  CHECK_EQ_INT(pl_instance_enter(in, EBB_INSTANCE_LOADED), 0); /* wake */
  CHECK_EQ_INT(pl_instance_release(in, NULL, NULL), 0);
  CHECK_EQ_INT(pl_instance_state_of(in), EBB_INSTANCE_RELEASED);
  CHECK(!pl_instance_is_loaded(in) && pl_instance_owner(in) == NULL);
  pl_instance_destroy(in);
  CHECK_EQ_U64(reserved(), 0);
}

static void test_illegal_refused(void) {
  pl_instance *in = synthetic("b", "{\"weights_mib\": 2}");
  /* new: nothing to run, idle, park or wake */
  CHECK_REFUSED(run_once(in), in, "cannot go from new to running: it is not loaded");
  CHECK_REFUSED(pl_instance_idle(in), in, "cannot go from new to idle");
  CHECK_REFUSED(pl_instance_enter(in, EBB_INSTANCE_PARKED), in, "from new to parked");
  CHECK_REFUSED(pl_instance_enter(in, EBB_INSTANCE_LOADED), in, "from new to loaded");
  CHECK_REFUSED(pl_instance_enter(in, (pl_instance_state)42), in, "from new to ?");
  CHECK_EQ_INT(pl_instance_load(in), 0);
  /* loaded: no second load, no way back to new */
  CHECK_REFUSED(pl_instance_load(in), in, "cannot load: it is loaded, not new");
  CHECK_REFUSED(pl_instance_enter(in, EBB_INSTANCE_NEW), in, "from loaded to new");
  /* idle: no double idle */
  CHECK_EQ_INT(pl_instance_idle(in), 0);
  CHECK_REFUSED(pl_instance_idle(in), in, "from idle to idle");
  /* parked: neither run nor idle until woken (no double park either) */
  CHECK_EQ_INT(pl_instance_enter(in, EBB_INSTANCE_PARKED), 0);
  CHECK_REFUSED(run_once(in), in, "from parked to running: its memory is parked; wake it first");
  CHECK_REFUSED(pl_instance_idle(in), in, "from parked to idle");
  CHECK_REFUSED(pl_instance_enter(in, EBB_INSTANCE_PARKED), in, "from parked to parked");
  CHECK_EQ_INT(pl_instance_enter(in, EBB_INSTANCE_LOADED), 0);
  /* released: finished for good */
  CHECK_EQ_INT(pl_instance_release(in, &(pl_instance_plan){.quiet = 1}, NULL), 0);
  const char *fin = "a released instance is finished; create another";
  CHECK_REFUSED(pl_instance_release(in, NULL, NULL), in, fin);
  CHECK_REFUSED(pl_instance_load(in), in, "cannot load: it is released");
  CHECK_REFUSED(run_once(in), in, fin);
  CHECK_REFUSED(pl_instance_enter(in, EBB_INSTANCE_LOADED), in, fin);
  CHECK(has(ebb_errmsg(), "stage 'b' of pipeline 'p'"));
  pl_instance_destroy(in);
  pl_instance_destroy(NULL);
  CHECK_EQ_INT(pl_instance_enter(NULL, EBB_INSTANCE_NEW), EBB_EINVAL);
  CHECK_EQ_INT(pl_instance_release(NULL, NULL, NULL), EBB_EINVAL);
  CHECK(has(ebb_errmsg(), "none given to release"));
  CHECK_EQ_U64(reserved(), 0);
}

/* Release while running (from inside the stage's own run): refused. */
static void test_release_while_running(void) {
  pl_instance_spec spec = {.size = sizeof spec,
                           .dev = dev,
                           .alloc = alloc,
                           .stage = &probe_stage,
                           .pipeline = "p",
                           .name = "pr"};
  REQUIRE(pl_instance_create(&spec, &probe_self) == 0);
  CHECK_EQ_INT(pl_instance_load(probe_self), 0);
  CHECK_EQ_INT(run_once(probe_self), 0);
  CHECK_EQ_INT(probe_rc_inside, EBB_ESTATE);
  CHECK_MSG(has(probe_msg_inside, "cannot go from running to released: it is inside its load "
                                  "or run; wait until that returns"),
            "message: %s", probe_msg_inside);
  CHECK_EQ_INT(pl_instance_state_of(probe_self), EBB_INSTANCE_LOADED);
  /* the stage's drop fails: logged, counted, the release goes on */
  pl_instance_report rep = {.size = sizeof rep};
  capture();
  CHECK_EQ_INT(pl_instance_release(probe_self, NULL, &rep), 0);
  char *log = captured();
  CHECK_EQ_INT(rep.drop_error, EBB_ESTAGE);
  CHECK(has(log, "[pr] the stage's release failed: probe: nothing to drop, failing as asked"));
  CHECK_EQ_INT(rep.unload_error, 0);
  CHECK_EQ_U64(rep.leaked_bytes, 0);
  CHECK_EQ_U64(rep.unattributed_bytes, 2 * MIB_);
  CHECK(has(log, "[pr] 2 MiB taken from the driver directly were not given back; freed by ebb"));
  CHECK(rep.released_bytes >= 6 * MIB_);
  CHECK_EQ_INT(pl_instance_state_of(probe_self), EBB_INSTANCE_RELEASED);
  free(log);
  pl_instance_destroy(probe_self);
  probe_self = NULL;
  CHECK_EQ_U64(reserved(), 0);
}

/* Release from each state that allows it: the memory all goes back. */
static void test_release_from_every_state(void) {
  const pl_instance_state states[] = {EBB_INSTANCE_NEW, EBB_INSTANCE_LOADED, EBB_INSTANCE_IDLE,
                                      EBB_INSTANCE_PARKED};
  for (size_t i = 0; i < sizeof states / sizeof *states; i++) {
    pl_instance *in = synthetic("c", "{\"weights_mib\": 16, \"cache_mib\": 4}");
    if (states[i] != EBB_INSTANCE_NEW) {
      REQUIRE(pl_instance_load(in) == 0);
      REQUIRE(run_once(in) == 0); /* builds the cache */
    }
    if (states[i] == EBB_INSTANCE_IDLE)
      REQUIRE(pl_instance_idle(in) == 0);
    if (states[i] == EBB_INSTANCE_PARKED)
      REQUIRE(pl_instance_enter(in, EBB_INSTANCE_PARKED) == 0);
    CHECK_EQ_INT(pl_instance_state_of(in), states[i]);
    pl_instance_report rep = {.size = sizeof rep};
    CHECK_EQ_INT(pl_instance_release(in, &(pl_instance_plan){.quiet = 1}, &rep), 0);
    CHECK_EQ_INT(pl_instance_state_of(in), EBB_INSTANCE_RELEASED);
    CHECK_MSG(states[i] == EBB_INSTANCE_NEW ? rep.released_bytes == 0
                                            : rep.released_bytes >= 20 * MIB_,
              "from %s: released %llu bytes", pl_instance_state_name(states[i]),
              (unsigned long long)rep.released_bytes);
    CHECK_EQ_INT(rep.callbacks_run, states[i] == EBB_INSTANCE_NEW ? 0 : 1);
    CHECK_EQ_U64(rep.leaked_bytes, 0);
    CHECK_EQ_U64(reserved(), 0);
    pl_instance_destroy(in);
  }
  /* never released by hand: destroy releases it (quietly) */
  pl_instance *in = synthetic("d", "{\"weights_mib\": 8}");
  REQUIRE(pl_instance_load(in) == 0);
  CHECK(reserved() >= 8 * MIB_);
  capture();
  pl_instance_destroy(in);
  char *log = captured();
  CHECK_EQ_U64(reserved(), 0);
  CHECK(!has(log, "[d] released"));
  free(log);
}

/* Every report field, against the fake driver's own figures. */
static void test_report_fields(void) {
  pl_instance *in = synthetic("r", "{\"weights_mib\": 64, \"activations_mib\": 16, "
                                   "\"cache_mib\": 16, \"leak_mib\": 8, \"outside_mib\": 4}");
  REQUIRE(pl_instance_load(in) == 0);
  REQUIRE(run_once(in) == 0);
  REQUIRE(dev_ctx_active(dev));
  pl_instance_report rep = {.size = sizeof rep};
  capture();
  CHECK_EQ_INT(pl_instance_release(in, &(pl_instance_plan){.with_context = 1}, &rep), 0);
  char *log = captured();
  CHECK_EQ_INT(rep.size, sizeof rep);
  /* weights + activations (cached) + cache + leak + outside + the context */
  CHECK_MSG(rep.released_bytes >= (64 + 16 + 16 + 8 + 4 + 300) * MIB_, "released %llu MiB",
            (unsigned long long)(rep.released_bytes >> 20));
  CHECK_EQ_U64(rep.context_bytes, 300 * MIB_);
  CHECK_EQ_U64(rep.unattributed_bytes, 0); /* synthetic gives its outside_mib back */
  CHECK_EQ_U64(rep.leaked_bytes, 8 * MIB_);
  CHECK_EQ_INT(rep.leaked_blocks, 1);
  CHECK_EQ_U64(rep.leaked_pinned_bytes, 0);
  CHECK_EQ_INT(rep.callbacks_run, 1);
  CHECK_EQ_INT(rep.callbacks_failed, 0);
  CHECK_EQ_INT(rep.drop_error, 0);
  CHECK_EQ_INT(rep.unload_error, 0);
  CHECK_EQ_INT(rep.context_error, 0);
  CHECK(rep.driver_free_before > 0 && rep.driver_free_after > rep.driver_free_before);
  CHECK_NEAR((double)(rep.driver_free_after - rep.driver_free_before), (double)rep.released_bytes,
             2.0 * MIB_);
  CHECK(!dev_ctx_active(dev));
  char line[128];
  snprintf(line, sizeof line, "[r] released %llu MiB of GPU memory",
           (unsigned long long)(rep.released_bytes >> 20));
  CHECK_MSG(has(log, line), "no line '%s'", line);
  CHECK(has(log, "[r] leaked 8 MiB in 1 blocks; freed by ebb"));
  CHECK(!has(log, "taken from the driver directly"));
  free(log);
  pl_instance_destroy(in);

  /* a failing unload is in the report; quiet: no lines at info level */
  in = synthetic("u", "{\"weights_mib\": 8, \"fail\": \"unload\"}");
  REQUIRE(pl_instance_load(in) == 0);
  rep = (pl_instance_report){.size = sizeof rep};
  capture();
  CHECK_EQ_INT(pl_instance_release(in, &(pl_instance_plan){.quiet = 1}, &rep), 0);
  log = captured();
  CHECK_EQ_INT(rep.unload_error, EBB_ESTAGE);
  CHECK_MSG(has(rep.unload_message, "unload"), "unload message: %s", rep.unload_message);
  CHECK(rep.released_bytes >= 8 * MIB_);
  CHECK_EQ_U64(rep.context_bytes, 0); /* not asked for */
  CHECK(!has(log, "[u] released"));
  CHECK(dev_ctx_active(dev));
  free(log);
  pl_instance_destroy(in);

  /* an older caller's smaller report gets only what fits */
  in = synthetic("s", "{\"weights_mib\": 2}");
  REQUIRE(pl_instance_load(in) == 0);
  struct {
    pl_instance_report head;
  } big;
  memset(&big, 0xAB, sizeof big);
  big.head.size = (uint32_t)offsetof(pl_instance_report, context_bytes);
  CHECK_EQ_INT(pl_instance_release(in, &(pl_instance_plan){.quiet = 1}, &big.head), 0);
  CHECK(big.head.released_bytes >= 2 * MIB_);
  CHECK_EQ_U64(big.head.context_bytes, 0xABABABABABABABABull); /* untouched */
  pl_instance_destroy(in);
  CHECK_EQ_U64(reserved(), 0);
}

/* The drop (the worker protocol's "release"): caches go, the stage stays
 * loaded and runs again; refused when not loaded. A plan with no_line:
 * the leak line still appears, the released line does not (ebb-worker). */
static void test_drop_and_no_line(void) {
  pl_instance *in = synthetic("d", "{\"weights_mib\": 16, \"cache_mib\": 32, "
                                   "\"leak_mib\": 4}");
  CHECK_REFUSED(pl_instance_drop(in, NULL), in, "not loaded");
  REQUIRE(pl_instance_load(in) == 0);
  REQUIRE(run_once(in) == 0);
  pl_instance_report rep = {.size = sizeof rep};
  CHECK_EQ_INT(pl_instance_drop(in, &rep), 0);
  CHECK_EQ_INT(pl_instance_state_of(in), EBB_INSTANCE_LOADED);
  CHECK_MSG(rep.released_bytes >= 32 * MIB_, "drop released %llu MiB",
            (unsigned long long)(rep.released_bytes >> 20));
  CHECK_EQ_INT(rep.callbacks_run, 1);
  CHECK(rep.driver_free_after > rep.driver_free_before);
  CHECK_EQ_INT(run_once(in), 0); /* still loaded */
  rep = (pl_instance_report){.size = sizeof rep};
  capture();
  CHECK_EQ_INT(pl_instance_release(in, &(pl_instance_plan){.no_line = 1}, &rep), 0);
  char *log = captured();
  CHECK(rep.released_bytes >= 16 * MIB_);
  CHECK(has(log, "[d] leaked 8 MiB in 2 blocks; freed by ebb")); /* 4 MiB per run */
  CHECK(!has(log, "[d] released"));
  free(log);
  CHECK_REFUSED(pl_instance_drop(in, NULL), in, "released");
  pl_instance_destroy(in);
}

int main(void) {
  pt_open("cuda", "2048");
  RUN(test_state_names);
  RUN(test_legal_path);
  RUN(test_illegal_refused);
  RUN(test_release_while_running);
  RUN(test_release_from_every_state);
  RUN(test_report_fields);
  RUN(test_drop_and_no_line);
  pt_close();
  return TEST_END();
}
