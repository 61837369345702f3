/* The manager's device thread (manager.h, "Threads"): the one thread that
 * calls the runner, its task queue, and pl__mgr_on_device_, which hands a
 * task over and waits (bounded by a cancel flag and a time, mgr_wait). */
#include <pthread.h>
#include <stdio.h>

#include "base/clock.h"
#include "base/wait.h"
#include "pipeline/host.h"
#include "pipeline/manager_int.h"

typedef struct task {
  struct task *next;
  int (*fn)(void *);
  void *arg;
  int rc, done, started;
  char err[1024];
} task;

void *pl__mgr_device_thread(void *arg) {
  pl_manager *m = arg;
  pthread_mutex_lock(&m->dev_lock);
  for (;;) {
    while (!m->head && !m->dev_stop)
      pthread_cond_wait(&m->dev_cond, &m->dev_lock);
    if (!m->head)
      break;
    task *t = m->head;
    m->head = t->next;
    if (!m->head)
      m->tail = NULL;
    m->dev_busy = t->started = 1;
    pthread_mutex_unlock(&m->dev_lock);
    ebb_clearerr();
    t->rc = t->fn(t->arg);
    if (t->rc)
      snprintf(t->err, sizeof t->err, "%s", ebb_errmsg());
    pthread_mutex_lock(&m->dev_lock);
    m->dev_busy = 0;
    t->done = 1;
    pthread_cond_broadcast(&m->dev_done);
  }
  pthread_mutex_unlock(&m->dev_lock);
  return NULL;
}

/* Takes t back out of the device thread's queue before it started
 * (dev_lock held). */
static void unqueue(pl_manager *m, task *t) {
  task *prev = NULL;
  for (task *x = m->head; x; prev = x, x = x->next)
    if (x == t) {
      if (prev)
        prev->next = t->next;
      else
        m->head = t->next;
      if (m->tail == t)
        m->tail = prev;
      return;
    }
}

/* Runs fn(arg) on the device thread and waits; the error message comes back
 * to the calling thread. try: do nothing (return 1) when the thread is busy.
 * w (may be NULL): a task that has not started when w->cancel is set or
 * w->until passes is taken back unrun (the device is held by other work). */
int pl__mgr_on_device_(pl_manager *m, int (*fn)(void *), void *arg, int try, const mgr_wait *w) {
  if (!m->dev_started || pthread_equal(pthread_self(), m->dev_thread))
    return fn(arg);
  task t = {.fn = fn, .arg = arg};
  pthread_mutex_lock(&m->dev_lock);
  if (try && (m->dev_busy || m->head)) {
    pthread_mutex_unlock(&m->dev_lock);
    return 1;
  }
  if (m->tail)
    m->tail->next = &t;
  else
    m->head = &t;
  m->tail = &t;
  pthread_cond_signal(&m->dev_cond);
  while (!t.done) {
    if (!w) {
      pthread_cond_wait(&m->dev_done, &m->dev_lock);
      continue;
    }
    int stop = w->cancel && atomic_load(w->cancel), late = w->until > 0 && base_now() > w->until;
    if (!t.started && (stop || late)) {
      unqueue(m, &t);
      pthread_mutex_unlock(&m->dev_lock);
      return ebb_seterr(stop ? EBB_ECANCELED : EBB_EBUSY, "%s",
                        stop ? "cancelled while it waited for the device"
                             : "the device stayed busy with other work");
    }
    base_cond_wait_ms(&m->dev_done, &m->dev_lock, 20);
  }
  pthread_mutex_unlock(&m->dev_lock);
  if (t.rc)
    ebb_seterr(t.rc, "%s", t.err);
  return t.rc;
}

int pl__mgr_on_device_unless_job(pl_manager *m, int (*fn)(void *), void *arg) {
  int rc = pl__mgr_on_device_(m, fn, arg, 1, NULL);
  if (rc != 1)
    return rc;
  pthread_mutex_lock(&m->lock);
  int job = m->running != NULL;
  pthread_mutex_unlock(&m->lock);
  if (job)
    return 1;
  mgr_wait w = {.until = base_now() + 2};
  rc = pl__mgr_on_device_(m, fn, arg, 0, &w);
  return rc == EBB_EBUSY ? 1 : rc; /* still busy after the wait: as with a job */
}
