/* Sleep: an owner's weights (blocks allocated while it was marked) go to host
 * memory, every segment it alone uses loses its physical memory and keeps its
 * address, the context can go too; wake maps memory at the same addresses,
 * puts the weights back and zeroes the rest. A wake that runs out of memory
 * (another process holding the device: fakegpu-hold) fails clearly, stays
 * asleep with its backup, and succeeds once the memory is back. 100 cycles
 * leave RSS and fakegpu-smi flat. */
#include <signal.h>

#include "memory_util.h"
#include "test.h"

#define BIG 16 /* MiB of weights in a segment of their own */
#define ACT 24 /* MiB not weights, a segment of its own (the 20 MiB one has 17 free) */

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &res) != 2)
      res = 0;
    fclose(f);
  }
  return res * (sysconf(_SC_PAGESIZE) / 1024);
}

typedef struct scene {
  dev_device *d;
  mem_allocator *a;
  ebb_owner *w;
  uint64_t big, mid, act;
  unsigned char *pat, *back;
} scene;

static void setup(scene *s, const char *spec) {
  s->d = mt_open(spec);
  REQUIRE(mem_allocator_create(s->d, NULL, &s->a) == 0);
  REQUIRE(mem_owner_create(s->a, "model", NULL, &s->w) == 0);
  mem_owner_mark_weights(s->w, 1);
  CHECK_EQ_INT(mem_alloc(s->w, BIG * MiB, "w.c:1", &s->big), 0);
  CHECK_EQ_INT(mem_alloc(s->w, 3 * MiB, "w.c:2", &s->mid), 0); /* in a 20 MiB one */
  mem_owner_mark_weights(s->w, 0);
  CHECK_EQ_INT(mem_alloc(s->w, ACT * MiB, "w.c:3", &s->act), 0); /* not weights */
  s->pat = malloc(ACT * MiB);                                    /* ACT > BIG */
  s->back = malloc(ACT * MiB);
  REQUIRE(s->pat && s->back);
  for (size_t i = 0; i < BIG * MiB; i++)
    s->pat[i] = (unsigned char)(i * 131 + (i >> 20));
  CHECK_EQ_INT(dev_copy_htod(s->d, s->big, s->pat, BIG * MiB), 0);
  CHECK_EQ_INT(dev_copy_htod(s->d, s->mid, s->pat + 7, 3 * MiB), 0);
  CHECK_EQ_INT(dev_memset8(s->d, s->act, 0x5A, ACT * MiB), 0);
}

static void teardown(scene *s) {
  free(s->pat);
  free(s->back);
  mem_owner_destroy(s->w, NULL);
  mem_allocator_destroy(s->a);
  dev_close(s->d);
}

/* The weights hold their bytes at their addresses; the rest is zero. */
static void check_awake(scene *s, const char *when) {
  CHECK_EQ_INT(dev_copy_dtoh(s->d, s->back, s->big, BIG * MiB), 0);
  CHECK_MSG(memcmp(s->back, s->pat, BIG * MiB) == 0, "%d MiB of weights changed %s", BIG, when);
  CHECK_EQ_INT(dev_copy_dtoh(s->d, s->back, s->mid, 3 * MiB), 0);
  CHECK_MSG(memcmp(s->back, s->pat + 7, 3 * MiB) == 0, "3 MiB of weights changed %s", when);
  CHECK_EQ_INT(dev_copy_dtoh(s->d, s->back, s->act, ACT * MiB), 0);
  int zero = 1;
  for (size_t i = 0; i < ACT * MiB && zero; i++)
    zero = s->back[i] == 0;
  CHECK_MSG(zero, "the dropped (non-weights) block is not zero %s", when);
  ebb_owner *who = NULL;
  CHECK_EQ_INT(mem_lookup(s->a, s->big, &who, NULL), 0);
  CHECK(who == s->w);
}

/* Sleep, then the context goes: what the driver and the books say. */
static void sleep_all(scene *s, int fake) {
  mem_sleep_stats st = {.size = sizeof st};
  CHECK_EQ_INT(mem_owner_sleep(s->w, &st), 0);
  CHECK_EQ_U64(st.device_bytes, (BIG + 20 + ACT) * MiB);
  CHECK_EQ_U64(st.backup_bytes, (BIG + 3) * MiB);
  CHECK_EQ_U64(st.dropped_bytes, ACT * MiB);
  CHECK_EQ_U64(mem_allocator_backup_bytes(s->a), (BIG + 3) * MiB);
  CHECK_EQ_U64(mt_reserved(s->a), 0);
  mem_release_result rr = {.size = sizeof rr};
  CHECK_EQ_INT(mem_release(s->a, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &rr), 0);
  if (fake) {
    CHECK_MSG(rr.context_released, "the context was kept while asleep: %s",
              ebb_strerror(rr.context_error));
    CHECK_EQ_INT(mt_smi_used_mib(getpid()), 0);
  }
}

static void wake_all(scene *s) {
  mem_sleep_stats st = {.size = sizeof st};
  CHECK_EQ_INT(mem_owner_wake_stats(s->w, &st), 0);
  CHECK_EQ_U64(st.device_bytes, (BIG + 20 + ACT) * MiB);
  CHECK_EQ_U64(st.backup_bytes, (BIG + 3) * MiB);
  CHECK_EQ_U64(mem_allocator_backup_bytes(s->a), 0);
  CHECK_EQ_U64(mt_reserved(s->a), (BIG + 20 + ACT) * MiB);
}

static void test_cpu(void) {
  scene s;
  setup(&s, "cpu");
  sleep_all(&s, 0);
  wake_all(&s);
  check_awake(&s, "across sleep/wake on the CPU device");
  teardown(&s);
}

/* fakegpu-hold taking `mib` of the device until killed. */
static pid_t hold(long mib, FILE **out) {
  const char *build = getenv("EBB_BUILD_DIR");
  REQUIRE(build);
  char path[1024], arg[32];
  snprintf(path, sizeof path, "%s/fakegpu/fakegpu-hold", build);
  snprintf(arg, sizeof arg, "%ld", mib);
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", 0, 0);
  char *argv[] = {path, "--alloc", arg, "--wait", NULL};
  extern char **environ;
  pid_t pid;
  REQUIRE(posix_spawn(&pid, path, &fa, NULL, argv, environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  *out = fdopen(fds[0], "r");
  char line[128] = "";
  for (int i = 0; i < 4 && fgets(line, sizeof line, *out); i++) /* init, ctx, alloc */
    if (!strncmp(line, "ok 0x", 5))
      break;
  CHECK_MSG(!strncmp(line, "ok 0x", 5), "fakegpu-hold did not take %ld MiB: '%s'", mib, line);
  return pid;
}

static void test_fake(void) {
  scene s;
  setup(&s, "cuda:0");
  REQUIRE(dev_supports_vmm(s.d));
  long held = mt_smi_used_mib(getpid());
  REQUIRE(held > 0);
  sleep_all(&s, 1);
  CHECK(!dev_ctx_active(s.d));
  wake_all(&s);
  CHECK(dev_ctx_active(s.d)); /* the wake re-created it */
  check_awake(&s, "across sleep, context release and wake");
  CHECK_EQ_INT(mt_smi_used_mib(getpid()), held);
  CHECK_EQ_INT(ebb_owner_wake(s.w), 0); /* awake already: nothing to do */

  /* out of memory on wake: another process holds almost all the device */
  sleep_all(&s, 1);
  dev_meminfo mi;
  REQUIRE(dev_mem_info(s.d, &mi) == 0 && mi.total_bytes > 0);
  long ctx_mib = 300, take = (long)(mi.free_bytes / MiB) - ctx_mib - ctx_mib - 50;
  FILE *hout = NULL;
  pid_t hp = hold(take, &hout);
  int rc = ebb_owner_wake(s.w);
  CHECK_EQ_INT(rc, EBB_EOOM);
  CHECK_MSG(strstr(ebb_errmsg(), "wake failed") && strstr(ebb_errmsg(), "model") &&
                strstr(ebb_errmsg(), "retried"),
            "unclear wake error: %s", ebb_errmsg());
  CHECK_EQ_U64(mem_allocator_backup_bytes(s.a), (BIG + 3) * MiB); /* still asleep */
  CHECK_EQ_U64(mt_reserved(s.a), 0);
  long smi_failed = mt_smi_used_mib(getpid());
  CHECK_MSG(smi_failed <= ctx_mib, "a failed wake left %ld MiB mapped (%s)", smi_failed,
            ebb_errmsg());
  kill(hp, SIGKILL);
  waitpid(hp, NULL, 0);
  fclose(hout);
  wake_all(&s);
  check_awake(&s, "after a wake that failed for want of memory, then succeeded");

  /* 100 cycles: nothing grows */
  sleep_all(&s, 1);
  wake_all(&s);
  long rss0 = rss_kib(), smi0 = mt_smi_used_mib(getpid());
  for (int i = 0; i < 100; i++) {
    mem_sleep_stats st = {.size = sizeof st};
    CHECK_EQ_INT(mem_owner_sleep(s.w, &st), 0);
    mem_release_result rr = {.size = sizeof rr};
    mem_release(s.a, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &rr);
    CHECK_EQ_INT(mem_owner_wake_stats(s.w, &st), 0);
  }
  long rss1 = rss_kib(), smi1 = mt_smi_used_mib(getpid());
  /* ASan's quarantine keeps recently freed blocks (about one backup here);
   * a backup leaked per cycle would be 100 of them */
  long bound = 8 * 1024;
#if defined(__SANITIZE_ADDRESS__)
  bound += 2 * (BIG + 3) * 1024;
#endif
  CHECK_MSG(rss1 - rss0 < bound, "RSS grew by %ld KiB over 100 sleep/wake cycles (bound %ld)",
            rss1 - rss0, bound);
  CHECK_EQ_INT(smi1, smi0);
  check_awake(&s, "after 100 sleep/wake cycles");
  teardown(&s);
}

/* A sleeping owner can be destroyed: its backup and address ranges go. */
static void test_destroy_asleep(void) {
  scene s;
  setup(&s, "cuda:0");
  mem_sleep_stats st = {.size = sizeof st};
  CHECK_EQ_INT(mem_owner_sleep(s.w, &st), 0);
  mem_free(s.a, s.big);
  mem_free(s.a, s.mid);
  mem_free(s.a, s.act);
  uint64_t got = 0;
  CHECK_EQ_INT(mem_allocator_trim(s.a, &got), 0);
  CHECK_EQ_U64(mem_allocator_backup_bytes(s.a), 0);
  mem_alloc_stats as = {.size = sizeof as};
  mem_allocator_get_stats(s.a, &as);
  CHECK_EQ_U64(as.segments.current, 0);
  teardown(&s);
}

/* The backup is packed (only the weights' bytes, in address order): a
 * weights block freed while asleep is not copied back, and the blocks after
 * it still find their own bytes. Three blocks share one 20 MiB segment. */
static void test_free_while_asleep(void) {
  dev_device *d = mt_open("cuda:0");
  mem_allocator *a = NULL;
  ebb_owner *w = NULL;
  REQUIRE(mem_allocator_create(d, NULL, &a) == 0);
  REQUIRE(mem_owner_create(a, "model", NULL, &w) == 0);
  mem_owner_mark_weights(w, 1);
  uint64_t x[3] = {0, 0, 0};
  unsigned char pat[3][4096], back[4096];
  for (int i = 0; i < 3; i++) {
    REQUIRE(mem_alloc(w, 2 * MiB, "w.c:9", &x[i]) == 0);
    memset(pat[i], 0x11 * (i + 1), sizeof pat[i]);
    CHECK_EQ_INT(dev_copy_htod(d, x[i] + 2 * MiB - 4096, pat[i], 4096), 0);
  }
  mem_owner_mark_weights(w, 0);
  mem_sleep_stats st = {.size = sizeof st};
  CHECK_EQ_INT(mem_owner_sleep(w, &st), 0);
  CHECK_EQ_U64(st.backup_bytes, 6 * MiB);
  CHECK_EQ_U64(mem_allocator_backup_bytes(a), 6 * MiB); /* not the segment's 20 */
  CHECK_EQ_INT(mem_free(a, x[1]), 0);
  CHECK_EQ_INT(mem_owner_wake_stats(w, &st), 0);
  for (int i = 0; i < 3; i += 2) {
    CHECK_EQ_INT(dev_copy_dtoh(d, back, x[i] + 2 * MiB - 4096, 4096), 0);
    CHECK_MSG(memcmp(back, pat[i], 4096) == 0,
              "block %d of 3 lost its bytes when the one before it was freed asleep", i + 1);
  }
  CHECK_EQ_U64(mem_allocator_backup_bytes(a), 0);
  mem_free(a, x[0]);
  mem_free(a, x[2]);
  mem_owner_destroy(w, NULL);
  mem_allocator_destroy(a);
  dev_close(d);
}

int main(void) {
  RUN(test_cpu);
  RUN(test_fake);
  RUN(test_destroy_asleep);
  RUN(test_free_while_asleep);
  return TEST_END();
}
