/* Owner-affine segments: a segment holds one owner's blocks only. Two owners
 * interleaving 1000 small allocations each (with some frees): releasing one
 * gives back every segment that held its blocks, and parking one parks all of
 * them; fakegpu-smi, run as another process, sees exactly those bytes go,
 * and the other owner's counters, segments and contents are untouched. An
 * empty segment is cache that any owner may take. */
#include "memory_util.h"
#include "test.h"

#define N 1000

typedef struct side {
  ebb_owner *o;
  uint64_t addr[N];
  size_t size[N];
} side;

static uint64_t owner_bytes(ebb_owner *o) {
  mem_owner_stats st = {.size = sizeof st};
  mem_owner_get_stats(o, &st);
  return st.bytes.current;
}

static mem_alloc_stats stats(mem_allocator *a) {
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(a, &st);
  return st;
}

static unsigned char pattern(const side *s, int i) {
  return (unsigned char)(i * 7 + (s->size[0] & 0xff) + 1);
}

/* Fills block i of s with its pattern (8 bytes at each end suffice to show
 * a block was moved or overwritten). */
static void fill(dev_device *d, const side *s, int i) {
  unsigned char buf[16];
  memset(buf, pattern(s, i), sizeof buf);
  CHECK_EQ_INT(dev_copy_htod(d, s->addr[i], buf, 8), 0);
  CHECK_EQ_INT(dev_copy_htod(d, s->addr[i] + s->size[i] - 8, buf, 8), 0);
}

/* Blocks of s that do not hold their pattern. */
static int damaged(dev_device *d, const side *s) {
  int bad = 0;
  for (int i = 0; i < N; i++) {
    if (!s->addr[i])
      continue;
    unsigned char x[8], y[8], want[8];
    memset(want, pattern(s, i), sizeof want);
    if (dev_copy_dtoh(d, x, s->addr[i], 8) || dev_copy_dtoh(d, y, s->addr[i] + s->size[i] - 8, 8) ||
        memcmp(x, want, 8) || memcmp(y, want, 8))
      bad++;
  }
  return bad;
}

/* A and B take N small blocks each, in turn (512 B to 200 KiB); every tenth
 * round each frees one of its earlier blocks (holes in its segments). */
static void interleave(dev_device *d, side *A, side *B) {
  unsigned seed = 7;
  for (int i = 0; i < N; i++)
    for (int k = 0; k < 2; k++) {
      side *s = k ? B : A;
      seed = seed * 1664525u + 1013904223u;
      s->size[i] = 512 + (seed >> 8) % (200 * 1024);
      CHECK_EQ_INT(mem_alloc(s->o, s->size[i], k ? "b.c:1" : "a.c:1", &s->addr[i]), 0);
      fill(d, s, i);
      if (i % 10 == 9 && s->addr[i - 5]) {
        CHECK_EQ_INT(mem_free(mem_owner_allocator(s->o), s->addr[i - 5]), 0);
        s->addr[i - 5] = 0;
      }
    }
}

static void free_all(mem_allocator *a, side *s) {
  for (int i = 0; i < N; i++)
    if (s->addr[i]) {
      CHECK_EQ_INT(mem_free(a, s->addr[i]), 0);
      s->addr[i] = 0;
    }
}

/* mode 0: release A (free its blocks, destroy it, trim); 1: park A. */
static void run(const char *spec, int mode) {
  dev_device *d = mt_open(spec);
  int fake = dev_kind_of(d) == EBB_DEVICE_CUDA;
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  static side A, B;
  memset(&A, 0, sizeof A);
  memset(&B, 0, sizeof B);
  REQUIRE(mem_owner_create(a, "a", NULL, &A.o) == 0);
  REQUIRE(mem_owner_create(a, "b", NULL, &B.o) == 0);
  interleave(d, &A, &B);
  uint64_t bytes_a = owner_bytes(A.o), bytes_b = owner_bytes(B.o);
  mem_alloc_stats before = stats(a);
  long smi_before = fake ? mt_smi_used_mib(getpid()) : 0;
  if (fake)
    REQUIRE(smi_before > 0);
  uint64_t back = 0;
  if (mode == 0) {
    free_all(a, &A);
    mem_owner_destroy(A.o, NULL);
    A.o = NULL;
    mem_release_result rr = {.size = sizeof rr};
    CHECK_EQ_INT(mem_release(a, EBB_RELEASE_TRIM, &rr), 0);
    back = rr.segment_bytes;
  } else {
    CHECK_EQ_INT(ebb_owner_park(A.o, &back), 0);
  }
  mem_alloc_stats after = stats(a);
  /* every byte of A went: what is left allocated is B's, all of it */
  CHECK_MSG(back >= bytes_a, "%s %s: %llu bytes went back for owner a's %llu", spec,
            mode ? "park" : "release", (unsigned long long)back, (unsigned long long)bytes_a);
  CHECK_EQ_U64(after.allocated.current, bytes_b);
  CHECK_EQ_U64(after.reserved.current, before.reserved.current - back);
  if (fake)
    CHECK_MSG(smi_before - mt_smi_used_mib(getpid()) == (long)(back >> 20) ||
                  smi_before - mt_smi_used_mib(getpid()) == (long)((back + (1 << 20) - 1) >> 20),
              "%s: fakegpu-smi dropped %ld MiB, ebb gave back %llu bytes", spec,
              smi_before - mt_smi_used_mib(getpid()), (unsigned long long)back);
  /* B untouched: its bytes, its contents, and every segment left is B's
   * alone (parking B parks all that is reserved) */
  CHECK_EQ_U64(owner_bytes(B.o), bytes_b);
  CHECK_EQ_INT(damaged(d, &B), 0);
  uint64_t parked_b = 0;
  CHECK_EQ_INT(ebb_owner_park(B.o, &parked_b), 0);
  if (mode == 0)
    CHECK_EQ_U64(parked_b, after.reserved.current);
  CHECK_EQ_U64(stats(a).allocated.current, 0);
  CHECK_EQ_INT(ebb_owner_wake(B.o), 0);
  CHECK_EQ_INT(damaged(d, &B), 0);
  if (mode == 1) {
    CHECK_EQ_INT(ebb_owner_wake(A.o), 0);
    CHECK_EQ_INT(damaged(d, &A), 0);
    CHECK_EQ_U64(stats(a).allocated.current, bytes_a + bytes_b);
    if (fake)
      CHECK_EQ_INT(mt_smi_used_mib(getpid()), smi_before);
    free_all(a, &A);
    mem_owner_destroy(A.o, NULL);
  }
  free_all(a, &B);
  mem_owner_destroy(B.o, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

static void test_release_cpu(void) { run("cpu", 0); }
static void test_release_fake(void) { run("cuda:0", 0); }
static void test_park_cpu(void) { run("cpu", 1); }
static void test_park_fake(void) { run("cuda:0", 1); }

/* A segment whose last block is freed is cache for anyone: another owner
 * takes it without a driver call, and it is then that owner's alone. */
static void test_empty_segment_changes_owner(void) {
  dev_device *d = mt_open("cuda:0");
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *x = NULL, *y = NULL;
  REQUIRE(mem_owner_create(a, "x", NULL, &x) == 0);
  REQUIRE(mem_owner_create(a, "y", NULL, &y) == 0);
  uint64_t p = 0, q = 0, r = 0;
  CHECK_EQ_INT(mem_alloc(x, 4096, "x.c:1", &p), 0);
  CHECK_EQ_INT(mem_free(a, p), 0);
  CHECK_EQ_U64(stats(a).seg_allocs, 1);
  CHECK_EQ_INT(mem_alloc(y, 4096, "y.c:1", &q), 0);
  CHECK_EQ_U64(stats(a).seg_allocs, 1); /* the cached segment, no driver call */
  CHECK_EQ_U64(q, p);
  CHECK_EQ_INT(mem_alloc(x, 4096, "x.c:2", &r), 0);
  CHECK_EQ_U64(stats(a).seg_allocs, 2); /* y's segment is not x's to share */
  CHECK_EQ_INT(mem_free(a, q), 0);
  CHECK_EQ_INT(mem_free(a, r), 0);
  mem_owner_destroy(x, NULL);
  mem_owner_destroy(y, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

int main(void) {
  RUN(test_release_cpu);
  RUN(test_release_fake);
  RUN(test_park_cpu);
  RUN(test_park_fake);
  RUN(test_empty_segment_changes_owner);
  return TEST_END();
}
