/* Placement rules (placement.h). */
#include "pipeline/placement.h"

int ebb_place_eligible(const ebb_place_dev *d, const ebb_place_job *job) {
  if (d->failed)
    return 0;
  if (!job->pin_cuda && !job->pin_cpu)
    return 1;
  if (d->ordinal < 0)
    return job->pin_cpu;
  return d->ordinal < 32 && (job->pin_cuda >> d->ordinal) & 1u;
}

int ebb_place_could_fit(const ebb_place_dev *d, const ebb_place_job *job) {
  if (!ebb_place_eligible(d, job))
    return 0;
  if (d->loaded || !job->need || !d->free_known)
    return 1;
  return job->need <= d->free_bytes + d->other_bytes;
}

static int loaded_anywhere(const ebb_place_dev *devs, size_t n, const ebb_place_job *job) {
  for (size_t i = 0; i < n; i++)
    if (devs[i].loaded && ebb_place_eligible(&devs[i], job))
      return 1;
  return 0;
}

/* Rule 2: best fit among idle devices with room; an unknown need takes the
 * empty device with the most free memory. */
static int fits(const ebb_place_dev *devs, size_t n, const ebb_place_job *job) {
  int best = -1;
  uint64_t best_left = UINT64_MAX;
  for (size_t i = 0; i < n; i++) {
    const ebb_place_dev *d = &devs[i];
    if (!d->idle || !ebb_place_eligible(d, job))
      continue;
    if (!job->need || !d->free_known) {
      if (d->others == 0 && (best < 0 || d->free_bytes > devs[best].free_bytes))
        best = (int)i;
      continue;
    }
    if (job->need > d->free_bytes)
      continue;
    uint64_t left = d->free_bytes - job->need;
    if (left < best_left) {
      best_left = left;
      best = (int)i;
    }
  }
  return best;
}

/* Rule 3: the idle device where evicting makes room, with the least loaded
 * bytes dropped. */
static int evict(const ebb_place_dev *devs, size_t n, const ebb_place_job *job) {
  int best = -1;
  for (size_t i = 0; i < n; i++) {
    const ebb_place_dev *d = &devs[i];
    if (!d->idle || d->others == 0 || !ebb_place_could_fit(d, job))
      continue;
    if (best < 0 || d->other_bytes < devs[best].other_bytes)
      best = (int)i;
  }
  return best;
}

int ebb_place(const ebb_place_dev *devs, size_t n, const ebb_place_job *job, ebb_place_how *how) {
  int any = 0; /* memory comes back (other processes end); pins and failures do not */
  for (size_t i = 0; i < n; i++)
    if (ebb_place_eligible(&devs[i], job))
      any = 1;
  *how = any ? EBB_PLACE_WAIT : EBB_PLACE_NEVER;
  if (!any)
    return -1;
  for (size_t i = 0; i < n; i++)
    if (devs[i].idle && devs[i].loaded && ebb_place_eligible(&devs[i], job)) {
      *how = EBB_PLACE_LOADED;
      return (int)i;
    }
  int d = fits(devs, n, job);
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

uint64_t ebb_place_estimate_hook(const ebb_pipeline_def *def) {
  (void)def; /* the stages' estimate() (stage ABI) sums here once it exists */
  return 0;
}

uint64_t ebb_place_need(const ebb_pipeline_def *def, uint64_t measured) {
  if (measured)
    return measured;
  uint64_t est = ebb_place_estimate_hook(def);
  return est ? est : def->expected_bytes;
}
