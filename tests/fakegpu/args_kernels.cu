// Kernels whose parameter layouts the fake reads from their images
// (tests/unit/fakegpu_kernel_args.c): pointers, an int, a structure by value
// holding a pointer, a char, a double pointer; a kernel with none; one that
// takes a large structure.
// Built by nvcc into a cubin, a compressed fatbin and a PTX-only fatbin
// (tests/unit/fakegpu.cmake).
struct holder {
  int a;
  float *p;
  double d;
};

extern "C" __global__ void args_add(float *x, const float *y, int n, holder s, char c, double *z) {
  int i = threadIdx.x;
  if (i < n)
    x[i] += y[i] + *s.p + c + z[0] + s.d;
}

extern "C" __global__ void args_none() {}

// A structure of 128 bytes by value: judged only at FAKEGPU_CHECK_ARGS=2.
struct big {
  float *p;
  long long rest[15];
};

extern "C" __global__ void args_big(big b) { b.p[threadIdx.x] = (float)b.rest[0]; }
