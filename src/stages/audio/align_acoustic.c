/* Acoustic forced alignment of lyric words with pocketsphinx (align.h).
 *
 * Debian's pocketsphinx (0.8+5prealpha) has no alignment search of its own
 * in its C API, so each chunk gets a finite-state grammar that is exactly
 * its dictionary words in order; the FSG search inserts silence and noise
 * fillers between them, and the segment iterator gives each word's frames.
 * The confidence of a word comes from its acoustic score in the forced
 * path per frame. pocketsphinx scores each frame's senones relative to the
 * frame's best senone, so that score is how far the word's phones fall
 * behind the best active phone could do there. (A free phone loop, the
 * textbook contrast, was measured again for issue 43: pocketsphinx's
 * allphone search, context-independent phones, all senones scored so both
 * paths share each frame's normaliser, per word the forced score per frame
 * minus the loop's on the same frames: medians 26-31 for a dev-set song's
 * own lyrics against 28-34 for another song's, and 27 against 30 on the
 * demo, i.e. no separation, at 2-3 times the cost. The loop's phones
 * matched the lyrics' no better than chance.) Whether the words are the
 * ones sung is judged instead by the order contrast (order_contrast). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ebb/error.h"
#include "stages/audio/align.h"
#include "stages/audio/decode.h"
#include "stages/audio/speech.h"
#include "stages/audio/st_util.h"

#define ACO_RATE 16000
#define ACO_FRAME_S 0.01
#define ACO_PAD_S 0.25 /* a chunk's audio starts and ends this far outside its phrases */
/* The whole-song alignment's windows (align.h, stg_aco_align_song): their
 * length (under ACO_WHOLE_S, so each is one full-utterance decode), the
 * part at their end whose words wait for the next window, the least a
 * window moves on, and the words in one window's grammar (more than
 * ACO_WIN_S seconds of the fastest singing holds). */
#define ACO_WIN_S 16.0
#define ACO_WIN_MARGIN_S 4.0
#define ACO_WIN_MIN_STEP_S 1.0
#define ACO_WIN_WORDS 24
/* conf = exp(-max(0, d - ACO_CONF_FREE) / ACO_CONF_SCALE), d = minus the
 * word's acoustic score per frame (pocketsphinx's scaled log units, 0 = the
 * best senone in every frame). On the demo song's sung words d is about
 * 20..45 where the word is sung; forced onto other words, 40..60. */
#define ACO_CONF_FREE 25.0
#define ACO_CONF_SCALE 25.0
/* The order contrast's second order (every other word first) needs this
 * many words: in a shorter chunk it keeps most of their order (1 3 5 2 4:
 * 1 3 5 in place), and songgen's 5-minute song, 4-6 words a chunk, came
 * out at 2.2 per frame against 5.7 with the reversed order alone. */
#define ACO_IL_MIN 8

#ifdef EBB_HAVE_POCKETSPHINX
#include <pocketsphinx.h>
#include <sphinxbase/fsg_model.h>

/* A word as the dictionary spells it: lowercase ASCII letters, digits and
 * apostrophes; 0 when the word has anything else (another script: not in
 * this dictionary) or nothing left. */
static int dict_form(const char *word, char *out, size_t n) {
  size_t k = 0;
  for (const unsigned char *p = (const unsigned char *)word; *p; p++) {
    if (*p >= 0x80)
      return 0;
    if (isalnum(*p) || *p == '\'') {
      if (k + 1 >= n)
        return 0;
      out[k++] = (char)tolower(*p);
    }
  }
  while (k && out[k - 1] == '\'')
    k--;
  out[k] = '\0';
  size_t lead = strspn(out, "'");
  memmove(out, out + lead, k - lead + 1);
  return out[0] != '\0';
}

struct stg_aco {
  cmd_ln_t *config;
  ps_decoder_t *ps;
  /* the order contrast (stg_aco_order_gain): every contrast_every-th
   * chunk aligned, the forward path's score minus the reversed words'
   * over the same frames, summed, and those frames */
  size_t contrast_every, nchunk, ncontrast; /* ncontrast: words */
  double gain, gain_frames;
  const int16_t *contrast_pcm; /* what the contrast decodes (stg_aco_contrast_audio); NULL: pcm */
  char **lts;                  /* words added with espeak-ng's pronunciation */
  size_t nlts;
};

int stg_aco_open(const char *hmm, const char *dict, stg_aco **out) {
  char mdef[4096];
  snprintf(mdef, sizeof mdef, "%s/mdef", hmm);
  if (access(mdef, R_OK))
    return ebb_seterr(EBB_ENOLIB,
                      "align: no acoustic model at %s (option acoustic_model; Debian package "
                      "pocketsphinx-en-us, installed by scripts/install-deps.sh)",
                      hmm);
  if (access(dict, R_OK))
    return ebb_seterr(EBB_ENOLIB,
                      "align: no pronunciation dictionary at %s (option dictionary; Debian "
                      "package pocketsphinx-en-us, installed by scripts/install-deps.sh)",
                      dict);
  stg_aco *a = calloc(1, sizeof *a);
  if (!a)
    return ebb_seterr(EBB_ENOMEM, "align: out of memory for the acoustic model");
  /* wide beams: the grammar is one path, so pruning only risks losing it;
   * no silence removal: the chunk's own times are wanted */
  a->config = cmd_ln_init(NULL, ps_args(), TRUE, "-hmm", hmm, "-dict", dict, "-logfn", "/dev/null",
                          "-remove_silence", "no", "-beam", "1e-80", "-pbeam", "1e-80", "-wbeam",
                          "1e-60", NULL);
  if (a->config)
    a->ps = ps_init(a->config);
  if (!a->ps) {
    stg_aco_close(a);
    return ebb_seterr(EBB_ENOLIB,
                      "align: pocketsphinx could not load the model %s with dictionary %s "
                      "(Debian package pocketsphinx-en-us)",
                      hmm, dict);
  }
  *out = a;
  return 0;
}

void stg_aco_close(stg_aco *a) {
  if (!a)
    return;
  if (a->ps)
    ps_free(a->ps);
  if (a->config)
    cmd_ln_free_r(a->config);
  for (size_t i = 0; i < a->nlts; i++)
    free(a->lts[i]);
  free(a->lts);
  free(a);
}

/* 1 when the dictionary has the word (normalised: lowercase, apostrophes
 * kept), or had it added from espeak-ng's letter-to-sound rules. */
static int stg_aco_known(stg_aco *a, const char *word) {
  char w[128];
  if (!dict_form(word, w, sizeof w))
    return 0;
  char *ph = ps_lookup_word(a->ps, w);
  int ok = ph != NULL;
  ckd_free(ph);
  return ok;
}

/* Runs the search `name` over pcm; 0 when it found a hypothesis,
 * EBB_ECANCELED when cancelled, -1 otherwise. A chunk of up to
 * ACO_WHOLE_S seconds goes in one call as a full utterance (batch CMN: the
 * best alignment). A longer one (a phrase plan that left minutes in one
 * chunk) is fed in blocks of ACO_BLOCK_S with a deadline check between
 * them: one call over a minute of audio took over a second of CPU on a busy
 * 2-core machine, past --job-timeout's grace; in blocks pocketsphinx
 * normalises the features live, which aligns such chunks less well. */
#define ACO_WHOLE_S 20.0
#define ACO_BLOCK_S 0.25
static int decode(stg_aco *a, const char *name, const int16_t *pcm, size_t n,
                  int (*cancelled)(void *), void *user) {
  if (ps_set_search(a->ps, name) < 0 || ps_start_utt(a->ps) < 0)
    return -1;
  int whole = n <= (size_t)(ACO_WHOLE_S * ACO_RATE), rc = 0;
  size_t block = whole ? n : (size_t)(ACO_BLOCK_S * ACO_RATE);
  for (size_t at = 0; at < n && !rc; at += block) {
    if (!whole && cancelled && cancelled(user)) {
      ps_end_utt(a->ps);
      return EBB_ECANCELED;
    }
    rc = ps_process_raw(a->ps, pcm + at, n - at < block ? n - at : block, FALSE, whole) < 0;
  }
  rc |= ps_end_utt(a->ps) < 0;
  int32 score;
  return rc || !ps_get_hyp(a->ps, &score) ? -1 : 0;
}

static int is_filler(const char *w) { return w[0] == '<' || w[0] == '[' || !strcmp(w, "SIL"); }

static int is_lts(const stg_aco *a, const char *d) {
  for (size_t i = 0; i < a->nlts; i++)
    if (!strcmp(a->lts[i], d))
      return 1;
  return 0;
}

/* A word the dictionary lacks, added with espeak-ng's letter-to-sound
 * pronunciation mapped to CMU phones (speech.h): 1 when added. */
static int add_lts(stg_aco *a, const char *d) {
  char ph[512];
  char **l = realloc(a->lts, (a->nlts + 1) * sizeof *l);
  if (!l)
    return 0;
  a->lts = l;
  if (stg_speech_phones(d, ph, sizeof ph) || !(a->lts[a->nlts] = strdup(d)))
    return 0;
  if (ps_add_word(a->ps, d, ph, FALSE) < 0) {
    free(a->lts[a->nlts]);
    return 0;
  }
  a->nlts++;
  return 1;
}

/* The grammar, built as a finite-state grammar directly: a chain of the
 * chunk's dictionary words (the FSG search adds silence and filler loops
 * at every state, and alternate pronunciations). Built with fsg_model
 * rather than ps_set_jsgf_string, which leaks its parsed grammar (7 KB a
 * call, valgrind) in 0.8+5prealpha. known[i]: word i is in the grammar.
 * Returns 0, -1 when pocketsphinx refused it, EBB_ENOMEM, EBB_ECANCELED
 * (stg_st_stop, st_util.h). */
static int set_grammar(stg_aco *a, const stg_aco_word *w, const stg_aco_chunk *c, int *known,
                       size_t *nknown) {
  *nknown = 0;
  for (size_t i = 0; i < c->count; i++) {
    char d[128];
    if ((i & 63) == 63 && stg_st_stop()) /* a chunk's words grow with the lyrics */
      return EBB_ECANCELED;
    known[i] = stg_aco_known(a, w[c->first + i].word);
    if (!known[i] && dict_form(w[c->first + i].word, d, sizeof d))
      known[i] = add_lts(a, d);
    *nknown += (size_t)known[i];
  }
  if (*nknown == 0)
    return 0;
  fsg_model_t *fsg = fsg_model_init("lyrics", ps_get_logmath(a->ps),
                                    cmd_ln_float32_r(a->config, "-lw"), (int32)*nknown + 1);
  if (!fsg)
    return ebb_seterr(EBB_ENOMEM, "align: out of memory for a grammar of %zu words", c->count);
  fsg->start_state = 0;
  fsg->final_state = (int32)*nknown;
  int32 st = 0;
  for (size_t i = 0; i < c->count; i++) {
    char d[128];
    if (!known[i] || !dict_form(w[c->first + i].word, d, sizeof d))
      continue;
    int32 wid = fsg_model_word_add(fsg, d);
    fsg_model_trans_add(fsg, st, st + 1, 0, wid);
    if (c->prefix && st > 0) /* the path may end after any word */
      fsg_model_null_trans_add(fsg, st, fsg->final_state, 0);
    st++;
  }
  if (c->prefix) /* ... or before the first: a window of accompaniment alone */
    fsg_model_null_trans_add(fsg, 0, fsg->final_state, 0);
  int rc = ps_set_fsg(a->ps, "lyrics", fsg) < 0 ? -1 : 0;
  fsg_model_free(fsg); /* the search holds its own reference */
  return rc;
}

/* Words the dictionary lacks sit between their aligned neighbours. */
static void place_between(stg_aco_word *w, const stg_aco_chunk *c, const int *known) {
  for (size_t i = 0; i < c->count;) {
    if (known[i]) {
      i++;
      continue;
    }
    size_t j = i;
    while (j < c->count && !known[j])
      j++;
    double lo = i > 0 ? w[c->first + i - 1].end : c->t0;
    double hi = j < c->count ? w[c->first + j].start : c->t1;
    if (hi < lo + 0.08 * (double)(j - i))
      hi = lo + 0.08 * (double)(j - i);
    for (size_t k = i; k < j; k++) {
      stg_aco_word *x = &w[c->first + k];
      x->start = lo + (hi - lo) * (double)(k - i) / (double)(j - i);
      x->end = lo + (hi - lo) * (double)(k - i + 1) / (double)(j - i);
      x->conf = 0;
      x->placed = EBB_PLACED_BETWEEN;
    }
    i = j;
  }
}

/* The forced path's words, in grammar order (fillers skipped): times from
 * t0, and each word's frames and acoustic score for the confidence. */
static void read_words(stg_aco *a, stg_aco_word *w, const stg_aco_chunk *c, const int *known,
                       double t0, int *fr0, int *fr1, int32 *ascr) {
  size_t k = 0;
  for (ps_seg_t *s = ps_seg_iter(a->ps); s; s = ps_seg_next(s)) {
    if (is_filler(ps_seg_word(s)))
      continue;
    while (k < c->count && !known[k])
      k++;
    if (k == c->count) {
      ps_seg_free(s);
      break;
    }
    int32 lscr, lback;
    ps_seg_frames(s, &fr0[k], &fr1[k]);
    ps_seg_prob(s, &ascr[k], &lscr, &lback);
    stg_aco_word *x = &w[c->first + k];
    x->start = t0 + fr0[k] * ACO_FRAME_S;
    x->end = t0 + (fr1[k] + 1) * ACO_FRAME_S;
    char dw[128];
    x->placed = dict_form(x->word, dw, sizeof dw) && is_lts(a, dw) ? EBB_PLACED_LTS
                                                                   : EBB_PLACED_ACOUSTIC;
    k++;
  }
}

/* Each placed word's confidence from its forced score per frame. */
static void word_conf(stg_aco_word *w, const stg_aco_chunk *c, const int *fr0, const int *fr1,
                      const int32 *ascr) {
  for (size_t k = 0; k < c->count; k++) {
    stg_aco_word *x = &w[c->first + k];
    if (x->placed != EBB_PLACED_ACOUSTIC && x->placed != EBB_PLACED_LTS)
      continue;
    double d = -(double)ascr[k] / (fr1[k] - fr0[k] + 1);
    x->conf = d <= ACO_CONF_FREE ? 1.0 : exp(-(d - ACO_CONF_FREE) / ACO_CONF_SCALE);
  }
}

/* The order contrast of one aligned chunk: the words the forward path
 * placed, in reverse order, decoded over the same samples (pcm, len) with
 * a grammar of exactly them, and (ACO_IL_MIN words or more) in a second
 * order, every other word and then the rest (1 3 5 7 2 4 6 8). Sung words in
 * their order explain the audio better than in either; another song's
 * words explain it about as badly in any order, and the better of two
 * wrong orders comes nearer them than one does (issue 43: with the reversed
 * order alone another song's lyrics reached 4.2 per frame on flite's
 * voices). Adds fwd minus the better of the two, and the frames, to the
 * model's sums; a reversed path that does not reach its end adds nothing,
 * a second order that does not is left out. */
static int order_contrast(stg_aco *a, const stg_aco_word *w, const stg_aco_chunk *c,
                          const int16_t *pcm, size_t len, int32 fwd) {
  stg_aco_word *rv = calloc(c->count, sizeof *rv);
  int *known = calloc(c->count, sizeof *known);
  size_t m = 0, nk = 0;
  int rc = 0;
  if (!rv || !known) {
    rc = ebb_seterr(EBB_ENOMEM, "align: out of memory for a chunk of %zu words", c->count);
    goto done;
  }
  for (size_t i = c->count; i-- > 0;)
    if (w[c->first + i].placed == EBB_PLACED_ACOUSTIC || w[c->first + i].placed == EBB_PLACED_LTS)
      rv[m++] = w[c->first + i];
  stg_aco_chunk r = {0, m, c->t0, c->t1, 0};
  if (m < 2)
    goto done;
  rc = set_grammar(a, rv, &r, known, &nk);
  int32 rev = 0, il = 0;
  if (rc || nk == 0 || decode(a, "lyrics", pcm, len, NULL, NULL) || !ps_get_hyp(a->ps, &rev))
    goto done;           /* EBB_ENOMEM / EBB_ECANCELED from set_grammar pass on */
  if (m >= ACO_IL_MIN) { /* the second order: every other word, then the rest */
    stg_aco_word *iw = calloc(m, sizeof *iw);
    size_t q = 0;
    if (!iw) {
      rc = ebb_seterr(EBB_ENOMEM, "align: out of memory for a chunk of %zu words", m);
      goto done;
    }
    for (size_t i = m; i-- > 0;) /* rv is reversed: forward word j is rv[m - 1 - j] */
      if ((m - 1 - i) % 2 == 0)
        iw[q++] = rv[i];
    for (size_t i = m; i-- > 0;)
      if ((m - 1 - i) % 2 == 1)
        iw[q++] = rv[i];
    rc = set_grammar(a, iw, &r, known, &nk);
    free(iw);
    if (rc == EBB_ENOMEM || rc == EBB_ECANCELED)
      goto done;
    if (!rc && nk && !decode(a, "lyrics", pcm, len, NULL, NULL) && ps_get_hyp(a->ps, &il) &&
        il > rev)
      rev = il;
    rc = 0;
  }
  a->gain += (double)fwd - (double)rev;
  a->gain_frames += (double)len / (ACO_RATE * ACO_FRAME_S);
  a->ncontrast += m;
done:
  free(rv);
  free(known);
  return rc == EBB_ENOMEM || rc == EBB_ECANCELED ? rc : 0;
}

void stg_aco_contrast_every(stg_aco *a, size_t every) {
  a->contrast_every = every;
  a->nchunk = a->ncontrast = 0;
  a->gain = a->gain_frames = 0;
}

double stg_aco_order_gain(const stg_aco *a, size_t *nwords) {
  *nwords = a->ncontrast;
  return a->gain_frames > 0 ? a->gain / a->gain_frames : 0;
}

void stg_aco_contrast_audio(stg_aco *a, const int16_t *pcm) { a->contrast_pcm = pcm; }

/* The words placed, the sung part of a prefix chunk, the unknown words
 * between their neighbours. 0, or EBB_ENOTFOUND (all un-placed) when a
 * whole chunk did not align. */
static int finish_chunk(stg_aco_word *w, const stg_aco_chunk *c, const int *known, size_t nknown) {
  size_t got = 0, upto = 0;
  for (size_t i = 0; i < c->count; i++)
    if (known[i] &&
        (w[c->first + i].placed == EBB_PLACED_ACOUSTIC || w[c->first + i].placed == EBB_PLACED_LTS))
      got++, upto = i + 1;
  if (c->prefix) { /* the words sung: up to the last one placed */
    stg_aco_chunk sung = *c;
    sung.count = got == nknown ? c->count : upto; /* unknown words after the last: to t1 */
    place_between(w, &sung, known);
    return 0;
  }
  if (got != nknown) {
    for (size_t i = 0; i < c->count; i++)
      w[c->first + i].placed = EBB_PLACED_NONE;
    return EBB_ENOTFOUND;
  }
  place_between(w, c, known);
  return 0;
}

int stg_aco_align(stg_aco *a, const int16_t *pcm, uint64_t n, stg_aco_word *w,
                  const stg_aco_chunk *c, int (*cancelled)(void *), void *user) {
  double pad = c->prefix ? 0 : ACO_PAD_S, t0 = fmax(0.0, c->t0 - pad);
  uint64_t s0 = (uint64_t)(t0 * ACO_RATE), s1 = (uint64_t)((c->t1 + pad) * ACO_RATE);
  if (s1 > n)
    s1 = n;
  if (s1 <= s0 + ACO_RATE / 10 || c->count == 0)
    return EBB_ENOTFOUND;
  size_t len = (size_t)(s1 - s0), nknown = 0;
  int *known = calloc(c->count, sizeof *known), *fr0 = calloc(c->count, sizeof *fr0);
  int *fr1 = calloc(c->count, sizeof *fr1);
  int32 *ascr = calloc(c->count, sizeof *ascr), fwd = 0;
  int rc = 0;
  if (!known || !fr0 || !fr1 || !ascr) {
    rc = ebb_seterr(EBB_ENOMEM, "align: out of memory for a chunk of %zu words", c->count);
    goto done;
  }
  if (cancelled && cancelled(user)) {
    rc = EBB_ECANCELED;
    goto done;
  }
  rc = set_grammar(a, w, c, known, &nknown);
  if (rc == EBB_ENOMEM || rc == EBB_ECANCELED)
    goto done;
  int drc = rc || nknown == 0 ? -1 : decode(a, "lyrics", pcm + s0, len, cancelled, user);
  if (drc) {
    rc = drc == EBB_ECANCELED ? EBB_ECANCELED : EBB_ENOTFOUND;
    goto done;
  }
  ps_get_hyp(a->ps, &fwd);
  read_words(a, w, c, known, t0, fr0, fr1, ascr);
  word_conf(w, c, fr0, fr1, ascr);
  if ((rc = finish_chunk(w, c, known, nknown)) == 0 && a->contrast_every &&
      a->nchunk++ % a->contrast_every == 0) {
    const int16_t *cp = a->contrast_pcm ? a->contrast_pcm + s0 : pcm + s0;
    /* other samples: the forward path again over them (its grammar is still set); one that
     * does not reach its end there adds nothing, as a reversed one */
    if (a->contrast_pcm && (decode(a, "lyrics", cp, len, NULL, NULL) || !ps_get_hyp(a->ps, &fwd)))
      goto done;
    rc = order_contrast(a, w, c, cp, len, fwd);
  }
done:
  free(known);
  free(fr0);
  free(fr1);
  free(ascr);
  return rc;
}

/* One window of the whole-song alignment: words [k, k + m) over [t0, t1];
 * keeps the placed words that end by `cut` (all of them at the song's
 * end), un-places the rest. *kept: the words kept; *next: where the next
 * window starts. */
static int song_window(stg_aco *a, const int16_t *pcm, uint64_t n, stg_aco_word *w, size_t k,
                       size_t m, double t0, double t1, int end, int (*cancelled)(void *),
                       void *user, size_t *kept, double *next) {
  stg_aco_chunk c = {k, m, t0, t1, 1};
  for (size_t i = k; i < k + m; i++)
    w[i].placed = EBB_PLACED_NONE;
  int rc = stg_aco_align(a, pcm, n, w, &c, cancelled, user);
  if (rc == EBB_ECANCELED || rc == EBB_ENOMEM)
    return rc;
  double cut = end ? t1 + 1 : t1 - ACO_WIN_MARGIN_S;
  size_t j = 0;
  while (j < m && w[k + j].placed != EBB_PLACED_NONE && w[k + j].end <= cut)
    j++;
  *next = end ? t1 : cut;
  if (j < m && w[k + j].placed != EBB_PLACED_NONE && w[k + j].start < *next)
    *next = w[k + j].start - 0.05; /* the word over the cut starts the next window */
  if (j == m && !end)              /* the grammar ran out: the next words may follow at once */
    *next = w[k + m - 1].end;
  for (size_t i = k + j; i < k + m; i++)
    w[i].placed = EBB_PLACED_NONE;
  if (j > 0 && *next < w[k + j - 1].end)
    *next = w[k + j - 1].end;
  if (*next < t0 + ACO_WIN_MIN_STEP_S)
    *next = t0 + ACO_WIN_MIN_STEP_S;
  *kept = j;
  return 0;
}

int stg_aco_align_song(stg_aco *a, const int16_t *pcm, uint64_t n, stg_aco_word *w, size_t nw,
                       int (*cancelled)(void *), void *user, size_t *nwin) {
  double dur = (double)n / ACO_RATE, t = 0;
  size_t k = 0;
  *nwin = 0;
  for (size_t i = 0; i < nw; i++)
    w[i].placed = EBB_PLACED_NONE;
  while (k < nw && t < dur - 0.1) { /* windows: the song's length over ACO_WIN_MIN_STEP_S */
    if ((cancelled && cancelled(user)) || stg_st_stop())
      return EBB_ECANCELED;
    double t1 = fmin(dur, t + ACO_WIN_S), next;
    size_t m = nw - k < ACO_WIN_WORDS ? nw - k : ACO_WIN_WORDS, kept = 0;
    int rc = song_window(a, pcm, n, w, k, m, t, t1, t1 >= dur, cancelled, user, &kept, &next);
    if (rc)
      return rc;
    (*nwin)++;
    k += kept;
    t = next;
  }
  return 0;
}
#else
struct stg_aco {
  int unused;
};
int stg_aco_open(const char *hmm, const char *dict, stg_aco **out) {
  (void)hmm, (void)dict, (void)out;
  return ebb_seterr(EBB_ENOLIB, "align: ebb was built without pocketsphinx, so the acoustic "
                                "method is unavailable (Debian packages libpocketsphinx-dev "
                                "pocketsphinx-en-us; scripts/install-deps.sh installs them, then "
                                "rebuild; method text still works)");
}
void stg_aco_close(stg_aco *a) { free(a); }
void stg_aco_contrast_every(stg_aco *a, size_t every) { (void)a, (void)every; }
void stg_aco_contrast_audio(stg_aco *a, const int16_t *pcm) { (void)a, (void)pcm; }
double stg_aco_order_gain(const stg_aco *a, size_t *nwords) {
  (void)a;
  *nwords = 0;
  return 0;
}
int stg_aco_align(stg_aco *a, const int16_t *pcm, uint64_t n, stg_aco_word *w,
                  const stg_aco_chunk *c, int (*cancelled)(void *), void *user) {
  (void)a, (void)pcm, (void)n, (void)w, (void)c, (void)cancelled, (void)user;
  return EBB_ENOLIB;
}
int stg_aco_align_song(stg_aco *a, const int16_t *pcm, uint64_t n, stg_aco_word *w, size_t nw,
                       int (*cancelled)(void *), void *user, size_t *nwin) {
  (void)a, (void)pcm, (void)n, (void)w, (void)nw, (void)cancelled, (void)user, (void)nwin;
  return EBB_ENOLIB;
}
#endif

/* The voicing weight (stg_vad_voiced) as a gain in place: 1 where a pitched voice is near
 * (weight 1), depth_db under where none is (weight 0). Soft evidence for the forced alignment:
 * where no voice is near, the silence model explains the frames better than a word's phones,
 * but a word can still be placed there (issue 43: the decoder put words into the rests'
 * residue). */
void stg_aco_voice_gains(double *v, size_t nv, double depth_db) {
  for (size_t f = 0; f < nv; f++)
    v[f] = pow(10.0, -depth_db * (1.0 - v[f]) / 20.0);
}

/* The gain of sample k at 16 kHz: the frames' gains interpolated between their centres (a
 * step would click); 1 without gains. */
static double sample_gain(const double *gain, size_t nv, double hop_s, uint64_t k) {
  if (!gain || nv == 0)
    return 1.0;
  double pos = (double)k / (16000.0 * hop_s);
  size_t f = (size_t)pos;
  if (f + 1 >= nv)
    return gain[nv - 1];
  double a = pos - (double)f;
  return gain[f] * (1 - a) + gain[f + 1] * a;
}

/* The vocals as pocketsphinx wants them: 16 kHz mono 16-bit, the peak at half scale, times the
 * gain of each hop_s frame (gain NULL: none). */
int stg_aco_pcm16k(const float *x, uint64_t n, uint32_t rate, const double *gain, size_t nv,
                   double hop_s, int16_t **pcm, uint64_t *m) {
  float *r = NULL;
  const float *y = x;
  int rc;
  if (rate != 16000) {
    if ((rc = stg_audio_resample(x, n, rate, 16000, &r, m)))
      return rc;
    y = r;
  } else {
    *m = n;
  }
  float peak = 0;
  for (uint64_t k = 0; k < *m; k++)
    peak = fmaxf(peak, fabsf(y[k]));
  *pcm = malloc((*m ? *m : 1) * sizeof **pcm);
  if (!*pcm) {
    free(r);
    return ebb_seterr(EBB_ENOMEM, "align: out of memory for %llu samples at 16 kHz",
                      (unsigned long long)*m);
  }
  /* plus a deterministic dither of +-1 LSB: on digital silence the features
   * are degenerate and every phone scores as well as any other there (a word
   * was placed in the silent start of a song with confidence 1) */
  double g = peak > 0 ? 16384.0 / peak : 0;
  uint32_t lcg = 12345;
  for (uint64_t k = 0; k < *m; k++) {
    lcg = lcg * 1664525u + 1013904223u;
    double gk = g * sample_gain(gain, nv, hop_s, k);
    (*pcm)[k] = (int16_t)(lrint(y[k] * gk) + (int)(lcg >> 30) - 1);
  }
  free(r);
  return 0;
}
