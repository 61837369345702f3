/* Stream memory operations: cuStreamWriteValue32/64, cuStreamWaitValue32/64
 * (and their _v2 names, the same ABI) and cuStreamBatchMemOp(_v2).
 *
 * The fake does a stream's work at the call, so an operation runs when the
 * call is made, after what the stream holds before it: stream callbacks
 * (host functions) queued earlier have run, and with simulated kernel time
 * (FAKEGPU_KERNEL_US) the stream's kernels have ended. A write stores the
 * 32- or 64-bit value at the address. A wait polls the address until its
 * condition holds (GEQ: (int32_t)(*addr - value) >= 0, or int64_t; EQ;
 * AND: *addr & value; NOR: ~(*addr | value)), so a value written by
 * another thread of the process, a host callback or another process (IPC
 * memory) releases it; the calling thread waits in its place (the fake has
 * no stream that could wait alone). A condition that does not hold within
 * FAKEGPU_WAIT_VALUE_MS (default 10000) answers 702 (LAUNCH_TIMEOUT) and
 * says on stderr what it waited for: on a GPU the stream would hang.
 *
 * The address must be 4-byte (8 for 64-bit) aligned and lie in device
 * memory of the process (plain, managed, VMM mapped with access, IPC) or in
 * page-locked host memory (cuMemHostAlloc, cuMemHostRegister): 1 otherwise,
 * as are unknown flags (write: NO_MEMORY_BARRIER 1; wait: the four
 * conditions and FLUSH 1<<30, accepted). A batch takes up to 256
 * operations (waits, writes, FLUSH_REMOTE_WRITES and BARRIER, which order
 * nothing more on the fake), flags 0; every operation is checked before
 * any is done. On a capturing stream they cannot be recorded: 900, the
 * capture invalidated. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fakecuda.h"

#define FK_ERR_LAUNCH_TIMEOUT ((CUresult)702)
#define FK_WAIT_FLUSH (1u << 30)
#define FK_BATCH_MAX 256

enum { OP_WAIT32 = 1, OP_WRITE32 = 2, OP_FLUSH = 3, OP_WAIT64 = 4, OP_WRITE64 = 5, OP_BARRIER = 6 };

/* CUstreamBatchMemOpParams: a 48-byte union led by the operation. */
typedef union {
  int operation;
  struct {
    int operation;
    CUdeviceptr address;
    uint64_t value; /* value (32-bit, the low half) or value64 */
    unsigned int flags;
    CUdeviceptr alias;
  } v;
  struct {
    int operation;
    unsigned int flags;
  } f;
  uint64_t pad[6];
} fk_memop;

/* The address holds a word of width bytes the fake may touch. fk_lock held. */
static int word_ok(CUdeviceptr addr, unsigned width) {
  return addr && addr % width == 0 &&
         (fk_mem_range_ok(addr, width) || fk_alloc_containing(addr, width) != NULL);
}

static int op_width(int op) { return op == OP_WAIT64 || op == OP_WRITE64 ? 8 : 4; }

/* One operation's arguments: 0 or 1. fk_lock held. */
static CUresult op_check(const fk_memop *m) {
  int op = m->operation;
  if (op == OP_FLUSH || op == OP_BARRIER)
    return m->f.flags <= (op == OP_BARRIER ? 1u : 0u) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  if (op != OP_WAIT32 && op != OP_WAIT64 && op != OP_WRITE32 && op != OP_WRITE64)
    return CUDA_ERROR_INVALID_VALUE;
  unsigned allowed = op == OP_WRITE32 || op == OP_WRITE64 ? 1u : 3u | FK_WAIT_FLUSH;
  if (m->v.flags & ~allowed)
    return CUDA_ERROR_INVALID_VALUE;
  return word_ok(m->v.address, (unsigned)op_width(op)) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Checks the context, stream and every operation; then waits for what the
 * stream holds before them. Takes and leaves fk_lock. */
static CUresult ops_begin(CUstream s, const fk_memop *ops, unsigned n) {
  fk_lock();
  struct CUctx_st *c;
  CUresult rc = fk_need_ctx(&c);
  if (rc == CUDA_SUCCESS && !fk_stream_ok(s))
    rc = CUDA_ERROR_INVALID_HANDLE;
  for (unsigned i = 0; rc == CUDA_SUCCESS && i < n; i++)
    rc = op_check(&ops[i]);
  if (rc == CUDA_SUCCESS)
    rc = fk_stream_work(s); /* a capture cannot record them: 900 */
  double until = rc == CUDA_SUCCESS && fk_sim_on() ? fk_sim_stream_done(c, s) : 0;
  fk_unlock();
  if (rc == CUDA_SUCCESS) {
    fk_callbacks_drain(); /* host functions queued before have run */
    if (until > 0)
      fk_sim_sleep_until(until);
  }
  return rc;
}

static int holds(uint64_t have, uint64_t want, unsigned flags, int wide) {
  switch (flags & 3u) {
  case 0: return wide ? (int64_t)(have - want) >= 0 : (int32_t)(uint32_t)(have - want) >= 0;
  case 1: return have == want;
  case 2: return (have & want) != 0;
  default: return wide ? ~(have | want) != 0 : (uint32_t) ~(have | want) != 0;
  }
}

static uint64_t load(CUdeviceptr addr, int wide) {
  if (wide)
    return __atomic_load_n((const uint64_t *)(uintptr_t)addr, __ATOMIC_ACQUIRE);
  return __atomic_load_n((const uint32_t *)(uintptr_t)addr, __ATOMIC_ACQUIRE);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* Polls until the condition holds (1 ms apart after the first 100 tries),
 * at most FAKEGPU_WAIT_VALUE_MS. */
static CUresult wait_value(const fk_memop *m) {
  int wide = m->operation == OP_WAIT64;
  uint64_t want = wide ? m->v.value : (uint32_t)m->v.value;
  double end = now_ms() + (double)fk_cfg.wait_value_ms;
  for (unsigned long tries = 0;; tries++) {
    if (holds(load(m->v.address, wide), want, m->v.flags, wide))
      return CUDA_SUCCESS;
    if (now_ms() >= end)
      break;
    if (tries >= 100)
      nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  static const char *conds[] = {"GEQ", "EQ", "AND", "NOR"};
  fprintf(stderr,
          "fakegpu: cuStreamWaitValue%d(0x%llx, %s 0x%llx) still waits after %ld ms (the word "
          "holds 0x%llx): answered CUDA_ERROR_LAUNCH_TIMEOUT (702), where a GPU's stream would "
          "hang. The fake waits in the calling thread, so a value that thread writes later "
          "never comes; FAKEGPU_WAIT_VALUE_MS sets the wait\n",
          wide ? 64 : 32, (unsigned long long)m->v.address, conds[m->v.flags & 3u],
          (unsigned long long)want, fk_cfg.wait_value_ms,
          (unsigned long long)load(m->v.address, wide));
  return FK_ERR_LAUNCH_TIMEOUT;
}

static CUresult run_op(const fk_memop *m) {
  switch (m->operation) {
  case OP_WRITE32:
    __atomic_store_n((uint32_t *)(uintptr_t)m->v.address, (uint32_t)m->v.value, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
  case OP_WRITE64:
    __atomic_store_n((uint64_t *)(uintptr_t)m->v.address, m->v.value, __ATOMIC_RELEASE);
    return CUDA_SUCCESS;
  case OP_WAIT32:
  case OP_WAIT64: return wait_value(m);
  default: __atomic_thread_fence(__ATOMIC_SEQ_CST); return CUDA_SUCCESS; /* flush, barrier */
  }
}

static CUresult ops_run(CUstream s, const fk_memop *ops, unsigned n) {
  CUresult rc = ops_begin(s, ops, n);
  for (unsigned i = 0; rc == CUDA_SUCCESS && i < n; i++)
    rc = run_op(&ops[i]);
  return rc;
}

static CUresult one_op(CUstream s, int op, CUdeviceptr addr, uint64_t value, unsigned flags) {
  fk_memop m;
  memset(&m, 0, sizeof m);
  m.v.operation = op;
  m.v.address = addr;
  m.v.value = value;
  m.v.flags = flags;
  return ops_run(s, &m, 1);
}

FK_API CUresult cuStreamWriteValue32(CUstream s, CUdeviceptr addr, uint32_t v, unsigned flags) {
  return one_op(s, OP_WRITE32, addr, v, flags);
}
FK_API CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, uint32_t v, unsigned flags) {
  return one_op(s, OP_WRITE32, addr, v, flags);
}
FK_API CUresult cuStreamWriteValue64(CUstream s, CUdeviceptr addr, uint64_t v, unsigned flags) {
  return one_op(s, OP_WRITE64, addr, v, flags);
}
FK_API CUresult cuStreamWriteValue64_v2(CUstream s, CUdeviceptr addr, uint64_t v, unsigned flags) {
  return one_op(s, OP_WRITE64, addr, v, flags);
}
FK_API CUresult cuStreamWaitValue32(CUstream s, CUdeviceptr addr, uint32_t v, unsigned flags) {
  return one_op(s, OP_WAIT32, addr, v, flags);
}
FK_API CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, uint32_t v, unsigned flags) {
  return one_op(s, OP_WAIT32, addr, v, flags);
}
FK_API CUresult cuStreamWaitValue64(CUstream s, CUdeviceptr addr, uint64_t v, unsigned flags) {
  return one_op(s, OP_WAIT64, addr, v, flags);
}
FK_API CUresult cuStreamWaitValue64_v2(CUstream s, CUdeviceptr addr, uint64_t v, unsigned flags) {
  return one_op(s, OP_WAIT64, addr, v, flags);
}

static CUresult batch(CUstream s, unsigned n, const void *ops, unsigned flags) {
  if (!n || n > FK_BATCH_MAX || !ops || flags) {
    fk_lock();
    struct CUctx_st *c;
    CUresult rc = fk_need_ctx(&c);
    fk_unlock();
    return rc ? rc : CUDA_ERROR_INVALID_VALUE;
  }
  return ops_run(s, ops, n);
}

FK_API CUresult cuStreamBatchMemOp(CUstream s, unsigned n, const void *ops, unsigned flags) {
  return batch(s, n, ops, flags);
}
FK_API CUresult cuStreamBatchMemOp_v2(CUstream s, unsigned n, const void *ops, unsigned flags) {
  return batch(s, n, ops, flags);
}
