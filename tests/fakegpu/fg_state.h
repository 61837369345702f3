/* The simulated device's shared state: one file (FAKEGPU_STATE) mapped by
 * every process that uses the fake driver, NVML or fakegpu-smi, so they all
 * see one device. Per-process accounting: each process that called cuInit
 * owns one slot; its usage per device is its contexts plus its allocations
 * (rounded to the granularity). Slots of processes that died (or exec'd)
 * without cleaning up are reclaimed by the next reader or allocator.
 *
 * Locking: flock on the file for other processes plus a mutex for other
 * threads of this process. Every function here takes both itself. */
#ifndef FAKEGPU_FG_STATE_H
#define FAKEGPU_FG_STATE_H

#include <stdint.h>
#include <sys/types.h>

#define FG_MAX_DEVICES 8
#define FG_MAX_PROCS 512
#define FG_MIB (1024ull * 1024ull)

/* Configuration of the device, read from the environment. The device-wide
 * part (devices, memory, granularity) is written into the state file by the
 * first process that attaches while no other live process holds a slot. */
typedef struct fg_config {
  unsigned ndevices;
  uint64_t total_bytes[FG_MAX_DEVICES]; /* memory of each device */
  uint64_t granularity;                 /* bytes */
  uint64_t context_bytes;               /* this process's cost of one context */
  long fail_alloc_at;                   /* 0: never */
  long fault_launch_at;                 /* 0: never */
  int stub;
  int poison;
  int check_args;     /* FAKEGPU_CHECK_ARGS: a launch on freed memory faults (700);
                           * 1: pointers and small structures, 2: every parameter */
  long quarantine;    /* FAKEGPU_QUARANTINE: freed device ranges kept unmapped-but-reserved */
  long kernel_us;     /* FAKEGPU_KERNEL_US: simulated time per kernel launch (0: off) */
  long wait_value_ms; /* FAKEGPU_WAIT_VALUE_MS: how long cuStreamWaitValue* waits */
  /* FAKEGPU_FAIL_DEVICE=D[:after=N][:lost]: device D fails at this process's
   * (N+1)th call on it that needs a context. */
  int fail_device; /* -1: none */
  long fail_after;
  int fail_lost;   /* 1: the device is lost for everyone; 0: sticky 700 */
  char error[256]; /* a bad setting, named; "" when the environment is fine */
  char state_path[4096];
} fg_config;

/* Reads the environment (defaults as documented in README.md). A setting
 * that cannot be used is described in cfg->error. */
void fg_config_from_env(fg_config *cfg);

typedef struct fg_proc_usage {
  pid_t pid;
  uint64_t used_bytes;
  unsigned contexts;
  uint64_t launches; /* kernel launches the process made on the device */
} fg_proc_usage;

typedef struct fg_device_usage {
  unsigned ndevices;
  uint64_t total_bytes; /* of this device */
  uint64_t granularity;
  uint64_t used_bytes; /* all live processes together */
  int lost;            /* the device fell off the bus (FAKEGPU_FAIL_DEVICE ...:lost) */
} fg_device_usage;

/* Opens (creates if absent) the state file. With register_self, also takes a
 * slot for this process (the driver does, NVML and fakegpu-smi do not).
 * Returns 0 or -errno. Idempotent. */
int fg_state_attach(const fg_config *cfg, int register_self);
/* Frees this process's slot (its memory goes back) and unmaps the file. */
void fg_state_detach(void);
/* Forget the mapping without touching the slot (a forked child). */
void fg_state_forget(void);

/* Adds bytes to this process's usage on dev if the device has room; else
 * returns -ENOMEM and changes nothing. is_ctx counts one more context. */
int fg_state_charge(unsigned dev, uint64_t bytes, int is_ctx);
/* Takes bytes back (never below 0). is_ctx counts one context less. */
void fg_state_uncharge(unsigned dev, uint64_t bytes, int is_ctx);

/* Counts one kernel launch of this process on dev (fakegpu-smi's
 * kernel_launches field). */
void fg_state_count_launch(unsigned dev);

/* Marks dev lost for every process on this state file, until no live
 * process is left. fg_state_lost reads the mark without taking the lock. */
void fg_state_set_lost(unsigned dev);
int fg_state_lost(unsigned dev);

/* Device totals after reclaiming dead processes. */
int fg_state_device(unsigned dev, fg_device_usage *out);
/* The processes with a context or memory on dev (at most max; *n is how
 * many there are in all, which can be more than max). */
int fg_state_procs(unsigned dev, fg_proc_usage *out, unsigned max, unsigned *n);

/* Tests only: adds a copy of pid's slot with its start time moved by
 * start_delta and `used` bytes on device 0, as if a process with that pid
 * (delta 0) or an earlier process with the same pid (delta != 0) held it. */
int fg_state_debug_clone_slot(pid_t pid, int64_t start_delta, uint64_t used);

/* Start time of pid (field 22 of /proc/pid/stat), 0 if it is gone. */
uint64_t fg_proc_start_time(pid_t pid);

#endif
