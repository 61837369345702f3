/* Stream memory operations on the fake (fakecuda_memops.c): 32- and 64-bit
 * writes land in device and page-locked host memory; waits return once
 * their condition (GEQ, EQ, AND, NOR) holds, whether it held at the call,
 * is made true by another thread, or by a host function queued on the
 * stream before the wait; a wait that never holds answers 702 after
 * FAKEGPU_WAIT_VALUE_MS (a child with 200 ms) instead of hanging; a batch
 * checks every operation before doing any; bad addresses, alignment, flags
 * and counts answer 1; a capturing stream answers 900. */
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "fakegpu/fg_test.h"

#define PROC(type, name, version) ((type)fgt_proc(name, version))
#define ERR_LAUNCH_TIMEOUT 702
#define ERR_CAPTURE_UNSUPPORTED 900

typedef CUresult (*w32_fn)(CUstream, CUdeviceptr, uint32_t, unsigned);
typedef CUresult (*w64_fn)(CUstream, CUdeviceptr, uint64_t, unsigned);
static w32_fn write32, wait32;
static w64_fn write64, wait64;
static CUresult (*batch)(CUstream, unsigned, void *, unsigned);
static CUresult (*host_func)(CUstream, void (*)(void *), void *);

typedef union {
  int operation;
  struct {
    int operation;
    CUdeviceptr address;
    uint64_t value;
    unsigned flags;
    CUdeviceptr alias;
  } v;
  uint64_t pad[6];
} memop_t; /* CUstreamBatchMemOpParams */

static void load(void) {
  write32 = PROC(w32_fn, "cuStreamWriteValue32", 11070);
  wait32 = PROC(w32_fn, "cuStreamWaitValue32", 11070);
  write64 = PROC(w64_fn, "cuStreamWriteValue64", 11070);
  wait64 = PROC(w64_fn, "cuStreamWaitValue64", 11070);
  *(void **)&batch = fgt_proc("cuStreamBatchMemOp", 11070);
  *(void **)&host_func = fgt_proc("cuLaunchHostFunc", 10000);
  REQUIRE(write32 && wait32 && write64 && wait64 && batch && host_func);
}

static uint32_t word32(CUdeviceptr d) {
  uint32_t v = 0;
  CHECK_EQ_INT(cu_cuMemcpyDtoH(&v, d, 4), CUDA_SUCCESS);
  return v;
}

static void test_writes(void) {
  CUstream s;
  CUdeviceptr d;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS && cu_cuMemAlloc(&d, 64) == CUDA_SUCCESS);
  CHECK_EQ_INT(write32(s, d, 0xabcd1234u, 0), CUDA_SUCCESS);
  CHECK_MSG(word32(d) == 0xabcd1234u, "write32 left 0x%x", word32(d));
  CHECK_EQ_INT(write64(s, d + 8, 0x1122334455667788ull, 1 /* NO_MEMORY_BARRIER */), CUDA_SUCCESS);
  uint64_t v = 0;
  CHECK_EQ_INT(cu_cuMemcpyDtoH(&v, d + 8, 8), CUDA_SUCCESS);
  CHECK_MSG(v == 0x1122334455667788ull, "write64 left 0x%llx", (unsigned long long)v);
  CHECK_EQ_INT(write32(NULL, d + 4, 7, 0), CUDA_SUCCESS); /* the legacy stream */
  CHECK_EQ_INT(word32(d + 4), 7);
  /* page-locked host memory */
  void *host = NULL;
  REQUIRE(cu_cuMemHostAlloc(&host, 64, 0) == CUDA_SUCCESS);
  CHECK_EQ_INT(write32(s, (CUdeviceptr)(uintptr_t)host, 99, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(*(volatile uint32_t *)host, 99);
  /* refusals: nothing written */
  uint32_t stack = 5;
  CHECK_EQ_INT(write32(s, d + 2, 1, 0), CUDA_ERROR_INVALID_VALUE);  /* misaligned */
  CHECK_EQ_INT(write64(s, d + 4, 1, 0), CUDA_ERROR_INVALID_VALUE);  /* misaligned for 64 */
  CHECK_EQ_INT(write32(s, d + 64, 1, 0), CUDA_ERROR_INVALID_VALUE); /* past the allocation */
  CHECK_EQ_INT(write32(s, (CUdeviceptr)(uintptr_t)&stack, 1, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(write32(s, d, 1, 2), CUDA_ERROR_INVALID_VALUE); /* unknown flag */
  CHECK_EQ_INT(write32((CUstream)&stack, d, 1, 0), CUDA_ERROR_INVALID_HANDLE);
  CHECK_MSG(word32(d) == 0xabcd1234u && stack == 5, "a refused write wrote");
  CHECK_EQ_INT(cu_cuMemFreeHost(host), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuMemFree(d), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
}

/* Conditions that hold at the call return at once. */
static void test_conditions(void) {
  CUstream s;
  CUdeviceptr d;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS && cu_cuMemAlloc(&d, 64) == CUDA_SUCCESS);
  CHECK_EQ_INT(write32(s, d, 10, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(wait32(s, d, 10, 0 /* GEQ */), CUDA_SUCCESS);
  CHECK_EQ_INT(wait32(s, d, 3, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(wait32(s, d, 0xfffffff0u, 0), CUDA_SUCCESS); /* cyclic: 10 - (-16) >= 0 */
  CHECK_EQ_INT(wait32(s, d, 10, 1 /* EQ */), CUDA_SUCCESS);
  CHECK_EQ_INT(wait32(s, d, 2, 2 /* AND */), CUDA_SUCCESS);
  CHECK_EQ_INT(wait32(s, d, 5, 3 /* NOR: ~(10 | 5) != 0 */), CUDA_SUCCESS);
  CHECK_EQ_INT(write64(s, d + 8, 1ull << 40, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(wait64(s, d + 8, 1ull << 40, 1), CUDA_SUCCESS);
  CHECK_EQ_INT(wait64(s, d + 8, 1ull << 39, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(wait32(s, d, 1, 4), CUDA_ERROR_INVALID_VALUE); /* unknown flag */
  CHECK_EQ_INT(wait32(s, d + 1, 1, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemFree(d), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
}

typedef struct {
  uint32_t *word;
  uint32_t value;
} setter;

static void *set_later(void *arg) {
  setter *st = arg;
  nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
  __atomic_store_n(st->word, st->value, __ATOMIC_RELEASE);
  return NULL;
}

static void set_in_callback(void *arg) {
  setter *st = arg;
  nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
  __atomic_store_n(st->word, st->value, __ATOMIC_RELEASE);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* A wait that does not hold at the call returns when another thread, or a
 * host function queued before it on the stream, makes it hold. */
static void test_wait_released(void) {
  CUstream s;
  void *host = NULL;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemHostAlloc(&host, 64, 0) == CUDA_SUCCESS);
  uint32_t *w = host;
  CUdeviceptr a = (CUdeviceptr)(uintptr_t)host;
  w[0] = w[1] = 0;
  setter st = {&w[0], 3};
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, set_later, &st) == 0);
  double t0 = now_ms();
  CHECK_EQ_INT(wait32(s, a, 3, 1 /* EQ */), CUDA_SUCCESS);
  double waited = now_ms() - t0;
  pthread_join(t, NULL);
  CHECK_MSG(waited >= 50, "the wait returned after %.0f ms, before the other thread wrote", waited);
  setter cb = {&w[1], 8};
  CHECK_EQ_INT(host_func(s, set_in_callback, &cb), CUDA_SUCCESS);
  CHECK_EQ_INT(wait32(s, a + 4, 8, 0 /* GEQ */), CUDA_SUCCESS);
  CHECK_EQ_INT(w[1], 8);
  CHECK_EQ_INT(cu_cuMemFreeHost(host), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
}

static void test_batch(void) {
  CUstream s;
  CUdeviceptr d;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS && cu_cuMemAlloc(&d, 64) == CUDA_SUCCESS);
  REQUIRE(cu_cuMemsetD8(d, 0, 64) == CUDA_SUCCESS);
  memop_t ops[4];
  memset(ops, 0, sizeof ops);
  ops[0].v.operation = 2; /* WRITE_VALUE_32 */
  ops[0].v.address = d;
  ops[0].v.value = 41;
  ops[1].v.operation = 5; /* WRITE_VALUE_64 */
  ops[1].v.address = d + 8;
  ops[1].v.value = 1ull << 33;
  ops[2].v.operation = 1; /* WAIT_VALUE_32, EQ */
  ops[2].v.address = d;
  ops[2].v.value = 41;
  ops[2].v.flags = 1;
  ops[3].operation = 6; /* BARRIER */
  CHECK_EQ_INT(batch(s, 4, ops, 0), CUDA_SUCCESS);
  uint64_t v = 0;
  CHECK_EQ_INT(cu_cuMemcpyDtoH(&v, d + 8, 8), CUDA_SUCCESS);
  CHECK_MSG(word32(d) == 41 && v == 1ull << 33, "batch writes: 0x%x, 0x%llx", word32(d),
            (unsigned long long)v);
  /* one bad operation: none is done */
  ops[0].v.value = 77;
  ops[3].v.operation = 9;
  CHECK_EQ_INT(batch(s, 4, ops, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_MSG(word32(d) == 41, "a refused batch wrote 0x%x", word32(d));
  CHECK_EQ_INT(batch(s, 0, ops, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(batch(s, 257, ops, 0), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(batch(s, 1, ops, 1), CUDA_ERROR_INVALID_VALUE);
  CHECK_EQ_INT(cu_cuMemFree(d), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
}

static void test_capture_refused(void) {
  CUresult (*begin)(CUstream, int) =
      PROC(CUresult(*)(CUstream, int), "cuStreamBeginCapture", 10010);
  CUresult (*end)(CUstream, void **) =
      PROC(CUresult(*)(CUstream, void **), "cuStreamEndCapture", 10000);
  CUstream s;
  CUdeviceptr d;
  REQUIRE(cu_cuStreamCreate(&s, 1) == CUDA_SUCCESS && cu_cuMemAlloc(&d, 64) == CUDA_SUCCESS);
  CHECK_EQ_INT(begin(s, 0), CUDA_SUCCESS);
  CHECK_EQ_INT(write32(s, d, 1, 0), ERR_CAPTURE_UNSUPPORTED);
  void *g = NULL;
  CHECK_EQ_INT(end(s, &g), 901); /* invalidated */
  CHECK_EQ_INT(cu_cuMemFree(d), CUDA_SUCCESS);
  CHECK_EQ_INT(cu_cuStreamDestroy(s), CUDA_SUCCESS);
}

/* A child with FAKEGPU_WAIT_VALUE_MS=200: a wait that never holds answers
 * 702 after about that long. */
static int child_timeout(void) {
  load();
  fgt_init_ctx();
  CUdeviceptr d;
  if (cu_cuMemAlloc(&d, 64) || cu_cuMemsetD8(d, 0, 64))
    return 10;
  double t0 = now_ms();
  CUresult rc = wait32(NULL, d, 1, 1 /* EQ */);
  double took = now_ms() - t0;
  if (rc != (CUresult)ERR_LAUNCH_TIMEOUT)
    return 11;
  if (took < 150 || took > 5000)
    return 12;
  return cu_cuMemFree(d) == CUDA_SUCCESS ? 0 : 13;
}

static void test_wait_times_out(void) {
  const char *env[] = {"FAKEGPU_WAIT_VALUE_MS=200", NULL};
  int rc = fgt_run_self("timeout", env);
  CHECK_MSG(rc == 0, "a wait that never holds: child exit %d (11: not 702, 12: not after ~200 ms)",
            rc);
}

int main(int argc, char **argv) {
  fgt_load_cuda();
  if (argc > 1)
    return !strcmp(argv[1], "timeout") ? child_timeout() : 99;
  load();
  fgt_init_ctx();
  RUN(test_writes);
  RUN(test_conditions);
  RUN(test_wait_released);
  RUN(test_batch);
  RUN(test_capture_refused);
  RUN(test_wait_times_out);
  return TEST_END();
}
