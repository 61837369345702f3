/* Blocks: 512-byte alignment, splitting and coalescing within a segment,
 * small vs large segments, per-owner counters, lookup, double free, debug
 * poisoning. Run on the CPU device and on the fake GPU. */
#include <fcntl.h>
#include <sys/stat.h>

#include "memory_util.h"
#include "test.h"

static const char *spec = "cpu";

static mem_alloc_stats astats(mem_allocator *a) {
  mem_alloc_stats st = {.size = sizeof st};
  CHECK_EQ_INT(mem_allocator_get_stats(a, &st), 0);
  return st;
}

static void test_split_coalesce(void) {
  dev_device *d = mt_open(spec);
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *o = NULL;
  REQUIRE(mem_owner_create(a, "stage", NULL, &o) == 0);
  uint64_t x = 0, y = 0, z = 0;
  CHECK_EQ_INT(mem_alloc(o, 1000, "t.c:1", &x), 0);
  CHECK_EQ_INT(mem_alloc(o, 100, "t.c:2", &y), 0);
  CHECK_EQ_INT(mem_alloc(o, 70000, "t.c:3", &z), 0);
  CHECK_EQ_U64(x % EBB_MEM_ALIGN, 0);
  CHECK_EQ_U64(y % EBB_MEM_ALIGN, 0);
  CHECK_EQ_U64(z % EBB_MEM_ALIGN, 0);
  /* carved one after the other from one small segment (split) */
  CHECK_EQ_U64(y, x + 1024);
  CHECK_EQ_U64(z, y + 512);
  mem_alloc_stats st = astats(a);
  CHECK_EQ_U64(st.segments.current, 1);
  CHECK_EQ_U64(st.reserved.current, EBB_MEM_SMALL_SEG);
  CHECK_EQ_U64(st.allocated.current, 1024 + 512 + 70144);
  CHECK_EQ_U64(st.cached.current, EBB_MEM_SMALL_SEG - (1024 + 512 + 70144));
  /* free the middle, then its neighbours: everything coalesces back into one
   * free block covering the whole segment, so a request for the full segment
   * is served from it without asking the driver */
  CHECK_EQ_INT(mem_free(a, y), 0);
  uint64_t y2 = 0;
  CHECK_EQ_INT(mem_alloc(o, 512, "t.c:4", &y2), 0);
  CHECK_EQ_U64(y2, y); /* best fit: the hole left by y */
  CHECK_EQ_INT(mem_free(a, y2), 0);
  CHECK_EQ_INT(mem_free(a, x), 0);
  CHECK_EQ_INT(mem_free(a, z), 0);
  uint64_t full = 0;
  CHECK_EQ_INT(mem_alloc(o, EBB_MEM_SMALL_LIMIT - 512, "t.c:5", &full), 0);
  CHECK_EQ_U64(full, x);
  uint64_t rest = 0; /* the remaining 1 MiB + 512 of the segment, no new segment */
  CHECK_EQ_INT(mem_alloc(o, EBB_MEM_SMALL_LIMIT - 512, "t.c:6", &rest), 0);
  st = astats(a);
  CHECK_EQ_U64(st.segments.current, 1);
  CHECK_EQ_U64(st.seg_allocs, 1);
  CHECK_EQ_INT(mem_free(a, full), 0);
  CHECK_EQ_INT(mem_free(a, rest), 0);
  /* a large request comes from a large segment of its own pool */
  uint64_t big = 0;
  CHECK_EQ_INT(mem_alloc(o, 3 * MiB, "t.c:7", &big), 0);
  st = astats(a);
  CHECK_EQ_U64(st.segments.current, 2);
  CHECK_EQ_U64(st.reserved.current, EBB_MEM_SMALL_SEG + EBB_MEM_LARGE_SEG_MIN);
  uint64_t huge = 0; /* >= 10 MiB: a segment of its own size (rounded to granularity) */
  CHECK_EQ_INT(mem_alloc(o, 33 * MiB + 5, "t.c:8", &huge), 0);
  st = astats(a);
  size_t g = 0;
  dev_granularity(d, &g);
  CHECK_EQ_U64(st.reserved.current,
               EBB_MEM_SMALL_SEG + EBB_MEM_LARGE_SEG_MIN + (33 * MiB + 5 + g - 1) / g * g);
  CHECK_EQ_INT(mem_free(a, big), 0);
  CHECK_EQ_INT(mem_free(a, huge), 0);
  st = astats(a);
  CHECK_EQ_U64(st.allocated.current, 0);
  CHECK_EQ_U64(st.blocks.current, 0);
  CHECK_EQ_U64(st.cached.current, st.reserved.current);
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

static void test_owner_counters(void) {
  dev_device *d = mt_open(spec);
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *p = NULL, *s1 = NULL, *s2 = NULL;
  REQUIRE(mem_owner_create(a, "pipeline", NULL, &p) == 0);
  REQUIRE(mem_owner_create(a, "separate", p, &s1) == 0);
  REQUIRE(mem_owner_create(a, "align", p, &s2) == 0);
  CHECK_EQ_STR(mem_owner_name(s1), "separate");
  CHECK(mem_owner_parent(s1) == p);
  CHECK(mem_owner_allocator(s2) == a);
  uint64_t b[4];
  CHECK_EQ_INT(mem_alloc(s1, 4 * MiB, "s1.c:1", &b[0]), 0);
  CHECK_EQ_INT(mem_alloc(s1, 2 * MiB, "s1.c:2", &b[1]), 0);
  CHECK_EQ_INT(mem_free(a, b[0]), 0);
  CHECK_EQ_INT(mem_alloc(s1, 1 * MiB, "s1.c:3", &b[2]), 0);
  CHECK_EQ_INT(mem_alloc(s2, 1000, "s2.c:1", &b[3]), 0);
  mem_owner_stats st = {.size = sizeof st};
  CHECK_EQ_INT(mem_owner_get_stats(s1, &st), 0);
  CHECK_EQ_INT(st.version, EBB_MEM_STATS_VERSION);
  CHECK_EQ_U64(st.bytes.current, 3 * MiB);
  CHECK_EQ_U64(st.bytes.peak, 6 * MiB);
  CHECK_EQ_U64(st.bytes.total, 7 * MiB);
  CHECK_EQ_U64(st.blocks.current, 2);
  CHECK_EQ_U64(st.blocks.peak, 2);
  CHECK_EQ_U64(st.blocks.total, 3);
  CHECK_EQ_INT(mem_owner_get_stats(p, &st), 0);
  CHECK_EQ_U64(st.bytes.current, 0);           /* own blocks only */
  CHECK_EQ_U64(st.tree_bytes, 3 * MiB + 1024); /* with its stages */
  ebb_owner *who = NULL;
  size_t sz = 0;
  CHECK_EQ_INT(mem_lookup(a, b[3], &who, &sz), 0);
  CHECK(who == s2);
  CHECK_EQ_U64(sz, 1000);
  /* a smaller size field (an older caller) gets the prefix only */
  struct {
    uint32_t size, version;
    mem_stat_count bytes;
  } old = {.size = sizeof old};
  CHECK_EQ_INT(mem_owner_get_stats(s2, (mem_owner_stats *)&old), 0);
  CHECK_EQ_U64(old.size, sizeof old);
  CHECK_EQ_U64(old.bytes.current, 1024);
  /* double free and foreign addresses are refused with a message */
  CHECK_EQ_INT(mem_free(a, b[2]), 0);
  CHECK_EQ_INT(mem_free(a, b[2]), EBB_ENOTFOUND);
  CHECK(strstr(ebb_errmsg(), "not a live block") != NULL);
  CHECK_EQ_INT(mem_free(a, b[1] + 512), EBB_ENOTFOUND);
  CHECK_EQ_INT(mem_alloc(s1, 0, "x", &b[0]), EBB_EINVAL);
  CHECK_EQ_INT(mem_free(a, b[1]), 0);
  CHECK_EQ_INT(mem_free(a, b[3]), 0);
  mem_leak_report *r = (mem_leak_report *)1;
  mem_owner_destroy(p, &r); /* children go with it; nothing leaked */
  CHECK(r == NULL);
  mem_owner_destroy(NULL, NULL);
  mem_allocator_destroy(a);
  mem_allocator_destroy(NULL);
  dev_close(d);
}

static void test_poison(void) {
#ifdef EBB_DEBUG
  dev_device *d = mt_open(spec);
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *o = NULL;
  REQUIRE(mem_owner_create(a, "p", NULL, &o) == 0);
  uint64_t x = 0, keep = 0;
  CHECK_EQ_INT(mem_alloc(o, 4096, "p.c:1", &x), 0);
  CHECK_EQ_INT(mem_alloc(o, 512, "p.c:2", &keep), 0); /* keeps the segment mapped */
  CHECK_EQ_INT(dev_memset8(d, x, 0x11, 4096), 0);
  CHECK_EQ_INT(mem_free(a, x), 0);
  unsigned char buf[4096];
  CHECK_EQ_INT(dev_copy_dtoh(d, buf, x, sizeof buf), 0);
  int poisoned = 1;
  for (size_t i = 0; i < sizeof buf; i++)
    poisoned &= buf[i] == 0xDB;
  CHECK_MSG(poisoned, "freed block not poisoned with 0xDB on %s (first byte 0x%02x)", spec, buf[0]);
  CHECK_EQ_INT(mem_free(a, keep), 0);
  mem_owner_destroy(o, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
#endif
}

/* Debug builds: using an owner after mem_owner_destroy is caught (the
 * signature check aborts; under ASan, ASan reports the use). In a child. */
static int child_use_after_destroy(void) {
  dev_device *d = mt_open("cpu");
  mem_allocator *a = NULL;
  ebb_owner *o = NULL;
  if (mem_allocator_create(d, NULL, &a) || mem_owner_create(a, "gone", NULL, &o))
    return 2;
  mem_owner_destroy(o, NULL);
  uint64_t x;
  mem_alloc(o, 4096, "uaf.c:1", &x); /* must not return */
  return 0;
}

static void test_signature(void) {
#ifdef EBB_DEBUG
  const char *tmp = getenv("EBB_TEST_TMP");
  REQUIRE(tmp != NULL);
  mkdir(tmp, 0755);
  char path[4096];
  snprintf(path, sizeof path, "%s/uaf.err", tmp);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 2, 1); /* the log goes to stdout */
  char *argv[] = {"/proc/self/exe", "use-after-destroy", NULL};
  extern char **environ;
  pid_t pid;
  REQUIRE(posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK_MSG(!(WIFEXITED(status) && WEXITSTATUS(status) == 0),
            "using a destroyed owner was not caught (child exited 0)");
  FILE *f = fopen(path, "r");
  char buf[8192] = {0};
  if (f) {
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
  }
  CHECK_MSG(strstr(buf, "used after mem_owner_destroy") || strstr(buf, "heap-use-after-free"),
            "no message naming the misuse; child output: %s", buf);
#else
  fprintf(stderr, "test_signature: not run: release builds carry no handle signatures\n");
#endif
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "use-after-destroy") == 0)
    return child_use_after_destroy();
  RUN(test_signature);
  spec = "cpu";
  RUN(test_split_coalesce);
  RUN(test_owner_counters);
  RUN(test_poison);
  spec = "cuda:0";
  RUN(test_split_coalesce);
  RUN(test_owner_counters);
  RUN(test_poison);
  return TEST_END();
}
