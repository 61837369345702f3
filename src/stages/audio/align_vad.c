/* RMS-energy voice activity detection (align.h): frame levels in dBFS; a
 * frame is active when it is within range_db of the track's loud level (95th
 * percentile of frame levels) and above floor_db. Short gaps are filled,
 * short blips dropped, and segments closer than phrase_gap_s form phrases. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/align.h"

ebb_vad_params ebb_vad_defaults(void) {
  return (ebb_vad_params){.win_s = 0.02,
                          .hop_s = 0.01,
                          .range_db = 30.0,
                          .floor_db = -55.0,
                          .fill_s = 0.03,
                          .min_active_s = 0.05,
                          .phrase_gap_s = 0.35,
                          .min_phrase_s = 0.2};
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Joins spans closer than gap, drops those shorter than min; in place. */
static size_t join_spans(ebb_span *s, size_t n, double gap, double min) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (k > 0 && s[i].start - s[k - 1].end < gap)
      s[k - 1].end = s[i].end;
    else
      s[k++] = s[i];
  }
  size_t m = 0;
  for (size_t i = 0; i < k; i++)
    if (s[i].end - s[i].start >= min - 1e-9)
      s[m++] = s[i];
  return m;
}

int ebb_vad(const float *x, uint64_t n, uint32_t rate, const ebb_vad_params *p, ebb_span **segs,
            size_t *nseg, ebb_span **phrases, size_t *nphr) {
  *segs = *phrases = NULL;
  *nseg = *nphr = 0;
  if (rate == 0 || !(p->hop_s > 0.0) || !(p->win_s > 0.0))
    return ebb_seterr(EBB_EINVAL, "vad: bad rate %u, hop %g s or window %g s", rate, p->hop_s,
                      p->win_s);
  size_t hop = (size_t)lround(p->hop_s * rate), win = (size_t)lround(p->win_s * rate);
  if (hop < 1)
    hop = 1;
  if (win < 1)
    win = 1;
  size_t nf = (size_t)(n / hop) + 1;
  double *db = malloc(nf * sizeof *db), *sorted = malloc(nf * sizeof *sorted);
  ebb_span *s = malloc(nf * sizeof *s), *ph = NULL;
  if (!db || !sorted || !s) {
    free(db);
    free(sorted);
    free(s);
    return ebb_seterr(EBB_ENOMEM, "vad: out of memory for %zu frames", nf);
  }
  for (size_t f = 0; f < nf; f++) {
    /* centred window */
    int64_t a = (int64_t)(f * hop) - (int64_t)win / 2, e = a + (int64_t)win;
    double sum = 0.0;
    for (int64_t k = a; k < e; k++)
      if (k >= 0 && (uint64_t)k < n)
        sum += (double)x[k] * x[k];
    db[f] = 10.0 * log10(sum / (double)win + 1e-20);
  }
  memcpy(sorted, db, nf * sizeof *db);
  qsort(sorted, nf, sizeof *sorted, cmp_double);
  double loud = sorted[(size_t)(0.95 * (double)(nf - 1))];
  double thr = fmax(p->floor_db, loud - p->range_db);
  size_t k = 0;
  for (size_t f = 0; f < nf; f++) {
    if (db[f] < thr)
      continue;
    double t0 = (double)f * hop / rate - p->hop_s / 2, t1 = t0 + p->hop_s;
    if (t0 < 0)
      t0 = 0;
    if (k > 0 && t0 - s[k - 1].end < 1e-9)
      s[k - 1].end = t1;
    else
      s[k++] = (ebb_span){t0, t1};
  }
  double dur = (double)n / rate;
  for (size_t i = 0; i < k; i++)
    if (s[i].end > dur)
      s[i].end = dur;
  k = join_spans(s, k, p->fill_s + 1e-9, p->min_active_s);
  if (k) {
    ph = malloc(k * sizeof *ph);
    if (!ph) {
      free(db);
      free(sorted);
      free(s);
      return ebb_seterr(EBB_ENOMEM, "vad: out of memory");
    }
    memcpy(ph, s, k * sizeof *ph);
  }
  size_t np = join_spans(ph, k, p->phrase_gap_s, p->min_phrase_s);
  free(db);
  free(sorted);
  if (k == 0) {
    free(s);
    s = NULL;
  }
  if (np == 0) {
    free(ph);
    ph = NULL;
  }
  *segs = s;
  *nseg = k;
  *phrases = ph;
  *nphr = np;
  return 0;
}
