/* Chunks for the acoustic alignment (align.h): which lyric words are sung
 * in which stretch of the vocals. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/align.h"
#include "stages/audio/st_util.h"

#define PL_MAX_RUN 4       /* lines or phrases in one pairing */
#define PL_SKIP_PHRASE 1.5 /* cost of a phrase with no line */
#define PL_SKIP_LINE 4.0   /* cost of a line with no phrase */
#define PL_JOIN 0.35       /* cost of each extra line or phrase in a pairing */
/* ... and of each second of rest between the phrases of one pairing (issue 43): a line is
 * sung over phrases split by a breath, lines are parted by longer rests, so a pairing that
 * joins phrases across a long rest is the less likely. Chosen on the dev set's espeak-ng songs
 * (bench/lyrics_devset_stored.py; 0.5 and 1.0 gave the same mixes, 1.0 the better voice
 * alone); docs/songtrace.md, align step 2. */
#define PL_REST 1.0

/* A line's weight: its letters plus one per word (about its sung length). */
static double letters(const char *w) {
  double n = 1;
  for (const unsigned char *p = (const unsigned char *)w; *p; p++)
    n += (*p >= 0x80) ? ((*p & 0xC0) == 0xC0) : ((*p | 32) >= 'a' && (*p | 32) <= 'z');
  return n;
}

typedef struct pl_line {
  size_t first, count;
  double weight;
} pl_line;

static int add_chunk(stg_aco_chunk **c, size_t *n, size_t *cap, stg_aco_chunk v) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 16;
    stg_aco_chunk *x = realloc(*c, nc * sizeof *x);
    if (!x)
      return ebb_seterr(EBB_ENOMEM, "align: out of memory for chunks");
    *c = x;
    *cap = nc;
  }
  (*c)[(*n)++] = v;
  return 0;
}

static size_t count_lines(const stg_aco_word *w, size_t nw, pl_line *out) {
  size_t nl = 0;
  for (size_t i = 0; i < nw; i++) {
    if (i == 0 || w[i].line != w[i - 1].line) {
      if (out)
        out[nl] = (pl_line){i, 0, 0};
      nl++;
    }
    if (out) {
      out[nl - 1].count++;
      out[nl - 1].weight += letters(w[i].word);
    }
  }
  return nl;
}

/* The cost of singing lines [j, j+b) over phrases [i, i+a) at `rate` letters/s: how far the
 * phrases' length is from the lines' at that rate, the joins, the rests inside. */
static double pair_cost(const pl_line *l, size_t j, size_t b, const stg_span *ph, size_t i,
                        size_t a, double rate) {
  double wsum = 0, dsum = 0;
  for (size_t k = 0; k < b; k++)
    wsum += l[j + k].weight;
  double gaps = 0;
  for (size_t k = 0; k < a; k++)
    dsum += ph[i + k].end - ph[i + k].start;
  for (size_t k = 1; k < a; k++)
    gaps += ph[i + k].start - ph[i + k - 1].end;
  return fabs(log((dsum * rate + 1e-9) / wsum)) + PL_JOIN * (double)(a - 1 + b - 1) +
         PL_REST * gaps;
}

/* The plan's steps (from: a * 8 + b into each cell of the W-wide table)
 * followed back from (nph, nl) into chunks: each run of lines with the
 * phrases it is sung over (a line with none: between its neighbours'
 * phrases), in order. 0 or EBB_ENOMEM (*chunks then partly filled; the
 * caller frees it). */
static int backtrack(const int *from, size_t W, const pl_line *l, size_t nl, const stg_span *ph,
                     size_t nph, double dur, stg_aco_chunk **chunks, size_t *nchunks) {
  size_t i = nph, j = nl, cap = 0;
  int rc;
  while (i > 0 || j > 0) { /* in reverse, then reversed */
    int f = from[i * W + j];
    size_t a = (size_t)f / 8, b = (size_t)f % 8;
    if (b > 0) {
      stg_aco_chunk c = {l[j - b].first, 0, 0, dur, 0};
      for (size_t k = j - b; k < j; k++)
        c.count += l[k].count;
      if (a > 0) {
        c.t0 = ph[i - a].start;
        c.t1 = ph[i - 1].end;
      } else { /* a line with no phrase: between the neighbours' phrases */
        c.t0 = i > 0 ? ph[i - 1].end : 0;
        c.t1 = i < nph ? ph[i].start : dur;
      }
      if ((rc = add_chunk(chunks, nchunks, &cap, c)))
        return rc;
    }
    i -= a;
    j -= b;
  }
  for (size_t k = 0; k < *nchunks / 2; k++) {
    stg_aco_chunk t = (*chunks)[k];
    (*chunks)[k] = (*chunks)[*nchunks - 1 - k];
    (*chunks)[*nchunks - 1 - k] = t;
  }
  return 0;
}

int stg_aco_plan_lines(const stg_aco_word *w, size_t nw, const stg_span *ph, size_t nph, double dur,
                       stg_aco_chunk **chunks, size_t *nchunks) {
  *chunks = NULL;
  *nchunks = 0;
  size_t nl = count_lines(w, nw, NULL);
  if (nl == 0)
    return 0;
  pl_line *l = calloc(nl, sizeof *l);
  size_t W = nl + 1, np = nph + 1;
  double *D = malloc(np * W * sizeof *D);
  int *from = malloc(np * W * sizeof *from); /* a * 8 + b of the step into (i, j) */
  int rc = 0;
  if (!l || !D || !from) {
    rc =
        ebb_seterr(EBB_ENOMEM, "align: out of memory planning %zu lines over %zu phrases", nl, nph);
    goto done;
  }
  count_lines(w, nw, l);
  double wtot = 0, dtot = 0;
  for (size_t j = 0; j < nl; j++)
    wtot += l[j].weight;
  for (size_t i = 0; i < nph; i++)
    dtot += ph[i].end - ph[i].start;
  double rate = dtot > 0 ? wtot / dtot : 1.0;
  for (size_t k = 0; k < np * W; k++)
    D[k] = INFINITY;
  D[0] = 0;
  for (size_t i = 0; i <= nph; i++) {
    if (stg_st_stop()) { /* a row is nl lines: it grows with the lyrics */
      rc = ebb_seterr(EBB_ECANCELED, "align: cancelled planning %zu lines over %zu phrases", nl,
                      nph);
      goto done;
    }
    for (size_t j = 0; j <= nl; j++) {
      double here = D[i * W + j];
      if (!isfinite(here))
        continue;
      if (i < nph && here + PL_SKIP_PHRASE < D[(i + 1) * W + j]) {
        D[(i + 1) * W + j] = here + PL_SKIP_PHRASE;
        from[(i + 1) * W + j] = 1 * 8 + 0;
      }
      if (j < nl && here + PL_SKIP_LINE < D[i * W + j + 1]) {
        D[i * W + j + 1] = here + PL_SKIP_LINE;
        from[i * W + j + 1] = 0 * 8 + 1;
      }
      for (size_t a = 1; a <= PL_MAX_RUN && i + a <= nph; a++)
        for (size_t b = 1; b <= PL_MAX_RUN && j + b <= nl; b++) {
          double c = here + pair_cost(l, j, b, ph, i, a, rate);
          if (c < D[(i + a) * W + j + b]) {
            D[(i + a) * W + j + b] = c;
            from[(i + a) * W + j + b] = (int)(a * 8 + b);
          }
        }
    }
  }
  rc = backtrack(from, W, l, nl, ph, nph, dur, chunks, nchunks);
done:
  if (rc) {
    free(*chunks);
    *chunks = NULL;
    *nchunks = 0;
  }
  free(l);
  free(D);
  free(from);
  return rc;
}

/* The phrase nearest to t (inside one: distance 0). */
static size_t nearest_phrase(const stg_span *ph, size_t nph, double t) {
  size_t best = 0;
  double bd = INFINITY;
  for (size_t i = 0; i < nph; i++) {
    double d = t < ph[i].start ? ph[i].start - t : t > ph[i].end ? t - ph[i].end : 0;
    if (d < bd) {
      bd = d;
      best = i;
    }
  }
  return best;
}

int stg_aco_plan_times(const stg_aco_word *w, size_t nw, const stg_span *ph, size_t nph, double dur,
                       stg_aco_chunk **chunks, size_t *nchunks) {
  size_t cap = 0;
  *chunks = NULL;
  *nchunks = 0;
  size_t prev = (size_t)-1;
  for (size_t i = 0; i < nw; i++) {
    double mid = 0.5 * (w[i].start + w[i].end);
    size_t p = nph ? nearest_phrase(ph, nph, mid) : 0;
    if (p < prev && prev != (size_t)-1)
      p = prev; /* keep the chunks in order */
    /* the phrase's own stretch: a rough time (a transcript spread evenly
     * over a segment, say) can reach far into the music around it */
    double lo = nph ? ph[p].start : w[i].start;
    double hi = nph ? ph[p].end : w[i].end;
    if (p == prev && *nchunks) {
      stg_aco_chunk *c = &(*chunks)[*nchunks - 1];
      c->count++;
      c->t0 = fmin(c->t0, lo);
      c->t1 = fmax(c->t1, hi);
      continue;
    }
    int rc = add_chunk(chunks, nchunks, &cap,
                       (stg_aco_chunk){i, 1, lo, fmin(hi, dur > 0 ? dur : hi), 0});
    if (rc) {
      free(*chunks);
      *chunks = NULL;
      *nchunks = 0;
      return rc;
    }
    prev = p;
  }
  return 0;
}
