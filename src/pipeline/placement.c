/* Placement rules (placement.h). */
#include "pipeline/placement.h"

int pl_place_eligible(const pl_place_dev *d, const pl_place_job *job) {
  if (d->failed)
    return 0;
  if (!job->pin_cuda && !job->pin_cpu)
    return 1;
  if (d->ordinal < 0)
    return job->pin_cpu;
  return d->ordinal < 32 && (job->pin_cuda >> d->ordinal) & 1u;
}

int pl_place_could_fit(const pl_place_dev *d, const pl_place_job *job) {
  if (!pl_place_eligible(d, job))
    return 0;
  if (d->loaded || !job->need || !d->free_known)
    return 1;
  return job->need <= d->free_bytes + d->other_bytes;
}

static int loaded_anywhere(const pl_place_dev *devs, size_t n, const pl_place_job *job) {
  for (size_t i = 0; i < n; i++)
    if (devs[i].loaded && pl_place_eligible(&devs[i], job))
      return 1;
  return 0;
}

/* Rule 1: an idle device where it is loaded, awake before asleep (a wake
 * in place still beats a load elsewhere). */
static int loaded_idle(const pl_place_dev *devs, size_t n, const pl_place_job *job) {
  int best = -1;
  for (size_t i = 0; i < n; i++)
    if (devs[i].idle && devs[i].loaded && pl_place_eligible(&devs[i], job) &&
        (best < 0 || (devs[best].asleep && !devs[i].asleep)))
      best = (int)i;
  return best;
}

/* Rule 2: best fit among idle devices with room; an unknown need takes the
 * empty device with the most free memory. */
static int fits(const pl_place_dev *devs, size_t n, const pl_place_job *job) {
  int best = -1;
  uint64_t best_left = UINT64_MAX;
  for (size_t i = 0; i < n; i++) {
    const pl_place_dev *d = &devs[i];
    if (!d->idle || !pl_place_eligible(d, job))
      continue;
    if (!job->need || !d->free_known) {
      if (d->others == 0 && (best < 0 || d->free_bytes > devs[best].free_bytes))
        best = (int)i;
      continue;
    }
    /* the sleepers here get their room back when they wake */
    uint64_t room = d->free_bytes > d->asleep_bytes ? d->free_bytes - d->asleep_bytes : 0;
    if (job->need > room)
      continue;
    uint64_t left = room - job->need;
    if (left < best_left) {
      best_left = left;
      best = (int)i;
    }
  }
  return best;
}

/* Rule 3: the idle device where evicting makes room, with the least loaded
 * bytes dropped. */
static int evict(const pl_place_dev *devs, size_t n, const pl_place_job *job) {
  int best = -1;
  for (size_t i = 0; i < n; i++) {
    const pl_place_dev *d = &devs[i];
    if (!d->idle || d->others == 0 || !pl_place_could_fit(d, job))
      continue;
    if (best < 0 || d->other_bytes < devs[best].other_bytes)
      best = (int)i;
  }
  return best;
}

int pl_place(const pl_place_dev *devs, size_t n, const pl_place_job *job, pl_place_how *how) {
  int any = 0; /* memory comes back (other processes end); pins and failures do not */
  for (size_t i = 0; i < n; i++)
    if (pl_place_eligible(&devs[i], job))
      any = 1;
  *how = any ? EBB_PLACE_WAIT : EBB_PLACE_NEVER;
  if (!any)
    return -1;
  int d = loaded_idle(devs, n, job);
  if (d >= 0) {
    *how = EBB_PLACE_LOADED;
    return d;
  }
  d = fits(devs, n, job);
  if (d >= 0) {
    *how = EBB_PLACE_FITS;
    return d;
  }
  if (job->overdue || !loaded_anywhere(devs, n, job)) {
    d = evict(devs, n, job);
    if (d >= 0) {
      *how = EBB_PLACE_EVICT;
      return d;
    }
  }
  return -1;
}

uint64_t pl_place_estimate_hook(pl_manager *m, const pl_def *def) {
  uint64_t sum = 0;
  int complete = 0;
  if (!m || !def || pl_manager_pipeline_need(m, def->name, &sum, &complete) != 0) {
    ebb_clearerr();
    return 0;
  }
  return complete && sum ? sum + pl_manager_context_estimate(m) : 0;
}

uint64_t pl_place_need(const pl_def *def, uint64_t measured, uint64_t estimate) {
  if (measured)
    return measured;
  return estimate ? estimate : def->expected_bytes;
}
