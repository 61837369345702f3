/* The release registry: callbacks run in registration order, a failing one is
 * reported and does not stop the others, unregistering works (also from
 * inside a callback), a callback that drops a cache makes that memory go
 * back in the same release. */
#include "base/log.h"
#include "memory_util.h"
#include "test.h"

static char order[64];
static size_t norder;

static void cb_void(void *arg) { order[norder++] = *(const char *)arg; }

static int cb_fail(void *arg) {
  order[norder++] = *(const char *)arg;
  return ebb_seterr(EBB_EIO, "cache '%s' could not be dropped", (const char *)arg);
}

static uint64_t h_self, h_victim;
static int cb_unregister(void *arg) {
  order[norder++] = *(const char *)arg;
  CHECK_EQ_INT(mem_off_release(h_self), 0);   /* itself */
  CHECK_EQ_INT(mem_off_release(h_victim), 0); /* a later one: must not run */
  return 0;
}

typedef struct cache {
  mem_allocator *a;
  uint64_t addr;
} cache;
static void cb_drop_cache(void *arg) {
  cache *c = arg;
  if (c->addr)
    mem_free(c->a, c->addr);
  c->addr = 0;
}

static void test_order_and_failures(void) {
  norder = 0;
  uint64_t h[5];
  CHECK_EQ_INT(mem_on_release("a", cb_void, "a", &h[0]), 0);
  CHECK_EQ_INT(mem_on_release_int("b-fails", cb_fail, "b", &h[1]), 0);
  CHECK_EQ_INT(mem_on_release("c", cb_void, "c", &h[2]), 0);
  CHECK_EQ_INT(mem_on_release_int("d-fails", cb_fail, "d", &h[3]), 0);
  CHECK_EQ_INT(mem_on_release("e", cb_void, "e", &h[4]), 0);
  CHECK(h[0] != 0 && h[0] != h[1]);
  FILE *logf = tmpfile();
  base_log_set_stream(logf);
  mem_release_result r = {.size = sizeof r};
  CHECK_EQ_INT(mem_release(NULL, EBB_RELEASE_DEFAULT, &r), 0);
  base_log_set_stream(NULL);
  order[norder] = 0;
  CHECK_EQ_STR(order, "abcde");
  CHECK_EQ_INT(r.callbacks_run, 5);
  CHECK_EQ_INT(r.callbacks_failed, 2);
  char buf[4096] = {0};
  rewind(logf);
  size_t n = fread(buf, 1, sizeof buf - 1, logf);
  buf[n] = 0;
  fclose(logf);
  CHECK_MSG(strstr(buf, "release callback 'b-fails' failed: cache 'b' could not be dropped"),
            "failure of b not reported; log was: %s", buf);
  CHECK_MSG(strstr(buf, "'d-fails' failed"), "failure of d not reported; log was: %s", buf);
  /* unregister: c goes, the rest keep their order */
  CHECK_EQ_INT(mem_off_release(h[2]), 0);
  CHECK_EQ_INT(mem_off_release(h[2]), EBB_ENOTFOUND);
  norder = 0;
  CHECK_EQ_INT(mem_release(NULL, EBB_RELEASE_CALLBACKS, &r), 0);
  order[norder] = 0;
  CHECK_EQ_STR(order, "abde");
  /* flags without CALLBACKS run none */
  norder = 0;
  CHECK_EQ_INT(mem_release(NULL, EBB_RELEASE_TRIM, &r), 0);
  CHECK_EQ_INT((int)norder, 0);
  for (int i = 0; i < 5; i++)
    if (i != 2)
      CHECK_EQ_INT(mem_off_release(h[i]), 0);
}

static void test_unregister_during_run(void) {
  norder = 0;
  uint64_t h1, h2;
  CHECK_EQ_INT(mem_on_release("first", cb_void, "1", &h1), 0);
  CHECK_EQ_INT(mem_on_release_int("self", cb_unregister, "s", &h_self), 0);
  CHECK_EQ_INT(mem_on_release("victim", cb_void, "v", &h_victim), 0);
  CHECK_EQ_INT(mem_on_release("last", cb_void, "2", &h2), 0);
  CHECK_EQ_INT(mem_release(NULL, EBB_RELEASE_CALLBACKS, NULL), 0);
  order[norder] = 0;
  CHECK_EQ_STR(order, "1s2");
  norder = 0;
  CHECK_EQ_INT(mem_release(NULL, EBB_RELEASE_CALLBACKS, NULL), 0);
  order[norder] = 0;
  CHECK_EQ_STR(order, "12");
  mem_off_release(h1);
  mem_off_release(h2);
}

static void test_cache_dropped_and_returned(const char *spec) {
  dev_device *d = mt_open(spec);
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *o = NULL;
  REQUIRE(mem_owner_create(a, "cacher", NULL, &o) == 0);
  cache c = {.a = a};
  CHECK_EQ_INT(mem_alloc(o, 48 * MiB, "c.c:1", &c.addr), 0);
  uint64_t h;
  CHECK_EQ_INT(mem_on_release("cacher's model cache", cb_drop_cache, &c, &h), 0);
  mem_release_result r = {.size = sizeof r};
  CHECK_EQ_INT(mem_release(a, EBB_RELEASE_DEFAULT, &r), 0);
  CHECK_EQ_U64(c.addr, 0);
  CHECK_EQ_U64(r.released_bytes, 48 * MiB);
  CHECK_EQ_U64(mt_reserved(a), 0);
  mem_off_release(h);
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

static void test_cache_cpu(void) { test_cache_dropped_and_returned("cpu"); }
static void test_cache_fake(void) {
  test_cache_dropped_and_returned("cuda:0");
  CHECK_EQ_INT(mt_smi_used_mib(getpid()), 0);
}

static void test_bad_args(void) {
  uint64_t h;
  CHECK_EQ_INT(mem_on_release("x", NULL, NULL, &h), EBB_EINVAL);
  CHECK_EQ_INT(mem_off_release(123456789), EBB_ENOTFOUND);
}

int main(void) {
  RUN(test_order_and_failures);
  RUN(test_unregister_during_run);
  RUN(test_cache_cpu);
  RUN(test_cache_fake);
  RUN(test_bad_args);
  return TEST_END();
}
