/* Placing and judging the acoustic method's words (align.h): the fallback
 * spread, a second try for the chunks that did not align on their phrases,
 * the words no window reached or no audio backs, and whether the lyrics fit
 * the voice at all. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/align.h"
#include "stages/audio/st_util.h"

/* The lyrics do not fit the voice when fewer than this share of the chunks
 * align, or the words' median confidence is under AL_FIT_MEDIAN: sung
 * lines with their own lyrics give medians of 0.75 to 1, the same lines
 * with another song's lyrics about 0.35 (bench/lyrics_align.py's lines). */
#define AL_FIT_CHUNKS 0.5
#define AL_FIT_MEDIAN 0.55
/* ... or, issue 43, when the lyrics in their order explain the vocals less
 * than AL_FIT_GAIN (pocketsphinx's scaled log units per 10 ms frame)
 * better than the better of two other orders of the same words (reversed;
 * in chunks of 8 words or more also every other word first:
 * align_acoustic.c's order_contrast). On the dev set's espeak-ng songs
 * (bench/lyrics_devset.py, all four songs of each voice, 0 / -6 dB and
 * voice alone, with the level phrases) another song's lyrics reach 2.1,
 * which alone would give 2.5; but flite-m-0 at -6 dB with flite-m-1's
 * lyrics (stages_align_fit) reached 2.6, so the value chosen before on
 * espeak-ng alone for the reversed order, 3.0, is kept: flite is no
 * longer held out for it, festival is. */
#define AL_FIT_GAIN 3.0
/* The order says little about a word or two ("hold on" reversed is
 * nearly as likely): the contrast must reach AL_FIT_GAIN when its chunks
 * held at least this many words (a lyric line or more), and only be
 * positive when they held fewer (issue 43: another song's lyrics with 7
 * words contrasted at -7.7 per frame were judged fitting). */
#define AL_FIT_GAIN_WORDS 8


/* A chunk that did not align: the rough (text) times when there are, else
 * spread evenly over the chunk's stretch by length. */
void stg_align_fallback(stg_aco_word *w, const stg_aco_chunk *c) {
  double total = 0, pos = 0;
  for (size_t i = c->first; i < c->first + c->count; i++)
    total += (double)strlen(w[i].word) + 1.0;
  for (size_t i = c->first; i < c->first + c->count; i++) {
    w[i].conf = 0;
    if (w[i].has_rough) {
      w[i].placed = EBB_PLACED_TEXT;
      continue;
    }
    w[i].placed = EBB_PLACED_SPREAD;
    w[i].start = c->t0 + (c->t1 - c->t0) * pos / total;
    pos += (double)strlen(w[i].word) + 1.0;
    w[i].end = c->t0 + (c->t1 - c->t0) * pos / total;
  }
}

static int cancelled(void *u) { return ebb_cancelled(u); }

static void log_fallback(ebb_stage_ctx *ctx, const stg_aco_word *w, const stg_aco_chunk *c) {
  const stg_aco_word *f = &w[c->first];
  stg_st_log(ctx, 2, "%s %d (\"%s%s\", %.2f-%.2f s) did not align acoustically; placed by %s",
             f->line >= 0 ? "line" : "phrase", f->line >= 0 ? f->line + 1 : 0, f->word,
             c->count > 1 ? " ..." : "", c->t0, c->t1,
             f->has_rough ? "the text method's times" : "spreading its words evenly");
}

/* A chunk whose words did not fit its phrases (the plan paired it with a
 * phrase cut too short, or with the wrong one: issue 43), tried once more
 * over the whole stretch between its neighbours: from the end of the last
 * word placed before it (else the previous chunk's end, the song's start)
 * to where the next chunk's phrases start (the song's end). 0 when it
 * aligned there; EBB_ENOTFOUND when not, or when there is no wider
 * stretch. */
static int align_wider(stg_aco *a, const int16_t *pcm, uint64_t m, stg_aco_word *w,
                       const stg_aco_chunk *ch, size_t nch, size_t i, double dur,
                       ebb_stage_ctx *ctx) {
  stg_aco_chunk c = ch[i];
  c.t0 = i > 0 ? ch[i - 1].t1 : 0;
  if (c.first > 0 &&
      (w[c.first - 1].placed == EBB_PLACED_ACOUSTIC || w[c.first - 1].placed == EBB_PLACED_LTS))
    c.t0 = fmax(c.t0, w[c.first - 1].end);
  c.t1 = i + 1 < nch ? ch[i + 1].t0 : dur;
  if (c.t0 >= ch[i].t0 && c.t1 <= ch[i].t1)
    return EBB_ENOTFOUND;
  c.t0 = fmin(c.t0, ch[i].t0);
  c.t1 = fmax(c.t1, ch[i].t1);
  return stg_aco_align(a, pcm, m, w, &c, cancelled, ctx);
}

/* The chunks that did not align on their phrases (fit[i] == 0), a second
 * time each over the stretch between their neighbours (align_wider); those
 * that still do not are placed by the fallback and logged. The fit check
 * has judged the chunks that aligned on their own phrases before this
 * runs: a line forced into a wider stretch finds a place there whatever
 * its words, so its words get their times but are not matched (confidence
 * under STG_ALIGN_CONF_MATCH), and the order contrast is not measured
 * here. */
int stg_align_again(ebb_stage_ctx *ctx, stg_aco *a, const int16_t *pcm, uint64_t m, stg_aco_word *w,
                    const stg_aco_chunk *ch, size_t nch, const char *fit, double dur) {
  size_t again = 0;
  stg_aco_contrast_every(a, 0);
  for (size_t i = 0; i < nch; i++) {
    if (fit[i])
      continue;
    int rc = align_wider(a, pcm, m, w, ch, nch, i, dur, ctx);
    if (rc == EBB_ECANCELED || rc == EBB_ENOMEM)
      return rc;
    if (rc) {
      log_fallback(ctx, w, &ch[i]);
      stg_align_fallback(w, &ch[i]);
      continue;
    }
    for (size_t k = ch[i].first; k < ch[i].first + ch[i].count; k++)
      w[k].conf = fmin(w[k].conf, STG_ALIGN_CONF_MATCH * 0.5);
    again++;
  }
  if (again)
    stg_st_log(ctx, 1,
               "%zu line groups aligned on a second try, over the whole stretch between their "
               "neighbours (the voice phrases paired with them were too short for their words)",
               again);
  return 0;
}

static int cmp_conf(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Whether the lyrics fit the voice: enough chunks aligned, the words'
 * median confidence high enough, and the order contrast (gain per frame
 * over chunks of ncontrast_words words, align.h's stg_aco_order_gain) at
 * least AL_FIT_GAIN when those held AL_FIT_GAIN_WORDS or more (else at least 0). Otherwise
 * every word is unmatched,
 * its confidence at most what was measured. Returns the median. */
double stg_align_check_fit(ebb_stage_ctx *ctx, stg_aco_word *w, size_t nw, size_t aligned,
                           size_t nchunks, double gain, size_t ncontrast_words) {
  double *c = malloc((nw ? nw : 1) * sizeof *c), med = 0;
  size_t k = 0;
  for (size_t i = 0; c && i < nw; i++)
    if (w[i].placed == EBB_PLACED_ACOUSTIC || w[i].placed == EBB_PLACED_LTS)
      c[k++] = w[i].conf;
  if (c && k) {
    qsort(c, k, sizeof *c, cmp_conf);
    med = c[k / 2];
  }
  free(c);
  /* under AL_FIT_GAIN_WORDS words the order says little, but words that explain the audio
   * better in another order still do not fit */
  int order_ok = ncontrast_words < AL_FIT_GAIN_WORDS ? gain >= 0 : gain >= AL_FIT_GAIN;
  if ((double)aligned >= AL_FIT_CHUNKS * (double)nchunks && med >= AL_FIT_MEDIAN && order_ok)
    return med;
  stg_st_log(ctx, 2,
             "the lyrics do not fit the voice: %zu of %zu lines aligned, median word confidence "
             "%.2f (fit: %.2f), the words in their order %.1f per frame better than in another "
             "order "
             "over %zu words (fit: %.1f); every word is marked matched false",
             aligned, nchunks, med, AL_FIT_MEDIAN, gain, ncontrast_words, AL_FIT_GAIN);
  for (size_t i = 0; i < nw; i++)
    w[i].conf = fmin(w[i].conf, STG_ALIGN_CONF_MATCH * 0.5);
  return med;
}

/* Words no window placed (lyrics longer than the song, or left where no
 * voice was heard) share the stretch between their placed neighbours (the
 * audio's start / end at the ends), within [0, dur]: unmatched, confidence 0,
 * source "spread". Returns how many. */
size_t stg_align_place_unbacked(stg_aco_word *w, size_t nw, double dur) {
  size_t left = 0;
  for (size_t i = 0; i < nw;) {
    if (w[i].placed != EBB_PLACED_NONE) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < nw && w[j].placed == EBB_PLACED_NONE)
      j++;
    stg_aco_chunk c = {i, j - i, i > 0 ? w[i - 1].end : 0, j < nw ? w[j].start : dur, 0};
    c.t0 = fmin(fmax(c.t0, 0), dur);
    c.t1 = fmin(fmax(c.t1, c.t0), dur);
    for (size_t k = i; k < j; k++)
      w[k].has_rough = 0;
    stg_align_fallback(w, &c);
    left += j - i;
    i = j;
  }
  return left;
}

/* A word placed acoustically where the vocals hold no sound (its loudest
 * 20 ms more than STG_ALIGN_BACKED_DB under the vocals' loud level, the 95th
 * percentile of 20 ms levels) is not backed by any audio: not aligned. */
static double frame_rms(const float *x, uint64_t n, uint64_t at, uint64_t len) {
  double e = 0;
  uint64_t k = at;
  for (; k < at + len && k < n; k++)
    e += (double)x[k] * x[k];
  return k > at ? sqrt(e / (double)(k - at)) : 0;
}

int stg_align_unbacked(stg_aco_word *w, size_t nw, const float *x, uint64_t n, uint32_t rate,
                       size_t *moved) {
  uint64_t fr = rate / 50, nf = n / (fr ? fr : 1);
  double *lv = malloc((nf ? nf : 1) * sizeof *lv), loud = 0;
  *moved = 0;
  if (!lv)
    return ebb_seterr(EBB_ENOMEM, "align: out of memory for %llu levels", (unsigned long long)nf);
  if (!nf) {
    free(lv);
    return 0;
  }
  for (uint64_t f = 0; f < nf; f++) {
    if ((f & 4095) == 4095 && stg_st_stop()) { /* the frames grow with the song */
      free(lv);
      return EBB_ECANCELED;
    }
    lv[f] = frame_rms(x, n, f * fr, fr);
  }
  qsort(lv, nf, sizeof *lv, cmp_conf);
  loud = lv[(size_t)(0.95 * (double)(nf - 1))];
  free(lv);
  double floor = loud * pow(10, -STG_ALIGN_BACKED_DB / 20);
  for (size_t i = 0; i < nw; i++) {
    if (w[i].placed != EBB_PLACED_ACOUSTIC && w[i].placed != EBB_PLACED_LTS)
      continue;
    double best = 0;
    for (double t = w[i].start; t < w[i].end; t += 0.02)
      best = fmax(best, frame_rms(x, n, (uint64_t)(t * rate), fr));
    if (best <= floor) {
      w[i].placed = EBB_PLACED_SPREAD;
      w[i].conf = 0;
      (*moved)++;
    }
  }
  return 0;
}
