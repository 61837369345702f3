/* The acoustic method's chunks on the plain vocals and, with voicing_db, their times from the
 * vocals shaped by the voice's voicing (align.h; issue 43).
 *
 * Why two passes: on the samples shaped by the voicing weight (attenuated where no pitched voice
 * is near) the decoder no longer crams words into the rests' residue, so the times are better in
 * the mixes; but the fit check judged on the shaped samples let another song's lyrics pass
 * (stages_align_fit), and which chunks align there is not what the check was measured on. So the
 * chunks are aligned, contrasted and judged on the plain samples exactly as without voicing_db,
 * and then each chunk is decoded once more on the shaped samples, its words taking those times
 * and keeping the plain pass's confidence. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/align.h"
#include "stages/audio/st_util.h"

static int cancelled(void *u) { return ebb_cancelled(u); }

int stg_align_chunks(ebb_stage_ctx *ctx, stg_aco *a, const int16_t *pcm, uint64_t m,
                     stg_aco_word *w, const stg_aco_chunk *ch, size_t nch, char *fit,
                     size_t *aligned) {
  *aligned = 0;
  for (size_t i = 0; i < nch; i++) {
    int rc = stg_aco_align(a, pcm, m, w, &ch[i], cancelled, ctx);
    if (rc == EBB_ECANCELED || rc == EBB_ENOMEM)
      return rc;
    fit[i] = rc == 0;
    *aligned += rc == 0;
  }
  return 0;
}

int stg_align_shaped(ebb_stage_ctx *ctx, stg_aco *a, const int16_t *pcm, uint64_t m,
                     stg_aco_word *w, const stg_aco_chunk *ch, size_t nch, char *fit,
                     size_t *moved) {
  size_t most = 1;
  *moved = 0;
  for (size_t i = 0; i < nch; i++)
    most = ch[i].count > most ? ch[i].count : most;
  stg_aco_word *sh = malloc(most * sizeof *sh);
  if (!sh)
    return ebb_seterr(EBB_ENOMEM, "align: out of memory for a chunk of %zu words", most);
  stg_aco_contrast_every(a, 0); /* the plain pass's contrast has been read */
  for (size_t i = 0; i < nch; i++) {
    stg_aco_chunk c = ch[i];
    memcpy(sh, &w[c.first], c.count * sizeof *sh);
    c.first = 0;
    int rc = stg_aco_align(a, pcm, m, sh, &c, cancelled, ctx);
    if (rc == EBB_ECANCELED || rc == EBB_ENOMEM) {
      free(sh);
      return rc;
    }
    if (rc) /* not on the shaped samples: the plain path's times stay */
      continue;
    for (size_t k = 0; k < c.count; k++) {
      stg_aco_word *x = &w[ch[i].first + k];
      x->start = sh[k].start;
      x->end = sh[k].end;
      if (!fit[i]) /* aligned on its phrases only here: placed, but the check did not judge it */
        x->placed = sh[k].placed, x->conf = fmin(sh[k].conf, STG_ALIGN_CONF_MATCH * 0.5);
    }
    fit[i] = 1;
    (*moved)++;
  }
  free(sh);
  return 0;
}
