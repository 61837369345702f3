/* Voicing that follows a singer (pitch.h, issue 44): the consonants and
 * breath at the edges of a sung note's voiced run take the run's pitch.
 * pYIN finds no period in an unvoiced consonant (f, s, sh, t, h) or in
 * breath, so a word sung on a note came out voiced only on its vowel: the
 * note started at the vowel, late, and ended early. A frame next to a voiced
 * run (or between two) is filled when, on the pre-emphasised signal, its
 * level is within consonant_db of the run's median (and, with
 * consonant_tilt_db above -100, its spectral tilt, pre-emphasised level
 * minus plain level, is that far above the run's: noise where the vowel had
 * harmonics). A stretch longer than consonant_ms, or one that does not end
 * at a quiet frame, the track's edge or another voiced run, is left
 * unvoiced: that is not a consonant but the accompaniment. A leading
 * stretch's first onset_shift_s stays unvoiced: every note's onset is moved
 * that much earlier afterwards (pitch_onsets.c), which would put a note
 * that starts at its consonant that much before it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/pitch.h"
#include "stages/audio/st_util.h"

#define VOICED(f) (frames[3 * (f) + 1] > 0.0f)

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* The median of v[a..b) (tmp: scratch of b - a floats). */
static float median_of(const float *v, size_t a, size_t b, float *tmp) {
  memcpy(tmp, v + a, (b - a) * sizeof *v);
  qsort(tmp, b - a, sizeof *tmp, cmp_float);
  return tmp[(b - a) / 2];
}

typedef struct pv_ctx {
  float *frames;
  const float *emph_db, *plain_db;
  size_t nf, max_len, lead_skip;
  double range_db, silence_db, tilt_db;
} pv_ctx;

static int consonant_like(const pv_ctx *c, size_t f, float lev, float tilt) {
  return c->emph_db[f] >= lev - c->range_db && c->emph_db[f] - c->plain_db[f] >= tilt + c->tilt_db;
}

/* Fills the unvoiced stretch next to run [s, e) on side dir (-1: before it,
 * +1: after it) with pitch hz when every frame of it is consonant-like and
 * it ends within max_len at a quiet frame, the track's edge or a voiced
 * frame. Returns the frames filled. */
static size_t fill_side(const pv_ctx *c, size_t s, size_t e, int dir, float lev, float tilt,
                        float hz) {
  float *frames = c->frames;
  size_t n = 0;
  long f = dir < 0 ? (long)s - 1 : (long)e;
  for (; f >= 0 && (size_t)f < c->nf && !VOICED(f); f += dir, n++) {
    if (n >= c->max_len)
      return 0;
    if (c->emph_db[f] < lev - c->range_db || c->plain_db[f] < c->silence_db)
      break; /* a quiet frame: the stretch ends here */
    if (!consonant_like(c, (size_t)f, lev, tilt))
      return 0; /* loud but not noise-like: not a consonant */
  }
  if (dir < 0) /* every onset is moved onset_shift_s earlier later on */
    n = n > c->lead_skip ? n - c->lead_skip : 0;
  for (size_t k = 0; k < n; k++) {
    size_t g = dir < 0 ? s - 1 - k : e + k;
    frames[3 * g + 1] = hz;
  }
  return n;
}

size_t stg_pitch_voicing_fill(float *frames, size_t nf, const float *emph_db, const float *plain_db,
                              const stg_pitch_params *p, double hop_s) {
  if (nf == 0 || !(p->consonant_s > 0.0) || !(hop_s > 0.0))
    return 0;
  float *tmp = stg_st_malloc(nf * sizeof *tmp), *tilt = stg_st_malloc(nf * sizeof *tilt);
  unsigned char *was = stg_st_malloc(nf);
  if (!tmp || !tilt || !was) {
    stg_st_free(tmp);
    stg_st_free(tilt);
    stg_st_free(was);
    return (size_t)-1;
  }
  for (size_t f = 0; f < nf; f++) {
    tilt[f] = emph_db[f] - plain_db[f];
    was[f] = VOICED(f);
  }
  pv_ctx c = {frames,
              emph_db,
              plain_db,
              nf,
              stg_pitch_frames_for(p->consonant_s, hop_s),
              p->onset_threshold > 0.0 ? stg_pitch_frames_for(p->onset_shift_s, hop_s) : 0,
              p->consonant_db,
              p->silence_db,
              p->consonant_tilt_db};
  size_t filled = 0;
  /* leading fills first: a consonant between two runs belongs to the
   * word that follows it (its pitch); then the trailing ones */
  for (int dir = -1; dir <= 1; dir += 2)
    for (size_t f = 0; f < nf && !stg_st_stop();) {
      if (!was[f]) {
        f++;
        continue;
      }
      size_t s = f;
      while (f < nf && was[f])
        f++;
      float lev = median_of(emph_db, s, f, tmp), t = median_of(tilt, s, f, tmp);
      filled += fill_side(&c, s, f, dir, lev, t, frames[3 * (dir < 0 ? s : f - 1) + 1]);
    }
  stg_st_free(tmp);
  stg_st_free(tilt);
  stg_st_free(was);
  return filled;
}
