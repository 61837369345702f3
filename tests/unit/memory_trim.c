/* trim returns exactly the cached segments, release leaves exactly the
 * context, releasing the context leaves 0 - checked from outside with
 * fakegpu-smi. Unattributed memory shows what was taken behind ebb's back. */
#include "memory_util.h"
#include "test.h"

static long ctx_mib(void) {
  const char *e = getenv("FAKEGPU_CONTEXT_MIB");
  return e ? atol(e) : 300;
}

static void test_trim_exact(void) {
  dev_device *d = mt_open("cuda:0");
  pid_t me = getpid();
  CHECK_EQ_INT(mt_smi_used_mib(me), 0); /* opening creates no context */
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  CHECK_EQ_INT(dev_ctx_active(d), 0);
  ebb_owner *o = NULL;
  REQUIRE(mem_owner_create(a, "trimmer", NULL, &o) == 0);
  uint64_t keep = 0, x[6];
  CHECK_EQ_INT(mem_alloc(o, 1000, "t.c:1", &keep), 0);          /* pins one small segment */
  CHECK_EQ_INT(mem_alloc(o, 3 * MiB, "t.c:2", &x[0]), 0);       /* 20 MiB large seg */
  CHECK_EQ_INT(mem_alloc(o, 64 * MiB, "t.c:3", &x[1]), 0);      /* own 64 MiB seg */
  CHECK_EQ_INT(mem_alloc(o, 100 * MiB + 1, "t.c:4", &x[2]), 0); /* own 102 MiB seg */
  CHECK_EQ_INT(mem_alloc(o, 5000, "t.c:5", &x[3]), 0);          /* same small seg */
  uint64_t reserved = mt_reserved(a);
  CHECK_EQ_U64(reserved, (2 + 20 + 64 + 102) * MiB);
  CHECK_EQ_INT(mt_smi_used_mib(me), ctx_mib() + 188);
  mem_free(a, x[0]);
  mem_free(a, x[1]);
  mem_free(a, x[3]);
  uint64_t got = 0;
  CHECK_EQ_INT(mem_allocator_trim(a, &got), 0);
  CHECK_EQ_U64(got, (20 + 64) * MiB); /* the small segment still has `keep` */
  CHECK_EQ_U64(mt_reserved(a), (2 + 102) * MiB);
  CHECK_EQ_INT(mt_smi_used_mib(me), ctx_mib() + 104);
  CHECK_EQ_INT(mem_allocator_trim(a, &got), 0);
  CHECK_EQ_U64(got, 0);
  mem_free(a, x[2]);
  mem_free(a, keep);
  mem_release_result r = {.size = sizeof r};
  CHECK_EQ_INT(mem_release(a, EBB_RELEASE_DEFAULT, &r), 0);
  CHECK_EQ_U64(r.released_bytes, 104 * MiB);
  CHECK_EQ_U64(r.segment_bytes, 104 * MiB);
  CHECK_EQ_INT(r.context_released, 0);
  /* after release the process holds exactly its context */
  CHECK_EQ_INT(mt_smi_used_mib(me), ctx_mib());
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(a, &st);
  CHECK_EQ_U64(st.reserved.current, 0);
  CHECK_EQ_U64(st.reserved.peak, 188 * MiB);
  CHECK_EQ_U64(st.trimmed_bytes, 188 * MiB);
  CHECK_EQ_INT(st.ctx_active, 1);
  CHECK_EQ_U64(st.context_estimate, (uint64_t)ctx_mib() * MiB); /* measured via NVML */
  CHECK_EQ_U64(st.driver_total, 81920 * MiB);
  /* and 0 after releasing the context */
  CHECK_EQ_INT(mem_release(a, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &r), 0);
  CHECK_EQ_INT(r.context_released, 1);
  CHECK_EQ_U64(r.context_bytes, (uint64_t)ctx_mib() * MiB);
  CHECK_EQ_U64(r.released_bytes, (uint64_t)ctx_mib() * MiB);
  CHECK_EQ_INT(mt_smi_used_mib(me), 0);
  CHECK_EQ_INT(dev_ctx_active(d), 0);
  /* the allocator works again after the context went back */
  uint64_t again = 0;
  CHECK_EQ_INT(mem_alloc(o, 4 * MiB, "t.c:6", &again), 0);
  CHECK_EQ_INT(mt_smi_used_mib(me), ctx_mib() + 20);
  mem_free(a, again);
  CHECK_EQ_INT(mem_release(a, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &r), 0);
  CHECK_EQ_U64(r.released_bytes, (uint64_t)(ctx_mib() + 20) * MiB);
  CHECK_EQ_INT(mt_smi_used_mib(me), 0);
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

static void test_release_never_initialises(void) {
  dev_device *d = mt_open("cuda:0");
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  mem_release_result r = {.size = sizeof r};
  CHECK_EQ_INT(mem_release(a, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &r), 0);
  CHECK_EQ_U64(r.released_bytes, 0);
  CHECK_EQ_INT(dev_ctx_active(d), 0);
  mem_alloc_stats st = {.size = sizeof st};
  CHECK_EQ_INT(mem_allocator_get_stats(a, &st), 0);
  CHECK_EQ_INT(dev_ctx_active(d), 0);
  mem_unattributed u = {.size = sizeof u};
  CHECK_EQ_INT(mem_allocator_unattributed(a, &u), 0);
  CHECK_EQ_INT(dev_ctx_active(d), 0);
  CHECK_EQ_INT(mt_smi_used_mib(getpid()), 0);
  mem_allocator_destroy(a);
  dev_close(d);
}

static void test_unattributed(void) {
  dev_device *d = mt_open("cuda:0");
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *o = NULL;
  REQUIRE(mem_owner_create(a, "u", NULL, &o) == 0);
  uint64_t x = 0;
  CHECK_EQ_INT(mem_alloc(o, 30 * MiB, "u.c:1", &x), 0);
  mem_unattributed u = {.size = sizeof u};
  CHECK_EQ_INT(mem_allocator_unattributed(a, &u), 0);
  CHECK_EQ_INT(u.known, 1);
  CHECK_EQ_INT(u.per_process, 1);
  CHECK_EQ_U64(u.ebb_reserved, 30 * MiB);
  CHECK_EQ_U64(u.context_estimate, (uint64_t)ctx_mib() * MiB);
  CHECK_EQ_INT(u.unattributed, 0);
  /* 100 MiB straight from the driver, behind ebb's back */
  dev_dseg raw;
  CHECK_EQ_INT(dev_seg_alloc(d, 100 * MiB, EBB_SEG_PLAIN, &raw), 0);
  CHECK_EQ_INT(mem_allocator_unattributed(a, &u), 0);
  CHECK_EQ_INT(u.unattributed, (int64_t)(100 * MiB));
  CHECK_EQ_U64(u.driver_used, (uint64_t)(ctx_mib() + 130) * MiB);
  dev_seg_free(d, &raw);
  CHECK_EQ_INT(mem_allocator_unattributed(a, &u), 0);
  CHECK_EQ_INT(u.unattributed, 0);
  mem_owner_destroy(o, NULL);             /* x leaks: reported and freed */
  CHECK_EQ_U64(mt_reserved(a), 30 * MiB); /* cached until trim */
  mem_allocator_destroy(a);
  CHECK_EQ_INT(mt_smi_used_mib(getpid()), ctx_mib());
  dev_close(d);
  CHECK_EQ_INT(mt_smi_used_mib(getpid()), 0);
}

int main(void) {
  RUN(test_trim_exact);
  RUN(test_release_never_initialises);
  RUN(test_unattributed);
  return TEST_END();
}
