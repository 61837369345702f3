/* What events.c (facts, hello, the publisher thread), events_jobs.c (jobs)
 * and events_memory.c (the ledger's memory picture) share: the live
 * picture's state. Not for other files. */
#ifndef EBB_SERVER_EVENTS_INT_H
#define EBB_SERVER_EVENTS_INT_H

#include <jansson.h>
#include <pthread.h>

#include "ebb/events.h"
#include "server/events.h"
#include "server/sse.h"

typedef struct owner_row {
  uint32_t id;
  char name[128];
  uint64_t bytes, peak; /* now; the most within this interval */
  uint64_t parked;      /* segment bytes parked (asleep) and not woken */
  unsigned allocs, frees;
  int touched; /* had an event this interval */
} owner_row;

/* One device (one manager and its allocator): publisher-only state. */
typedef struct ev_dev {
  pl_manager *m;
  mem_allocator *alloc;
  const char *label;
  uint64_t ledger_seen;
  owner_row *owners;
  size_t nowners, capowners;
} ev_dev;

/* A job this server queued, until it ends: its state and its stages' peaks. */
typedef struct watched_job {
  int64_t id;
  char uid[40];
  char pipeline[128];
  int state;               /* EBB_JOB_... */
  double created, started; /* Unix seconds; 0: not yet */
  json_t *peaks;           /* {owner name: peak bytes while it ran} */
  json_t *peaks_sent;      /* peaks in the last `job` event */
} watched_job;

/* A fact from the bus, copied, waiting for the publisher thread. */
typedef struct ev_fact {
  struct ev_fact *next;
  ebb_event_kind kind;
  double t;
  char *device, *owner, *pipeline, *id, *state, *message, *code, *detail;
  int64_t job;
  uint64_t bytes, context_bytes;
  int outside;
  json_t *sites; /* LEAK: [{"bytes":N,"site":S}] */
  int pid;       /* GRANT: the giver, or this process when it asked */
  double ms;
  uint64_t bytes_asked, free_after;
  size_t peers;
} ev_fact;

struct srv_events {
  pl_manager *m; /* device 0's: the pipelines' definitions */
  ev_dev *dev;
  size_t ndev;
  srv_store *store;
  int interval_ms, history_s;
  srv_sse *sse;
  ebb_subscription *sub;

  pthread_t th;
  int started;
  pthread_mutex_t mu; /* the facts, the hello state, the watched jobs */
  pthread_cond_t wake;
  int stop;
  ev_fact *fhead, *ftail;
  json_t *pipelines, *sessions, *leaks; /* hello state */
  watched_job *wjobs;
  size_t nwjobs, capwjobs;

  /* publisher-only */
  char last_job_pipeline[128]; /* the pipeline of the job that ran last */
  char *pipelines_text;
  int pipes_dirty, sessions_dirty;
  char **sids; /* open sessions' ids */
  size_t nsids;
};

/* --- "events_jobs.c" */
/* A job's fact: its `job` event; an ended job is forgotten. */
void srv_ev_on_job(srv_events *e, const ev_fact *f);
/* The running jobs' peaks this interval (a change: a `job` event); answers
 * the pipeline that runs, in running (NULL: none). */
const char *srv_ev_running_jobs(srv_events *e, char *running, size_t rn);
/* hello's jobs: the newest the store holds (a new reference). */
json_t *srv_ev_hello_jobs(srv_events *e);

/* --- "events_memory.c" */
/* Reads a device's ledger events since the last tick into its owner rows
 * (bytes, peaks, parked bytes). */
void srv_ev_read_ledger(ev_dev *d);
/* The `memory` sample of device di. running: the running job's pipeline. */
void srv_ev_publish_memory(srv_events *e, size_t di, const char *running);
/* The pipeline an owner of device label belongs to (NULL when none). */
const char *srv_ev_pipeline_of(srv_events *e, const char *label, const char *owner,
                               const char *running);
/* This interval's peaks of w's pipeline's owners go to w. */
void srv_ev_add_peaks(srv_events *e, watched_job *w);

#endif
