// A program built with the CUDA toolkit's nvcc and libcudart, run on the fake
// driver by tests/integration/fakegpu_cudart.sh: it checks what the runtime
// does on it and prints figures the script compares with fakegpu-smi.
//   cudart_client EXPECTED_DEVICES
// Prints "pid N", "free_mib N" (cudaMemGetInfo, after its own allocations
// are gone), then "ok"; any failed check prints "FAIL: ..." and exits 1.
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(call)                                                              \
  do {                                                                           \
    cudaError_t e_ = (call);                                                     \
    if (e_ != cudaSuccess) {                                                     \
      printf("FAIL: %s: %d %s (line %d)\n", #call, (int)e_, cudaGetErrorString(e_), \
             __LINE__);                                                          \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)
#define EXPECT(cond, ...)                                                        \
  do {                                                                           \
    if (!(cond)) {                                                               \
      printf("FAIL: " __VA_ARGS__);                                              \
      printf("\n");                                                              \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

// No host twin exists for it: the fake accepts the launch and does nothing.
__global__ void add_one(unsigned char *p, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n)
    p[i] += 1;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)(i * 131u + seed);
}

static void round_trip(size_t n) {
  unsigned char *h = (unsigned char *)malloc(n), *back = (unsigned char *)malloc(n);
  fill(h, n, 7);
  void *d = NULL, *d2 = NULL;
  CHECK(cudaMalloc(&d, n));
  CHECK(cudaMalloc(&d2, n));
  CHECK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(d2, d, n, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy(back, d2, n, cudaMemcpyDeviceToHost));
  EXPECT(!memcmp(h, back, n), "cudaMemcpy H->D->D->H changed the bytes");
  CHECK(cudaMemset(d2, 0x5a, n));
  CHECK(cudaMemcpy(back, d2, n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++)
    EXPECT(back[i] == 0x5a, "cudaMemset: byte %zu is 0x%02x, not 0x5a", i, back[i]);
  CHECK(cudaFree(d));
  CHECK(cudaFree(d2));
  free(h);
  free(back);
}

static void pinned_async_streams_events(size_t n) {
  unsigned char *h = NULL, *back = NULL;
  CHECK(cudaMallocHost((void **)&h, n));
  CHECK(cudaHostAlloc((void **)&back, n, cudaHostAllocDefault));
  fill(h, n, 3);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int least = 0, greatest = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT(greatest < least, "stream priorities: greatest %d, least %d", greatest, least);
  cudaStream_t hi;
  CHECK(cudaStreamCreateWithPriority(&hi, cudaStreamDefault, greatest));
  int prio = 1;
  CHECK(cudaStreamGetPriority(hi, &prio));
  EXPECT(prio == greatest, "cudaStreamGetPriority: %d, not %d", prio, greatest);
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusActive;
  CHECK(cudaStreamIsCapturing(s, &cap));
  EXPECT(cap == cudaStreamCaptureStatusNone, "a fresh stream is capturing");
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  void *d = NULL;
  // Stream-ordered allocation from the device's default pool.
  CHECK(cudaMallocAsync(&d, n, s));
  CHECK(cudaEventRecord(a, s));
  CHECK(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s));
  CHECK(cudaMemsetAsync(d, 0x11, 16, s));
  CHECK(cudaMemcpyAsync(back, d, n, cudaMemcpyDeviceToHost, s));
  CHECK(cudaEventRecord(b, s));
  CHECK(cudaStreamWaitEvent(hi, b, 0));
  CHECK(cudaFreeAsync(d, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaEventSynchronize(b));
  EXPECT(cudaEventQuery(b) == cudaSuccess, "a synchronised event is not complete");
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  EXPECT(ms >= 0, "cudaEventElapsedTime: %f ms", ms);
  for (size_t i = 0; i < n; i++)
    EXPECT(back[i] == (i < 16 ? 0x11 : (unsigned char)(i * 131u + 3)),
           "cudaMemcpyAsync/cudaMemsetAsync: byte %zu is 0x%02x", i, back[i]);
  cudaMemPool_t pool;
  CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  unsigned long long used = 1;
  CHECK(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used));
  EXPECT(used == 0, "the default pool still uses %llu bytes after cudaFreeAsync", used);
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaStreamDestroy(hi));
  CHECK(cudaFreeHost(h));
  CHECK(cudaFreeHost(back));
}

static void kernel_launch(void) {
  unsigned char *d = NULL;
  CHECK(cudaMalloc((void **)&d, 256));
  CHECK(cudaMemset(d, 1, 256));
  add_one<<<2, 128>>>(d, 256);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  unsigned char back[256];
  CHECK(cudaMemcpy(back, d, 256, cudaMemcpyDeviceToHost));
  // The fake does no arithmetic: the bytes are those written before.
  EXPECT(back[0] == 1 && back[255] == 1, "the no-op kernel changed memory");
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, add_one));
  EXPECT(attr.maxThreadsPerBlock == 1024, "maxThreadsPerBlock %d", attr.maxThreadsPerBlock);
  CHECK(cudaFree(d));
}

// Managed memory twice the device's size: allocated, every byte written and
// read back (the fake keeps it in host memory beyond what fits).
static void managed_oversubscribed(size_t total) {
  size_t n = 2 * total;
  unsigned char *m = NULL;
  CHECK(cudaMallocManaged((void **)&m, n, cudaMemAttachGlobal));
  const size_t page = 4096;
  for (size_t i = 0; i < n; i += page)
    memset(m + i, (int)((i / page) % 251 + 1), page < n - i ? page : n - i);
  for (size_t i = 0; i < n; i++)
    if (m[i] != (unsigned char)((i / page) % 251 + 1))
      EXPECT(0, "managed byte %zu of %zu is 0x%02x", i, n, m[i]);
  CHECK(cudaFree(m));
}

int main(int argc, char **argv) {
  int expected = argc > 1 ? atoi(argv[1]) : 1;
  int count = -1;
  CHECK(cudaGetDeviceCount(&count));
  EXPECT(count == expected, "cudaGetDeviceCount: %d, FAKEGPU_DEVICES says %d", count, expected);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  EXPECT(strstr(prop.name, "fakegpu") != NULL, "device 0 is '%s'", prop.name);
  int drv = 0, rt = 0;
  CHECK(cudaDriverGetVersion(&drv));
  CHECK(cudaRuntimeGetVersion(&rt));
  printf("driver %d runtime %d device '%s' %zu MiB\n", drv, rt, prop.name,
         prop.totalGlobalMem >> 20);
  CHECK(cudaSetDevice(count - 1));
  CHECK(cudaSetDevice(0));
  round_trip((size_t)3 << 20);
  pinned_async_streams_events((size_t)1 << 20);
  kernel_launch();
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  EXPECT(total_b == prop.totalGlobalMem, "cudaMemGetInfo total %zu", total_b);
  managed_oversubscribed(total_b);
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  printf("pid %d\n", (int)getpid());
  printf("free_mib %zu\n", free_b >> 20);
  fflush(stdout);
  // Hold the context while the script reads fakegpu-smi, until stdin closes.
  char line[16];
  if (argc > 2 && !strcmp(argv[2], "--wait"))
    while (fgets(line, sizeof line, stdin))
      ;
  printf("ok\n");
  return 0;
}
