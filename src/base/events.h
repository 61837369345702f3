/* The event bus (include/ebb/events.h): the publishing side, for ebb's own
 * rooms. Lowest room, so every publisher (memory's leak finder, pipeline's
 * instances and manager, the server's queue and sessions, the broker) can
 * use it without reaching up. */
#ifndef EBB_BASE_EVENTS_H
#define EBB_BASE_EVENTS_H

#include "ebb/events.h"

/* --- "events.c" */
/* Delivers ev to the log (events_log.c) and then to every subscription, on
 * this thread, and returns when all have seen it. Sets ev->size, ev->seq and
 * (when 0) ev->t. ev and what it points to are the caller's and only read. */
void base_event_publish(ebb_event *ev);

/* A memory grant (the broker, docs/broker.md): process pid (what: how it
 * calls itself, e.g. "ebb serve") gave back `given` of the `asked` bytes on
 * device in ms milliseconds; reason: what it gave up; state "gave" (pid is
 * this process) or "received" (a peer gave to this one). Publishes
 * EBB_EVENT_GRANT (owner = what, message = reason), which the log writes
 * as the fixed line `[broker] pid P (WHAT) gave back N MiB on cuda:K in T
 * ms: REASON`. Strings borrowed. */
void base_event_publish_grant(const char *state, int pid, const char *what, const char *device,
                              uint64_t asked, uint64_t given, double ms, const char *reason);
/* This process asked its peers on device for `need` bytes (npeers of them
 * answered or were tried); the driver then had free_after free. Publishes
 * EBB_EVENT_GRANT with state "asked"; the log writes `[broker] cuda:K: N MiB
 * free of M MiB needed after asking P peers`. */
void base_event_publish_ask(const char *device, uint64_t need, uint64_t free_after, size_t npeers,
                            int satisfied);

/* --- "events_log.c" */
/* The log lines of an event (the fixed lines of docs/api.md, "Log lines": the release line, the
 * leak report, the broker's grant); nothing for the kinds that have no line. The bus calls it
 * first for every event. */
void base_event_log(const ebb_event *ev);

#endif
