/* A slot in the state file counts only while its process is the one that
 * took it: same pid AND same start time (so a reused pid does not keep a dead
 * process's memory), and the process still alive. */
#include "fakegpu/fg_test.h"
#include "fg_state.h"

static uint64_t used0(void) {
  fg_device_usage u;
  REQUIRE(fg_state_device(0, &u) == 0);
  return u.used_bytes;
}

static void test_pid_and_start_time(void) {
  fg_config cfg;
  fg_config_from_env(&cfg);
  REQUIRE(fg_state_attach(&cfg, 0) == 0);
  CHECK_EQ_U64(used0(), 0);
  fgt_hold h;
  fgt_hold_start(&h);
  HOLD_OK(&h, "init"); /* takes a slot, uses nothing */
  CHECK_EQ_U64(used0(), 0);
  /* Same pid, same start time: that process's memory, counted. */
  REQUIRE(fg_state_debug_clone_slot(h.pid, 0, 1024 * MIB) == 0);
  CHECK_EQ_U64(used0(), 1024 * MIB);
  /* Same pid, another start time: a process that died before this pid was
   * reused. Reclaimed. */
  REQUIRE(fg_state_debug_clone_slot(h.pid, -5, 512 * MIB) == 0);
  CHECK_EQ_U64(used0(), 1024 * MIB);
  REQUIRE(fg_state_debug_clone_slot(h.pid, 7, 256 * MIB) == 0);
  CHECK_EQ_U64(used0(), 1024 * MIB);
  /* The process goes: everything it held goes. */
  kill(h.pid, SIGKILL);
  fgt_hold_wait(&h);
  CHECK_EQ_U64(used0(), 0);
  fg_state_detach();
}

static void test_start_time_parse(void) {
  /* Field 22 of /proc/self/stat, whatever the command name contains. */
  FILE *f = fopen("/proc/self/stat", "r");
  REQUIRE(f != NULL);
  char buf[1024];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')') + 2;
  unsigned long long fields[30] = {0};
  int k = 3;
  char *save;
  for (char *t = strtok_r(p, " ", &save); t && k < 30; t = strtok_r(NULL, " ", &save))
    fields[k++] = strtoull(t, NULL, 10);
  CHECK_EQ_U64(fg_proc_start_time(getpid()), fields[22]);
  CHECK(fields[22] > 0);
  CHECK_EQ_U64(fg_proc_start_time(0x7ffffff0), 0);
}

int main(void) {
  RUN(test_start_time_parse);
  RUN(test_pid_and_start_time);
  return TEST_END();
}
