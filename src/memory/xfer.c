/* Bulk copies between device memory and (pageable) host memory for park,
 * sleep and wake: in chunks through two pinned staging buffers, each with a
 * stream of its own, so that the host's memcpy into (or out of) one buffer
 * overlaps the DMA of the other. The backups themselves stay ordinary host
 * memory: they must outlive the context (sleep gives it back, and pinned
 * memory goes with its context), and the staging buffers are only the size
 * of two chunks. Everything here lives for one call: the streams and the
 * staging buffers are given back by mem__xfer_close, before any context
 * release can need them gone. Lock: the allocator's (the caller's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/log.h"
#include "memory/internal.h"

static void fallback(mem_xfer *x) {
  for (int i = 0; i < 2; i++) {
    dev_stream_destroy(x->dev, x->st[i]);
    dev_host_free(x->dev, x->stage[i]);
    x->st[i] = NULL;
    x->stage[i] = NULL;
  }
  x->cap = 0;
}

int mem__xfer_open_locked(mem_allocator *a, uint64_t total, mem_xfer *x) {
  memset(x, 0, sizeof *x);
  x->dev = a->dev;
  /* The CPU device's memory is host memory: staging would only add a copy. */
  if (total == 0 || dev_kind_of(a->dev) == EBB_DEVICE_CPU)
    return 0;
  int rc = mem__ctx_ensure_locked(a);
  if (rc)
    return rc;
  size_t cap = total < MEM_XFER_CHUNK ? mem__round_up((size_t)total, 4096) : MEM_XFER_CHUNK;
  for (int i = 0; i < 2 && !rc; i++) {
    rc = dev_stream_create(a->dev, &x->st[i]);
    if (!rc)
      rc = dev_host_alloc(a->dev, cap, &x->stage[i]);
  }
  if (rc) {
    /* Still correct without them, only slower: plain synchronous copies. */
    base_log(EBB_LOG_DEBUG, "memory",
             "%s: no pinned staging for a %llu-byte copy (%s); copying "
             "synchronously",
             dev_device_label(a->dev), (unsigned long long)total, ebb_errmsg());
    fallback(x);
    return 0;
  }
  x->cap = cap;
  return 0;
}

/* rc, remembered when it is the first failure (close keeps its message). */
static int keep(mem_xfer *x, int rc) {
  if (rc && !x->rc)
    x->rc = rc;
  return rc;
}

/* Waits for buffer i's copy; a device-to-host one is then moved to where it
 * belongs. */
static int drain(mem_xfer *x, int i) {
  if (!x->busy[i])
    return 0;
  x->busy[i] = 0;
  int rc = dev_stream_sync(x->dev, x->st[i]);
  if (!rc && x->pend_dst[i])
    memcpy(x->pend_dst[i], x->stage[i], x->pend_n[i]);
  x->pend_dst[i] = NULL;
  return rc;
}

/* One chunked copy: to the device (host -> staging -> async DMA) or from it
 * (async DMA -> staging, moved to host once drained). */
static int chunks(mem_xfer *x, int to_device, unsigned char *host, uint64_t dev, size_t n) {
  int rc = 0;
  for (size_t off = 0; off < n && !rc; off += x->cap) {
    size_t k = n - off < x->cap ? n - off : x->cap;
    int i = x->cur;
    x->cur ^= 1;
    if ((rc = drain(x, i)))
      break;
    if (to_device) {
      memcpy(x->stage[i], host + off, k);
      rc = dev_copy_htod_async(x->dev, dev + off, x->stage[i], k, x->st[i]);
    } else {
      rc = dev_copy_dtoh_async(x->dev, x->stage[i], dev + off, k, x->st[i]);
      x->pend_dst[i] = rc == 0 ? host + off : NULL;
      x->pend_n[i] = k;
    }
    x->busy[i] = rc == 0;
  }
  return keep(x, rc);
}

int mem__xfer_htod(mem_xfer *x, uint64_t dst, const unsigned char *src, size_t n) {
  if (!x->cap)
    return dev_copy_htod(x->dev, dst, src, n);
  return chunks(x, 1, (unsigned char *)src, dst, n);
}

int mem__xfer_dtoh(mem_xfer *x, unsigned char *dst, uint64_t src, size_t n) {
  if (!x->cap)
    return dev_copy_dtoh(x->dev, dst, src, n);
  return chunks(x, 0, dst, src, n);
}

int mem__xfer_finish(mem_xfer *x) {
  if (!x->cap)
    return dev_synchronize(x->dev);
  int rc = drain(x, x->cur);
  int rc2 = drain(x, x->cur ^ 1);
  return keep(x, rc ? rc : rc2);
}

void mem__xfer_close(mem_xfer *x) {
  if (!x->dev)
    return;
  int busy = x->busy[0] || x->busy[1];
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", ebb_errmsg());
  for (int i = 0; i < 2; i++)
    if (x->busy[i]) {
      x->busy[i] = 0;
      dev_stream_sync(x->dev, x->st[i]); /* a copy failed: its error is the one kept */
    }
  fallback(x);
  if (busy && x->rc)
    ebb_seterr(x->rc, "%s", msg);
  x->dev = NULL;
}

/* Backups are mapped for themselves, not malloc'd: freeing one (a wake, an
 * unload) gives its pages back to the kernel at once, where malloc would
 * keep them for reuse (glibc's mmap threshold rises to 32 MiB after the
 * first large free; ASan's quarantine holds 256 MiB), and a sleeping
 * server's RSS is what its backups hold. */
void *mem__backup_alloc(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
#ifdef MADV_HUGEPAGE
  /* huge pages where the kernel has them (THP "madvise"): the sleep's
   * writes fault 2 MiB at a time, the wake's reads miss the TLB less */
  if (n >= ((size_t)2 << 20))
    madvise(p, n, MADV_HUGEPAGE);
#endif
  return p;
}

void mem__backup_free(void *p, size_t n) {
  if (p)
    munmap(p, n);
}
