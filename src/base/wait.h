/* Waiting on a condition variable for a bounded time: the ticks of the
 * threads that poll (progress line, connection reaper, a bounded wait for
 * the device thread). */
#ifndef EBB_BASE_WAIT_H
#define EBB_BASE_WAIT_H

#include <pthread.h>

/* pthread_cond_timedwait on (cond, lock) until ms milliseconds from now
 * (CLOCK_REALTIME, the condition's default clock). The caller holds lock, as
 * for pthread_cond_timedwait; returns its result (0 or ETIMEDOUT). */
int base_cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *lock, long ms);

#endif
