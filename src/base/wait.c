/* Bounded waits on a condition variable (wait.h). */
#include "base/wait.h"

#include <time.h>

int base_cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *lock, long ms) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return pthread_cond_timedwait(cond, lock, &ts);
}
