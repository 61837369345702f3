/* The ledger's insides, shared by ledger.c and ledger_svg.c. */
#ifndef EBB_MEMORY_LEDGER_INTERNAL_H
#define EBB_MEMORY_LEDGER_INTERNAL_H

#include <pthread.h>
#include <stdio.h>

#include "memory/memory.h"

struct ebb_ledger {
  pthread_mutex_t mu;
  ebb_ledger_event *ev;
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

typedef struct ledger_snap {
  ebb_ledger_event *ev;
  size_t n;
  char **names;
  size_t nnames;
  uint64_t dropped, t0;
  char device[32];
} ledger_snap;

int ledger_snapshot(ebb_ledger *l, ledger_snap *s);
void ledger_snap_free(ledger_snap *s);
const char *ledger_name_locked(const ebb_ledger *l, uint32_t id);

#endif
