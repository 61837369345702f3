/* Several threads using one context at once (as ebb's allocator and stages
 * do): allocations, copies, launches and frees interleave without losing a
 * byte of accounting, and each thread's current context is its own. */
#include <pthread.h>

#include "fakegpu/fg_test.h"

#define THREADS 4
#define ROUNDS 200

static CUcontext g_ctx;
static int g_errors;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

__attribute__((visibility("default"))) void fakegpu_twin_inc(const dev_launch_dims *d,
                                                             void **params) {
  unsigned char *p = (unsigned char *)(uintptr_t)(*(CUdeviceptr *)params[0]);
  for (unsigned i = 0; i < d->grid[0] * d->block[0]; i++)
    p[i]++;
}

static void *worker(void *arg) {
  int id = (int)(intptr_t)arg, bad = 0;
  bad |= cu_cuCtxSetCurrent(g_ctx) != CUDA_SUCCESS;
  CUmodule m;
  CUfunction f;
  bad |= cu_cuModuleLoadData(&m, "") != CUDA_SUCCESS;
  bad |= cu_cuModuleGetFunction(&f, m, "inc") != CUDA_SUCCESS;
  for (int r = 0; r < ROUNDS && !bad; r++) {
    CUdeviceptr p;
    size_t n = 4096 + (size_t)(r % 7) * 1000;
    unsigned char buf[256];
    if (cu_cuMemAlloc(&p, n) != CUDA_SUCCESS) {
      bad = 1;
      break;
    }
    memset(buf, id + r, sizeof buf);
    bad |= cu_cuMemcpyHtoD(p, buf, sizeof buf) != CUDA_SUCCESS;
    void *params[] = {&p};
    bad |= cu_cuLaunchKernel(f, 2, 1, 1, 128, 1, 1, 0, NULL, params, NULL) != CUDA_SUCCESS;
    bad |= cu_cuMemcpyDtoH(buf, p, sizeof buf) != CUDA_SUCCESS;
    bad |= buf[0] != (unsigned char)(id + r + 1) || buf[255] != (unsigned char)(id + r + 1);
    bad |= cu_cuMemFree(p) != CUDA_SUCCESS;
  }
  bad |= cu_cuModuleUnload(m) != CUDA_SUCCESS;
  pthread_mutex_lock(&g_mu);
  g_errors += bad;
  pthread_mutex_unlock(&g_mu);
  return NULL;
}

static void test_threads_share_a_context(void) {
  unsigned long long base = fgt_used();
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
  /* Meanwhile another process allocates and frees on the same device. */
  fgt_hold h;
  fgt_hold_start(&h);
  HOLD_OK(&h, "init");
  HOLD_OK(&h, "ctx");
  for (int i = 0; i < 20; i++) {
    HOLD_OK(&h, "alloc 10");
    HOLD_OK(&h, "free");
  }
  HOLD_OK(&h, "release");
  fgt_hold_wait(&h);
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  CHECK_EQ_INT(g_errors, 0);
  CHECK_EQ_U64(fgt_used(), base);
}

int main(void) {
  fgt_load_cuda();
  g_ctx = fgt_init_ctx();
  RUN(test_threads_share_a_context);
  return TEST_END();
}
