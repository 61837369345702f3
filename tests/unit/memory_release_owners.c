/* The release registry by owner (issue 17): a callback registered for an
 * owner runs when that owner's callbacks are released, never a neighbour's;
 * process-wide registrations (mem_on_release) run only as the process's
 * (mem_release_callbacks_of(NULL)) or in a whole-process mem_release; a
 * dropped cache of one owner gives back exactly its bytes at the next trim
 * on the CPU device and the fake GPU (measured by fakegpu-smi). */
#include <unistd.h>

#include "memory_util.h"
#include "test.h"

typedef struct cache {
  mem_allocator *a;
  uint64_t addr;
  char tag;
} cache;
static char order[32];
static size_t norder;
static void drop(void *arg) {
  cache *c = arg;
  order[norder++] = c->tag;
  if (c->addr)
    mem_free(c->a, c->addr);
  c->addr = 0;
}

static void test_own_callbacks_only(const char *spec) {
  dev_device *d = mt_open(spec);
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *oa = NULL, *ob = NULL, *proc = NULL;
  REQUIRE(mem_owner_create(a, "a", NULL, &oa) == 0);
  REQUIRE(mem_owner_create(a, "b", NULL, &ob) == 0);
  REQUIRE(mem_owner_create(a, "lib", NULL, &proc) == 0);
  cache ca = {a, 0, 'a'}, cb = {a, 0, 'b'}, cp = {a, 0, 'p'};
  REQUIRE(mem_alloc(oa, 40 * MiB, "t.c:1", &ca.addr) == 0);
  REQUIRE(mem_alloc(ob, 60 * MiB, "t.c:2", &cb.addr) == 0);
  REQUIRE(mem_alloc(proc, 20 * MiB, "t.c:3", &cp.addr) == 0);
  uint64_t ha, hb, hp;
  CHECK_EQ_INT(mem_on_release_for(oa, "a's cache", drop, &ca, &ha), 0);
  CHECK_EQ_INT(mem_on_release_for(ob, "b's cache", drop, &cb, &hb), 0);
  CHECK_EQ_INT(mem_on_release("a library's cache", drop, &cp, &hp), 0);
  CHECK_EQ_U64(mem_release_count_of(oa), 1);
  CHECK_EQ_U64(mem_release_count_of(NULL), 1);
  long used0 = strcmp(spec, "cpu") ? mt_smi_used_mib(getpid()) : -1;

  /* a's release: a's callback only, and the trim gives back a's 40 MiB */
  norder = 0;
  int run = -1, failed = -1;
  CHECK_EQ_INT(mem_release_callbacks_of(oa, &run, &failed), 1);
  CHECK_EQ_INT(run, 1);
  CHECK_EQ_INT(failed, 0);
  mem_release_result r = {.size = sizeof r};
  CHECK_EQ_INT(mem_release(a, EBB_RELEASE_TRIM, &r), 0);
  order[norder] = 0;
  CHECK_EQ_STR(order, "a");
  CHECK_EQ_U64(r.released_bytes, 40 * MiB);
  CHECK(cb.addr != 0 && cp.addr != 0);
  if (used0 >= 0) /* the fake GPU, measured from outside */
    CHECK_EQ_INT(mt_smi_used_mib(getpid()), used0 - 40);

  /* the process's: the library's cache only */
  norder = 0;
  CHECK_EQ_INT(mem_release_callbacks_of(NULL, NULL, NULL), 1);
  CHECK_EQ_INT(mem_release(a, EBB_RELEASE_TRIM, &r), 0);
  order[norder] = 0;
  CHECK_EQ_STR(order, "p");
  CHECK_EQ_U64(r.released_bytes, 20 * MiB);
  CHECK(cb.addr != 0);

  /* a whole-process release runs every owner's, in registration order */
  norder = 0;
  CHECK_EQ_INT(mem_release(a, EBB_RELEASE_DEFAULT, &r), 0);
  order[norder] = 0;
  CHECK_EQ_STR(order, "abp");
  CHECK_EQ_U64(r.released_bytes, 60 * MiB);
  CHECK_EQ_INT(r.callbacks_run, 3);

  CHECK_EQ_INT(mem_off_release(ha), 0);
  CHECK_EQ_INT(mem_off_release(hb), 0);
  CHECK_EQ_INT(mem_off_release(hp), 0);
  CHECK_EQ_U64(mem_release_count_of(oa), 0);
  CHECK_EQ_INT(mem_release_callbacks_of(ob, NULL, NULL), 0);
  mem_owner_destroy(oa, NULL);
  mem_owner_destroy(ob, NULL);
  mem_owner_destroy(proc, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

MT_MAIN_CPU_AND_FAKE(test_own_callbacks_only)
