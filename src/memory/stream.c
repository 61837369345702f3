/* Stream-ordered reuse: the events a free block waits for before a request
 * on another stream may take it (its gate), as PyTorch's caching allocator
 * (record_stream, insert_events / process_events) and the driver's
 * cuMemFreeAsync order reuse. An event is recorded on the freeing stream
 * (and on each stream the block's uses were recorded on) at the free;
 * blocks cut from or merged with that block share it, with one event per
 * stream kept (the later one covers the earlier). Events, with their device
 * events, are recycled through a->ev_idle (recording an event again is
 * allowed while it is pending) and destroyed at trim, before the context
 * can go. Every
 * function expects a->mu: the driver calls (record, query) are made with it
 * held, as segment calls are. */
#include <stdlib.h>

#include "base/log.h"
#include "memory/internal.h"

/* An event no block refers to any more goes idle with its device event
 * (record takes it again: no host allocation per free). */
static void unref(mem_allocator *a, mem_event *e) {
  if (--e->refs > 0)
    return;
  if (a->nev_idle == a->cap_ev_idle) {
    size_t cap = a->cap_ev_idle ? a->cap_ev_idle * 2 : 16;
    mem_event **n = realloc(a->ev_idle, cap * sizeof *n);
    if (!n) {
      dev_event_destroy(a->dev, e->h);
      free(e);
      return;
    }
    a->ev_idle = n;
    a->cap_ev_idle = cap;
  }
  a->ev_idle[a->nev_idle++] = e;
}

/* The streams no one can destroy: the legacy default stream (0, or
 * CU_STREAM_LEGACY 1) and the per-thread default stream (2), where PyTorch
 * runs unless told otherwise. A free there records nothing: its event is
 * recorded when a request on another stream (or none) first asks, and an
 * event recorded later on the same stream covers all the work queued
 * before it, the block's included. On a stream the program creates the
 * event is recorded at the free: a handle destroyed and made again could
 * otherwise name another stream by then. */
static int lasting(uint64_t stream) { return stream <= 2; }

/* A new event on stream (lazy there: lasting), or NULL when none could be
 * recorded. */
static mem_event *record(mem_allocator *a, uint64_t stream) {
  mem_event *e = a->nev_idle ? a->ev_idle[--a->nev_idle] : calloc(1, sizeof *e);
  if (!e)
    return NULL;
  e->lazy = lasting(stream);
  if (!e->lazy && dev_event_record(a->dev, stream, &e->h) != 0) {
    dev_event_destroy(a->dev, e->h);
    free(e);
    return NULL;
  }
  e->stream = stream;
  e->seq = ++a->ev_seq;
  e->refs = 1;
  e->done = 0;
  return e;
}

/* A lazy event recorded now; if it cannot be, the device is waited for
 * (then nothing of the block's work can be pending). */
static void materialize(mem_allocator *a, mem_event *e) {
  if (!e->lazy)
    return;
  e->lazy = 0;
  if (dev_event_record(a->dev, e->stream, &e->h) == 0)
    return;
  base_log(EBB_LOG_WARN, "memory",
           "%s: no event could be recorded on stream 0x%llx for a freed block (%s); waiting "
           "for the device instead",
           dev_device_label(a->dev), (unsigned long long)e->stream, ebb_errmsg());
  dev_synchronize(a->dev);
  e->done = 1;
}

static int done(mem_allocator *a, mem_event *e) {
  materialize(a, e);
  if (!e->done && dev_event_query(a->dev, e->h) == 1)
    e->done = 1;
  return e->done;
}

static void drop_at(mem_allocator *a, mem_block *b, int i) {
  unref(a, b->gate[i]);
  b->gate[i] = b->gate[--b->ngate];
  b->gate[b->ngate] = NULL;
}

int mem__gate_open_locked(mem_allocator *a, mem_block *b, uint64_t stream) {
  int open = 1;
  for (int i = 0; i < b->ngate;) {
    mem_event *e = b->gate[i];
    if (e->lazy && e->stream == stream) { /* the same stream: ordered, no call */
      i++;
      continue;
    }
    if (done(a, e)) {
      drop_at(a, b, i);
      continue;
    }
    if (e->stream != stream || stream == MEM_STREAM_NONE)
      open = 0;
    i++;
  }
  if (!open)
    a->stream_waits++;
  return open;
}

/* Adds e (a reference the caller hands over) to b's gate: one event per
 * stream, the later; a full gate waits for its oldest event first. */
static void add(mem_allocator *a, mem_block *b, mem_event *e) {
  if (e->done) {
    unref(a, e);
    return;
  }
  for (int i = 0; i < b->ngate; i++)
    if (b->gate[i]->stream == e->stream) {
      if (b->gate[i]->seq > e->seq) {
        unref(a, e);
      } else {
        unref(a, b->gate[i]);
        b->gate[i] = e;
      }
      return;
    }
  if (b->ngate == MEM_GATE_MAX) {
    int old = 0;
    for (int i = 1; i < b->ngate; i++)
      if (b->gate[i]->seq < b->gate[old]->seq)
        old = i;
    if (!done(a, b->gate[old]))
      dev_event_wait(a->dev, b->gate[old]->h);
    drop_at(a, b, old);
  }
  b->gate[b->ngate++] = e;
}

/* The device is waited for instead of an event that could not be
 * recorded: nothing of the block's work can still be pending then. */
static void record_or_wait(mem_allocator *a, mem_block *b, uint64_t stream) {
  mem_event *e = record(a, stream);
  if (e) {
    add(a, b, e);
    return;
  }
  base_log(EBB_LOG_WARN, "memory",
           "%s: no event could be recorded on stream 0x%llx at a free (%s); waiting for the "
           "device instead",
           dev_device_label(a->dev), (unsigned long long)stream, ebb_errmsg());
  dev_synchronize(a->dev);
}

void mem__gate_at_free_locked(mem_allocator *a, mem_block *b, uint64_t stream) {
  if (stream == MEM_STREAM_NONE)
    stream = b->stream; /* taken on a stream: that stream's earlier work may still run */
  if (b->sync_free) {
    dev_synchronize(a->dev); /* more streams used it than the gate holds */
  } else {
    if (stream != MEM_STREAM_NONE)
      record_or_wait(a, b, stream);
    for (int i = 0; i < b->nuses; i++)
      if (b->uses[i] != stream)
        record_or_wait(a, b, b->uses[i]);
  }
  b->nuses = 0;
  b->sync_free = 0;
  b->stream = MEM_STREAM_NONE;
}

void mem__gate_merge_locked(mem_allocator *a, mem_block *dst, mem_block *src) {
  for (int i = 0; i < src->ngate; i++)
    add(a, dst, src->gate[i]);
  src->ngate = 0;
}

void mem__gate_copy_locked(mem_block *dst, const mem_block *src) {
  for (int i = 0; i < src->ngate; i++) {
    dst->gate[i] = src->gate[i];
    dst->gate[i]->refs++;
  }
  dst->ngate = src->ngate;
}

void mem__gate_clear_locked(mem_allocator *a, mem_block *b) {
  while (b->ngate)
    drop_at(a, b, b->ngate - 1);
}

void mem__gate_settle_locked(mem_allocator *a, mem_block *b) {
  for (int i = 0; i < b->ngate; i++)
    if (!done(a, b->gate[i]) && dev_event_wait(a->dev, b->gate[i]->h) == 0)
      b->gate[i]->done = 1;
  mem__gate_clear_locked(a, b);
}

void mem__events_trim_locked(mem_allocator *a) {
  while (a->nev_idle) {
    mem_event *e = a->ev_idle[--a->nev_idle];
    dev_event_destroy(a->dev, e->h);
    free(e);
  }
}

int mem_record_stream(mem_allocator *a, uint64_t addr, uint64_t stream) {
  if (!a)
    return ebb_seterr(EBB_EINVAL, "mem_record_stream: no allocator");
  mem__lock(a);
  mem_block *b = mem__map_get(&a->live, addr);
  if (!b) {
    mem__unlock(a);
    return ebb_seterr(EBB_ENOTFOUND, "mem_record_stream: 0x%llx is not a live block on %s",
                      (unsigned long long)addr, dev_device_label(a->dev));
  }
  int known = stream == b->stream || stream == MEM_STREAM_NONE;
  for (int i = 0; i < b->nuses && !known; i++)
    known = b->uses[i] == stream;
  if (!known && b->nuses < MEM_GATE_MAX - 1)
    b->uses[b->nuses++] = stream;
  else if (!known)
    b->sync_free = 1;
  mem__unlock(a);
  return 0;
}

uint64_t mem_allocator_stream_waits(mem_allocator *a) {
  mem__lock(a);
  uint64_t n = a->stream_waits;
  mem__unlock(a);
  return n;
}
