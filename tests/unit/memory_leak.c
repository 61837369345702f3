/* Owner teardown frees what the owner did not free itself and reports it:
 * owner, size, allocation site and (when enabled) a symbolised backtrace; the
 * fixed log line `[STAGE] leaked N MiB in M blocks; freed by ebb`. */
#include "base/log.h"
#include "memory_util.h"
#include "test.h"

static char *slurp(FILE *f) {
  static char buf[16384];
  rewind(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  return buf;
}

__attribute__((noinline)) static int leaky_stage_load(ebb_owner *o, uint64_t *x) {
  return mem_alloc(o, 3 * MiB, "leaky.c:42", x);
}

static void test_report(void) {
  dev_device *d = mt_open("cuda:0");
  mem_alloc_opts opts = {.size = sizeof opts, .seg_kind = EBB_SEG_AUTO, .backtraces = 1};
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, &opts, &a) == 0);
  ebb_owner *p = NULL, *o = NULL;
  REQUIRE(mem_owner_create(a, "pipeline", NULL, &p) == 0);
  REQUIRE(mem_owner_create(a, "separate", p, &o) == 0);
  uint64_t x = 0, y = 0, z = 0;
  CHECK_EQ_INT(leaky_stage_load(o, &x), 0);
  CHECK_EQ_INT(mem_alloc(o, 2 * MiB, "leaky.c:50", &y), 0);
  CHECK_EQ_INT(mem_alloc(o, 4096, "leaky.c:51", &z), 0);
  CHECK_EQ_INT(mem_free(a, z), 0); /* freed: not a leak */
  mem_leak_report *r = NULL;
  mem_owner_destroy(o, &r);
  REQUIRE(r != NULL);
  CHECK_EQ_STR(r->owner, "separate");
  CHECK_EQ_INT((int)r->nleaks, 2);
  CHECK_EQ_U64(r->bytes, 5 * MiB);
  CHECK_EQ_U64(r->leaks[0].size, 3 * MiB); /* largest first */
  CHECK_EQ_STR(r->leaks[0].site, "leaky.c:42");
  CHECK_EQ_STR(r->leaks[0].owner, "separate");
  CHECK_EQ_U64(r->leaks[0].addr, x);
  CHECK_EQ_STR(r->leaks[1].site, "leaky.c:50");
  REQUIRE(r->leaks[0].backtrace != NULL);
  CHECK_MSG(strstr(r->leaks[0].backtrace, "leaky_stage_load") ||
                strstr(r->leaks[0].backtrace, "test_report"),
            "backtrace does not name the caller:\n%s", r->leaks[0].backtrace);
  /* the memory went back to the allocator: nothing allocated, all cached */
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(a, &st);
  CHECK_EQ_U64(st.allocated.current, 0);
  CHECK_EQ_U64(st.blocks.current, 0);
  mem_owner_stats os = {.size = sizeof os};
  mem_owner_get_stats(p, &os);
  CHECK_EQ_U64(os.tree_bytes, 0);
  /* the log lines */
  FILE *logf = tmpfile();
  base_log_set_stream(logf);
  mem_leak_report_publish(r, 0);
  base_log_set_stream(NULL);
  char *log = slurp(logf);
  fclose(logf);
  CHECK_MSG(strstr(log, "[separate] leaked 5 MiB in 2 blocks; freed by ebb\n"),
            "leak line missing; log was:\n%s", log);
  CHECK_MSG(strstr(log, "3 MiB (3145728 bytes) at leaky.c:42"), "site line missing:\n%s", log);
  CHECK_MSG(strstr(log, "2 MiB (2097152 bytes) at leaky.c:50"), "site line missing:\n%s", log);
  mem_leak_report_free(r);
  /* the trimmed memory really goes back to the driver */
  uint64_t got = 0;
  mem_allocator_trim(a, &got);
  CHECK_EQ_U64(got, 22 * MiB); /* a 20 MiB large segment + a 2 MiB small one */
  mem_owner_destroy(p, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

typedef struct seen {
  int calls;
  char owner[64];
  size_t n;
  uint64_t bytes;
} seen;
static void on_leak(const mem_leak_report *r, void *ctx) {
  seen *s = ctx;
  s->calls++;
  snprintf(s->owner, sizeof s->owner, "%s", r->owner);
  s->n = r->nleaks;
  s->bytes = r->bytes + r->pinned_bytes;
}

static void test_handler_children_and_reclaim(void) {
  dev_device *d = mt_open("cpu");
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  seen s = {0};
  mem_allocator_on_leak(a, on_leak, &s);
  ebb_owner *p = NULL, *c = NULL;
  REQUIRE(mem_owner_create(a, "pipe", NULL, &p) == 0);
  REQUIRE(mem_owner_create(a, "child", p, &c) == 0);
  uint64_t x;
  void *pin;
  CHECK_EQ_INT(mem_alloc(c, 1 * MiB, "c.c:1", &x), 0);
  CHECK_EQ_INT(mem_pinned_alloc(c, 8192, &pin), 0);
  CHECK_EQ_INT(mem_alloc(p, 512, "p.c:1", &x), 0);
  /* reclaim keeps the owners, frees their blocks, reports once */
  CHECK_EQ_INT(mem_owner_reclaim(p, NULL), 0);
  CHECK_EQ_INT(s.calls, 1);
  CHECK_EQ_STR(s.owner, "pipe");
  CHECK_EQ_INT((int)s.n, 3);
  CHECK_EQ_U64(s.bytes, 1 * MiB + 512 + 8192);
  CHECK_EQ_INT(mem_alloc(c, 4096, "c.c:2", &x), 0); /* still usable */
  CHECK_EQ_INT(mem_free(a, x), 0);
  mem_owner_destroy(p, NULL); /* nothing left: no call */
  CHECK_EQ_INT(s.calls, 1);
  mem_allocator_destroy(a);
  dev_close(d);
}

/* Sites are copied: a site buffer that changes (a plugin unloaded and another
 * loaded at the same address) does not change what earlier blocks report. */
static void test_sites_copied(void) {
  dev_device *d = mt_open("cpu");
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *o = NULL;
  REQUIRE(mem_owner_create(a, "plugin", NULL, &o) == 0);
  char site[32];
  uint64_t x, y;
  snprintf(site, sizeof site, "first.c:1");
  CHECK_EQ_INT(mem_alloc(o, 8192, site, &x), 0);
  snprintf(site, sizeof site, "second.c:2");
  CHECK_EQ_INT(mem_alloc(o, 4096, site, &y), 0);
  memset(site, 'X', sizeof site - 1);
  mem_leak_report *r = NULL;
  mem_owner_destroy(o, &r);
  REQUIRE(r != NULL && r->nleaks == 2);
  CHECK_EQ_STR(r->leaks[0].site, "first.c:1");
  CHECK_EQ_STR(r->leaks[1].site, "second.c:2");
  mem_leak_report_free(r);
  mem_allocator_destroy(a);
  dev_close(d);
}

/* No site (NULL, as memory.h allows) is reported as "?". */
static void test_no_site(void) {
  dev_device *d = mt_open("cpu");
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *o = NULL;
  REQUIRE(mem_owner_create(a, "anon", NULL, &o) == 0);
  uint64_t x;
  CHECK_EQ_INT(mem_alloc(o, 4096, NULL, &x), 0);
  mem_leak_report *r = NULL;
  mem_owner_destroy(o, &r);
  REQUIRE(r != NULL && r->nleaks == 1);
  CHECK_EQ_STR(r->leaks[0].site, "?");
  mem_leak_report_free(r);
  mem_allocator_destroy(a);
  dev_close(d);
}

/* mem_owner_live lists what a reclaim would free and frees nothing; a
 * block mem_keep marked survives a reclaim (still its owner's, not
 * reported) and goes with the owner's teardown. */
static void test_live_and_keep(void) {
  dev_device *d = mt_open("cuda:0");
  mem_allocator *a = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  ebb_owner *o = NULL;
  REQUIRE(mem_owner_create(a, "holder", NULL, &o) == 0);
  uint64_t x = 0, y = 0;
  CHECK_EQ_INT(mem_alloc(o, 3 * MiB, "held.py:1", &x), 0);
  CHECK_EQ_INT(mem_alloc(o, 1 * MiB, "held.py:2", &y), 0);
  mem_leak_report *r = NULL;
  CHECK_EQ_INT(mem_owner_live(o, &r), 0);
  REQUIRE(r != NULL && r->nleaks == 2);
  CHECK_EQ_U64(r->leaks[0].addr, x);
  CHECK_EQ_STR(r->leaks[0].site, "held.py:1");
  CHECK_EQ_U64(r->bytes, 4 * MiB);
  mem_leak_report_free(r);
  mem_owner_stats st = {.size = sizeof st};
  mem_owner_get_stats(o, &st);
  CHECK_EQ_U64(st.bytes.current, 4 * MiB); /* nothing was freed */
  CHECK_EQ_INT(mem_keep(a, x), 0);
  CHECK_EQ_INT(mem_keep(a, 12345), EBB_ENOTFOUND);
  CHECK_EQ_INT(mem_owner_reclaim(o, &r), 0);
  REQUIRE(r != NULL && r->nleaks == 1);
  CHECK_EQ_U64(r->leaks[0].addr, y);
  mem_leak_report_free(r);
  mem_owner_get_stats(o, &st);
  CHECK_EQ_U64(st.bytes.current, 3 * MiB); /* the kept block is still the owner's */
  CHECK_EQ_INT(mem_owner_reclaim(o, &r), 0);
  CHECK(r == NULL);                /* only a kept block left: nothing to report */
  CHECK_EQ_INT(mem_free(a, x), 0); /* its holder lets go: an ordinary free */
  uint64_t z = 0;
  CHECK_EQ_INT(mem_alloc(o, 3 * MiB, "held.py:3", &z), 0);
  CHECK_EQ_INT(mem_owner_reclaim(o, &r), 0); /* a new block at x is not kept */
  REQUIRE(r != NULL && r->nleaks == 1);
  mem_leak_report_free(r);
  CHECK_EQ_INT(mem_owner_live(o, &r), 0);
  CHECK(r == NULL);
  CHECK_EQ_INT(mem_alloc(o, 3 * MiB, "held.py:4", &z), 0);
  CHECK_EQ_INT(mem_keep(a, z), 0);
  mem_owner_destroy(o, &r); /* a teardown frees a kept block too */
  REQUIRE(r != NULL && r->nleaks == 1);
  mem_leak_report_free(r);
  mem_allocator_destroy(a);
  dev_close(d);
}

int main(void) {
  RUN(test_report);
  RUN(test_live_and_keep);
  RUN(test_sites_copied);
  RUN(test_no_site);
  RUN(test_handler_children_and_reclaim);
  return TEST_END();
}
