/* The export stage's stems (export.h): the separate stage's AUDIO items
 * "vocals" and "accompaniment" written as vocals.flac / accompaniment.flac
 * (16-bit FLAC, libsndfile) or, on request, 16-bit WAV, at the items' own
 * rate and channel count. */
#include <errno.h>
#include <sndfile.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "stages/audio/export.h"
#include "stages/audio/st_util.h"

int stg_export_stems_parse(ebb_stage_ctx *ctx, const char *s, int *out) {
  if (!strcmp(s, "flac"))
    *out = EBB_STEMS_FLAC;
  else if (!strcmp(s, "wav"))
    *out = EBB_STEMS_WAV;
  else if (!strcmp(s, "none"))
    *out = EBB_STEMS_NONE;
  else
    return stg_st_fail(ctx, EBB_ECONFIG, "option stems: \"%s\" is not flac, wav or none", s);
  return 0;
}

static int write_audio(ebb_stage_ctx *ctx, const char *path, const ebb_item_info *a, int wav) {
  SF_INFO si = {.samplerate = (int)a->rate,
                .channels = (int)a->channels,
                .format = (wav ? SF_FORMAT_WAV : SF_FORMAT_FLAC) | SF_FORMAT_PCM_16};
  SNDFILE *f = sf_open(path, SFM_WRITE, &si);
  if (!f)
    return stg_st_fail(ctx, EBB_EIO, "%s: cannot write: %s", path, sf_strerror(NULL));
  /* clip rather than wrap: a separated stem can exceed full scale slightly */
  sf_command(f, SFC_SET_CLIPPING, NULL, SF_TRUE);
  /* in blocks of a second or so of audio, the job's cancellation checked
   * between them (a FLAC encoder takes ~10 ms a block) */
  sf_count_t n = 0, total = (sf_count_t)a->frames, block = 1 << 16;
  while (n < total) {
    if (ebb_cancelled(ctx)) {
      sf_close(f);
      unlink(path);
      return stg_st_fail(ctx, EBB_ECANCELED, "cancelled while writing %s", path);
    }
    sf_count_t take = total - n < block ? total - n : block;
    sf_count_t w = sf_writef_float(f, a->samples + (size_t)n * a->channels, take);
    n += w;
    if (w != take)
      break;
  }
  int bad = n != total;
  if (sf_close(f) || bad)
    return stg_st_fail(ctx, EBB_EIO, "%s: write failed after %lld of %llu frames", path,
                       (long long)n, (unsigned long long)a->frames);
  return 0;
}

int stg_export_stems(ebb_stage_ctx *ctx, const ebb_items *in, ebb_items *out, const char *dir,
                     int mode) {
  static const char *const names[] = {"vocals", "accompaniment"};
  const char *ext = mode == EBB_STEMS_WAV ? "wav" : "flac";
  for (int i = 0; i < 2; i++) {
    char file[64], path[4096];
    snprintf(file, sizeof file, "%s.%s", names[i], ext);
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, file) >= sizeof path)
      return stg_st_fail(ctx, EBB_EINVAL, "output path %s/%s is too long", dir, file);
    ebb_item_info a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    if (ctx->host->item_find(in, names[i], &a) || a.kind != EBB_ITEM_AUDIO || !a.samples) {
      /* a stem an earlier run left here would pass for this song's */
      int stale = unlink(path) == 0;
      stg_st_log(ctx, 1, "no AUDIO item \"%s\": %s not written%s", names[i], file,
                 stale ? " (removed the one an earlier run left)" : "");
      continue;
    }
    int rc = write_audio(ctx, path, &a, mode == EBB_STEMS_WAV);
    if (!rc && (rc = ctx->host->add_file(out, file, path)))
      rc = stg_st_fail(ctx, rc, "cannot add FILE item %s", file);
    if (rc)
      return rc;
    stg_st_log(ctx, 1, "wrote %s (%.1f s, %u Hz, %u channel%s)", path, (double)a.frames / a.rate,
               a.rate, a.channels, a.channels == 1 ? "" : "s");
  }
  return 0;
}
