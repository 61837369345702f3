/* What the manager's files share (manager.c, manager_state.c,
 * manager_thread.c, manager_ask.c, manager_sleep.c, manager_give.c): its
 * state and the pl__mgr_ internals, grouped by the file that defines them.
 * The files call one another in one direction only (build_cycles): state
 * and thread below, then ask, then manager.c, then sleep, then give.
 * Not for other files. */
#ifndef EBB_PIPELINE_MANAGER_INT_H
#define EBB_PIPELINE_MANAGER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "pipeline/manager.h"

#define MIB(x) ((unsigned long long)((x) >> 20))
#define GIB(x) ((double)(x) / (1024.0 * 1024.0 * 1024.0))

typedef struct mpipe {
  const pl_def *def; /* borrowed from the config */
  int loaded;
  uint64_t need;      /* last measured peak, else "expected_mib"; 0: unknown */
  int measured;       /* need is a measurement here (a load or a run) */
  int need_ctx;       /* need counts the device context (measured while making one) */
  char *outdir;       /* WORK/pipelines/NAME (kept while instances live) */
  int asleep;         /* sleep (issue 12): loaded, its stages asleep */
  double slept_at;    /* when it fell asleep (the budget unloads the oldest) */
  double used_at;     /* last load or run (giving back takes the least recent first) */
  uint64_t work;      /* a run's working memory over what the loaded pipeline held, measured */
  uint64_t load_peak; /* the owners' peak its last load measured (no context) */
  int need_work;      /* need covers a run's working memory (a run measured it since the load) */
} mpipe;

struct pl_manager {
  dev_device *dev;
  mem_allocator *alloc;
  const pl_registry *reg;
  const pl_config *cfg;
  char *work_dir;
  char *hook; /* $EBB_STAGE_HOOK: also run at pipeline-unloaded / pipeline-loaded */
  pl_policy policy;
  double load_wait_s;
  pl_runner *runner;
  pl_sessions *sessions;
  /* Every runner call runs on one long-lived device thread: a burst at a
   * time, and worker processes (isolated stages, which die with the thread
   * that started them: PR_SET_PDEATHSIG) outlive the HTTP connection that
   * loaded them. Callers wait for their task. */
  pthread_t dev_thread;
  int dev_started;
  pthread_mutex_t dev_lock;
  pthread_cond_t dev_cond, dev_done;
  struct task *head, *tail;
  int dev_busy, dev_stop;
  pthread_mutex_t switch_lock; /* loads and unloads, one at a time */
  pthread_mutex_t lock;        /* pipes[].loaded/need, released_total */
  mpipe *pipes;
  size_t npipes;
  uint64_t released_total;
  /* sleep (issue 12), under lock */
  uint64_t sleep_budget; /* host bytes for backups; 0: no limit */
  uint64_t wakes;        /* wakes done (by the API or by a job) */
  double wake_seconds;   /* their time, summed */
  uint64_t backup_bytes; /* last seen (the read side never waits on the allocator) */
  mpipe *running;        /* the pipeline of the job on the device thread, under lock */
  double sleep_bps;      /* bytes a second the last sleep parked (a giving's estimate) */
  int (*ask_peers)(void *arg, dev_device *dev, uint64_t need); /* issue 35; may be NULL */
  void (*ask_done)(void *arg, dev_device *dev);
  void *ask_arg;
  int room_asked; /* pl_manager_ask_room's claim stands for the load that follows */
  double used_at; /* last load or run, under lock */
};

/* How long a caller waits for the device thread to start its task, and
 * what makes it give up first (run_limits). */
typedef struct mgr_wait {
  const atomic_int *cancel; /* set: EBB_ECANCELED; may be NULL */
  double until;             /* monotonic; past it: EBB_EBUSY; 0: no bound */
} mgr_wait;

/* "manager_thread.c" */
/* The device thread's loop (pthread_create's start, arg: the manager). */
void *pl__mgr_device_thread(void *arg);
/* Runs fn(arg) on the device thread and waits; the
 * error message comes back to the calling thread. try: do nothing (return
 * 1) when the thread is busy. w (may be NULL): a task that has not started
 * when w->cancel is set or w->until passes is taken back unrun. */
int pl__mgr_on_device_(pl_manager *m, int (*fn)(void *), void *arg, int try, const mgr_wait *w);
#define pl__mgr_on_device(m, fn, arg) pl__mgr_on_device_((m), (fn), (arg), 0, NULL)
/* As pl__mgr_on_device_ with try, for a peer's ask: 1 while a job holds
 * the device; the device thread's own housekeeping (the once-a-second idle
 * tick) is waited for, at most 2 s, so that an ask then is not told a job
 * runs when none does. */
int pl__mgr_on_device_unless_job(pl_manager *m, int (*fn)(void *), void *arg);

/* "manager_state.c" */
uint64_t pl__mgr_driver_free(pl_manager *m, int *known);
void pl__mgr_log_free(const char *name, const char *when, uint64_t bytes);
/* A pipeline's state changed on this manager's device: the fact, once. */
void pl__mgr_publish(pl_manager *m, const char *name, const char *state, uint64_t before,
                     uint64_t after);
mpipe *pl__mgr_find(pl_manager *m, const char *name);
int pl__mgr_unknown(pl_manager *m, const char *name); /* EBB_ENOTFOUND naming the known */
int pl__mgr_loaded_count(pl_manager *m);
void pl__mgr_add_released(pl_manager *m, uint64_t b);
int pl__mgr_asleep(pl_manager *m, mpipe *pp);
/* The backups' figure the read side shows, refreshed after every change. */
void pl__mgr_note_backup(pl_manager *m);

/* "manager_ask.c" */
/* What loading (or waking) pp will take; 0: unknown. *why says which. */
uint64_t pl__mgr_predicted_need(pl_manager *m, mpipe *pp, const char **why);
/* 1 when the peers were asked for need (then pl__mgr_ask_finished). */
int pl__mgr_ask_peers(pl_manager *m, const char *name, const char *what, uint64_t need);
void pl__mgr_ask_finished(pl_manager *m, int asked);

/* "manager.c" */
/* switch_lock held: pp unloaded (sessions drained first), *released its bytes. */
int pl__mgr_unload_in_switch(pl_manager *m, mpipe *pp, uint64_t *released);
typedef struct pl__mgr_release_args {
  pl_manager *m;
  uint64_t rel;
} pl__mgr_release_args;
/* On the device thread: trim, the pinned pool, idle stages (a->rel). */
int pl__mgr_release_on_dev(void *arg);

/* "manager_sleep.c" */
/* switch_lock held. try: do nothing (return 1) while the device is busy. */
int pl__mgr_sleep_in_switch(pl_manager *m, mpipe *pp, int try, mem_sleep_stats *out);

#endif
