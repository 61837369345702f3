/* Simulated time (FAKEGPU_KERNEL_US): a kernel takes that long on its
 * stream, behind the work already there; stream and event queries answer
 * NOT_READY (600) until it has ended, synchronize waits for it, an event
 * completes when the work before it does, cuStreamWaitEvent orders one
 * stream's timeline after another's, and the legacy stream waits for the
 * blocking streams (not for a non-blocking one). The ordering is read from
 * the events' times, which the fake sets from the simulated timelines, so it
 * does not depend on how busy the machine is. Off (the default): everything
 * is complete at the call. */
#include <time.h>

#include "fakegpu/fg_test.h"

#define K_US 400000 /* one kernel: 0.4 s */
#define K_MS (K_US / 1000.0f)

typedef CUresult (*query_fn)(void *);
typedef CUresult (*wait_fn)(CUstream, CUevent, unsigned);
static query_fn stream_query, event_query;
static wait_fn stream_wait_event;
static CUfunction g_nop;

__attribute__((visibility("default"))) void fakegpu_twin_simnop(const dev_launch_dims *d,
                                                                void **params) {
  (void)d, (void)params;
}

static void launch(CUstream s) {
  REQUIRE(cu_cuLaunchKernel(g_nop, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL) == CUDA_SUCCESS);
}

static CUevent record(CUstream s) {
  CUevent e;
  REQUIRE(cu_cuEventCreate(&e, 0) == CUDA_SUCCESS && cu_cuEventRecord(e, s) == CUDA_SUCCESS);
  return e;
}

static float since(CUevent a, CUevent b) {
  float ms = -1;
  CHECK_EQ_INT(cu_cuEventElapsedTime(&ms, a, b), CUDA_SUCCESS);
  return ms;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void setup(void) {
  *(void **)&stream_query = dlsym(fgt_cuda, "cuStreamQuery");
  *(void **)&event_query = dlsym(fgt_cuda, "cuEventQuery");
  *(void **)&stream_wait_event = dlsym(fgt_cuda, "cuStreamWaitEvent");
  REQUIRE(stream_query && event_query && stream_wait_event);
  fgt_init_ctx();
  CUmodule m;
  REQUIRE(cu_cuModuleLoadData(&m, "") == CUDA_SUCCESS);
  REQUIRE(cu_cuModuleGetFunction(&g_nop, m, "simnop") == CUDA_SUCCESS);
}

/* In a child with FAKEGPU_KERNEL_US=K_US. */
static int child_simulated(void) {
  setup();
  CUstream a, b, nb;
  REQUIRE(cu_cuStreamCreate(&a, 0) == CUDA_SUCCESS && cu_cuStreamCreate(&b, 0) == CUDA_SUCCESS &&
          cu_cuStreamCreate(&nb, 1) == CUDA_SUCCESS); /* nb: CU_STREAM_NON_BLOCKING */
  CUevent start = record(a);
  double t0 = now_ms();
  launch(a);
  CUevent ea = record(a);
  CHECK_EQ_INT(stream_query(a), CUDA_ERROR_NOT_READY);
  CHECK_EQ_INT(event_query(ea), CUDA_ERROR_NOT_READY);
  CHECK_EQ_INT(stream_query(b), CUDA_SUCCESS); /* nothing on b yet */
  /* b waits for a's event, then runs its own kernel: ends a kernel later. */
  CHECK_EQ_INT(stream_wait_event(b, ea, 0), CUDA_SUCCESS);
  launch(b);
  CUevent eb = record(b);
  launch(nb); /* a non-blocking stream waits for nothing */
  CUevent enb = record(nb);
  CHECK_EQ_INT(cu_cuStreamSynchronize(a), CUDA_SUCCESS);
  CHECK_MSG(now_ms() - t0 >= K_MS - 1,
            "cuStreamSynchronize returned %.0f ms after a %.0f ms kernel", now_ms() - t0, K_MS);
  CHECK_EQ_INT(stream_query(a), CUDA_SUCCESS);
  CHECK_EQ_INT(event_query(ea), CUDA_SUCCESS);
  CHECK_MSG(since(start, ea) >= K_MS - 1, "a's kernel ended %.1f ms after it began",
            since(start, ea));
  CHECK_MSG(since(start, eb) >= 2 * K_MS - 1,
            "b's kernel, queued after a's event, ended %.1f ms "
            "after the start; want two kernels' time",
            since(start, eb));
  CHECK_MSG(since(start, enb) < 2 * K_MS - 1,
            "the non-blocking stream's kernel ended %.1f ms "
            "after the start: it waited for other streams",
            since(start, enb));
  /* The legacy stream waits for the blocking streams' work. */
  launch(a);
  CUevent ea2 = record(a);
  launch(NULL);
  CUevent el = record(NULL);
  CHECK_MSG(since(ea2, el) >= K_MS - 1,
            "the legacy stream's kernel ended %.1f ms after a's: it "
            "did not wait for a",
            since(ea2, el));
  CHECK_EQ_INT(cu_cuEventSynchronize(el), CUDA_SUCCESS);
  CHECK_EQ_INT(event_query(el), CUDA_SUCCESS);
  launch(b);
  CHECK_EQ_INT(cu_cuCtxSynchronize(), CUDA_SUCCESS);
  CHECK_EQ_INT(stream_query(b), CUDA_SUCCESS);
  return TEST_END();
}

/* The default: complete at the call. */
static void test_off_by_default(void) {
  CUstream a;
  REQUIRE(cu_cuStreamCreate(&a, 0) == CUDA_SUCCESS);
  launch(a);
  CUevent e = record(a);
  CHECK_EQ_INT(stream_query(a), CUDA_SUCCESS);
  CHECK_EQ_INT(event_query(e), CUDA_SUCCESS);
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  if (argc > 1 && !strcmp(argv[1], "simulated"))
    return child_simulated();
  if (argc > 1 && !strcmp(argv[1], "bad"))
    return cu_cuInit(0) == CUDA_ERROR_INVALID_VALUE ? 0 : 1;
  setup();
  RUN(test_off_by_default);
  char state[4200], us[64];
  snprintf(state, sizeof state, "FAKEGPU_STATE=%s.child", getenv("FAKEGPU_STATE"));
  snprintf(us, sizeof us, "FAKEGPU_KERNEL_US=%d", K_US);
  CHECK_EQ_INT(fgt_run_self("simulated", (const char *[]){us, state, NULL}), 0);
  CHECK_EQ_INT(fgt_run_self("bad", (const char *[]){"FAKEGPU_KERNEL_US=-5", state, NULL}), 0);
  unlink(state + strlen("FAKEGPU_STATE="));
  return TEST_END();
}
