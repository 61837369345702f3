/* cuInit, the fork rule, device queries, errors and versions. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "fakecuda.h"

fg_config fk_cfg;
int fk_initialized;
int fk_forked;
CUresult fk_init_error = CUDA_ERROR_NOT_INITIALIZED;
unsigned fk_ndevices;
uint64_t fk_granularity;
static pid_t g_init_pid;
static int g_visible[FG_MAX_DEVICES]; /* ordinal -> the fake's device */

unsigned fk_device_of(int ordinal) {
  return ordinal >= 0 && ordinal < FG_MAX_DEVICES ? (unsigned)g_visible[ordinal] : 0;
}

int fk_ordinal_of(unsigned d) {
  for (unsigned i = 0; i < fk_ndevices; i++)
    if ((unsigned)g_visible[i] == d)
      return (int)i;
  return -1;
}

/* The uuid string of the fake's device d, as nvidia-smi prints it. */
static void uuid_string(unsigned d, char *out, size_t len) {
  static const unsigned char b[15] = {'f', 'a', 'k', 'e',  'g',  'p',  'u', '-',
                                      'e', 'b', 'b', 0x10, 0x42, 0x13, 0x37};
  snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
           b[14], d);
}

/* CUDA_VISIBLE_DEVICES as the driver reads it: indices or (prefixes of)
 * uuids, comma separated; the list ends at the first entry that names no
 * device or names one twice. Unset: every device in order. Answers how many
 * are visible. */
static unsigned parse_visible(unsigned physical) {
  const char *v = getenv("CUDA_VISIBLE_DEVICES");
  if (!v) {
    for (unsigned i = 0; i < physical; i++)
      g_visible[i] = (int)i;
    return physical;
  }
  unsigned n = 0, used = 0;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", v);
  for (char *save, *t = strtok_r(buf, ",", &save); t && n < physical;
       t = strtok_r(NULL, ",", &save)) {
    while (*t == ' ')
      t++;
    int d = -1;
    if (!strncmp(t, "GPU-", 4)) {
      for (unsigned i = 0; i < physical && d < 0; i++) {
        char u[64];
        uuid_string(i, u, sizeof u);
        if (strlen(t) > 4 && !strncmp(u, t, strlen(t)))
          d = (int)i;
      }
    } else {
      char *end;
      long x = strtol(t, &end, 10);
      if (end != t && !*end && x >= 0 && x < (long)physical)
        d = (int)x;
    }
    if (d < 0 || (used & (1u << d)))
      break;
    used |= 1u << d;
    g_visible[n++] = d;
  }
  return n;
}
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

void fk_lock(void) { pthread_mutex_lock(&g_lock); }
void fk_unlock(void) { pthread_mutex_unlock(&g_lock); }

/* Like the real driver, a child forked after cuInit cannot use CUDA: every
 * call answers CUDA_ERROR_NOT_INITIALIZED, cuInit included. */
static void on_fork_child(void) {
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  g_lock = fresh;
  if (fk_initialized) {
    fk_forked = 1;
    fk_initialized = 0;
    fg_state_forget();
  }
}

__attribute__((constructor)) static void fk_load(void) {
  fg_config_from_env(&fk_cfg);
  pthread_atfork(NULL, NULL, on_fork_child);
}

/* A process that exits gives everything back, as with the real driver. */
__attribute__((destructor)) static void fk_unload(void) {
  if (fk_initialized && !fk_forked && getpid() == g_init_pid)
    fg_state_detach();
}

CUresult fk_check_init(void) {
  if (fk_cfg.stub)
    return CUDA_ERROR_STUB_LIBRARY;
  if (fk_forked || !fk_initialized)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (fk_in_callback())
    return CUDA_ERROR_NOT_PERMITTED;
  return CUDA_SUCCESS;
}

CUresult fk_check_device(CUdevice dev) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (dev < 0 || (unsigned)dev >= fk_ndevices)
    return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

uint64_t fk_round_up(uint64_t bytes) {
  return (bytes + fk_granularity - 1) / fk_granularity * fk_granularity;
}

FK_API CUresult cuInit(unsigned int flags) {
  if (fk_cfg.stub)
    return CUDA_ERROR_STUB_LIBRARY;
  if (fk_forked)
    return CUDA_ERROR_NOT_INITIALIZED;
  if (flags != 0)
    return CUDA_ERROR_INVALID_VALUE;
  fk_lock();
  CUresult rc = CUDA_SUCCESS;
  if (fk_initialized)
    goto out;
  if (fk_cfg.error[0]) {
    fprintf(stderr, "fakegpu: %s\n", fk_cfg.error);
    rc = fk_init_error = CUDA_ERROR_INVALID_VALUE;
    goto out;
  }
  if (fk_cfg.ndevices == 0) {
    rc = fk_init_error = CUDA_ERROR_NO_DEVICE;
    goto out;
  }
  int err = fg_state_attach(&fk_cfg, 1);
  if (err) {
    fprintf(stderr, "fakegpu: cannot use state file %s: %s\n", fk_cfg.state_path, strerror(-err));
    rc = fk_init_error = CUDA_ERROR_UNKNOWN;
    goto out;
  }
  fg_device_usage u;
  fg_state_device(0, &u);
  fk_ndevices = parse_visible(u.ndevices ? u.ndevices : fk_cfg.ndevices);
  if (fk_ndevices == 0) {
    fg_state_detach();
    rc = fk_init_error = CUDA_ERROR_NO_DEVICE;
    goto out;
  }
  fk_granularity = u.granularity ? u.granularity : fk_cfg.granularity;
  /* Every allocation holds a memfd (so IPC can reach it): allow many. */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max < 65536 ? rl.rlim_max : 65536;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  g_init_pid = getpid();
  fk_initialized = 1;
out:
  fk_unlock();
  return rc;
}

FK_API CUresult cuDriverGetVersion(int *version) {
  if (fk_cfg.stub)
    return CUDA_ERROR_STUB_LIBRARY;
  if (!version)
    return CUDA_ERROR_INVALID_VALUE;
  *version = FK_DRIVER_VERSION;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGetCount(int *count) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!count)
    return CUDA_ERROR_INVALID_VALUE;
  *count = (int)fk_ndevices;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGet(CUdevice *dev, int ordinal) {
  CUresult rc = fk_check_init();
  if (rc)
    return rc;
  if (!dev)
    return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || (unsigned)ordinal >= fk_ndevices)
    return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!name || len <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  snprintf(name, (size_t)len, "%s", FK_DEVICE_NAME);
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!bytes)
    return CUDA_ERROR_INVALID_VALUE;
  fg_device_usage u;
  if (fg_state_device(fk_device_of(dev), &u) != 0)
    return CUDA_ERROR_UNKNOWN;
  *bytes = u.total_bytes;
  return CUDA_SUCCESS;
}

static int attribute_value(int attr, CUdevice dev, int *ok) {
  *ok = 1;
  switch (attr) {
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
  case 2:
  case 3: return 1024;       /* max block dim x, y */
  case 4: return 64;         /* max block dim z */
  case 5: return 2147483647; /* max grid dim x */
  case 6:
  case 7: return 65535;    /* max grid dim y, z */
  case 8: return 49152;    /* shared memory per block */
  case 9: return 65536;    /* constant memory */
  case 10: return 32;      /* warp size */
  case 12: return 65536;   /* registers per block */
  case 13: return 1980000; /* clock rate, kHz */
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return FK_DEVICE_SMS;
  case 19: return 1; /* can map host memory */
  case 31: return 1; /* concurrent kernels */
  case 32: return 1; /* ECC */
  case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0x18 + (int)fk_device_of(dev);
  case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
  case 36: return 2619000;  /* memory clock, kHz */
  case 37: return 5120;     /* bus width */
  case 38: return 52428800; /* L2 */
  case 39: return 2048;     /* threads per SM */
  case 40: return 2;        /* async engines */
  case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
  case 11: return 2147483647; /* max pitch */
  case 14: return 512;        /* texture alignment */
  case 15: return 1;          /* GPU overlap */
  case 21: return 131072;     /* max 1D texture width */
  case 22: return 131072;     /* max 2D texture width */
  case 23: return 65536;      /* max 2D texture height */
  case 24:
  case 25:
  case 26: return 16384; /* max 3D texture */
  case 30: return 512;   /* surface alignment */
  case 51: return 32;    /* texture pitch alignment */
  case 78: return 1;     /* stream priorities */
  case 79:
  case 80: return 1;      /* global and local L1 cache */
  case 81: return 233472; /* shared memory per SM */
  case 82: return 65536;  /* registers per SM */
  case 83: return 1;      /* managed memory */
  case 87: return 2;      /* single to double precision ratio */
  case 89: return 1;      /* concurrent managed access */
  case 90: return 1;      /* compute preemption */
  case 91: return 1;      /* host pointer for registered memory */
  case 92:
  case 93:
  case 94: return 1;           /* stream memory operations (v1): 32, 64 bit, NOR */
  case 95: return 1;           /* cooperative launch */
  case 97: return 232448;      /* shared memory per block, opt-in */
  case 98: return 1;           /* CU_STREAM_WAIT_VALUE_FLUSH and FLUSH_REMOTE_WRITES */
  case 99: return 1;           /* host register supported */
  case 106: return 32;         /* blocks per SM */
  case 108: return 82837504;   /* max persisting L2 */
  case 109: return 134213632;  /* max access policy window */
  case 111: return 1024;       /* reserved shared memory per block */
  case 115: return 1;          /* memory pools */
  case 120: return 1;          /* thread block cluster launch (Hopper) */
  case 139: return 0x233010de; /* PCI device and vendor id: H100 SXM5, NVIDIA */
  case 122:
  case 123: return 1; /* 64-bit stream memory operations, wait NOR */
  case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: return 1;
  case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: return 1;
  default:
    if (attr > 0 && attr < 150)
      return 0; /* a real attribute the fake does not model */
    *ok = 0;
    return 0;
  }
}

FK_API CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!value)
    return CUDA_ERROR_INVALID_VALUE;
  int ok;
  int v = attribute_value(attrib, dev, &ok);
  if (!ok)
    return CUDA_ERROR_INVALID_VALUE;
  *value = v;
  return CUDA_SUCCESS;
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!uuid)
    return CUDA_ERROR_INVALID_VALUE;
  static const char base[16] = {'f', 'a', 'k', 'e',  'g',  'p',  'u',  '-',
                                'e', 'b', 'b', 0x10, 0x42, 0x13, 0x37, 0};
  memcpy(uuid->bytes, base, 16);
  uuid->bytes[15] = (char)fk_device_of(dev);
  return CUDA_SUCCESS;
}

FK_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return device_uuid(uuid, dev); }
FK_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return device_uuid(uuid, dev); }

/* --- errors ---------------------------------------------------------------- */
#define FK_ERRORS(X)                                                                               \
  X(CUDA_SUCCESS, 0, "no error")                                                                   \
  X(CUDA_ERROR_INVALID_VALUE, 1, "invalid argument")                                               \
  X(CUDA_ERROR_OUT_OF_MEMORY, 2, "out of memory")                                                  \
  X(CUDA_ERROR_NOT_INITIALIZED, 3, "initialization error")                                         \
  X(CUDA_ERROR_DEINITIALIZED, 4, "driver shutting down")                                           \
  X(CUDA_ERROR_STUB_LIBRARY, 34, "CUDA driver is a stub library")                                  \
  X(CUDA_ERROR_NO_DEVICE, 100, "no CUDA-capable device is detected")                               \
  X(CUDA_ERROR_INVALID_DEVICE, 101, "invalid device ordinal")                                      \
  X(CUDA_ERROR_INVALID_IMAGE, 200, "device kernel image is invalid")                               \
  X(CUDA_ERROR_NO_BINARY_FOR_GPU, 209, "no kernel image is available for execution on the device") \
  X(CUDA_ERROR_INVALID_CONTEXT, 201, "invalid device context")                                     \
  X(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, 202, "context already current")                            \
  X(CUDA_ERROR_ALREADY_MAPPED, 208, "resource already mapped")                                     \
  X(CUDA_ERROR_NOT_MAPPED, 211, "resource not mapped")                                             \
  X(CUDA_ERROR_INVALID_PTX, 218, "a PTX JIT compilation failed")                                   \
  X(CUDA_ERROR_FILE_NOT_FOUND, 301, "file not found")                                              \
  X(CUDA_ERROR_INVALID_HANDLE, 400, "invalid resource handle")                                     \
  X(CUDA_ERROR_ILLEGAL_STATE, 401, "the operation cannot be performed in the present state")       \
  X(CUDA_ERROR_NOT_FOUND, 500, "named symbol not found")                                           \
  X(CUDA_ERROR_NOT_READY, 600, "device not ready")                                                 \
  X(CUDA_ERROR_ILLEGAL_ADDRESS, 700, "an illegal memory access was encountered")                   \
  X(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 701, "too many resources requested for launch")            \
  X(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, 704, "peer access is already enabled")                 \
  X(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, 705, "peer access has not been enabled")                   \
  X(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, 708, "primary context active")                              \
  X(CUDA_ERROR_CONTEXT_IS_DESTROYED, 709, "context is destroyed")                                  \
  X(CUDA_ERROR_TOO_MANY_PEERS, 711, "peer mapping resources exhausted")                            \
  X(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, 712,                                                \
    "part or all of the requested memory range is already mapped")                                 \
  X(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, 713,                                                    \
    "pointer does not correspond to a registered memory region")                                   \
  X(CUDA_ERROR_LAUNCH_FAILED, 719, "unspecified launch failure")                                   \
  X(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, 720, "too many blocks in cooperative launch")         \
  X(CUDA_ERROR_NOT_PERMITTED, 800, "operation not permitted")                                      \
  X(CUDA_ERROR_NOT_SUPPORTED, 801, "operation not supported")                                      \
  X(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, 900,                                                    \
    "operation not permitted when stream is capturing")                                            \
  X(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, 901,                                                    \
    "operation failed due to a previous error during capture")                                     \
  X(CUDA_ERROR_UNKNOWN, 999, "unknown error")

FK_API CUresult cuGetErrorName(CUresult error, const char **str) {
  if (!str)
    return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
#define FK_NAME_(name, v, s) \
  case v: *str = #name; return CUDA_SUCCESS;
    FK_ERRORS(FK_NAME_)
#undef FK_NAME_
  }
  *str = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

FK_API CUresult cuGetErrorString(CUresult error, const char **str) {
  if (!str)
    return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
#define FK_STR_(name, v, s) \
  case v: *str = s; return CUDA_SUCCESS;
    FK_ERRORS(FK_STR_)
#undef FK_STR_
  }
  *str = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

/* cuDeviceGetProperties (CUdevprop, deprecated but exported): the same
 * figures as the attributes. */
typedef struct {
  int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], sharedMemPerBlock;
  int totalConstantMemory, SIMDWidth, memPitch, regsPerBlock, clockRate, textureAlign;
} fk_devprop;

FK_API CUresult cuDeviceGetProperties(fk_devprop *p, CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  if (!p)
    return CUDA_ERROR_INVALID_VALUE;
  static const int attrs[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
  int v[14], ok;
  for (int i = 0; i < 14; i++)
    v[i] = attribute_value(attrs[i], dev, &ok);
  *p = (fk_devprop){v[0],
                    {v[1], v[2], v[3]},
                    {v[4], v[5], v[6]},
                    v[7],
                    v[8],
                    v[9],
                    v[10],
                    v[11],
                    v[12],
                    v[13]};
  return CUDA_SUCCESS;
}

/* The widest 1D texture over linear memory of a format and channel count:
 * 2^28 elements (Hopper's), as long as the format and count are ones a
 * texture takes (1 otherwise). */
FK_API CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t *width, int format, unsigned channels,
                                                   CUdevice dev) {
  CUresult rc = fk_check_device(dev);
  if (rc)
    return rc;
  int known = format == 0x01 || format == 0x02 || format == 0x03 || format == 0x08 ||
              format == 0x09 || format == 0x0a || format == 0x10 || format == 0x20;
  if (!width || !known || (channels != 1 && channels != 2 && channels != 4))
    return CUDA_ERROR_INVALID_VALUE;
  *width = (size_t)1 << 28;
  return CUDA_SUCCESS;
}
