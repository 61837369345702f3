/* The ledger's insides, shared by the ledger's files only (ledger.c, the
 * exports and the SVG timeline); grouped by the file that defines each name.
 * The allocator side reaches the ledger through internal.h. */
#ifndef EBB_MEMORY_LEDGER_INTERNAL_H
#define EBB_MEMORY_LEDGER_INTERNAL_H

#include <pthread.h>
#include <stdio.h>

#include "memory/memory.h"

struct mem_ledger {
  pthread_mutex_t mu; /* guards everything below; held only inside ledger.c */
  mem_ledger_event *ev;
  size_t cap, n, head;
  uint64_t dropped;
  uint64_t t0;
  char device[32];
  char **names; /* by owner id */
  size_t nnames;
  char **marks;
  size_t nmarks;
  uint64_t last_reserved, last_allocated;
};

/* A copy of the ring, oldest event first, with its own copy of the names
 * (owner events' labels point into it), read without the ledger's mutex. */
typedef struct ledger_snap {
  mem_ledger_event *ev;
  size_t n;
  char **names;
  size_t nnames;
  uint64_t dropped, t0;
  char device[32];
} ledger_snap;

/* --- "ledger.c" ----------------------------------------------------------- */
int mem__ledger_snapshot(mem_ledger *l, ledger_snap *s);
void mem__ledger_snap_free(ledger_snap *s);

/* --- "ledger_svg_replay.c": the events replayed into pixel columns ------- */
/* The timeline's model: per pixel column the bytes of each owner, of the
 * context and of the reserved segments at the column's fullest moment, plus
 * what the axes need. Filled by mem__svg_replay from a snapshot, drawn by
 * ledger_svg.c; nothing in it is locked. */
typedef struct svg_model {
  const ledger_snap *s;
  size_t stride; /* s->nnames + 1: owners' slots per column in colv */
  size_t nown;   /* owners with device events in the window */
  int *slot;     /* owner id -> 1-based slot (0: none) */
  uint32_t *ids; /* slot - 1 -> owner id */
  double *cur;   /* slot - 1 -> bytes now (during the replay) */
  double *peak;  /* slot - 1 -> most bytes held */
  int ncols;
  double *colv;   /* [column * stride + slot - 1]: owner bytes */
  double *coltot; /* owners + context */
  double *colres; /* reserved */
  double *colctx; /* context bytes drawn */
  int *colctxon;  /* context alive */
  int *colset;    /* an event (or a carried state) is in the column */
  int ctx_seen;   /* a context event is in the window */
  int ctx_known;  /* one of them has a size */
  double ctx_peak, rel_max, ymax;
  uint64_t t_first;
  double span_ns;
} svg_model;

/* 0, or EBB_ENOMEM (m is then empty); free with mem__svg_model_free. */
int mem__svg_replay(const ledger_snap *s, int ncols, svg_model *m);
void mem__svg_model_free(svg_model *m);

#endif
