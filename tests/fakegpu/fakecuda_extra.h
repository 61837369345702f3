/* Driver entry points the fake exports beyond ebb's own table
 * (EBB_CUDA_ENTRY_POINTS): what other driver-API clients need, Numba's CUDA
 * target first (numba/cuda/cudadrv/drvapi.py). Same row format:
 *   X(base_name, versioned_symbol, abi_version, (parameter list))
 * cuGetProcAddress answers from this table too, and the fake's tests load
 * every row by its exact name. Types and values match cuda.h. */
#ifndef FAKEGPU_FAKECUDA_EXTRA_H
#define FAKEGPU_FAKECUDA_EXTRA_H

#include "device/cuda_api.h"

typedef struct CUlinkState_st *CUlinkState;
typedef int CUjit_option;
typedef int CUjitInputType;
typedef int CUfunction_attribute;
typedef int CUfunc_cache;
typedef int CUpointer_attribute;
typedef void (*CUstreamCallback)(CUstream s, CUresult status, void *user);
typedef size_t (*CUoccupancyB2DSize)(int block_size);

#define CUDA_ERROR_FILE_NOT_FOUND 301
#define CUDA_ERROR_NO_BINARY_FOR_GPU 209
#define CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED 704
#define CUDA_ERROR_PEER_ACCESS_NOT_ENABLED 705
#define CUDA_ERROR_TOO_MANY_PEERS 711
#define CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE 720
#define CUDA_ERROR_INVALID_CLUSTER_SIZE 912
#define CUDA_ERROR_INVALID_RESOURCE_TYPE 914
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED 713

/* Special stream handles. */
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#define CU_STREAM_NON_BLOCKING 0x1

/* cuMemAllocManaged flags. */
#define CU_MEM_ATTACH_GLOBAL 0x1
#define CU_MEM_ATTACH_HOST 0x2

/* cuMemHostRegister flags. */
#define CU_MEMHOSTREGISTER_PORTABLE 0x01
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x02
#define CU_MEMHOSTREGISTER_IOMEMORY 0x04
#define CU_MEMHOSTREGISTER_READ_ONLY 0x08

/* Pointer attributes (CUpointer_attribute) and memory types. */
#define CU_POINTER_ATTRIBUTE_CONTEXT 1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_DEVICE_POINTER 3
#define CU_POINTER_ATTRIBUTE_HOST_POINTER 4
#define CU_POINTER_ATTRIBUTE_SYNC_MEMOPS 6
#define CU_POINTER_ATTRIBUTE_BUFFER_ID 7
#define CU_POINTER_ATTRIBUTE_IS_MANAGED 8
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define CU_POINTER_ATTRIBUTE_RANGE_SIZE 12
#define CU_POINTER_ATTRIBUTE_MAPPED 13
#define CU_MEMORYTYPE_HOST 1
#define CU_MEMORYTYPE_DEVICE 2

/* JIT options and inputs. */
#define CU_JIT_INFO_LOG_BUFFER 3
#define CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES 4
#define CU_JIT_ERROR_LOG_BUFFER 5
#define CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES 6
#define CU_JIT_NUM_OPTIONS 32
#define CU_JIT_INPUT_CUBIN 0
#define CU_JIT_INPUT_PTX 1
#define CU_JIT_INPUT_FATBINARY 2
#define CU_JIT_INPUT_OBJECT 3
#define CU_JIT_INPUT_LIBRARY 4

/* Function attributes. */
#define CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK 0
#define CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES 1
#define CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES 2
#define CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES 3
#define CU_FUNC_ATTRIBUTE_NUM_REGS 4
#define CU_FUNC_ATTRIBUTE_PTX_VERSION 5
#define CU_FUNC_ATTRIBUTE_BINARY_VERSION 6
#define CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES 8
#define CU_FUNC_CACHE_PREFER_EQUAL 3

#define FK_EXTRA_ENTRY_POINTS(X)                                                                   \
  X(cuCtxGetDevice, "cuCtxGetDevice", 2000, (CUdevice * dev))                                      \
  X(cuDeviceComputeCapability, "cuDeviceComputeCapability", 2000,                                  \
    (int *major, int *minor, CUdevice dev))                                                        \
  X(cuDevicePrimaryCtxSetFlags, "cuDevicePrimaryCtxSetFlags_v2", 11000,                            \
    (CUdevice dev, unsigned int flags))                                                            \
  X(cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", 4000, (int *can, CUdevice dev, CUdevice peer)) \
  X(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", 4000, (CUcontext peer, unsigned int flags))    \
  X(cuCtxDisablePeerAccess, "cuCtxDisablePeerAccess", 4000, (CUcontext peer))                      \
  X(cuMemGetAddressRange, "cuMemGetAddressRange_v2", 3020,                                         \
    (CUdeviceptr * base, size_t * size, CUdeviceptr dptr))                                         \
  X(cuPointerGetAttribute, "cuPointerGetAttribute", 4000,                                          \
    (void *data, CUpointer_attribute attr, CUdeviceptr ptr))                                       \
  X(cuPointerGetAttributes, "cuPointerGetAttributes", 7000,                                        \
    (unsigned int n, CUpointer_attribute *attrs, void **data, CUdeviceptr ptr))                    \
  X(cuMemHostRegister, "cuMemHostRegister_v2", 6050, (void *p, size_t bytes, unsigned int flags))  \
  X(cuMemHostUnregister, "cuMemHostUnregister", 4000, (void *p))                                   \
  X(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", 3020,                               \
    (CUdeviceptr * dptr, void *p, unsigned int flags))                                             \
  X(cuMemHostGetFlags, "cuMemHostGetFlags", 2030, (unsigned int *flags, void *p))                  \
  X(cuMemAllocManaged, "cuMemAllocManaged", 6000,                                                  \
    (CUdeviceptr * dptr, size_t bytes, unsigned int flags))                                        \
  X(cuMemcpy, "cuMemcpy", 4000, (CUdeviceptr dst, CUdeviceptr src, size_t n))                      \
  X(cuMemcpyAsync, "cuMemcpyAsync", 4000,                                                          \
    (CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s))                                      \
  X(cuMemcpyPeer, "cuMemcpyPeer", 4000,                                                            \
    (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n))                  \
  X(cuMemcpyPeerAsync, "cuMemcpyPeerAsync", 4000,                                                  \
    (CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s))      \
  X(cuMemsetD16, "cuMemsetD16_v2", 3020, (CUdeviceptr dst, unsigned short v, size_t n))            \
  X(cuMemsetD32, "cuMemsetD32_v2", 3020, (CUdeviceptr dst, unsigned int v, size_t n))              \
  X(cuMemsetD8Async, "cuMemsetD8Async", 3020,                                                      \
    (CUdeviceptr dst, unsigned char v, size_t n, CUstream s))                                      \
  X(cuMemsetD16Async, "cuMemsetD16Async", 3020,                                                    \
    (CUdeviceptr dst, unsigned short v, size_t n, CUstream s))                                     \
  X(cuMemsetD32Async, "cuMemsetD32Async", 3020,                                                    \
    (CUdeviceptr dst, unsigned int v, size_t n, CUstream s))                                       \
  X(cuStreamQuery, "cuStreamQuery", 2000, (CUstream s))                                            \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", 3020, (CUstream s, CUevent e, unsigned int flags))     \
  X(cuStreamAddCallback, "cuStreamAddCallback", 5000,                                              \
    (CUstream s, CUstreamCallback cb, void *user, unsigned int flags))                             \
  X(cuEventQuery, "cuEventQuery", 2000, (CUevent e))                                               \
  X(cuProfilerStart, "cuProfilerStart", 4000, (void))                                              \
  X(cuProfilerStop, "cuProfilerStop", 4000, (void))                                                \
  X(cuModuleLoadDataEx, "cuModuleLoadDataEx", 2010,                                                \
    (CUmodule * m, const void *image, unsigned int n, CUjit_option *opts, void **vals))            \
  X(cuModuleGetGlobal, "cuModuleGetGlobal_v2", 3020,                                               \
    (CUdeviceptr * dptr, size_t * bytes, CUmodule m, const char *name))                            \
  X(cuLinkCreate, "cuLinkCreate_v2", 6050,                                                         \
    (unsigned int n, CUjit_option *opts, void **vals, CUlinkState *state))                         \
  X(cuLinkAddData, "cuLinkAddData_v2", 6050,                                                       \
    (CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,            \
     unsigned int n, CUjit_option *opts, void **vals))                                             \
  X(cuLinkAddFile, "cuLinkAddFile_v2", 6050,                                                       \
    (CUlinkState state, CUjitInputType type, const char *path, unsigned int n, CUjit_option *opts, \
     void **vals))                                                                                 \
  X(cuLinkComplete, "cuLinkComplete", 5050, (CUlinkState state, void **cubin, size_t *size))       \
  X(cuLinkDestroy, "cuLinkDestroy", 5050, (CUlinkState state))                                     \
  X(cuFuncGetAttribute, "cuFuncGetAttribute", 2020,                                                \
    (int *value, CUfunction_attribute attr, CUfunction f))                                         \
  X(cuFuncSetCacheConfig, "cuFuncSetCacheConfig", 3000, (CUfunction f, CUfunc_cache config))       \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, "cuOccupancyMaxActiveBlocksPerMultiprocessor",    \
    6050, (int *blocks, CUfunction f, int block_size, size_t dyn_smem))                            \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,                                          \
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000,                                  \
    (int *blocks, CUfunction f, int block_size, size_t dyn_smem, unsigned int flags))              \
  X(cuOccupancyMaxPotentialBlockSize, "cuOccupancyMaxPotentialBlockSize", 6050,                    \
    (int *min_grid, int *block_size, CUfunction f, CUoccupancyB2DSize b2d, size_t dyn_smem,        \
     int limit))                                                                                   \
  X(cuOccupancyMaxPotentialBlockSizeWithFlags, "cuOccupancyMaxPotentialBlockSizeWithFlags", 7000,  \
    (int *min_grid, int *block_size, CUfunction f, CUoccupancyB2DSize b2d, size_t dyn_smem,        \
     int limit, unsigned int flags))                                                               \
  X(cuLaunchCooperativeKernel, "cuLaunchCooperativeKernel", 9000,                                  \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,             \
     unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params))

#endif
