/* Driver entry points the CUDA runtime (libcudart, static or shared, and the
 * copies inside CuPy and PyTorch) asks cuGetProcAddress for, beyond ebb's
 * table and FK_EXTRA_ENTRY_POINTS: the _v2 ABIs of CUDA 13, the old ABIs it
 * still asks for, memory pools and stream-ordered allocation, libraries and
 * kernels, stream priorities and capture queries, context limits and flags,
 * IPC event handles. Same row format:
 *   X(base_name, versioned_symbol, abi_version, (parameter list))
 * The version of each ABI is the one in the toolkit's cudaTypedefs.h
 * (PFN_<name>_v<version>). Types and values match cuda.h. */
#ifndef FAKEGPU_FAKECUDA_RT_H
#define FAKEGPU_FAKECUDA_RT_H

#include "fakecuda_extra.h"

typedef struct fk_pool *CUmemoryPool;
typedef struct fk_library *CUlibrary;
typedef struct fk_kernel *CUkernel;
typedef int CUlimit;
typedef int CUmemPool_attribute;
typedef int CUstreamCaptureStatus;
typedef int CUstreamCaptureMode;
typedef int CUlibraryOption;
typedef int CUdevice_P2PAttribute;
typedef int CUmoduleLoadingMode;
typedef int CUsharedconfig;
typedef int CUmem_advise;
typedef int CUmem_range_attribute;
typedef void (*CUhostFn)(void *user);
typedef struct CUgraph_st *CUgraph;
typedef struct fk_graph_exec *CUgraphExec;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphEdgeData_st CUgraphEdgeData;
/* cuda.h's layout: the id, padding to 8 bytes, a 64-byte value union. */
#define FK_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION 4
typedef struct CUlaunchAttribute_st {
  int id;
  char pad[4];
  union {
    char pad[64];
    struct {
      unsigned int x, y, z;
    } clusterDim;
  } value;
} CUlaunchAttribute;

typedef struct fk_array *CUarray;
typedef unsigned long long CUtexObject;
typedef unsigned long long CUsurfObject;
typedef struct CUDA_RESOURCE_DESC_st CUDA_RESOURCE_DESC;
typedef struct CUDA_TEXTURE_DESC_st CUDA_TEXTURE_DESC;
typedef struct CUDA_RESOURCE_VIEW_DESC_st CUDA_RESOURCE_VIEW_DESC;
typedef struct CUDA_ARRAY_DESCRIPTOR_st {
  size_t Width, Height;
  int Format;
  unsigned int NumChannels;
} CUDA_ARRAY_DESCRIPTOR;
typedef struct CUDA_ARRAY3D_DESCRIPTOR_st {
  size_t Width, Height, Depth;
  int Format;
  unsigned int NumChannels, Flags;
} CUDA_ARRAY3D_DESCRIPTOR;
/* Opaque here: fakecuda_array.c reads them in cuda.h's _v2 layout. */
typedef struct CUDA_MEMCPY2D_st CUDA_MEMCPY2D;
typedef struct CUDA_MEMCPY3D_st CUDA_MEMCPY3D;

typedef struct CUipcEventHandle_st {
  char reserved[CU_IPC_HANDLE_SIZE];
} CUipcEventHandle;

typedef struct CUmemPoolProps_st {
  CUmemAllocationType allocType;
  CUmemAllocationHandleType handleTypes;
  CUmemLocation location;
  void *win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
} CUmemPoolProps;

typedef struct CUlaunchConfig_st {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned int numAttrs;
} CUlaunchConfig;

#define CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES 1
#define CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC 2
#define CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES 3
#define CU_MEMPOOL_ATTR_RELEASE_THRESHOLD 4
#define CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT 5
#define CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH 6
#define CU_MEMPOOL_ATTR_USED_MEM_CURRENT 7
#define CU_MEMPOOL_ATTR_USED_MEM_HIGH 8
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_EVENT_INTERPROCESS 0x4
#define CU_STREAM_CAPTURE_STATUS_NONE 0
#define CU_MEM_LOCATION_TYPE_HOST 2
#define CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE 17
/* Stream priorities of a Hopper GPU: 0 (least) to -5 (greatest). */
#define FK_PRIO_LEAST 0
#define FK_PRIO_GREATEST (-5)

/* The CUDA 13 ABIs of cuCtxGetDevice and cuCtxSynchronize take a context.
 * cuGetProcAddress hands them out at 13000, but the fake does not export
 * their _v2 names: clients that look names up with dlsym and prefer a "_v2"
 * suffix (Numba 0.56) would call them with the old parameters. */
CUresult fk_ctx_get_device_v2(CUdevice *dev, CUcontext ctx);
CUresult fk_ctx_synchronize_v2(CUcontext ctx);
#define FK_RT_UNEXPORTED_ENTRY_POINTS(X)                              \
  X(cuCtxGetDevice, "cuCtxGetDevice_v2", 13000, fk_ctx_get_device_v2) \
  X(cuCtxSynchronize, "cuCtxSynchronize_v2", 13000, fk_ctx_synchronize_v2)

#define FK_RT_ENTRY_POINTS(X)                                                                      \
  X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 7000, (CUdevice dev))                  \
  X(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", 7000, (CUdevice dev))                      \
  X(cuLinkCreate, "cuLinkCreate", 5050,                                                            \
    (unsigned int n, CUjit_option *opts, void **vals, CUlinkState *state))                         \
  X(cuLinkAddData, "cuLinkAddData", 5050,                                                          \
    (CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,            \
     unsigned int n, CUjit_option *opts, void **vals))                                             \
  X(cuLinkAddFile, "cuLinkAddFile", 5050,                                                          \
    (CUlinkState state, CUjitInputType type, const char *path, unsigned int n, CUjit_option *opts, \
     void **vals))                                                                                 \
  X(cuIpcOpenMemHandle, "cuIpcOpenMemHandle", 4010,                                                \
    (CUdeviceptr * dptr, CUipcMemHandle handle, unsigned int flags))                               \
  X(cuEventElapsedTime, "cuEventElapsedTime_v2", 12080, (float *ms, CUevent a, CUevent b))         \
  X(cuCtxGetFlags, "cuCtxGetFlags", 7000, (unsigned int *flags))                                   \
  X(cuCtxSetFlags, "cuCtxSetFlags", 12010, (unsigned int flags))                                   \
  X(cuCtxGetId, "cuCtxGetId", 12000, (CUcontext ctx, unsigned long long *id))                      \
  X(cuCtxGetApiVersion, "cuCtxGetApiVersion", 3020, (CUcontext ctx, unsigned int *version))        \
  X(cuCtxGetLimit, "cuCtxGetLimit", 3010, (size_t * value, CUlimit limit))                         \
  X(cuCtxSetLimit, "cuCtxSetLimit", 3010, (CUlimit limit, size_t value))                           \
  X(cuCtxGetCacheConfig, "cuCtxGetCacheConfig", 3020, (CUfunc_cache * config))                     \
  X(cuCtxSetCacheConfig, "cuCtxSetCacheConfig", 3020, (CUfunc_cache config))                       \
  X(cuCtxGetSharedMemConfig, "cuCtxGetSharedMemConfig", 4020, (CUsharedconfig * config))           \
  X(cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange", 5050, (int *least, int *greatest)) \
  X(cuCtxResetPersistingL2Cache, "cuCtxResetPersistingL2Cache", 11000, (void))                     \
  X(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", 4010, (char *id, int len, CUdevice dev))           \
  X(cuDeviceGetByPCIBusId, "cuDeviceGetByPCIBusId", 4010, (CUdevice * dev, const char *id))        \
  X(cuDeviceGetP2PAttribute, "cuDeviceGetP2PAttribute", 8000,                                      \
    (int *value, CUdevice_P2PAttribute attr, CUdevice src, CUdevice dst))                          \
  X(cuStreamCreateWithPriority, "cuStreamCreateWithPriority", 5050,                                \
    (CUstream * s, unsigned int flags, int priority))                                              \
  X(cuStreamGetPriority, "cuStreamGetPriority", 5050, (CUstream s, int *priority))                 \
  X(cuStreamGetFlags, "cuStreamGetFlags", 5050, (CUstream s, unsigned int *flags))                 \
  X(cuStreamGetCtx, "cuStreamGetCtx", 9020, (CUstream s, CUcontext * ctx))                         \
  X(cuStreamGetId, "cuStreamGetId", 12000, (CUstream s, unsigned long long *id))                   \
  X(cuStreamGetDevice, "cuStreamGetDevice", 12080, (CUstream s, CUdevice * dev))                   \
  X(cuStreamIsCapturing, "cuStreamIsCapturing", 10000,                                             \
    (CUstream s, CUstreamCaptureStatus * status))                                                  \
  X(cuStreamGetCaptureInfo, "cuStreamGetCaptureInfo", 10010,                                       \
    (CUstream s, CUstreamCaptureStatus * status, cuuint64_t * id))                                 \
  X(cuStreamGetCaptureInfo, "cuStreamGetCaptureInfo_v2", 11030,                                    \
    (CUstream s, CUstreamCaptureStatus * status, cuuint64_t * id, CUgraph * graph,                 \
     const CUgraphNode **deps, size_t *ndeps))                                                     \
  X(cuStreamGetCaptureInfo, "cuStreamGetCaptureInfo_v3", 12030,                                    \
    (CUstream s, CUstreamCaptureStatus * status, cuuint64_t * id, CUgraph * graph,                 \
     const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps))                      \
  X(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", 10010,                 \
    (CUstreamCaptureMode * mode))                                                                  \
  X(cuLaunchHostFunc, "cuLaunchHostFunc", 10000, (CUstream s, CUhostFn fn, void *user))            \
  X(cuStreamBeginCapture, "cuStreamBeginCapture_v2", 10010,                                        \
    (CUstream s, CUstreamCaptureMode mode))                                                        \
  X(cuStreamEndCapture, "cuStreamEndCapture", 10000, (CUstream s, CUgraph * graph))                \
  X(cuGraphCreate, "cuGraphCreate", 10000, (CUgraph * graph, unsigned int flags))                  \
  X(cuGraphDestroy, "cuGraphDestroy", 10000, (CUgraph graph))                                      \
  X(cuGraphInstantiate, "cuGraphInstantiate", 10000,                                               \
    (CUgraphExec * exec, CUgraph graph, void **err_node, char *log, size_t log_size))              \
  X(cuGraphInstantiate, "cuGraphInstantiate_v2", 11000,                                            \
    (CUgraphExec * exec, CUgraph graph, void **err_node, char *log, size_t log_size))              \
  X(cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags", 11040,                             \
    (CUgraphExec * exec, CUgraph graph, unsigned long long flags))                                 \
  X(cuGraphUpload, "cuGraphUpload", 11010, (CUgraphExec exec, CUstream s))                         \
  X(cuGraphLaunch, "cuGraphLaunch", 10000, (CUgraphExec exec, CUstream s))                         \
  X(cuGraphGetNodes, "cuGraphGetNodes", 10000,                                                     \
    (CUgraph graph, CUgraphNode * nodes, size_t * count))                                          \
  X(cuGraphNodeGetType, "cuGraphNodeGetType", 10000, (CUgraphNode node, int *type))                \
  X(cuGraphExecDestroy, "cuGraphExecDestroy", 10000, (CUgraphExec exec))                           \
  X(cuEventRecordWithFlags, "cuEventRecordWithFlags", 11010,                                       \
    (CUevent e, CUstream s, unsigned int flags))                                                   \
  X(cuIpcGetEventHandle, "cuIpcGetEventHandle", 4010, (CUipcEventHandle * h, CUevent e))           \
  X(cuIpcOpenEventHandle, "cuIpcOpenEventHandle", 4010, (CUevent * e, CUipcEventHandle h))         \
  X(cuMemAllocHost, "cuMemAllocHost_v2", 3020, (void **p, size_t bytes))                           \
  X(cuMemAllocPitch, "cuMemAllocPitch_v2", 3020,                                                   \
    (CUdeviceptr * dptr, size_t * pitch, size_t width, size_t height, unsigned int elem))          \
  X(cuMemAdvise, "cuMemAdvise", 8000,                                                              \
    (CUdeviceptr p, size_t n, CUmem_advise advice, CUdevice dev))                                  \
  X(cuMemAdvise, "cuMemAdvise_v2", 12020,                                                          \
    (CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc))                             \
  X(cuMemPrefetchAsync, "cuMemPrefetchAsync", 8000,                                                \
    (CUdeviceptr p, size_t n, CUdevice dev, CUstream s))                                           \
  X(cuMemPrefetchAsync, "cuMemPrefetchAsync_v2", 12020,                                            \
    (CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags, CUstream s))                  \
  X(cuFuncGetName, "cuFuncGetName", 12030, (const char **name, CUfunction f))                      \
  X(cuFuncSetAttribute, "cuFuncSetAttribute", 9000,                                                \
    (CUfunction f, CUfunction_attribute attr, int value))                                          \
  X(cuOccupancyAvailableDynamicSMemPerBlock, "cuOccupancyAvailableDynamicSMemPerBlock", 10020,     \
    (size_t * smem, CUfunction f, int blocks, int block_size))                                     \
  X(cuModuleGetLoadingMode, "cuModuleGetLoadingMode", 11070, (CUmoduleLoadingMode * mode))         \
  X(cuOccupancyMaxPotentialClusterSize, "cuOccupancyMaxPotentialClusterSize", 11070,               \
    (int *size, CUfunction f, const CUlaunchConfig *config))                                       \
  X(cuOccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters", 11070,                           \
    (int *clusters, CUfunction f, const CUlaunchConfig *config))                                   \
  X(cuLaunchKernelEx, "cuLaunchKernelEx", 11060,                                                   \
    (const CUlaunchConfig *config, CUfunction f, void **params, void **extra))                     \
  X(cuLibraryLoadData, "cuLibraryLoadData", 12000,                                                 \
    (CUlibrary * lib, const void *code, CUjit_option *jit_opts, void **jit_vals,                   \
     unsigned int njit, CUlibraryOption *lib_opts, void **lib_vals, unsigned int nlib))            \
  X(cuLibraryUnload, "cuLibraryUnload", 12000, (CUlibrary lib))                                    \
  X(cuLibraryGetKernel, "cuLibraryGetKernel", 12000,                                               \
    (CUkernel * k, CUlibrary lib, const char *name))                                               \
  X(cuLibraryGetModule, "cuLibraryGetModule", 12000, (CUmodule * m, CUlibrary lib))                \
  X(cuLibraryGetGlobal, "cuLibraryGetGlobal", 12000,                                               \
    (CUdeviceptr * dptr, size_t * bytes, CUlibrary lib, const char *name))                         \
  X(cuKernelGetFunction, "cuKernelGetFunction", 12000, (CUfunction * f, CUkernel k))               \
  X(cuKernelGetName, "cuKernelGetName", 12030, (const char **name, CUkernel k))                    \
  X(cuKernelGetAttribute, "cuKernelGetAttribute", 12000,                                           \
    (int *value, CUfunction_attribute attr, CUkernel k, CUdevice dev))                             \
  X(cuKernelSetAttribute, "cuKernelSetAttribute", 12000,                                           \
    (CUfunction_attribute attr, int value, CUkernel k, CUdevice dev))                              \
  X(cuKernelSetCacheConfig, "cuKernelSetCacheConfig", 12000,                                       \
    (CUkernel k, CUfunc_cache config, CUdevice dev))                                               \
  X(cuFuncGetParamInfo, "cuFuncGetParamInfo", 12040,                                               \
    (CUfunction f, size_t index, size_t * offset, size_t * size))                                  \
  X(cuKernelGetParamInfo, "cuKernelGetParamInfo", 12040,                                           \
    (CUkernel k, size_t index, size_t * offset, size_t * size))                                    \
  X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", 11020,                                 \
    (CUmemoryPool * pool, CUdevice dev))                                                           \
  X(cuDeviceGetMemPool, "cuDeviceGetMemPool", 11020, (CUmemoryPool * pool, CUdevice dev))          \
  X(cuDeviceSetMemPool, "cuDeviceSetMemPool", 11020, (CUdevice dev, CUmemoryPool pool))            \
  X(cuMemGetDefaultMemPool, "cuMemGetDefaultMemPool", 13000,                                       \
    (CUmemoryPool * pool, CUmemLocation * loc, CUmemAllocationType type))                          \
  X(cuMemGetMemPool, "cuMemGetMemPool", 13000,                                                     \
    (CUmemoryPool * pool, CUmemLocation * loc, CUmemAllocationType type))                          \
  X(cuMemSetMemPool, "cuMemSetMemPool", 13000,                                                     \
    (CUmemLocation * loc, CUmemAllocationType type, CUmemoryPool pool))                            \
  X(cuMemPoolCreate, "cuMemPoolCreate", 11020, (CUmemoryPool * pool, const CUmemPoolProps *props)) \
  X(cuMemPoolDestroy, "cuMemPoolDestroy", 11020, (CUmemoryPool pool))                              \
  X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", 11020,                                         \
    (CUmemoryPool pool, CUmemPool_attribute attr, void *value))                                    \
  X(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", 11020,                                         \
    (CUmemoryPool pool, CUmemPool_attribute attr, void *value))                                    \
  X(cuMemPoolTrimTo, "cuMemPoolTrimTo", 11020, (CUmemoryPool pool, size_t keep))                   \
  X(cuMemPoolSetAccess, "cuMemPoolSetAccess", 11020,                                               \
    (CUmemoryPool pool, const CUmemAccessDesc *map, size_t count))                                 \
  X(cuMemPoolGetAccess, "cuMemPoolGetAccess", 11020,                                               \
    (CUmemAccess_flags * flags, CUmemoryPool pool, CUmemLocation * loc))                           \
  X(cuMemAllocAsync, "cuMemAllocAsync", 11020, (CUdeviceptr * dptr, size_t bytes, CUstream s))     \
  X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020,                                     \
    (CUdeviceptr * dptr, size_t bytes, CUmemoryPool pool, CUstream s))                             \
  X(cuMemFreeAsync, "cuMemFreeAsync", 11020, (CUdeviceptr dptr, CUstream s))                       \
  X(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle", 11000,                             \
    (CUmemGenericAllocationHandle * h, void *addr))                                                \
  X(cuMemGetAllocationPropertiesFromHandle, "cuMemGetAllocationPropertiesFromHandle", 10020,       \
    (CUmemAllocationProp * prop, CUmemGenericAllocationHandle h))                                  \
  X(cuArrayCreate, "cuArrayCreate_v2", 3020, (CUarray * a, const CUDA_ARRAY_DESCRIPTOR *d))        \
  X(cuArray3DCreate, "cuArray3DCreate_v2", 3020, (CUarray * a, const CUDA_ARRAY3D_DESCRIPTOR *d))  \
  X(cuArrayDestroy, "cuArrayDestroy", 2000, (CUarray a))                                           \
  X(cuArrayGetDescriptor, "cuArrayGetDescriptor_v2", 3020, (CUDA_ARRAY_DESCRIPTOR * d, CUarray a)) \
  X(cuArray3DGetDescriptor, "cuArray3DGetDescriptor_v2", 3020,                                     \
    (CUDA_ARRAY3D_DESCRIPTOR * d, CUarray a))                                                      \
  X(cuMemcpy2D, "cuMemcpy2D_v2", 3020, (const CUDA_MEMCPY2D *p))                                   \
  X(cuMemcpy2DUnaligned, "cuMemcpy2DUnaligned_v2", 3020, (const CUDA_MEMCPY2D *p))                 \
  X(cuMemcpy2DAsync, "cuMemcpy2DAsync_v2", 3020, (const CUDA_MEMCPY2D *p, CUstream s))             \
  X(cuMemcpy3D, "cuMemcpy3D_v2", 3020, (const CUDA_MEMCPY3D *p))                                   \
  X(cuMemcpy3DAsync, "cuMemcpy3DAsync_v2", 3020, (const CUDA_MEMCPY3D *p, CUstream s))             \
  X(cuTexObjectCreate, "cuTexObjectCreate", 5000,                                                  \
    (CUtexObject * t, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *tex,                 \
     const CUDA_RESOURCE_VIEW_DESC *view))                                                         \
  X(cuTexObjectDestroy, "cuTexObjectDestroy", 5000, (CUtexObject t))                               \
  X(cuTexObjectGetResourceDesc, "cuTexObjectGetResourceDesc", 5000,                                \
    (CUDA_RESOURCE_DESC * res, CUtexObject t))                                                     \
  X(cuTexObjectGetTextureDesc, "cuTexObjectGetTextureDesc", 5000,                                  \
    (CUDA_TEXTURE_DESC * tex, CUtexObject t))                                                      \
  X(cuTexObjectGetResourceViewDesc, "cuTexObjectGetResourceViewDesc", 5000,                        \
    (CUDA_RESOURCE_VIEW_DESC * view, CUtexObject t))                                               \
  X(cuSurfObjectCreate, "cuSurfObjectCreate", 5000,                                                \
    (CUsurfObject * sf, const CUDA_RESOURCE_DESC *res))                                            \
  X(cuSurfObjectDestroy, "cuSurfObjectDestroy", 5000, (CUsurfObject sf))                           \
  X(cuSurfObjectGetResourceDesc, "cuSurfObjectGetResourceDesc", 5000,                              \
    (CUDA_RESOURCE_DESC * res, CUsurfObject sf))                                                   \
  X(cuGraphDebugDotPrint, "cuGraphDebugDotPrint", 11030,                                           \
    (CUgraph graph, const char *path, unsigned int flags))                                         \
  X(cuMemsetD2D8, "cuMemsetD2D8_v2", 3020,                                                         \
    (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h))                          \
  X(cuMemsetD2D16, "cuMemsetD2D16_v2", 3020,                                                       \
    (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h))                         \
  X(cuMemsetD2D32, "cuMemsetD2D32_v2", 3020,                                                       \
    (CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h))                           \
  X(cuMemsetD2D8Async, "cuMemsetD2D8Async", 3020,                                                  \
    (CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s))              \
  X(cuMemsetD2D16Async, "cuMemsetD2D16Async", 3020,                                                \
    (CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s))             \
  X(cuMemsetD2D32Async, "cuMemsetD2D32Async", 3020,                                                \
    (CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s))               \
  X(cuStreamAttachMemAsync, "cuStreamAttachMemAsync", 6000,                                        \
    (CUstream s, CUdeviceptr dptr, size_t length, unsigned int flags))                             \
  X(cuStreamGetAttribute, "cuStreamGetAttribute", 11000, (CUstream s, int attr, void *value))      \
  X(cuStreamSetAttribute, "cuStreamSetAttribute", 11000,                                           \
    (CUstream s, int attr, const void *value))                                                     \
  X(cuStreamCopyAttributes, "cuStreamCopyAttributes", 11000, (CUstream dst, CUstream src))         \
  X(cuMemcpyHtoA, "cuMemcpyHtoA_v2", 3020, (void))                                                 \
  X(cuMemcpyHtoAAsync, "cuMemcpyHtoAAsync_v2", 3020, (void))                                       \
  X(cuMemcpyAtoH, "cuMemcpyAtoH_v2", 3020, (void))                                                 \
  X(cuMemcpyAtoHAsync, "cuMemcpyAtoHAsync_v2", 3020, (void))                                       \
  X(cuMemcpyDtoA, "cuMemcpyDtoA_v2", 3020, (void))                                                 \
  X(cuMemcpyAtoD, "cuMemcpyAtoD_v2", 3020, (void))                                                 \
  X(cuMemcpyAtoA, "cuMemcpyAtoA_v2", 3020, (void))                                                 \
  X(cuGraphGetRootNodes, "cuGraphGetRootNodes", 10000, (void))                                     \
  X(cuGraphGetEdges, "cuGraphGetEdges", 10000, (void))                                             \
  X(cuGraphNodeGetDependencies, "cuGraphNodeGetDependencies", 10000, (void))                       \
  X(cuGraphNodeGetDependentNodes, "cuGraphNodeGetDependentNodes", 10000, (void))                   \
  X(cuGraphClone, "cuGraphClone", 10000, (void))                                                   \
  X(cuGraphNodeFindInClone, "cuGraphNodeFindInClone", 10000, (void))                               \
  X(cuGraphExecGetFlags, "cuGraphExecGetFlags", 12000, (void))                                     \
  X(cuGraphNodeSetEnabled, "cuGraphNodeSetEnabled", 11060, (void))                                 \
  X(cuGraphNodeGetEnabled, "cuGraphNodeGetEnabled", 11060, (void))                                 \
  X(cuGraphMemsetNodeGetParams, "cuGraphMemsetNodeGetParams", 10000, (void))                       \
  X(cuGraphHostNodeGetParams, "cuGraphHostNodeGetParams", 10000, (void))                           \
  X(cuGraphEventRecordNodeGetEvent, "cuGraphEventRecordNodeGetEvent", 11010, (void))               \
  X(cuFuncGetModule, "cuFuncGetModule", 11000, (void))                                             \
  X(cuFuncIsLoaded, "cuFuncIsLoaded", 12040, (void))                                               \
  X(cuFuncLoad, "cuFuncLoad", 12040, (void))                                                       \
  X(cuCtxRecordEvent, "cuCtxRecordEvent", 12050, (void))                                           \
  X(cuCtxWaitEvent, "cuCtxWaitEvent", 12050, (void))                                               \
  X(cuDeviceGetProperties, "cuDeviceGetProperties", 2000, (void))                                  \
  X(cuDeviceGetTexture1DLinearMaxWidth, "cuDeviceGetTexture1DLinearMaxWidth", 11010, (void))       \
  X(cuDeviceGetGraphMemAttribute, "cuDeviceGetGraphMemAttribute", 11040, (void))                   \
  X(cuDeviceSetGraphMemAttribute, "cuDeviceSetGraphMemAttribute", 11040, (void))                   \
  X(cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", 11040, (void))                                   \
  X(cuDeviceGetExecAffinitySupport, "cuDeviceGetExecAffinitySupport", 11040, (void))               \
  X(cuCtxGetExecAffinity, "cuCtxGetExecAffinity", 11040, (void))                                   \
  X(cuFlushGPUDirectRDMAWrites, "cuFlushGPUDirectRDMAWrites", 11030, (void))                       \
  X(cuDeviceGetDevResource, "cuDeviceGetDevResource", 12040, (void))                               \
  X(cuCtxGetDevResource, "cuCtxGetDevResource", 12040, (void))                                     \
  X(cuMemcpy3DPeer, "cuMemcpy3DPeer", 4000, (void))                                                \
  X(cuMemcpy3DPeerAsync, "cuMemcpy3DPeerAsync", 4000, (void))                                      \
  X(cuUserObjectCreate, "cuUserObjectCreate", 11030, (void))                                       \
  X(cuUserObjectRetain, "cuUserObjectRetain", 11030, (void))                                       \
  X(cuUserObjectRelease, "cuUserObjectRelease", 11030, (void))                                     \
  X(cuGraphRetainUserObject, "cuGraphRetainUserObject", 11030, (void))                             \
  X(cuGraphReleaseUserObject, "cuGraphReleaseUserObject", 11030, (void))                           \
  X(cuFuncSetBlockShape, "cuFuncSetBlockShape", 2000, (void))                                      \
  X(cuFuncSetSharedSize, "cuFuncSetSharedSize", 2000, (void))                                      \
  X(cuParamSetSize, "cuParamSetSize", 2000, (void))                                                \
  X(cuParamSeti, "cuParamSeti", 2000, (void))                                                      \
  X(cuParamSetf, "cuParamSetf", 2000, (void))                                                      \
  X(cuParamSetv, "cuParamSetv", 2000, (void))                                                      \
  X(cuLaunch, "cuLaunch", 2000, (void))                                                            \
  X(cuLaunchGrid, "cuLaunchGrid", 2000, (void))                                                    \
  X(cuLaunchGridAsync, "cuLaunchGridAsync", 2000, (void))                                          \
  X(cuGraphHostNodeSetParams, "cuGraphHostNodeSetParams", 10000, (void))                           \
  X(cuGraphMemsetNodeSetParams, "cuGraphMemsetNodeSetParams", 10000, (void))                       \
  X(cuGraphEventRecordNodeSetEvent, "cuGraphEventRecordNodeSetEvent", 11010, (void))               \
  X(cuGraphExecHostNodeSetParams, "cuGraphExecHostNodeSetParams", 10020, (void))                   \
  X(cuGraphExecMemsetNodeSetParams, "cuGraphExecMemsetNodeSetParams", 10020, (void))               \
  X(cuGraphExecEventRecordNodeSetEvent, "cuGraphExecEventRecordNodeSetEvent", 11010, (void))       \
  X(cuMemGetAccess, "cuMemGetAccess", 10020, (void))                                               \
  X(cuCoredumpGetAttribute, "cuCoredumpGetAttribute", 12010, (void))                               \
  X(cuCoredumpGetAttributeGlobal, "cuCoredumpGetAttributeGlobal", 12010, (void))                   \
  X(cuCoredumpSetAttribute, "cuCoredumpSetAttribute", 12010, (void))                               \
  X(cuCoredumpSetAttributeGlobal, "cuCoredumpSetAttributeGlobal", 12010, (void))                   \
  X(cuTexRefCreate, "cuTexRefCreate", 2000, (void))                                                \
  X(cuTexRefDestroy, "cuTexRefDestroy", 2000, (void))                                              \
  X(cuTexRefSetArray, "cuTexRefSetArray", 2000, (void))                                            \
  X(cuTexRefGetArray, "cuTexRefGetArray", 2000, (void))                                            \
  X(cuTexRefSetAddress, "cuTexRefSetAddress_v2", 3020, (void))                                     \
  X(cuTexRefSetAddress2D, "cuTexRefSetAddress2D_v3", 4010, (void))                                 \
  X(cuTexRefGetAddress, "cuTexRefGetAddress_v2", 3020, (void))                                     \
  X(cuTexRefSetFormat, "cuTexRefSetFormat", 2000, (void))                                          \
  X(cuTexRefGetFormat, "cuTexRefGetFormat", 2000, (void))                                          \
  X(cuTexRefSetAddressMode, "cuTexRefSetAddressMode", 2000, (void))                                \
  X(cuTexRefGetAddressMode, "cuTexRefGetAddressMode", 2000, (void))                                \
  X(cuTexRefSetFilterMode, "cuTexRefSetFilterMode", 2000, (void))                                  \
  X(cuTexRefGetFilterMode, "cuTexRefGetFilterMode", 2000, (void))                                  \
  X(cuTexRefSetMipmapFilterMode, "cuTexRefSetMipmapFilterMode", 5000, (void))                      \
  X(cuTexRefGetMipmapFilterMode, "cuTexRefGetMipmapFilterMode", 5000, (void))                      \
  X(cuTexRefSetMipmapLevelBias, "cuTexRefSetMipmapLevelBias", 5000, (void))                        \
  X(cuTexRefGetMipmapLevelBias, "cuTexRefGetMipmapLevelBias", 5000, (void))                        \
  X(cuTexRefSetMipmapLevelClamp, "cuTexRefSetMipmapLevelClamp", 5000, (void))                      \
  X(cuTexRefGetMipmapLevelClamp, "cuTexRefGetMipmapLevelClamp", 5000, (void))                      \
  X(cuTexRefSetMaxAnisotropy, "cuTexRefSetMaxAnisotropy", 5000, (void))                            \
  X(cuTexRefGetMaxAnisotropy, "cuTexRefGetMaxAnisotropy", 5000, (void))                            \
  X(cuTexRefSetBorderColor, "cuTexRefSetBorderColor", 8000, (void))                                \
  X(cuTexRefGetBorderColor, "cuTexRefGetBorderColor", 8000, (void))                                \
  X(cuTexRefSetFlags, "cuTexRefSetFlags", 2000, (void))                                            \
  X(cuTexRefGetFlags, "cuTexRefGetFlags", 2000, (void))                                            \
  X(cuTexRefSetMipmappedArray, "cuTexRefSetMipmappedArray", 5000, (void))                          \
  X(cuTexRefGetMipmappedArray, "cuTexRefGetMipmappedArray", 5000, (void))                          \
  X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 5000, (void))                                \
  X(cuMipmappedArrayGetLevel, "cuMipmappedArrayGetLevel", 5000, (void))                            \
  X(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 5000, (void))                              \
  X(cuCtxSetSharedMemConfig, "cuCtxSetSharedMemConfig", 4020, (void))                              \
  X(cuFuncSetSharedMemConfig, "cuFuncSetSharedMemConfig", 4020, (void))                            \
  X(cuPointerSetAttribute, "cuPointerSetAttribute", 6000, (void))                                  \
  X(cuMemRangeGetAttribute, "cuMemRangeGetAttribute", 8000, (void))                                \
  X(cuMemRangeGetAttributes, "cuMemRangeGetAttributes", 8000, (void))                              \
  X(cuCtxAttach, "cuCtxAttach", 2000, (void))                                                      \
  X(cuCtxDetach, "cuCtxDetach", 2000, (void))                                                      \
  X(cuModuleLoad, "cuModuleLoad", 2000, (void))                                                    \
  X(cuModuleLoadFatBinary, "cuModuleLoadFatBinary", 2000, (void))                                  \
  X(cuGraphAddKernelNode, "cuGraphAddKernelNode", 10000, (void))                                   \
  X(cuGraphAddKernelNode, "cuGraphAddKernelNode_v2", 12000, (void))                                \
  X(cuGraphKernelNodeGetParams, "cuGraphKernelNodeGetParams", 10000, (void))                       \
  X(cuGraphKernelNodeGetParams, "cuGraphKernelNodeGetParams_v2", 12000, (void))                    \
  X(cuGraphKernelNodeSetParams, "cuGraphKernelNodeSetParams", 10000, (void))                       \
  X(cuGraphKernelNodeSetParams, "cuGraphKernelNodeSetParams_v2", 12000, (void))                    \
  X(cuGraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams", 10010, (void))               \
  X(cuGraphExecKernelNodeSetParams, "cuGraphExecKernelNodeSetParams_v2", 12000, (void))            \
  X(cuGraphAddMemcpyNode, "cuGraphAddMemcpyNode", 10000, (void))                                   \
  X(cuGraphAddMemsetNode, "cuGraphAddMemsetNode", 10000, (void))                                   \
  X(cuGraphAddHostNode, "cuGraphAddHostNode", 10000, (void))                                       \
  X(cuGraphAddEmptyNode, "cuGraphAddEmptyNode", 10000, (void))                                     \
  X(cuGraphAddEventRecordNode, "cuGraphAddEventRecordNode", 11010, (void))                         \
  X(cuGraphAddEventWaitNode, "cuGraphAddEventWaitNode", 11010, (void))                             \
  X(cuGraphAddDependencies, "cuGraphAddDependencies", 10000, (void))                               \
  X(cuGraphAddDependencies, "cuGraphAddDependencies_v2", 12030, (void))                            \
  X(cuGraphRemoveDependencies, "cuGraphRemoveDependencies", 10000, (void))                         \
  X(cuGraphRemoveDependencies, "cuGraphRemoveDependencies_v2", 12030, (void))                      \
  X(cuGraphGetEdges, "cuGraphGetEdges_v2", 12030, (void))                                          \
  X(cuGraphNodeGetDependencies, "cuGraphNodeGetDependencies_v2", 12030, (void))                    \
  X(cuGraphNodeGetDependentNodes, "cuGraphNodeGetDependentNodes_v2", 12030, (void))                \
  X(cuGraphDestroyNode, "cuGraphDestroyNode", 10000, (void))                                       \
  X(cuGraphMemcpyNodeGetParams, "cuGraphMemcpyNodeGetParams", 10000, (void))                       \
  X(cuGraphMemcpyNodeSetParams, "cuGraphMemcpyNodeSetParams", 10000, (void))                       \
  X(cuGraphExecMemcpyNodeSetParams, "cuGraphExecMemcpyNodeSetParams", 10020, (void))               \
  X(cuGraphEventWaitNodeGetEvent, "cuGraphEventWaitNodeGetEvent", 11010, (void))                   \
  X(cuGraphEventWaitNodeSetEvent, "cuGraphEventWaitNodeSetEvent", 11010, (void))                   \
  X(cuGraphExecEventWaitNodeSetEvent, "cuGraphExecEventWaitNodeSetEvent", 11010, (void))           \
  X(cuGraphExecUpdate, "cuGraphExecUpdate", 10020, (void))                                         \
  X(cuGraphExecUpdate, "cuGraphExecUpdate_v2", 12000, (void))                                      \
  X(cuGraphInstantiateWithParams, "cuGraphInstantiateWithParams", 12000, (void))                   \
  X(cuStreamWriteValue32, "cuStreamWriteValue32", 8000, (void))                                    \
  X(cuStreamWriteValue32, "cuStreamWriteValue32_v2", 11070, (void))                                \
  X(cuStreamWriteValue64, "cuStreamWriteValue64", 9000, (void))                                    \
  X(cuStreamWriteValue64, "cuStreamWriteValue64_v2", 11070, (void))                                \
  X(cuStreamWaitValue32, "cuStreamWaitValue32", 8000, (void))                                      \
  X(cuStreamWaitValue32, "cuStreamWaitValue32_v2", 11070, (void))                                  \
  X(cuStreamWaitValue64, "cuStreamWaitValue64", 9000, (void))                                      \
  X(cuStreamWaitValue64, "cuStreamWaitValue64_v2", 11070, (void))                                  \
  X(cuStreamBatchMemOp, "cuStreamBatchMemOp", 8000, (void))                                        \
  X(cuStreamBatchMemOp, "cuStreamBatchMemOp_v2", 11070, (void))                                    \
  X(cuGraphAddNode, "cuGraphAddNode", 12020, (void))                                               \
  X(cuGraphAddNode, "cuGraphAddNode_v2", 12030, (void))                                            \
  X(cuGraphNodeSetParams, "cuGraphNodeSetParams", 12020, (void))                                   \
  X(cuGraphExecNodeSetParams, "cuGraphExecNodeSetParams", 12020, (void))

#endif
