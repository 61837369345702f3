/* 8 threads allocate and free at once (own owners and one shared owner); each
 * block is filled with its thread's byte and checked before it is freed, so
 * two threads handed overlapping blocks would be caught. Afterwards the books
 * balance. Meant to run under ASan (make asan) and TSan (see docs/memory.md). */
#include <pthread.h>

#include "memory_util.h"
#include "test.h"

#define NT 8
#define OPS 1500
#define LIVE 24

static dev_device *dev;
static mem_allocator *alloc;
static ebb_owner *shared;
static int bad[NT];

typedef struct targ {
  int id;
  ebb_owner *own;
} targ;

static void fail(int id, const char *what) {
  if (bad[id]++ < 3)
    fprintf(stderr, "thread %d: %s: %s\n", id, what, ebb_errmsg());
}

static unsigned next_rand(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return *s >> 8;
}

static int check_fill(uint64_t addr, size_t n, unsigned char v) {
  unsigned char buf[64];
  size_t k = n < sizeof buf ? n : sizeof buf;
  if (dev_copy_dtoh(dev, buf, addr, k) || dev_copy_dtoh(dev, buf + 0, addr + n - k, k))
    return 0;
  for (size_t i = 0; i < k; i++)
    if (buf[i] != v)
      return 0;
  return 1;
}

static void *worker(void *p) {
  targ *t = p;
  unsigned seed = 77u * (unsigned)t->id + 1;
  uint64_t addr[LIVE] = {0};
  size_t size[LIVE] = {0};
  unsigned char v = (unsigned char)(0x10 + t->id);
  for (int op = 0; op < OPS; op++) {
    int slot = (int)(next_rand(&seed) % LIVE);
    if (addr[slot]) {
      if (!check_fill(addr[slot], size[slot], v))
        fail(t->id, "block content changed (or copy failed)");
      if (mem_free(alloc, addr[slot]))
        fail(t->id, "free");
      addr[slot] = 0;
      continue;
    }
    unsigned r = next_rand(&seed);
    size_t n = r % 4 == 0 ? (size_t)(1 + r % 6) << 20 : (size_t)(1 + r % 200000);
    ebb_owner *o = r % 3 == 0 ? shared : t->own;
    if (mem_alloc(o, n, "threads.c:1", &addr[slot])) {
      fail(t->id, "alloc");
      continue;
    }
    size[slot] = n;
    if (dev_memset8(dev, addr[slot], v, n))
      fail(t->id, "memset8");
    if (op % 200 == 0) {
      uint64_t got;
      mem_allocator_trim(alloc, &got);
      mem_owner_stats st = {.size = sizeof st};
      mem_owner_get_stats(t->own, &st);
    }
  }
  for (int i = 0; i < LIVE; i++)
    if (addr[i]) {
      if (!check_fill(addr[i], size[i], v))
        fail(t->id, "block content changed at the end");
      mem_free(alloc, addr[i]);
    }
  return NULL;
}

static void run(const char *spec) {
  dev = mt_open(spec);
  REQUIRE(mem_allocator_create(dev, NULL, &alloc) == 0);
  REQUIRE(mem_owner_create(alloc, "shared", NULL, &shared) == 0);
  pthread_t th[NT];
  targ args[NT];
  for (int i = 0; i < NT; i++) {
    char name[32];
    snprintf(name, sizeof name, "thread %d", i);
    args[i].id = i;
    bad[i] = 0;
    REQUIRE(mem_owner_create(alloc, name, NULL, &args[i].own) == 0);
    REQUIRE(pthread_create(&th[i], NULL, worker, &args[i]) == 0);
  }
  for (int i = 0; i < NT; i++)
    pthread_join(th[i], NULL);
  for (int i = 0; i < NT; i++)
    CHECK_MSG(bad[i] == 0, "%s: thread %d saw %d failed operations or overwritten blocks", spec, i,
              bad[i]);
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(alloc, &st);
  CHECK_EQ_U64(st.allocated.current, 0);
  CHECK_EQ_U64(st.blocks.current, 0);
  CHECK_EQ_U64(st.cached.current, st.reserved.current);
  CHECK(st.blocks.total > NT * OPS / 3);
  uint64_t sum = 0;
  for (int i = 0; i < NT; i++) {
    mem_owner_stats os = {.size = sizeof os};
    mem_owner_get_stats(args[i].own, &os);
    CHECK_EQ_U64(os.bytes.current, 0);
    sum += os.blocks.total;
    mem_owner_destroy(args[i].own, NULL);
  }
  mem_owner_stats os = {.size = sizeof os};
  mem_owner_get_stats(shared, &os);
  CHECK_EQ_U64(sum + os.blocks.total, st.blocks.total);
  mem_owner_destroy(shared, NULL);
  uint64_t got = 0;
  mem_allocator_trim(alloc, &got);
  CHECK_EQ_U64(mt_reserved(alloc), 0);
  mem_allocator_destroy(alloc);
  dev_close(dev);
}

MT_MAIN_CPU_AND_FAKE(run)
