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

// CuPy's CIndexer<1>: the host writes size and shape and leaves index[] as
// its heap had it (the kernel writes its own copy before reading): judged at
// FAKEGPU_CHECK_ARGS=2 only.
struct indexer {
  long long size;
  long long shape[1];
  long long index[1];
};

extern "C" __global__ void args_index(indexer ix, float *out) {
  ix.index[0] = threadIdx.x;
  if (ix.index[0] < ix.size)
    out[ix.index[0] % ix.shape[0]] = 1.0f;
}

// An array of data pointers by value (PyTorch's Array<char *, 3>): every
// element judged.
struct ptrs {
  float *p[3];
};

extern "C" __global__ void args_ptrs(ptrs a) { a.p[0][threadIdx.x] = a.p[1][threadIdx.x] + a.p[2][threadIdx.x]; }
