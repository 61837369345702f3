/* ebb's events: the facts ebb's code makes, published once by the code that
 * makes them, delivered to every subscriber in the process.
 *
 * A stage's release, a leak, a job's state, a pipeline loaded, unloaded,
 * asleep or awake, a session opened or closed, a device lost, a memory
 * grant to a peer process, an allocation refused for want of device memory,
 * an owner's memory parked in host memory and a mark on a device's timeline
 * are each published as one `ebb_event`. ebb itself is a subscriber: the
 * log lines (`[STAGE] released N MiB of GPU memory`, the leak report),
 * `GET /v1/events`, the per-stage bytes in the job store and `/metrics` are
 * all written from these events; nothing in ebb reads its own log back.
 * An embedding program subscribes the same way and sees the same facts
 * (docs/python.md, "C: libebb.so", "Events").
 *
 * Delivery is synchronous, on the thread that published the fact, after
 * every earlier subscriber and before the publishing function returns.
 * A subscriber must be quick and must not block on anything the publishing
 * thread may hold; it may publish, subscribe, and unsubscribe any
 * subscription (its own included) from inside its callback. The event and
 * every pointer in it live only for the duration of the call: copy what
 * you keep. */
#ifndef EBB_EVENTS_H
#define EBB_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ebb_event_kind {
  EBB_EVENT_RELEASED = 1,    /* owner handed `bytes` back to the driver */
  EBB_EVENT_LEAK = 2,        /* owner went with memory it never freed; ebb freed it */
  EBB_EVENT_JOB = 3,         /* job `job` is now in `state` */
  EBB_EVENT_PIPELINE = 4,    /* pipeline `pipeline` is now `state` on `device` */
  EBB_EVENT_SESSION = 5,     /* session `id` of `pipeline` is now `state` */
  EBB_EVENT_DEVICE_LOST = 6, /* `device` failed; `message` says how */
  EBB_EVENT_GRANT = 7,       /* broker (docs/broker.md): `state` "gave": this process, `pid`,
                                gave back `bytes` on `device` in `ms`; "received": peer `pid`
                                gave this process `bytes`; "asked": this process asked its
                                peers for `bytes_asked`, the driver then had
                                `driver_free_after` free (`message`: "satisfied" or not) */
  EBB_EVENT_OOM = 8,         /* `owner` asked `device`'s allocator for `bytes`; the driver had
                                not enough free memory even after trimming the cache */
  EBB_EVENT_MARK = 9,        /* a labelled point on `device`'s memory timeline (`message`:
                                "separate load", "separate release", ...); the ledger's mark */
  EBB_EVENT_PARKED = 10,     /* `owner`'s segments on `device` went to host memory and their
                                `bytes` of device memory back to the driver, addresses kept:
                                `state` "asleep" (a sleep) or "parked" (every live byte kept) */
} ebb_event_kind;

/* Flags. QUIET: the fact has no line in ebb's log (a forced teardown, a
 * policy that says nothing, a release an embedding program asked for and
 * reads the figures of itself); it is a fact all the same. */
#define EBB_EVENT_QUIET 1u
/* RELEASED by the process-wide owner (release callbacks registered for no
 * owner: a library's cache), not by a stage. */
#define EBB_EVENT_PROCESS 2u

/* One allocation site of a leak (EBB_EVENT_LEAK). */
typedef struct ebb_event_site {
  uint64_t bytes;        /* the block's size */
  const char *site;      /* "file.c:12 (function)" or "?" */
  const char *owner;     /* the block's own owner when a child of the leaking one; else NULL */
  const char *backtrace; /* newline-separated frames, or NULL */
  int pinned;            /* a pinned host buffer, not device memory */
} ebb_event_site;

/* Which fields a kind sets is said beside each; the rest are 0 / NULL. */
typedef struct ebb_event {
  uint32_t size; /* sizeof(ebb_event) of the publisher: fields past it are absent */
  ebb_event_kind kind;
  uint64_t seq;           /* per process, from 1, in the order facts were published */
  double t;               /* when, Unix seconds */
  unsigned flags;         /* EBB_EVENT_QUIET */
  const char *device;     /* "cuda:0", "cpu"; NULL when the fact is no one device's */
  const char *owner;      /* RELEASED, LEAK, OOM, PARKED: the stage (or owner) name; GRANT:
                           the peer's name for itself ("ebb serve") */
  const char *pipeline;   /* JOB, PIPELINE, SESSION */
  const char *id;         /* SESSION: its id */
  int64_t job;            /* JOB: its id; RELEASED, LEAK: the job running then, or 0 */
  const char *state;      /* JOB: queued|running|succeeded|failed|cancelled;
                           PIPELINE: loaded|unloaded|asleep|awake;
                           SESSION: open|stopped|closed (stopped: id NULL, every
                           session of `pipeline`, or of all when NULL);
                           GRANT: gave|received|asked; PARKED: asleep|parked */
  const char *message;    /* JOB: the error; DEVICE_LOST: why; RELEASED: the stage's note;
                           GRANT: the peer's reason; LEAK: what leaked ("GPU memory");
                           MARK: the label */
  const char *what;       /* RELEASED: the memory's name in the log line ("GPU memory") */
  const char *code;       /* JOB: the error's wire name (EBB_E...) or NULL */
  const char *detail;     /* JOB: a finished job's per-stage figures, JSON
                           ([{"name":S,"released_bytes":N,"peak_bytes":N|null}]: the
                           stage's own releases, its peak; null: not measured, a
                           cached stage), or NULL */
  uint64_t bytes;         /* RELEASED: handed back; LEAK: device bytes leaked (or taken
                           from the driver directly when `outside`); JOB: released
                           by the job; GRANT: given back; OOM: asked for; PARKED: device
                           bytes given back */
  uint64_t bytes_asked;   /* GRANT: what the asker wanted */
  uint64_t context_bytes; /* RELEASED: of `bytes`, the device context's */
  uint64_t driver_free_before, driver_free_after; /* RELEASED, PIPELINE: the driver's
                                                     free memory (0: not measured) */
  uint64_t pinned_bytes;                          /* LEAK: pinned host bytes leaked */
  uint64_t blocks;                                /* LEAK: device blocks leaked */
  uint64_t pinned_blocks;                         /* LEAK: pinned buffers leaked */
  const ebb_event_site *sites;                    /* LEAK: nsites of them */
  size_t nsites;
  int callbacks_run, callbacks_failed; /* RELEASED: release callbacks run / failed */
  int outside;                         /* LEAK: the bytes were taken from the driver directly */
  int pid;                             /* GRANT: the peer that gave */
  double ms;                           /* GRANT: how long the asking took */
  size_t peers;                        /* GRANT "asked": how many peers were asked */
} ebb_event;

typedef void (*ebb_event_fn)(void *ctx, const ebb_event *ev);
typedef struct ebb_subscription ebb_subscription;

/* Calls fn(ctx, event) for every event published from now on, in this
 * process, until ebb_events_unsubscribe. *out, owned by the caller, is set
 * before the first call can start (fn may read it through ctx). 0, or
 * EBB_EINVAL (fn NULL), EBB_ENOMEM. Any thread. */
int ebb_events_subscribe(ebb_event_fn fn, void *ctx, ebb_subscription **out);

/* No call to the subscription's fn starts after this returns, and none is
 * running then (except the one that called this, when fn unsubscribes
 * itself: it returns normally). Frees s. NULL: no-op. Any thread. */
void ebb_events_unsubscribe(ebb_subscription *s);

/* A printable name of kind: "released", "leak", "job", "pipeline",
 * "session", "device_lost", "grant", "oom", "mark", "parked"; "?" for
 * others. */
const char *ebb_event_kind_name(ebb_event_kind kind);

#ifdef __cplusplus
}
#endif
#endif
