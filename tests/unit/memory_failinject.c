/* Failure injection: the scenario below runs in a child process once per
 * device allocation it makes, with FAKEGPU_FAIL_ALLOC_AT=N making the Nth one
 * fail (curl torture style). Every run must end without a crash, with the
 * allocator's books balanced (nothing reserved, allocated or cached after
 * teardown + release), the context released, and - checked from outside
 * with fakegpu-smi - nothing left on the device for the child's pid. */
#include <spawn.h>
#include <sys/wait.h>

#include "base/log.h"
#include "memory_util.h"
#include "test.h"

static int errors;

static void note(int rc) {
  if (rc)
    errors++;
}

static void scenario(dev_device *d, int seg_kind) {
  mem_alloc_opts opts = {.size = sizeof opts, .seg_kind = seg_kind};
  mem_allocator *a = NULL;
  if (mem_allocator_create(d, &opts, &a))
    exit(2);
  ebb_owner *p = NULL, *s1 = NULL, *s2 = NULL;
  if (mem_owner_create(a, "pipe", NULL, &p) || mem_owner_create(a, "s1", p, &s1) ||
      mem_owner_create(a, "s2", p, &s2))
    exit(2);
  uint64_t x[12] = {0};
  /* small, large (shared 20 MiB segments) and own-segment (>= 10 MiB) sizes */
  static const size_t sizes[12] = {1000,    3 << 20,   24 << 20, 5000,    512, 12 << 20,
                                   1 << 20, 700 << 10, 11 << 20, 2 << 20, 100, 16 << 20};
  for (int i = 0; i < 12; i++)
    note(mem_alloc(i % 2 ? s1 : s2, sizes[i], "fi.c:1", &x[i]));
  void *pin = NULL;
  note(mem_pinned_alloc(s1, 64 << 10, &pin));
  for (int i = 0; i < 12; i += 3)
    if (x[i])
      note(mem_free(a, x[i])), x[i] = 0;
  uint64_t got;
  note(mem_allocator_trim(a, &got));
  for (int i = 0; i < 6; i++) {
    uint64_t y = 0;
    note(mem_alloc(s1, (size_t)(i + 1) << 21, "fi.c:2", &y));
    if (y)
      note(mem_free(a, y));
  }
  if (seg_kind == EBB_SEG_VMM) {
    uint64_t parked;
    note(ebb_owner_park(s2, &parked));
    note(ebb_owner_wake(s2));
  }
  if (pin)
    note(mem_pinned_free(a, pin));
  mem_owner_destroy(s1, NULL); /* leaks: reported and freed */
  mem_owner_destroy(p, NULL);
  mem_release_result r = {.size = sizeof r};
  note(mem_release(a, EBB_RELEASE_DEFAULT | EBB_RELEASE_CONTEXT, &r));
  mem_alloc_stats st = {.size = sizeof st};
  mem_allocator_get_stats(a, &st);
  if (st.reserved.current || st.allocated.current || st.cached.current || st.blocks.current ||
      st.segments.current || st.pinned_reserved.current || dev_ctx_active(d)) {
    fprintf(stderr,
            "child: books not balanced after teardown: reserved %llu allocated %llu cached %llu "
            "blocks %llu segments %llu pinned %llu ctx %d\n",
            (unsigned long long)st.reserved.current, (unsigned long long)st.allocated.current,
            (unsigned long long)st.cached.current, (unsigned long long)st.blocks.current,
            (unsigned long long)st.segments.current, (unsigned long long)st.pinned_reserved.current,
            dev_ctx_active(d));
    exit(2);
  }
  if (st.oom_retries)
    errors++;
  mem_allocator_destroy(a);
}

static int child(void) {
  base_log_set_level(EBB_LOG_ERROR); /* leak reports are expected here */
  dev_device *d = mt_open("cuda:0");
  scenario(d, EBB_SEG_VMM);
  scenario(d, EBB_SEG_PLAIN);
  uint64_t used = 1;
  if (dev_process_used(d, getpid(), &used) == 0 && used != 0) {
    fprintf(stderr, "child: the driver says we still hold %llu bytes\n", (unsigned long long)used);
    return 2;
  }
  dev_close(d);
  return errors ? 0 : 3; /* 3: the injected failure was never reached */
}

static void test_every_allocation(void) {
  extern char **environ;
  int n, runs = 0;
  for (n = 1; n <= 200; n++) {
    char fail[64];
    snprintf(fail, sizeof fail, "FAKEGPU_FAIL_ALLOC_AT=%d", n);
    size_t ne = 0;
    while (environ[ne])
      ne++;
    char **env = calloc(ne + 2, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
      if (strncmp(environ[i], "FAKEGPU_FAIL_ALLOC_AT=", 22) != 0)
        env[k++] = environ[i];
    env[k++] = fail;
    char *argv[] = {"/proc/self/exe", "child", NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, env);
    free(env);
    REQUIRE(rc == 0);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_MSG(!WIFSIGNALED(status), "failing allocation %d: child crashed with signal %d", n,
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    CHECK_MSG(code == 0 || code == 3, "failing allocation %d: child exit status %d", n, code);
    CHECK_MSG(mt_smi_used_mib(pid) == 0,
              "failing allocation %d: fakegpu-smi still lists %ld MiB "
              "for the child",
              n, mt_smi_used_mib(pid));
    if (code == 3)
      break;
    runs++;
  }
  fprintf(stderr, "injected a failure at each of %d device allocations\n", runs);
  CHECK_MSG(runs >= 10, "the scenario made only %d device allocations", runs);
  CHECK_MSG(n <= 200, "the scenario never finished without reaching the injected failure");
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "child") == 0)
    return child();
  RUN(test_every_allocation);
  return TEST_END();
}
