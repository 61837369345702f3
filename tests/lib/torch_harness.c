/* PyTorch's CUDAPluggableAllocator, imitated: dlopen libebb.so, dlsym the
 * alloc/free functions by name and call them through pointers of the types
 * PyTorch uses (void *(ssize_t, int, cudaStream_t), void (void *, ssize_t,
 * int, cudaStream_t)), from several threads, each with its own owner pushed
 * (the allocator callback itself knows no owner). Checks attribution, peaks,
 * the default owner, leaks and release against fakegpu-smi. Built without
 * linking anything of ebb (tests/unit/lib.cmake); $EBB_LIBEBB is the library.
 * The late-free guard: a tensor still alive when its owner is released
 * (ebb frees its block as a leak) keeps its address from new tensors until
 * its free, and that late free never frees another block ebb placed at the
 * address; ebb_torch_alloc_at (the Python plug-in's entry) keeps the site. Registered as lib_torch_alloc. */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <sys/types.h>

#include "ebb/ebb.h" /* types only: every function comes from dlsym */
#include "smi.h"
#include "test.h"

typedef void *cudaStream_t;
typedef void *(*torch_alloc_fn)(ssize_t size, int device, cudaStream_t stream);
typedef void (*torch_free_fn)(void *ptr, ssize_t size, int device, cudaStream_t stream);
typedef int (*torch_alloc_at_fn)(ssize_t size, int device, const char *site, void **ptr);

static struct {
  torch_alloc_fn alloc;
  torch_free_fn free;
  torch_alloc_at_fn alloc_at;
  __typeof__(ebb_lookup) *lookup;
  __typeof__(ebb_gpu_alloc) *gpu_alloc;
  __typeof__(ebb_free) *ebb_free;
  __typeof__(ebb_gpu_for_ordinal) *gpu_for_ordinal;
  __typeof__(ebb_gpu_open) *gpu_open;
  __typeof__(ebb_gpu_close) *gpu_close;
  __typeof__(ebb_owner_open) *owner_open;
  __typeof__(ebb_owner_close) *owner_close;
  __typeof__(ebb_owner_get_usage) *usage;
  __typeof__(ebb_owner_release) *release;
  __typeof__(ebb_gpu_release) *gpu_release;
  __typeof__(ebb_gpu_get_stats) *stats;
  __typeof__(ebb_gpu_default_owner) *default_owner;
  __typeof__(ebb_push) *push;
  __typeof__(ebb_pop) *pop;
  __typeof__(ebb_leak_list_free) *leak_free;
  __typeof__(ebb_errmsg) *errmsg;
} E;

#define NTHREADS 4
#define ROUNDS 6

static ebb_gpu *g;
static ebb_owner *owners[NTHREADS];
static uint64_t expect_peak[NTHREADS], expect_now[NTHREADS], expect_total[NTHREADS];
static void *forgotten[NTHREADS];
static cudaStream_t fake_stream = (cudaStream_t)0x5eed;

static void *worker(void *arg) {
  int t = (int)(intptr_t)arg;
  if (E.push(owners[t]))
    return (void *)"push failed";
  void *live[ROUNDS] = {0};
  ssize_t live_sz[ROUNDS] = {0};
  uint64_t now = 0, peak = 0, total = 0;
  for (int r = 0; r < ROUNDS; r++) {
    /* thread t allocates (t+1)*(r+1) MiB plus a small odd size, frees the
     * previous round's big block every other round */
    ssize_t big = (ssize_t)((uint64_t)(t + 1) * (r + 1) * MiB);
    live[r] = E.alloc(big, 0, fake_stream);
    if (!live[r])
      return (void *)"alloc failed";
    memset(live[r], t + 1, 4096); /* the fake's memory is host memory */
    live_sz[r] = big;
    now += big, total += big;
    void *small = E.alloc(1000 + t, 0, fake_stream); /* rounded to 1024 */
    if (!small)
      return (void *)"small alloc failed";
    now += 1024, total += 1024;
    if (now > peak)
      peak = now;
    E.free(small, 1000 + t, 0, fake_stream);
    now -= 1024;
    if (r % 2 == 1) {
      E.free(live[r - 1], live_sz[r - 1], 0, fake_stream);
      now -= live_sz[r - 1];
      live[r - 1] = NULL;
    }
  }
  /* every block but the last round's goes back; that one is "forgotten" */
  for (int r = 0; r < ROUNDS - 1; r++)
    if (live[r]) {
      E.free(live[r], live_sz[r], 0, fake_stream);
      now -= live_sz[r];
    }
  forgotten[t] = live[ROUNDS - 1];
  expect_now[t] = now, expect_peak[t] = peak, expect_total[t] = total;
  E.pop();
  return NULL;
}

/* 1 when the block at p is live in ebb. */
static int live(void *p) {
  uint64_t n = 0;
  return E.lookup(g, (uint64_t)(uintptr_t)p, NULL, &n) == 0;
}

/* A tensor made under owner "late" (with a site) that is still alive when
 * the owner is closed: ebb frees it as a leak naming the site. A newer
 * tensor then gets the same address (the freed block is the cache's); the
 * old tensor's free, when it comes, must leave the newer block alone. */
static void *leaked_tensor(ssize_t size, const char *site) {
  ebb_owner *o = NULL;
  void *p = NULL;
  REQUIRE(E.owner_open(g, "late", NULL, &o) == 0);
  REQUIRE(E.push(o) == 0);
  int rc = E.alloc_at(size, 0, site, &p);
  E.pop();
  CHECK_MSG(rc == 0 && p, "ebb_torch_alloc_at(%zd): %s", size, E.errmsg());
  ebb_leak_list *l = NULL;
  E.owner_close(o, &l);
  CHECK_MSG(l && l->count == 1, "closing the owner reported %llu leaks, expected 1",
            l ? (unsigned long long)l->count : 0ull);
  if (l && l->count == 1)
    CHECK_EQ_STR(l->leaks[0].site, site);
  E.leak_free(l);
  CHECK(!live(p)); /* ebb freed it */
  return p;
}

static void test_late_free(void) {
  /* PyTorch still holds the leaked tensor's address (its allocator keys
   * its allocations by address and aborts on a second one): a new tensor
   * gets another address, and the set-aside block is given back */
  test_current_ = "late free: PyTorch's addresses";
  void *old = leaked_tensor(4 * MiB, "model.py:12");
  void *t2 = E.alloc(4 * MiB, 0, fake_stream);
  REQUIRE(t2 != NULL);
  CHECK_MSG(t2 != old,
            "a new tensor got the address 0x%llx that a live (leaked) tensor "
            "still holds in PyTorch",
            (unsigned long long)(uintptr_t)old);
  CHECK(!live(old)); /* the block set aside there went back */
  /* memory that is not PyTorch's may take the address; the old tensor's
   * late free must leave that block alone */
  test_current_ = "late free: another block at the address";
  uint64_t other = 0;
  REQUIRE(E.gpu_alloc(g, 4 * MiB, "other.c:1", &other) == 0);
  REQUIRE(other == (uint64_t)(uintptr_t)old); /* else this proves nothing */
  E.free(old, 4 * MiB, 0, fake_stream);       /* the leaked tensor dies now */
  CHECK_MSG(live((void *)(uintptr_t)other),
            "the late free of a leaked tensor freed the newer "
            "block at 0x%llx",
            (unsigned long long)other);
  REQUIRE(E.ebb_free(g, other) == 0);
  /* once PyTorch has let go, the address is PyTorch's to have again */
  test_current_ = "late free: the address free again";
  void *t3 = E.alloc(4 * MiB, 0, fake_stream);
  CHECK_MSG(t3 == old, "after the late free the address 0x%llx stays set aside",
            (unsigned long long)(uintptr_t)old);
  E.free(t3, 4 * MiB, 0, fake_stream);
  E.free(t2, 4 * MiB, 0, fake_stream);
  CHECK(!live(t3) && !live(t2));

  /* an empty tensor takes nothing; a NULL out-pointer is refused */
  void *p = (void *)1;
  CHECK(E.alloc_at(0, 0, "x.py:1", &p) == 0 && p == NULL);
  CHECK(E.alloc_at(1, 0, "x.py:1", NULL) == EBB_EINVAL);
}

#define SYM(field, name)                   \
  do {                                     \
    *(void **)&E.field = dlsym(lib, name); \
    REQUIRE(E.field != NULL);              \
  } while (0)

int main(void) {
  const char *path = getenv("EBB_LIBEBB");
  REQUIRE(path != NULL);
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* as ctypes.CDLL does */
  if (!lib) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return 1;
  }
  SYM(alloc, "ebb_torch_alloc");
  SYM(free, "ebb_torch_free");
  SYM(alloc_at, "ebb_torch_alloc_at");
  SYM(lookup, "ebb_lookup");
  SYM(gpu_alloc, "ebb_gpu_alloc");
  SYM(ebb_free, "ebb_free");
  SYM(gpu_for_ordinal, "ebb_gpu_for_ordinal");
  SYM(gpu_open, "ebb_gpu_open");
  SYM(gpu_close, "ebb_gpu_close");
  SYM(owner_open, "ebb_owner_open");
  SYM(owner_close, "ebb_owner_close");
  SYM(usage, "ebb_owner_get_usage");
  SYM(release, "ebb_owner_release");
  SYM(gpu_release, "ebb_gpu_release");
  SYM(stats, "ebb_gpu_get_stats");
  SYM(default_owner, "ebb_gpu_default_owner");
  SYM(push, "ebb_push");
  SYM(pop, "ebb_pop");
  SYM(leak_free, "ebb_leak_list_free");
  SYM(errmsg, "ebb_errmsg");
  CHECK(dlsym(lib, "mem_alloc") == NULL); /* internals are not exported */

  /* the program opens the device, the framework's allocator uses it, the
   * program closes its handle: the allocator's handle must stay valid */
  test_current_ = "shared handle";
  ebb_gpu *mine = NULL;
  REQUIRE(E.gpu_open("cuda:0", &mine) == 0);
  REQUIRE(E.gpu_for_ordinal(0, &g) == 0);
  CHECK(g == mine); /* one device, one allocator */
  E.gpu_close(mine);

  test_current_ = "threads";
  CHECK_EQ_INT(smi_me(), 0); /* nothing allocated yet: no context */
  char name[16];
  for (int t = 0; t < NTHREADS; t++) {
    snprintf(name, sizeof name, "stage%d", t);
    REQUIRE(E.owner_open(g, name, NULL, &owners[t]) == 0);
  }
  pthread_t th[NTHREADS];
  for (int t = 0; t < NTHREADS; t++)
    REQUIRE(pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t) == 0);
  for (int t = 0; t < NTHREADS; t++) {
    void *err = NULL;
    pthread_join(th[t], &err);
    CHECK_MSG(err == NULL, "thread %d: %s: %s", t, (const char *)err, E.errmsg());
  }
  for (int t = 0; t < NTHREADS; t++) {
    ebb_owner_usage u = {.size = sizeof u};
    REQUIRE(E.usage(owners[t], &u) == 0);
    CHECK_EQ_U64(u.bytes, expect_now[t]);
    CHECK_EQ_U64(u.bytes_peak, expect_peak[t]);
    CHECK_EQ_U64(u.bytes_total, expect_total[t]);
    CHECK_EQ_U64(u.blocks, 1);
    CHECK_EQ_U64(expect_now[t], (uint64_t)(t + 1) * ROUNDS * MiB);
  }

  /* no owner pushed on this thread: the device's default owner */
  test_current_ = "default owner";
  void *d = E.alloc(3 * MiB, 0, fake_stream);
  REQUIRE(d != NULL);
  ebb_owner_usage u = {.size = sizeof u};
  REQUIRE(E.usage(E.default_owner(g), &u) == 0);
  CHECK_EQ_U64(u.bytes, 3 * MiB);
  E.free(d, 3 * MiB, 0, fake_stream);
  CHECK(E.alloc(0, 0, fake_stream) == NULL); /* empty tensors take nothing */

  test_current_ = "smi";
  ebb_gpu_stats st = {.size = sizeof st};
  REQUIRE(E.stats(g, &st) == 0);
  CHECK_EQ_INT(smi_me(), (long)((st.reserved + st.context_bytes) / MiB));

  /* releasing each owner: its forgotten block is a leak, and the bytes the
   * driver got back are what fakegpu-smi sees go */
  test_current_ = "release";
  for (int t = 0; t < NTHREADS; t++) {
    ebb_leak_list *leaks = NULL;
    ebb_released r = {.size = sizeof r};
    long before = smi_me();
    REQUIRE(E.release(owners[t], 0, &leaks, &r) == 0);
    long after = smi_me();
    REQUIRE(leaks != NULL);
    CHECK_EQ_U64(leaks->count, 1);
    CHECK_EQ_U64(leaks->bytes, expect_now[t]);
    CHECK_EQ_STR(leaks->leaks[0].site, "torch");
    E.leak_free(leaks);
    CHECK_MSG(before - after == (long)(r.released_bytes / MiB),
              "stage%d: release says %llu MiB, fakegpu-smi saw %ld MiB go", t,
              (unsigned long long)(r.released_bytes / MiB), before - after);
    /* PyTorch frees the tensor later: quiet, no double free */
    E.free(forgotten[t], (ssize_t)expect_now[t], 0, fake_stream);
  }
  REQUIRE(E.stats(g, &st) == 0);
  CHECK_EQ_U64(st.reserved, 0);
  CHECK_EQ_INT(smi_me(), (long)(st.context_bytes / MiB));

  test_late_free();

  test_current_ = "context";
  ebb_released r = {.size = sizeof r};
  REQUIRE(E.gpu_release(NULL, EBB_GPU_RELEASE_CONTEXT, &r) == 0);
  CHECK_EQ_INT(r.context_released, 1);
  CHECK_EQ_INT(smi_me(), 0);
  for (int t = 0; t < NTHREADS; t++)
    E.owner_close(owners[t], NULL);
  return TEST_END();
}
