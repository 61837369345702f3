/* Quota per owner (and per parent) and out-of-memory: trim + one retry, then
 * EBB_EOOM with a message naming the owner, the request and the numbers. */
#include "memory_util.h"
#include "test.h"

static void test_quota(void) {
  dev_device *d = mt_open("cpu");
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *p = NULL, *s = NULL, *t = NULL;
  REQUIRE(mem_owner_create(a, "songtrace", NULL, &p) == 0);
  REQUIRE(mem_owner_create(a, "separate", p, &s) == 0);
  REQUIRE(mem_owner_create(a, "align", p, &t) == 0);
  mem_owner_set_kind(s, "stage");
  mem_owner_set_kind(p, "pipeline");
  CHECK_EQ_INT(mem_owner_set_quota(s, 10 * MiB), 0);
  CHECK_EQ_INT(mem_owner_set_quota(p, 12 * MiB), 0);
  uint64_t x, y, z;
  CHECK_EQ_INT(mem_alloc(s, 8 * MiB, "q.c:1", &x), 0);
  CHECK_EQ_INT(mem_alloc(s, 3 * MiB, "q.c:2", &y), EBB_EQUOTA);
  CHECK_MSG(strstr(ebb_errmsg(), "stage 'separate' asked for 3 MiB (3145728 bytes) but holds 8 MiB "
                                 "of its 10 MiB quota"),
            "quota message: %s", ebb_errmsg());
  CHECK_EQ_INT(mem_alloc(s, 2 * MiB, "q.c:3", &y), 0); /* exactly at quota */
  /* the parent's quota covers its stages together */
  CHECK_EQ_INT(mem_alloc(t, 3 * MiB, "q.c:4", &z), EBB_EQUOTA);
  CHECK_MSG(strstr(ebb_errmsg(), "owner 'align' asked for 3 MiB") &&
                strstr(ebb_errmsg(), "pipeline 'songtrace' holds 10 MiB of its 12 MiB quota"),
            "parent quota message: %s", ebb_errmsg());
  CHECK_EQ_INT(mem_alloc(t, 2 * MiB, "q.c:5", &z), 0);
  mem_owner_stats st = {.size = sizeof st};
  mem_owner_get_stats(s, &st);
  CHECK_EQ_U64(st.refused, 1);
  CHECK_EQ_U64(st.quota, 10 * MiB);
  CHECK_EQ_INT(mem_owner_set_quota(p, 0), 0); /* lifted */
  CHECK_EQ_INT(mem_alloc(t, 3 * MiB, "q.c:6", &x), 0);
  mem_owner_destroy(p, NULL); /* leaks everything on purpose: reported */
  mem_allocator_destroy(a);
  dev_close(d);
}

static void test_oom_trim_retry(void) {
  /* a 1 GiB fake device of our own (the state file is this test's alone) */
  setenv("FAKEGPU_MEMORY_MIB", "1024", 1);
  setenv("FAKEGPU_CONTEXT_MIB", "300", 1);
  dev_device *d = mt_open("cuda:0");
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *o1 = NULL, *o2 = NULL;
  REQUIRE(mem_owner_create(a, "decode", NULL, &o1) == 0);
  REQUIRE(mem_owner_create(a, "separate", NULL, &o2) == 0);
  mem_owner_set_kind(o2, "stage");
  uint64_t x[300], y;
  /* 300 MiB of small blocks (two to a 2 MiB small segment), then freed: the
   * small segments stay cached (growth in the large pool does not drop them) */
  for (int i = 0; i < 300; i++)
    CHECK_EQ_INT(mem_alloc(o1, 1000 * 1024, "o.c:1", &x[i]), 0);
  for (int i = 0; i < 300; i++)
    CHECK_EQ_INT(mem_free(a, x[i]), 0);
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(a, &st);
  CHECK_EQ_U64(st.cached.current, 300 * MiB);
  /* 700 MiB does not fit next to the cache: the allocator trims and retries */
  CHECK_EQ_INT(mem_alloc(o2, 700 * MiB, "o.c:2", &y), 0);
  mem_allocator_get_stats(a, &st);
  CHECK_EQ_U64(st.oom_retries, 1);
  CHECK_EQ_U64(st.reserved.current, 700 * MiB);
  CHECK_EQ_U64(st.trimmed_bytes, 300 * MiB);
  CHECK_EQ_INT(mem_free(a, y), 0);
  /* 2 GiB can never fit: the cached 700 MiB segment is given back (too small
   * to serve it), the driver still says no, trim + retry, fail with numbers */
  CHECK_EQ_INT(mem_alloc(o2, 2048 * MiB, "o.c:3", &y), EBB_EOOM);
  const char *m = ebb_errmsg();
  CHECK_MSG(strstr(m, "stage 'separate' asked for 2.0 GiB; 724 MiB free on cuda:0 after trimming "
                      "700 MiB of cache"),
            "OOM message: %s", m);
  CHECK_MSG(strstr(m, "request 2147483648 bytes"), "OOM message lacks the exact request: %s", m);
  mem_owner_stats os = {.size = sizeof os};
  mem_owner_get_stats(o2, &os);
  CHECK_EQ_U64(os.refused, 1);
  CHECK_EQ_U64(os.bytes.current, 0);
  mem_allocator_get_stats(a, &st);
  CHECK_EQ_U64(st.reserved.current, 0);
  CHECK_EQ_U64(st.oom_retries, 1);
  /* nothing to trim: no retry (it would only hide the failure), and the
   * message says 0 B trimmed */
  CHECK_EQ_INT(mem_alloc(o1, 900 * MiB, "o.c:4", &y), EBB_EOOM);
  CHECK_MSG(strstr(ebb_errmsg(), "owner 'decode' asked for 900 MiB; 724 MiB free on cuda:0 after "
                                 "trimming 0 B of cache"),
            "OOM message: %s", ebb_errmsg());
  mem_owner_destroy(o1, NULL);
  mem_owner_destroy(o2, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

int main(void) {
  RUN(test_quota);
  RUN(test_oom_trim_retry);
  return TEST_END();
}
