// The CUDA math libraries start on the fake (tests/integration/fakegpu_cudalibs.sh).
// Each library carries its own copy of the runtime and its own fatbins; until
// the fake answered cudaFree(0) (cuMemFree_v2(0) -> 0), device variables
// (cuLibraryGetGlobal), thread block cluster occupancy and the names cuBLASLt
// looks up with dlsym, curandCreateGenerator answered 203
// (INITIALIZATION_FAILED) and cublasCreate 1, then 14.
//
// Checks, in order: cudaFree(NULL); this program's own __device__ and
// __constant__ variables (initial bytes, size, copies to and from the symbol,
// its address, which cudaFree refuses); cuRAND generator create / seed /
// destroy; cuBLAS create, a vector copied in and out, destroy; cuSOLVER and
// cuSPARSE handles. Prints "FAIL ..." per failed check and "ok" at the end
// when all passed; exits 1 otherwise. No kernel is launched (the fake does no
// arithmetic), so every answer checked here is exact.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <curand.h>
#include <cusolverDn.h>
#include <cusparse.h>
#include <stdio.h>
#include <string.h>

__device__ int dvar[64] = {7, 8, 9};
__constant__ float cvar[16];

static int failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      printf("FAIL line %d: ", __LINE__);                                      \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
      failures++;                                                              \
    }                                                                          \
  } while (0)

static void check_symbols(void) {
  int host[64];
  memset(host, 0xff, sizeof host);
  cudaError_t e = cudaMemcpyFromSymbol(host, dvar, sizeof host);
  CHECK(e == cudaSuccess, "cudaMemcpyFromSymbol(dvar) = %d", (int)e);
  CHECK(host[0] == 7 && host[1] == 8 && host[2] == 9 && host[3] == 0 && host[63] == 0,
        "dvar's initial values are %d %d %d %d .. %d, not 7 8 9 0 .. 0", host[0], host[1],
        host[2], host[3], host[63]);
  size_t n = 0;
  e = cudaGetSymbolSize(&n, cvar);
  CHECK(e == cudaSuccess && n == sizeof(float) * 16, "cudaGetSymbolSize(cvar) = %d, %zu bytes",
        (int)e, n);
  float in[16], out[16];
  for (int i = 0; i < 16; i++)
    in[i] = (float)i * 1.5f;
  e = cudaMemcpyToSymbol(cvar, in, sizeof in);
  CHECK(e == cudaSuccess, "cudaMemcpyToSymbol(cvar) = %d", (int)e);
  memset(out, 0, sizeof out);
  e = cudaMemcpyFromSymbol(out, cvar, sizeof out);
  CHECK(e == cudaSuccess && !memcmp(in, out, sizeof in),
        "cudaMemcpyFromSymbol(cvar) = %d, bytes %s", (int)e,
        memcmp(in, out, sizeof in) ? "differ" : "equal");
  e = cudaMemcpyToSymbol(cvar, in, sizeof in, sizeof(float));
  CHECK(e != cudaSuccess, "a copy past the end of cvar was accepted");
  cudaGetLastError();
  void *p = NULL;
  e = cudaGetSymbolAddress(&p, dvar);
  CHECK(e == cudaSuccess && p, "cudaGetSymbolAddress(dvar) = %d, %p", (int)e, p);
  if (p) {
    int first = 0;
    e = cudaMemcpy(&first, p, sizeof first, cudaMemcpyDeviceToHost);
    CHECK(e == cudaSuccess && first == 7, "dvar read through its address: %d, %d", (int)e,
          first);
    e = cudaFree(p);
    CHECK(e != cudaSuccess, "cudaFree of a variable's address succeeded");
    cudaGetLastError();
  }
}

static void check_curand(void) {
  curandGenerator_t g;
  curandStatus_t s = curandCreateGenerator(&g, CURAND_RNG_PSEUDO_DEFAULT);
  CHECK(s == CURAND_STATUS_SUCCESS, "curandCreateGenerator = %d", (int)s);
  if (s != CURAND_STATUS_SUCCESS)
    return;
  s = curandSetPseudoRandomGeneratorSeed(g, 1234);
  CHECK(s == CURAND_STATUS_SUCCESS, "curandSetPseudoRandomGeneratorSeed = %d", (int)s);
  s = curandDestroyGenerator(g);
  CHECK(s == CURAND_STATUS_SUCCESS, "curandDestroyGenerator = %d", (int)s);
}

static void check_cublas(void) {
  cublasHandle_t h;
  cublasStatus_t s = cublasCreate(&h);
  CHECK(s == CUBLAS_STATUS_SUCCESS, "cublasCreate = %d", (int)s);
  if (s != CUBLAS_STATUS_SUCCESS)
    return;
  double in[32], out[32];
  for (int i = 0; i < 32; i++)
    in[i] = i * 0.25;
  double *d = NULL;
  cudaError_t e = cudaMalloc((void **)&d, sizeof in);
  CHECK(e == cudaSuccess, "cudaMalloc = %d", (int)e);
  if (e == cudaSuccess) {
    s = cublasSetVector(32, sizeof(double), in, 1, d, 1);
    CHECK(s == CUBLAS_STATUS_SUCCESS, "cublasSetVector = %d", (int)s);
    memset(out, 0, sizeof out);
    s = cublasGetVector(32, sizeof(double), d, 1, out, 1);
    CHECK(s == CUBLAS_STATUS_SUCCESS && !memcmp(in, out, sizeof in),
          "cublasGetVector = %d, bytes %s", (int)s, memcmp(in, out, sizeof in) ? "differ" : "equal");
    cudaFree(d);
  }
  s = cublasDestroy(h);
  CHECK(s == CUBLAS_STATUS_SUCCESS, "cublasDestroy = %d", (int)s);
}

static void check_solver_sparse(void) {
  cusolverDnHandle_t sh;
  cusolverStatus_t ss = cusolverDnCreate(&sh);
  CHECK(ss == CUSOLVER_STATUS_SUCCESS, "cusolverDnCreate = %d", (int)ss);
  if (ss == CUSOLVER_STATUS_SUCCESS) {
    ss = cusolverDnDestroy(sh);
    CHECK(ss == CUSOLVER_STATUS_SUCCESS, "cusolverDnDestroy = %d", (int)ss);
  }
  cusparseHandle_t ph;
  cusparseStatus_t ps = cusparseCreate(&ph);
  CHECK(ps == CUSPARSE_STATUS_SUCCESS, "cusparseCreate = %d", (int)ps);
  if (ps == CUSPARSE_STATUS_SUCCESS) {
    ps = cusparseDestroy(ph);
    CHECK(ps == CUSPARSE_STATUS_SUCCESS, "cusparseDestroy = %d", (int)ps);
  }
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  cudaError_t e = cudaFree(NULL);
  CHECK(e == cudaSuccess, "cudaFree(NULL) = %d", (int)e);
  check_symbols();
  check_curand();
  check_cublas();
  check_solver_sparse();
  e = cudaDeviceReset();
  CHECK(e == cudaSuccess, "cudaDeviceReset = %d", (int)e);
  printf("failures %d\n", failures);
  if (failures)
    return 1;
  printf("ok\n");
  return 0;
}
