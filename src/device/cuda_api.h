/* The subset of the CUDA driver API that ebb (and the fake driver under
 * tests/fakegpu/) uses, declared here so that ebb builds where no CUDA toolkit
 * is installed. Layouts and values match cuda.h of CUDA 12/13; never include
 * cuda.h next to this file.
 *
 * EBB_CUDA_ENTRY_POINTS is the one table of driver entry points:
 *   X(base_name, versioned_symbol, pinned_abi_version, (parameter list))
 * The loader resolves base_name through cuGetProcAddress_v2 at the pinned
 * version and falls back to dlsym(versioned_symbol). The fake exports exactly
 * the versioned symbols and answers cuGetProcAddress from the same table. */
#ifndef EBB_DEVICE_CUDA_API_H
#define EBB_DEVICE_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef uint64_t cuuint64_t;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

typedef struct CUuuid_st {
  char bytes[16];
} CUuuid;

#define CU_IPC_HANDLE_SIZE 64
typedef struct CUipcMemHandle_st {
  char reserved[CU_IPC_HANDLE_SIZE];
} CUipcMemHandle;

/* Error codes (CUresult). */
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_DEINITIALIZED 4
#define CUDA_ERROR_STUB_LIBRARY 34
#define CUDA_ERROR_NO_DEVICE 100
#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_IMAGE 200
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_CONTEXT_ALREADY_CURRENT 202
#define CUDA_ERROR_ALREADY_MAPPED 208
#define CUDA_ERROR_NOT_MAPPED 211
#define CUDA_ERROR_INVALID_PTX 218
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_NOT_READY 600
#define CUDA_ERROR_ILLEGAL_ADDRESS 700
#define CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES 701
#define CUDA_ERROR_LAUNCH_FAILED 719
#define CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE 708
#define CUDA_ERROR_CONTEXT_IS_DESTROYED 709
#define CUDA_ERROR_NOT_PERMITTED 800
#define CUDA_ERROR_NOT_SUPPORTED 801
#define CUDA_ERROR_UNKNOWN 999

/* Device attributes ebb asks for. */
typedef int CUdevice_attribute;
#define CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK 1
#define CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT 16
#define CU_DEVICE_ATTRIBUTE_PCI_BUS_ID 33
#define CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID 34
#define CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING 41
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
#define CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED 102
#define CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED 103

/* cuGetProcAddress. */
typedef int CUdriverProcAddressQueryResult;
#define CU_GET_PROC_ADDRESS_SUCCESS 0
#define CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND 1
#define CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT 2
#define CU_GET_PROC_ADDRESS_DEFAULT 0

/* Context flags and host allocation flags. */
#define CU_CTX_SCHED_AUTO 0
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS 0x1

/* Virtual memory management. */
typedef int CUmemAllocationType;
#define CU_MEM_ALLOCATION_TYPE_PINNED 1
typedef int CUmemAllocationHandleType;
#define CU_MEM_HANDLE_TYPE_NONE 0
#define CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR 1
typedef int CUmemLocationType;
#define CU_MEM_LOCATION_TYPE_DEVICE 1
typedef int CUmemAccess_flags;
#define CU_MEM_ACCESS_FLAGS_PROT_NONE 0
#define CU_MEM_ACCESS_FLAGS_PROT_READ 1
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
typedef int CUmemAllocationGranularity_flags;
#define CU_MEM_ALLOC_GRANULARITY_MINIMUM 0
#define CU_MEM_ALLOC_GRANULARITY_RECOMMENDED 1

typedef struct CUmemLocation_st {
  CUmemLocationType type;
  int id;
} CUmemLocation;

typedef struct CUmemAllocationProp_st {
  CUmemAllocationType type;
  CUmemAllocationHandleType requestedHandleTypes;
  CUmemLocation location;
  void *win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc_st {
  CUmemLocation location;
  CUmemAccess_flags flags;
} CUmemAccessDesc;

/* X(base, versioned symbol, pinned ABI version, (params)) */
#define EBB_CUDA_ENTRY_POINTS(X)                                                                 \
  X(cuInit, "cuInit", 2000, (unsigned int flags))                                                \
  X(cuDriverGetVersion, "cuDriverGetVersion", 2020, (int *version))                              \
  X(cuDeviceGet, "cuDeviceGet", 2000, (CUdevice * dev, int ordinal))                             \
  X(cuDeviceGetCount, "cuDeviceGetCount", 2000, (int *count))                                    \
  X(cuDeviceGetName, "cuDeviceGetName", 2000, (char *name, int len, CUdevice dev))               \
  X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", 3020, (size_t * bytes, CUdevice dev))               \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", 2000,                                          \
    (int *value, CUdevice_attribute attrib, CUdevice dev))                                       \
  X(cuDeviceGetUuid, "cuDeviceGetUuid_v2", 11040, (CUuuid * uuid, CUdevice dev))                 \
  X(cuGetErrorName, "cuGetErrorName", 6000, (CUresult error, const char **str))                  \
  X(cuGetErrorString, "cuGetErrorString", 6000, (CUresult error, const char **str))              \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000, (CUcontext * ctx, CUdevice dev)) \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", 11000, (CUdevice dev))            \
  X(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset_v2", 11000, (CUdevice dev))                \
  X(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", 7000,                              \
    (CUdevice dev, unsigned int *flags, int *active))                                            \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", 4000, (CUcontext ctx))                                   \
  X(cuCtxGetCurrent, "cuCtxGetCurrent", 4000, (CUcontext * ctx))                                 \
  X(cuCtxSynchronize, "cuCtxSynchronize", 2000, (void))                                          \
  X(cuCtxCreate, "cuCtxCreate_v2", 3020, (CUcontext * ctx, unsigned int flags, CUdevice dev))    \
  X(cuCtxDestroy, "cuCtxDestroy_v2", 4000, (CUcontext ctx))                                      \
  X(cuCtxPushCurrent, "cuCtxPushCurrent_v2", 4000, (CUcontext ctx))                              \
  X(cuCtxPopCurrent, "cuCtxPopCurrent_v2", 4000, (CUcontext * ctx))                              \
  X(cuMemAlloc, "cuMemAlloc_v2", 3020, (CUdeviceptr * dptr, size_t bytes))                       \
  X(cuMemFree, "cuMemFree_v2", 3020, (CUdeviceptr dptr))                                         \
  X(cuMemGetInfo, "cuMemGetInfo_v2", 3020, (size_t * free_bytes, size_t * total_bytes))          \
  X(cuMemHostAlloc, "cuMemHostAlloc", 2020, (void **p, size_t bytes, unsigned int flags))        \
  X(cuMemFreeHost, "cuMemFreeHost", 2000, (void *p))                                             \
  X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", 3020, (CUdeviceptr dst, const void *src, size_t bytes))     \
  X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", 3020, (void *dst, CUdeviceptr src, size_t bytes))           \
  X(cuMemcpyDtoD, "cuMemcpyDtoD_v2", 3020, (CUdeviceptr dst, CUdeviceptr src, size_t bytes))     \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", 3020,                                             \
    (CUdeviceptr dst, const void *src, size_t bytes, CUstream s))                                \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", 3020,                                             \
    (void *dst, CUdeviceptr src, size_t bytes, CUstream s))                                      \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", 3020,                                             \
    (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s))                                \
  X(cuMemsetD8, "cuMemsetD8_v2", 3020, (CUdeviceptr dst, unsigned char v, size_t n))             \
  X(cuStreamCreate, "cuStreamCreate", 2000, (CUstream * s, unsigned int flags))                  \
  X(cuStreamDestroy, "cuStreamDestroy_v2", 4000, (CUstream s))                                   \
  X(cuStreamSynchronize, "cuStreamSynchronize", 2000, (CUstream s))                              \
  X(cuEventCreate, "cuEventCreate", 2000, (CUevent * e, unsigned int flags))                     \
  X(cuEventRecord, "cuEventRecord", 2000, (CUevent e, CUstream s))                               \
  X(cuEventSynchronize, "cuEventSynchronize", 2000, (CUevent e))                                 \
  X(cuEventQuery, "cuEventQuery", 2000, (CUevent e))                                             \
  X(cuEventDestroy, "cuEventDestroy_v2", 4000, (CUevent e))                                      \
  X(cuEventElapsedTime, "cuEventElapsedTime", 2000, (float *ms, CUevent a, CUevent b))           \
  X(cuModuleLoadData, "cuModuleLoadData", 2000, (CUmodule * m, const void *image))               \
  X(cuModuleGetFunction, "cuModuleGetFunction", 2000,                                            \
    (CUfunction * f, CUmodule m, const char *name))                                              \
  X(cuModuleUnload, "cuModuleUnload", 2000, (CUmodule m))                                        \
  X(cuLaunchKernel, "cuLaunchKernel", 4000,                                                      \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,           \
     unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void **params,            \
     void **extra))                                                                              \
  X(cuMemAddressReserve, "cuMemAddressReserve", 10020,                                           \
    (CUdeviceptr * ptr, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags))  \
  X(cuMemCreate, "cuMemCreate", 10020,                                                           \
    (CUmemGenericAllocationHandle * h, size_t size, const CUmemAllocationProp *prop,             \
     unsigned long long flags))                                                                  \
  X(cuMemMap, "cuMemMap", 10020,                                                                 \
    (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle h,                \
     unsigned long long flags))                                                                  \
  X(cuMemSetAccess, "cuMemSetAccess", 10020,                                                     \
    (CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count))                   \
  X(cuMemUnmap, "cuMemUnmap", 10020, (CUdeviceptr ptr, size_t size))                             \
  X(cuMemRelease, "cuMemRelease", 10020, (CUmemGenericAllocationHandle h))                       \
  X(cuMemAddressFree, "cuMemAddressFree", 10020, (CUdeviceptr ptr, size_t size))                 \
  X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", 10020,                       \
    (size_t * gran, const CUmemAllocationProp *prop, CUmemAllocationGranularity_flags option))   \
  X(cuMemExportToShareableHandle, "cuMemExportToShareableHandle", 10020,                         \
    (void *shareable, CUmemGenericAllocationHandle h, CUmemAllocationHandleType type,            \
     unsigned long long flags))                                                                  \
  X(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", 10020,                     \
    (CUmemGenericAllocationHandle * h, void *os_handle, CUmemAllocationHandleType type))         \
  X(cuIpcGetMemHandle, "cuIpcGetMemHandle", 4010, (CUipcMemHandle * h, CUdeviceptr dptr))        \
  X(cuIpcOpenMemHandle, "cuIpcOpenMemHandle_v2", 11000,                                          \
    (CUdeviceptr * dptr, CUipcMemHandle h, unsigned int flags))                                  \
  X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 4010, (CUdeviceptr dptr))

/* cuGetProcAddress_v2 is resolved by dlsym itself; it is the way in. */
typedef CUresult (*dev_pfn_cuGetProcAddress_v2)(const char *symbol, void **pfn, int cuda_version,
                                                cuuint64_t flags,
                                                CUdriverProcAddressQueryResult *status);

/* Kernel host twins: device/kernel_twin.h (dev_launch_dims, EBB_TWIN_PREFIX). */

/* NVML subset. */
typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_DRIVER_NOT_LOADED 9
#define NVML_ERROR_LIBRARY_NOT_FOUND 12
#define NVML_ERROR_UNKNOWN 999

typedef struct nvmlMemory_st {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct nvmlProcessInfo_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

/* X(symbol, return type, (params)) */
#define EBB_NVML_ENTRY_POINTS(X)                                                          \
  X(nvmlInit_v2, nvmlReturn_t, (void))                                                    \
  X(nvmlShutdown, nvmlReturn_t, (void))                                                   \
  X(nvmlErrorString, const char *, (nvmlReturn_t r))                                      \
  X(nvmlDeviceGetCount_v2, nvmlReturn_t, (unsigned int *count))                           \
  X(nvmlDeviceGetHandleByIndex_v2, nvmlReturn_t, (unsigned int index, nvmlDevice_t *dev)) \
  X(nvmlDeviceGetName, nvmlReturn_t, (nvmlDevice_t dev, char *name, unsigned int len))    \
  X(nvmlDeviceGetMemoryInfo, nvmlReturn_t, (nvmlDevice_t dev, nvmlMemory_t * mem))        \
  X(nvmlDeviceGetMemoryInfo_v2, nvmlReturn_t, (nvmlDevice_t dev, nvmlMemory_v2_t * mem))  \
  X(nvmlDeviceGetComputeRunningProcesses_v3, nvmlReturn_t,                                \
    (nvmlDevice_t dev, unsigned int *count, nvmlProcessInfo_t *infos))                    \
  X(nvmlSystemGetDriverVersion, nvmlReturn_t, (char *version, unsigned int len))

#endif
