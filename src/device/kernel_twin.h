/* The kernel-twin contract: how a GPU kernel runs without a GPU.
 *
 * Every kernel of ebb (the .cu files in src/stages/kernels) has a host twin: a C
 * function with the same parameters and the same float32 arithmetic, that
 * loops over the grid's blocks and threads itself. The twin of kernel NAME
 * is the exported symbol EBB_TWIN_PREFIX "NAME", of type dev_kernel_twin_fn,
 * and is called once per launch with the grid, the block and the kernel's
 * parameters. It is a production contract, not a test hook:
 *  - the CPU device (cpu_backend.c) runs kernels through their twins;
 *  - the fake driver (tests/fakegpu) answers cuModuleGetFunction(NAME) with
 *    the twin, where device pointers are host addresses.
 * Both look twins up with dlsym(RTLD_DEFAULT), so a program must export
 * them: cmake/ebb.dynamic-list exports exactly the symbols with this prefix.
 * (The prefix keeps the name it was born with in the fake driver; every
 * twin, ebb's and the tests', is exported under it.)
 *
 * Needs no CUDA header: this is all the device room and the twins share. */
#ifndef EBB_DEVICE_KERNEL_TWIN_H
#define EBB_DEVICE_KERNEL_TWIN_H

typedef struct dev_launch_dims {
  unsigned int grid[3];
  unsigned int block[3];
  unsigned int shared_bytes;
} dev_launch_dims;

typedef void (*dev_kernel_twin_fn)(const dev_launch_dims *dims, void **params);

#define EBB_TWIN_PREFIX "fakegpu_twin_"

#endif
