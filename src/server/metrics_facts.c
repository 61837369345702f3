/* /metrics from the facts (include/ebb/events.h): counters a subscription
 * keeps, the same figures whatever the log says or where it goes. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/events.h"
#include "server/internal.h"

/* Room for every kind of fact; the kinds counted are those
 * ebb_event_kind_name knows (src/base/events.c: one list of them). */
#define NKINDS 32

struct srv_fact_counts {
  ebb_subscription *sub;
  atomic_ullong events[NKINDS];
  atomic_ullong stage_released;  /* bytes stages (owners) handed back */
  atomic_ullong leaked, outside; /* device bytes leaked; taken from the driver directly */
};

static void on_fact(void *ctx, const ebb_event *ev) {
  srv_fact_counts *c = ctx;
  if (ev->kind > 0 && ev->kind < NKINDS)
    atomic_fetch_add(&c->events[ev->kind], 1);
  if (ev->kind == EBB_EVENT_RELEASED && ev->owner)
    atomic_fetch_add(&c->stage_released, ev->bytes);
  else if (ev->kind == EBB_EVENT_LEAK)
    atomic_fetch_add(ev->outside ? &c->outside : &c->leaked, ev->bytes);
}

int srv_fact_counts_create(srv_fact_counts **out) {
  srv_fact_counts *c = calloc(1, sizeof *c);
  if (!c)
    return ebb_seterr(EBB_ENOMEM, "metrics: out of host memory");
  int rc = ebb_events_subscribe(on_fact, c, &c->sub);
  if (rc) {
    free(c);
    return rc;
  }
  *out = c;
  return 0;
}

void srv_fact_counts_destroy(srv_fact_counts *c) {
  if (!c)
    return;
  ebb_events_unsubscribe(c->sub);
  free(c);
}

void srv_fact_counts_metrics(srv_fact_counts *c, FILE *f) {
  if (!c)
    return;
  fprintf(f, "# HELP ebb_events_total Facts published on ebb's event bus, by kind.\n"
             "# TYPE ebb_events_total counter\n");
  for (int k = 1; k < NKINDS && strcmp(ebb_event_kind_name((ebb_event_kind)k), "?"); k++)
    fprintf(f, "ebb_events_total{kind=\"%s\"} %llu\n", ebb_event_kind_name((ebb_event_kind)k),
            (unsigned long long)atomic_load(&c->events[k]));
  fprintf(f,
          "# HELP ebb_stage_released_bytes_total Device bytes stages handed back to the "
          "driver in their own releases.\n# TYPE ebb_stage_released_bytes_total counter\n"
          "ebb_stage_released_bytes_total %llu\n",
          (unsigned long long)atomic_load(&c->stage_released));
  fprintf(f,
          "# HELP ebb_leaked_bytes_total Device bytes owners went without freeing (leak) "
          "or took from the driver directly (outside); ebb freed them.\n"
          "# TYPE ebb_leaked_bytes_total counter\n"
          "ebb_leaked_bytes_total{kind=\"leak\"} %llu\n"
          "ebb_leaked_bytes_total{kind=\"outside\"} %llu\n",
          (unsigned long long)atomic_load(&c->leaked),
          (unsigned long long)atomic_load(&c->outside));
}
