/* The pinned host pool: buffers counted per owner, idle buffers reused for
 * the same rounded size, emptied by release, leaks reclaimed. */
#include "memory_util.h"
#include "test.h"

static void run(const char *spec) {
  dev_device *d = mt_open(spec);
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *o = NULL;
  REQUIRE(mem_owner_create(a, "decode", NULL, &o) == 0);
  void *p1 = NULL, *p2 = NULL, *p3 = NULL;
  CHECK_EQ_INT(mem_pinned_alloc(o, 10000, &p1), 0);       /* 12 KiB */
  CHECK_EQ_INT(mem_pinned_alloc(o, 3 * MiB + 1, &p2), 0); /* 4 MiB */
  REQUIRE(p1 && p2);
  memset(p1, 0x5a, 10000); /* host-addressable */
  memset(p2, 0xa5, 3 * MiB + 1);
  mem_owner_stats os = {.size = sizeof os};
  mem_owner_get_stats(o, &os);
  CHECK_EQ_U64(os.pinned_bytes.current, 12288 + 4 * MiB);
  CHECK_EQ_U64(os.pinned_blocks.current, 2);
  CHECK_EQ_U64(os.bytes.current, 0); /* device bytes are counted apart */
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(a, &st);
  CHECK_EQ_U64(st.pinned_reserved.current, 12288 + 4 * MiB);
  CHECK_EQ_U64(st.pinned_allocated.current, 12288 + 4 * MiB);
  CHECK_EQ_INT(mem_pinned_free(a, p1), 0);
  CHECK_EQ_INT(mem_pinned_free(a, p1), EBB_ENOTFOUND);
  /* same rounded size: the idle buffer comes back */
  CHECK_EQ_INT(mem_pinned_alloc(o, 12000, &p3), 0);
  CHECK(p3 == p1);
  CHECK_EQ_INT(mem_pinned_free(a, p3), 0);
  CHECK_EQ_INT(mem_pinned_free(a, p2), 0);
  mem_allocator_get_stats(a, &st);
  CHECK_EQ_U64(st.pinned_allocated.current, 0);
  CHECK_EQ_U64(st.pinned_reserved.current, 12288 + 4 * MiB);
  mem_owner_get_stats(o, &os);
  CHECK_EQ_U64(os.pinned_bytes.peak, 12288 + 4 * MiB);
  CHECK_EQ_U64(os.pinned_blocks.total, 3);
  mem_release_result r = {.size = sizeof r};
  CHECK_EQ_INT(mem_release(a, EBB_RELEASE_DEFAULT, &r), 0);
  CHECK_EQ_U64(r.pinned_bytes, 12288 + 4 * MiB);
  mem_allocator_get_stats(a, &st);
  CHECK_EQ_U64(st.pinned_reserved.current, 0);
  /* a live pinned buffer keeps the context (it belongs to it) */
  CHECK_EQ_INT(mem_pinned_alloc(o, 4096, &p1), 0);
  CHECK_EQ_INT(mem_release(a, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &r), 0);
  if (dev_kind_of(d) == EBB_DEVICE_CUDA) {
    CHECK_EQ_INT(r.context_released, 0);
    CHECK_EQ_INT(r.context_error, EBB_EBUSY);
  }
  mem_leak_report *lr = NULL;
  mem_owner_reclaim(o, &lr);
  REQUIRE(lr != NULL);
  CHECK_EQ_U64(lr->pinned_bytes, 4096);
  CHECK_EQ_INT(lr->leaks[0].pinned, 1);
  mem_leak_report_free(lr);
  CHECK_EQ_INT(mem_release(a, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &r), 0);
  if (dev_kind_of(d) == EBB_DEVICE_CUDA) {
    CHECK_EQ_INT(r.context_released, 1);
    CHECK_EQ_INT(mt_smi_used_mib(getpid()), 0);
  }
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

MT_MAIN_CPU_AND_FAKE(run)
