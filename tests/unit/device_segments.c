/* Segments on the CPU device and on cuda:0: plain and VMM allocation rounded
 * to the granularity, copies and memset, park (physical memory released,
 * address kept) and wake (new memory at the same address: the old data is
 * gone), EBB_EBUSY releasing a context under mapped segments, EBB_EOOM with a
 * message naming the device and sizes, kernels through host twins. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "device/kernel_twin.h"
#include "device/device.h"
#include "support/devtest.h"
#include "test.h"

static int real;

/* A host twin: params = {uint64_t *dst (device address), uint32_t n,
 * uint32_t value}; thread i writes value + i. */
void fakegpu_twin_ebbtest_iota(const dev_launch_dims *dims, void **params);
void fakegpu_twin_ebbtest_iota(const dev_launch_dims *dims, void **params) {
  uint32_t *dst = (uint32_t *)(uintptr_t)(*(uint64_t *)params[0]);
  uint32_t n = *(uint32_t *)params[1], v = *(uint32_t *)params[2];
  uint64_t threads = (uint64_t)dims->grid[0] * dims->block[0];
  for (uint64_t i = 0; i < threads && i < n; i++)
    dst[i] = v + (uint32_t)i;
}

static uint64_t process_bytes(dev_device *d) {
  uint64_t b = 0;
  if (dev_kind_of(d) == EBB_DEVICE_CUDA)
    dev_process_used(d, getpid(), &b);
  return b;
}

static void plain_and_copies(const char *spec) {
  dev_device *d = NULL;
  REQUIRE(dev_open(spec, &d) == 0);
  size_t g = 0;
  CHECK_EQ_INT(dev_granularity(d, &g), 0);
  if (!real && dev_kind_of(d) == EBB_DEVICE_CUDA)
    CHECK_EQ_U64(g, 2u << 20);
  if (dev_kind_of(d) == EBB_DEVICE_CPU)
    CHECK_EQ_U64(g, (uint64_t)sysconf(_SC_PAGESIZE));
  dev_dseg s;
  REQUIRE(dev_seg_alloc(d, 1000 * 1000, EBB_SEG_PLAIN, &s) == 0);
  CHECK(s.addr != 0);
  CHECK_EQ_U64(s.size % g, 0);
  CHECK(s.size >= 1000 * 1000 && s.size < 1000 * 1000 + g);
  CHECK_EQ_INT(s.kind, EBB_SEG_PLAIN);
  CHECK(dev_ctx_active(d) || dev_kind_of(d) == EBB_DEVICE_CPU);

  unsigned char *buf = malloc(s.size), *back = malloc(s.size);
  for (size_t i = 0; i < s.size; i++)
    buf[i] = (unsigned char)(i * 7 + 1);
  CHECK_EQ_INT(dev_copy_htod(d, s.addr, buf, s.size), 0);
  memset(back, 0, s.size);
  CHECK_EQ_INT(dev_copy_dtoh(d, back, s.addr, s.size), 0);
  CHECK_MSG(memcmp(buf, back, s.size) == 0, "%s: htod then dtoh changed the data", spec);
  /* dtod: second half <- first half; memset the first 100 bytes */
  CHECK_EQ_INT(dev_copy_dtod(d, s.addr + s.size / 2, s.addr, s.size / 2), 0);
  CHECK_EQ_INT(dev_memset8(d, s.addr, 0xab, 100), 0);
  CHECK_EQ_INT(dev_synchronize(d), 0);
  CHECK_EQ_INT(dev_copy_dtoh(d, back, s.addr, s.size), 0);
  CHECK(back[0] == 0xab && back[99] == 0xab && back[100] == buf[100]);
  CHECK(memcmp(back + s.size / 2, buf, s.size / 2) == 0);

  /* A context under a mapped segment cannot be released. */
  if (dev_kind_of(d) == EBB_DEVICE_CUDA) {
    CHECK_EQ_INT(dev_ctx_release(d), EBB_EBUSY);
    CHECK(strstr(ebb_errmsg(), "1 mapped segments") != NULL);
    CHECK(dev_ctx_active(d));
  }
  CHECK_EQ_INT(dev_seg_free(d, &s), 0);
  CHECK_EQ_U64(s.addr, 0);
  CHECK_EQ_INT(dev_seg_free(d, &s), EBB_EINVAL); /* not a segment any more */
  CHECK_EQ_INT(dev_ctx_release(d), 0);
  CHECK(!dev_ctx_active(d));
  free(buf);
  free(back);
  dev_close(d);
}

static void vmm_park_wake(const char *spec) {
  dev_device *d = NULL;
  REQUIRE(dev_open(spec, &d) == 0);
  if (!dev_supports_vmm(d)) {
    fprintf(stderr, "note: %s (%s) has no VMM; park/wake not checked\n", spec, dev_name(d));
    dev_close(d);
    return;
  }
  const size_t mib64 = 64u << 20;
  uint64_t before = process_bytes(d);
  dev_dseg s;
  REQUIRE(dev_seg_alloc(d, mib64, EBB_SEG_VMM, &s) == 0);
  CHECK_EQ_INT(s.kind, EBB_SEG_VMM);
  CHECK(s.handle != 0);
  CHECK(!s.parked);
  CHECK_EQ_U64(s.size, mib64);
  uint64_t mapped = process_bytes(d);
  if (!real && dev_kind_of(d) == EBB_DEVICE_CUDA)
    CHECK_EQ_U64(mapped, (300ull << 20) + mib64);

  uint32_t *pat = malloc(mib64), *back = malloc(mib64);
  for (size_t i = 0; i < mib64 / 4; i++)
    pat[i] = 0x5eed0000u ^ (uint32_t)i;
  CHECK_EQ_INT(dev_copy_htod(d, s.addr, pat, mib64), 0);
  uint64_t addr = s.addr;

  uint64_t rss_before = 0, rss_after = 0;
  if (dev_kind_of(d) == EBB_DEVICE_CPU)
    dev_process_used(d, getpid(), &rss_before);
  CHECK_EQ_INT(dev_seg_park(d, &s), 0);
  CHECK_EQ_U64(s.addr, addr);
  CHECK(s.parked);
  if (dev_kind_of(d) == EBB_DEVICE_CPU) {
    /* The pages went back to the kernel: the resident set shrank by ~64 MiB. */
    dev_process_used(d, getpid(), &rss_after);
    CHECK_MSG(rss_before >= rss_after + (48u << 20),
              "cpu park did not give the pages back: resident %llu -> %llu bytes",
              (unsigned long long)rss_before, (unsigned long long)rss_after);
  }
  CHECK_EQ_U64(s.handle, 0);
  if (dev_kind_of(d) == EBB_DEVICE_CUDA && !real)
    CHECK_MSG(process_bytes(d) == mapped - mib64,
              "parking did not give the 64 MiB back: %llu bytes held, was %llu",
              (unsigned long long)process_bytes(d), (unsigned long long)mapped);
  /* With only parked segments the context can go. */
  CHECK_EQ_INT(dev_seg_park(d, &s), 0); /* again: no-op */
  CHECK_EQ_INT(dev_ctx_release(d), 0);
  CHECK(!dev_ctx_active(d));
  if (dev_kind_of(d) == EBB_DEVICE_CUDA && !real)
    CHECK_EQ_U64(process_bytes(d), before);

  CHECK_EQ_INT(dev_seg_wake(d, &s), 0);
  CHECK_EQ_U64(s.addr, addr);
  CHECK(!s.parked);
  CHECK(s.handle != 0);
  memset(back, 0, mib64);
  CHECK_EQ_INT(dev_copy_dtoh(d, back, s.addr, mib64), 0);
  if (!real)
    CHECK_MSG(memcmp(back, pat, mib64) != 0, "%s: the data survived park/wake", spec);
  CHECK_EQ_INT(dev_copy_htod(d, s.addr, pat, mib64), 0);
  CHECK_EQ_INT(dev_copy_dtoh(d, back, s.addr, mib64), 0);
  CHECK_MSG(memcmp(back, pat, mib64) == 0, "%s: the woken segment does not hold new data", spec);

  /* Plain segments cannot be parked. */
  dev_dseg p;
  REQUIRE(dev_seg_alloc(d, 1, EBB_SEG_PLAIN, &p) == 0);
  CHECK_EQ_INT(dev_seg_park(d, &p), EBB_EINVAL);
  CHECK_EQ_INT(dev_seg_free(d, &p), 0);
  CHECK_EQ_INT(dev_seg_free(d, &s), 0);
  CHECK_EQ_INT(dev_ctx_release(d), 0);
  free(pat);
  free(back);
  dev_close(d);
}

static int overcommit_always(void) {
  FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
  int mode = 0;
  if (f) {
    if (fscanf(f, "%d", &mode) != 1)
      mode = 0;
    fclose(f);
  }
  return mode == 1;
}

static void oom(const char *spec) {
  if (!strcmp(spec, "cpu") && overcommit_always()) {
    fprintf(stderr, "note: vm.overcommit_memory=1: the kernel grants any mapping, cpu OOM not "
                    "checked\n");
    return;
  }
  dev_device *d = NULL;
  REQUIRE(dev_open(spec, &d) == 0);
  uint64_t total = dev_total_bytes(d);
  size_t want = (size_t)(total + total / 2);
  dev_dseg s;
  int rc = dev_seg_alloc(d, want, EBB_SEG_PLAIN, &s);
  CHECK_MSG(rc == EBB_EOOM, "%s: asking for 1.5x the device answered %d (%s)", spec, rc,
            ebb_errmsg());
  CHECK_EQ_U64(s.addr, 0);
  if (dev_kind_of(d) == EBB_DEVICE_CUDA) {
    CHECK_MSG(strstr(ebb_errmsg(), "cuMemAlloc_v2 failed on cuda:0: CUDA_ERROR_OUT_OF_MEMORY (2)"),
              "OOM message: %s", ebb_errmsg());
    CHECK_MSG(strstr(ebb_errmsg(), "free of"), "OOM message lacks the free/total: %s",
              ebb_errmsg());
    if (dev_supports_vmm(d)) {
      rc = dev_seg_alloc(d, want, EBB_SEG_VMM, &s);
      CHECK_MSG(rc == EBB_EOOM, "VMM OOM answered %d (%s)", rc, ebb_errmsg());
      CHECK_MSG(strstr(ebb_errmsg(), "on cuda:0") && strstr(ebb_errmsg(), "GiB"),
                "VMM OOM message: %s", ebb_errmsg());
    }
    CHECK_EQ_INT(dev_ctx_release(d), 0); /* nothing was left held */
  } else {
    CHECK_MSG(strstr(ebb_errmsg(), "on cpu") && strstr(ebb_errmsg(), "GiB"), "cpu OOM message: %s",
              ebb_errmsg());
  }
  dev_close(d);
}

static void kernels(const char *spec) {
  dev_device *d = NULL;
  REQUIRE(dev_open(spec, &d) == 0);
  if (real && dev_kind_of(d) == EBB_DEVICE_CUDA) {
    fprintf(stderr, "note: host-twin kernels are a fake/CPU feature; not run on %s\n", spec);
    dev_close(d);
    return;
  }
  dev_module *m = NULL;
  REQUIRE(dev_module_load(d, NULL, &m) == 0);
  dev_kernel *k = NULL, *k2 = NULL;
  CHECK_EQ_INT(dev_device_kernel(d, m, "ebbtest_iota", &k), 0);
  CHECK_EQ_INT(dev_device_kernel(d, m, "ebbtest_iota", &k2), 0);
  CHECK(k == k2);
  dev_kernel *none = NULL;
  CHECK(dev_device_kernel(d, m, "ebbtest_no_such_kernel", &none) != 0);
  CHECK(none == NULL);
  dev_dseg s;
  REQUIRE(dev_seg_alloc(d, 4096, EBB_SEG_PLAIN, &s) == 0);
  uint64_t dst = s.addr;
  uint32_t n = 1000, v = 7;
  void *params[] = {&dst, &n, &v};
  unsigned grid[3] = {4, 1, 1}, block[3] = {256, 1, 1};
  CHECK_EQ_INT(dev_launch(d, k, grid, block, 0, params), 0);
  CHECK_EQ_INT(dev_synchronize(d), 0);
  uint32_t out[1000];
  CHECK_EQ_INT(dev_copy_dtoh(d, out, s.addr, sizeof out), 0);
  CHECK_EQ_INT(out[0], 7);
  CHECK_EQ_INT(out[999], 1006);
  if (dev_kind_of(d) == EBB_DEVICE_CUDA) {
    CHECK_EQ_INT(dev_seg_free(d, &s), 0);
    CHECK_EQ_INT(dev_ctx_release(d), EBB_EBUSY); /* the module holds it */
    dev_module_unload(d, m);
    CHECK_EQ_INT(dev_ctx_release(d), 0);
  } else {
    dev_module_unload(d, m);
  }
  dev_close(d); /* frees s on the CPU */
}

static void pinned(const char *spec) {
  dev_device *d = NULL;
  REQUIRE(dev_open(spec, &d) == 0);
  void *p = NULL;
  CHECK_EQ_INT(dev_host_alloc(d, 1 << 20, &p), 0);
  CHECK(p != NULL && ((uintptr_t)p % 4096) == 0);
  memset(p, 1, 1 << 20);
  if (dev_kind_of(d) == EBB_DEVICE_CUDA)
    CHECK_EQ_INT(dev_ctx_release(d), EBB_EBUSY);
  CHECK_EQ_INT(dev_host_free(d, p), 0);
  CHECK_EQ_INT(dev_ctx_release(d), 0);
  dev_close(d);
}

static void test_cpu(void) {
  plain_and_copies("cpu");
  vmm_park_wake("cpu");
  oom("cpu");
  kernels("cpu");
  pinned("cpu");
}

static void test_cuda(void) {
  plain_and_copies("cuda:0");
  vmm_park_wake("cuda:0");
  oom("cuda:0");
  kernels("cuda:0");
  pinned("cuda:0");
}

/* close frees what is still held and gives the context back. */
static void test_close_frees(void) {
  dev_device *d = NULL;
  REQUIRE(dev_open("cuda:0", &d) == 0);
  dev_dseg a, b;
  REQUIRE(dev_seg_alloc(d, 8u << 20, EBB_SEG_PLAIN, &a) == 0);
  if (dev_supports_vmm(d)) {
    REQUIRE(dev_seg_alloc(d, 8u << 20, EBB_SEG_VMM, &b) == 0);
    CHECK_EQ_INT(dev_seg_park(d, &b), 0);
  }
  CHECK(process_bytes(d) > 0 || real);
  dev_close(d);
  long long mib = dt_smi_proc_mib(getpid());
  CHECK_MSG(mib == 0, "after close the smi still lists %lld MiB for this process", mib);
}

/* Several threads allocating, copying and freeing on one device at once: the
 * registry stays consistent and every thread finds the context current. */
typedef struct thread_arg {
  dev_device *d;
  int id, errors;
  char last[256];
} thread_arg;

static void *thread_body(void *p) {
  thread_arg *a = p;
  unsigned char buf[4096], back[4096];
  for (int i = 0; i < 40; i++) {
    dev_dseg s;
    if (dev_seg_alloc(a->d, 4096 + (size_t)i * 1000, i % 2 ? EBB_SEG_VMM : EBB_SEG_PLAIN, &s)) {
      a->errors++;
      snprintf(a->last, sizeof a->last, "%s", ebb_errmsg());
      continue;
    }
    memset(buf, a->id * 40 + i, sizeof buf);
    if (dev_copy_htod(a->d, s.addr, buf, sizeof buf) ||
        dev_copy_dtoh(a->d, back, s.addr, sizeof back) || memcmp(buf, back, sizeof buf)) {
      a->errors++;
      snprintf(a->last, sizeof a->last, "copy: %s", ebb_errmsg());
    }
    if (dev_seg_free(a->d, &s)) {
      a->errors++;
      snprintf(a->last, sizeof a->last, "free: %s", ebb_errmsg());
    }
  }
  return NULL;
}

static void threads_on(const char *spec) {
  dev_device *d = NULL;
  REQUIRE(dev_open(spec, &d) == 0);
  pthread_t t[4];
  thread_arg a[4];
  for (int i = 0; i < 4; i++) {
    a[i] = (thread_arg){.d = d, .id = i};
    pthread_create(&t[i], NULL, thread_body, &a[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    CHECK_MSG(a[i].errors == 0, "%s: thread %d saw %d errors (last: %s)", spec, i, a[i].errors,
              a[i].last);
  }
  /* Everything was freed, so the context can go. */
  CHECK_EQ_INT(dev_ctx_release(d), 0);
  dev_close(d);
}

static void test_threads(void) {
  threads_on("cpu");
  threads_on("cuda:0");
}

int main(void) {
  real = dt_real_gpu();
  RUN(test_cpu);
  RUN(test_cuda);
  RUN(test_close_frees);
  RUN(test_threads);
  return TEST_END();
}
