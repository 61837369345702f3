/* Work estimates (issue 31, "Deadlines that hold"): every built-in stage
 * gives one through the stage ABI's optional `work`; the formulas grow with
 * the input and with each option that drives the cost (and shrink with the
 * hop), so a costlier setting never estimates less; a stage built against
 * an older struct (no `work`) still loads and gives none (EBB_EUNSUPPORTED);
 * a pipeline's work is the sum of its stages', with the costliest named. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/registry.h"
#include "pipeline/work.h"
#include "stages/audio/decode.h"
#include "stages/audio/pitch.h"
#include "stages/audio/separate.h"
#include "stages/builtin.h"
#include "test.h"

static double work_of(const pl_registry *r, const char *stage, const char *options,
                      double input_s) {
  const ebb_stage *st = pl_registry_find(r, stage, NULL);
  REQUIRE(st);
  ebb_work w = {.size = sizeof w};
  int rc = pl_stage_work(st, options, input_s, 16000, &w);
  CHECK_MSG(rc == 0, "stage %s gives no work estimate: %s", stage, ebb_errmsg());
  return w.cpu_s;
}

static void test_every_builtin_estimates(void) {
  pl_registry *r = NULL;
  REQUIRE(pl_registry_create(&r) == 0);
  size_t n = 0;
  const ebb_stage *const *all = stg_builtin_stages(&n);
  CHECK_EQ_INT((int)n, 7);
  for (size_t i = 0; i < n; i++) {
    CHECK_MSG(EBB_STAGE_HAS(all[i], work) && all[i]->work, "built-in stage %s has no work hook",
              all[i]->name);
    double one = work_of(r, all[i]->name, NULL, 60), five = work_of(r, all[i]->name, NULL, 300);
    CHECK_MSG(one >= 0 && five >= one, "%s: 300 s estimates %g s, 60 s %g s", all[i]->name, five,
              one);
    printf("work %-10s defaults: 60 s -> %.3g s, 300 s -> %.3g s\n", all[i]->name, one, five);
  }
  /* the probe: far over any sensible limit; and the stage names
   * what drives it */
  ebb_work w = {.size = sizeof w};
  REQUIRE(pl_stage_work(pl_registry_find(r, "pitch", NULL), "{\"hop\": 1, \"frame\": 65536}", 300,
                        16000, &w) == 0);
  CHECK_MSG(w.cpu_s > 1000, "pitch hop 1 frame 65536 on 300 s: only %g s", w.cpu_s);
  CHECK_EQ_STR(w.drivers, "hop 1, frame 65536");
  CHECK(work_of(r, "pitch", "{\"method\": \"yin\"}", 300) < work_of(r, "pitch", NULL, 300));
  CHECK(work_of(r, "synthetic", "{\"touch\": \"full\"}", 0) >
        work_of(r, "synthetic", "{\"touch\": \"sample\"}", 0));
  CHECK(work_of(r, "export", "{\"stems\": \"none\"}", 300) < work_of(r, "export", NULL, 300));
  /* transcribe's remote wait is bounded by its options, not counted as work */
  memset(&w, 0, sizeof w);
  w.size = sizeof w;
  REQUIRE(pl_stage_work(pl_registry_find(r, "transcribe", NULL),
                        "{\"timeout_s\": 10, \"connect_timeout_s\": 1, \"retries\": 2}", 300, 0,
                        &w) == 0);
  CHECK_NEAR(w.wait_s, 33.0, 1e-9);
  CHECK(w.cpu_s < 1.0);
  pl_registry_destroy(r);
}

static void test_monotone(void) {
  /* pitch: more input, a smaller hop, a larger frame, a higher rate, pYIN */
  double base = stg_pitch_work_s(1, 160, 1024, 16000, 300);
  CHECK(stg_pitch_work_s(1, 160, 1024, 16000, 600) > base);
  CHECK(stg_pitch_work_s(1, 80, 1024, 16000, 300) > base);
  CHECK(stg_pitch_work_s(1, 160, 4096, 16000, 300) > base);
  CHECK(stg_pitch_work_s(1, 160, 1024, 48000, 300) > base);
  CHECK(stg_pitch_work_s(0, 160, 1024, 16000, 300) < base);
  for (int hop = 1; hop < 65536; hop *= 2)
    CHECK_MSG(stg_pitch_work_s(1, hop, 1024, 16000, 300) >
                  stg_pitch_work_s(1, hop * 2, 1024, 16000, 300),
              "pitch: hop %d estimates no more than hop %d", hop, hop * 2);
  for (int f = 64; f < 65536; f *= 2)
    CHECK_MSG(stg_pitch_work_s(1, 1, f, 16000, 300) < stg_pitch_work_s(1, 1, f * 2, 16000, 300),
              "pitch: frame %d estimates no less than frame %d", f, f * 2);
  /* separate: n_fft, max_lag (until it spans the input), a smaller hop and
   * pool; input */
  stg_sep_options o;
  stg_sep_options_default(&o);
  double s0 = stg_separate_work_s(&o, 300);
  CHECK(stg_separate_work_s(&o, 600) > s0);
  stg_sep_options t = o;
  t.n_fft = 4096;
  CHECK(stg_separate_work_s(&t, 300) > s0);
  t = o;
  t.hop = 64;
  CHECK(stg_separate_work_s(&t, 300) > s0);
  t = o;
  t.pool = 1;
  CHECK(stg_separate_work_s(&t, 300) > s0);
  t = o;
  t.max_lag_s = 100;
  CHECK(stg_separate_work_s(&t, 300) > s0);
  double prev = 0;
  for (double lag = 1; lag <= 600; lag *= 2) {
    t.max_lag_s = lag;
    double w = stg_separate_work_s(&t, 300);
    CHECK_MSG(w >= prev, "separate: max_lag %g estimates less than half of it", lag);
    prev = w;
  }
  /* decode: the output rate (resampling), the input's length up to max_seconds */
  CHECK(stg_decode_work_s(300, 16000, 48000, 900) > stg_decode_work_s(300, 16000, 16000, 900));
  CHECK(stg_decode_work_s(300, 16000, 768000, 900) > stg_decode_work_s(300, 16000, 48000, 900));
  CHECK(stg_decode_work_s(600, 16000, 16000, 900) > stg_decode_work_s(300, 16000, 16000, 900));
  CHECK_NEAR(stg_decode_work_s(3000, 16000, 16000, 900), stg_decode_work_s(900, 16000, 16000, 900),
             1e-12);
  /* synthetic: run_ms and the memory it touches */
  CHECK_NEAR(stg_synthetic_work_s(2000, 0, 1), 2.0, 1e-12);
  CHECK(stg_synthetic_work_s(0, 1024, 1) > stg_synthetic_work_s(0, 64, 1));
  CHECK(stg_synthetic_work_s(0, 1024, 0) < stg_synthetic_work_s(0, 1024, 1));
}

static void test_old_struct_and_sum(void) {
  const char *pdir = getenv("EBB_TEST_PLUGIN_DIR");
  REQUIRE(pdir);
  char p[1024];
  snprintf(p, sizeof p, "%s/old_size/old_size.so", pdir);
  pl_registry *r = NULL;
  REQUIRE(pl_registry_create(&r) == 0);
  REQUIRE(pl_registry_load_plugin(r, p) == 0);
  const ebb_stage *st = pl_registry_find(r, "echo", NULL);
  REQUIRE(st);
  CHECK(!EBB_STAGE_HAS(st, work));
  ebb_work w = {.size = sizeof w};
  CHECK_EQ_INT(pl_stage_work(st, NULL, 300, 0, &w), EBB_EUNSUPPORTED);
  /* a pipeline of decode, pitch (costly) and the old stage: the sum of the
   * two that estimate, pitch named, the old stage counted unknown */
  pl_stage_def sd[3] = {{.stage = "decode", .name = "decode", .options = json_object()},
                        {.stage = "pitch",
                         .name = "p",
                         .options = json_pack("{s:i,s:i}", "hop", 1, "frame", 65536)},
                        {.stage = "echo", .name = "echo", .options = json_object()}};
  pl_def d = {.name = "t", .stages = sd, .nstages = 3};
  pl_job_work jw;
  REQUIRE(pl_work(r, &d, 300, 16000, &jw) == 0);
  CHECK_EQ_INT((int)jw.unknown, 1);
  CHECK_EQ_STR(jw.top_stage, "p");
  CHECK_EQ_STR(jw.top_drivers, "hop 1, frame 65536");
  CHECK(jw.cpu_s > jw.top_cpu_s && jw.top_cpu_s > 1000);
  for (int i = 0; i < 3; i++)
    json_decref(sd[i].options);
  pl_registry_destroy(r);
}

int main(void) {
  RUN(test_every_builtin_estimates);
  RUN(test_monotone);
  RUN(test_old_struct_and_sum);
  return TEST_END();
}
