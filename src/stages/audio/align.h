/* The `align` stage: word timings for the song's lyrics.
 *
 * Inputs: JSON "transcript" (optional; transcribe.h's shape), AUDIO "vocals"
 * (else "audio") for voice activity, option `lyrics` (a text file, one line
 * per lyric line; relative paths resolve against the current directory).
 * Output: JSON "lyrics" =
 *   {"words":[{"word","start","end","matched"[,"line"]}],
 *    "phrases":[{"start","end"}], "source":"transcript+lyrics"|"transcript"|"vad"}
 *
 * With lyrics and a transcript, the lyric words are aligned to the
 * transcript's words by a Needleman-Wunsch alignment: gap cost 1, substitution
 * cost 2 d where d is the Levenshtein distance of the normalised words divided
 * by the longer length (so two unrelated words cost as much as a deletion plus
 * an insertion, and the alignment never pairs them to save a gap). Aligned
 * pairs with d <= 0.4 are matches and take the transcript word's times; the other lyric words get times interpolated
 * between their matched neighbours (weighted by length) and "matched": false.
 * Word boundaries are then snapped to the nearest voice-activity onset/offset
 * (energy + periodicity VAD on the vocals, align_vad.c) within `snap_ms`. Without lyrics the
 * transcript's words are used as they are (snapped); without a transcript
 * only the vocal phrases are reported. */
#ifndef EBB_STAGES_AUDIO_ALIGN_H
#define EBB_STAGES_AUDIO_ALIGN_H

#include <stddef.h>
#include <stdint.h>

#include "ebb/stage.h"

extern const ebb_stage stg_stage_align;

/* Lowercase letters and digits of a word (UTF-8 bytes >= 0x80 kept as they
 * are; apostrophes and punctuation dropped) into out (NUL-terminated). */
void stg_align_normalise(const char *word, char *out, size_t n);
/* Levenshtein distance of the normalised words / the longer length, in
 * [0, 1]; two words that normalise to empty have distance 0. */
double stg_align_word_distance(const char *a, const char *b);

/* Aligns lyric words a[0..na) to transcript words b[0..nb): map[i] is the
 * index in b matched to a[i], or -1. Matches are strictly increasing in b.
 * Returns 0 or EBB_ENOMEM. */
int stg_align_words(const char *const *a, size_t na, const char *const *b, size_t nb, int *map);

typedef struct stg_span {
  double start, end;
} stg_span;

#define STG_VAD_SMOOTH_S 0.3 /* the level_phrases' smoothing window */

typedef struct stg_vad_params {
  double win_s, hop_s; /* analysis window/hop (0.02, 0.01) */
  double range_db;     /* active: within this much of the loud level (the 95th percentile) (20) */
  double floor_db;     /* ... and above this absolute level, dBFS (-55) */
  double fill_s;       /* gaps shorter than this inside activity are filled (0.03) */
  double min_active_s; /* shorter activity is dropped (0.05) */
  double phrase_gap_s; /* activity closer than this joins one phrase (0.35) */
  double min_phrase_s; /* shorter phrases are dropped (0.45) */
  double max_aperiodicity; /* ... and active only where YIN's aperiodicity (min d', 5-frame
                            * median) is at most this (0.2); >= 1 turns the cue off */
  int level_phrases;       /* 1: phrases from the level smoothed over STG_VAD_SMOOTH_S against the
                      * song's own quiet and loud levels (align_vad.c); 0: from the segments */
} stg_vad_params;

/* The VAD's fixed frame layout and, for the rest, the defaults of the align
 * stage's option table (align.c, beside the table). */
stg_vad_params stg_vad_defaults(void);

/* Voice activity segments and phrases (segments joined across short gaps).
 * *segs and *phrases are malloc'd (caller frees; may be NULL when the count
 * is 0). */
int stg_vad(const float *x, uint64_t n, uint32_t rate, const stg_vad_params *p, stg_span **segs,
            size_t *nseg, stg_span **phrases, size_t *nphr);
/* The same, and (voice not NULL) the voicing weight of each hop_s frame, 0..1: how near a
 * loud periodic frame (a pitched voice) is; *voice malloc'd (caller frees), *nvoice frames,
 * frame f centred on f * hop_s. */
int stg_vad_voiced(const float *x, uint64_t n, uint32_t rate, const stg_vad_params *p,
                   stg_span **segs, size_t *nseg, stg_span **phrases, size_t *nphr, double **voice,
                   size_t *nvoice);

/* --- acoustic alignment (align_acoustic.c, align_plan.c) -------------------
 *
 * The lyric words are cut into chunks (a lyric line or a few, or the words
 * of one voice phrase) that are each sung inside a known stretch of the
 * vocals; each chunk is force-aligned on its own with pocketsphinx (a finite-state
 * grammar of exactly the chunk's dictionary words, silence and noise allowed
 * between them), so a long song stays fast and one chunk that does not align
 * cannot move the others. */

typedef enum {
  EBB_PLACED_NONE = 0, /* not placed yet */
  EBB_PLACED_ACOUSTIC, /* its own segment in the forced alignment */
  EBB_PLACED_LTS,      /* the same, the dictionary lacking it: pronounced by espeak-ng */
  EBB_PLACED_BETWEEN,  /* no pronunciation (another script): between its aligned neighbours */
  EBB_PLACED_TEXT,     /* its chunk did not align: the text method's time */
  EBB_PLACED_SPREAD,   /* its chunk did not align: spread evenly over the chunk */
} stg_placed;

typedef struct stg_aco_word {
  const char *word;  /* as written (not owned) */
  int line;          /* lyric line, or -1 */
  double start, end; /* in: a rough time when has_rough; out: the placed times */
  int has_rough;
  double conf;       /* out: 0..1, how much better the words explain the audio than free phones */
  stg_placed placed; /* out */
} stg_aco_word;

typedef struct stg_aco_chunk {
  size_t first, count; /* words [first, first + count) */
  double t0, t1;       /* sung inside [t0, t1] seconds */
  int prefix;          /* 1: exactly [t0, t1] (no padding), and the path may end after any
                        * word: the words after the last one sung stay EBB_PLACED_NONE */
} stg_aco_chunk;

/* Chunks from lyric lines and voice phrases (align_plan.c): a dynamic
 * programme pairs runs of consecutive lines with runs of consecutive phrases
 * so that each run's letters per second is close to the song's, and a phrase
 * may carry no line (a voice-like instrument). Words must carry their line
 * numbers (non-decreasing). *chunks is malloc'd (caller frees). */
int stg_aco_plan_lines(const stg_aco_word *w, size_t nw, const stg_span *ph, size_t nph, double dur,
                       stg_aco_chunk **chunks, size_t *nchunks);
/* Chunks from rough word times: the words whose middle falls in (or is
 * nearest to) one voice phrase form a chunk over that phrase (without
 * phrases, over the words' rough times). */
int stg_aco_plan_times(const stg_aco_word *w, size_t nw, const stg_span *ph, size_t nph, double dur,
                       stg_aco_chunk **chunks, size_t *nchunks);

typedef struct stg_aco stg_aco; /* a loaded acoustic model + dictionary */

/* Loads the model directory `hmm` and dictionary `dict`. EBB_ENOLIB naming
 * the Debian package when they are missing or ebb was built without
 * pocketsphinx; EBB_ENOMEM. *out: stg_aco_close. */
int stg_aco_open(const char *hmm, const char *dict, stg_aco **out);
void stg_aco_close(stg_aco *a); /* NULL: no-op */
/* Aligns the words of one chunk to pcm (16 kHz mono, the whole song):
 * 0 and each word placed (EBB_PLACED_ACOUSTIC; EBB_PLACED_LTS for a word
 * the dictionary lacks, added with espeak-ng's pronunciation;
 * EBB_PLACED_BETWEEN for one with none, e.g. in another script), EBB_ENOTFOUND when the chunk has no dictionary
 * word or the alignment did not reach the chunk's end (words untouched),
 * EBB_ECANCELED when cancelled() said so, EBB_ENOMEM. */
int stg_aco_align(stg_aco *a, const int16_t *pcm, uint64_t n, stg_aco_word *w,
                  const stg_aco_chunk *c, int (*cancelled)(void *), void *user);

/* The order contrast, evidence that the words are the ones sung: from now
 * on every `every`-th chunk that aligns (0: none) is decoded a second time
 * over the same samples with the words it placed in reverse order, and the
 * forward path's score minus the reversed one's is summed with the frames
 * (the sums start again here). */
void stg_aco_contrast_every(stg_aco *a, size_t every);
/* The summed contrast per 10 ms frame (pocketsphinx's scaled log units) and,
 * in *nwords, the words of the chunks that gave one (a reversed path that
 * does not reach its end gives none); 0 when none did. */
double stg_aco_order_gain(const stg_aco *a, size_t *nwords);
/* The samples the order contrast decodes, forward and in the other orders, instead of those
 * aligned (the same length and rate; not owned, kept until the next call): the vocals not
 * shaped by voicing_db, so the fit check judges the words on the voice as it is (issue 43:
 * on the shaped samples another song's lyrics passed it). Scope song only: by phrases the
 * chunks are aligned on the plain samples first (stg_align_shaped). NULL: the aligned samples. */
void stg_aco_contrast_audio(stg_aco *a, const int16_t *pcm);

/* The vocals as pocketsphinx wants them: 16 kHz mono 16-bit, the peak at
 * half scale, plus a deterministic dither of +-1 LSB, times the gain of
 * each hop_s frame (gain NULL: none). *pcm: *m samples, the caller frees. */
int stg_aco_pcm16k(const float *x, uint64_t n, uint32_t rate, const double *gain, size_t nv,
                   double hop_s, int16_t **pcm, uint64_t *m);
/* The voicing weight (stg_vad_voiced, nv frames) as a gain in place: 1
 * where a pitched voice is near, depth_db under where none is
 * (voicing_db). */
void stg_aco_voice_gains(double *v, size_t nv, double depth_db);

/* The whole song at once (lyrics without rough times): overlapping windows
 * of ACO_WIN_S seconds over all of pcm, each decoded with a grammar of the
 * next words that may end after any of them, silence and fillers anywhere.
 * The words a window places before its last ACO_WIN_MARGIN_S seconds are
 * kept; the next window starts where the first word not kept starts (or
 * where the kept part ends), with that word, so a line may span windows
 * and rests, and nothing depends on voice-activity phrases. Cost: linear in
 * the song's length (each window moves on by at least ACO_WIN_MIN_STEP_S).
 * Words no window reached (lyrics longer than the song) stay
 * EBB_PLACED_NONE. *nwin: windows decoded. Returns 0, EBB_ECANCELED,
 * EBB_ENOMEM, EBB_ENOLIB. */
int stg_aco_align_song(stg_aco *a, const int16_t *pcm, uint64_t n, stg_aco_word *w, size_t nw,
                       int (*cancelled)(void *), void *user, size_t *nwin);

/* --- the chunks, plain and shaped (align_shape.c) --------------------- */

/* Each chunk ch[i] aligned on its own phrases over pcm: fit[i] 1 when it aligned, *aligned of
 * them. 0, EBB_ECANCELED, EBB_ENOMEM. */
int stg_align_chunks(ebb_stage_ctx *ctx, stg_aco *a, const int16_t *pcm, uint64_t m,
                     stg_aco_word *w, const stg_aco_chunk *ch, size_t nch, char *fit,
                     size_t *aligned);
/* The times from the vocals shaped by their voicing (voicing_db, issue 43), after the fit check
 * judged the chunks aligned on the plain vocals: each chunk decoded once more over pcm (the
 * shaped samples); a chunk that aligns there takes the shaped path's times, keeping the plain
 * pass's confidence when it aligned there too (fit[i]), else unmatched, and fit[i] becomes 1
 * (so stg_align_again leaves it). Turns the order contrast off. *moved: the chunks that took
 * the shaped times. 0, EBB_ECANCELED, EBB_ENOMEM. */
int stg_align_shaped(ebb_stage_ctx *ctx, stg_aco *a, const int16_t *pcm, uint64_t m,
                     stg_aco_word *w, const stg_aco_chunk *ch, size_t nch, char *fit,
                     size_t *moved);

/* --- placing and judging the words (align_fit.c) ---------------------- */

/* A word placed acoustically is "matched" at or above this confidence;
 * below it the word's time is kept but not trusted. */
#define STG_ALIGN_CONF_MATCH 0.3
/* A word is backed by audio when its loudest 20 ms is within this many dB
 * of the vocals' loud level (the 95th percentile of 20 ms levels). */
#define STG_ALIGN_BACKED_DB 50.0

/* A chunk that did not align: the rough (text) times when there are, else
 * spread evenly over [t0, t1] by length; confidence 0. */
void stg_align_fallback(stg_aco_word *w, const stg_aco_chunk *c);
/* The chunks ch[i] that did not align on their own phrases (fit[i] == 0),
 * once more each over the whole stretch between their neighbours (the end
 * of the last word placed before, the next chunk's start); those that
 * still do not are placed by stg_align_fallback and logged. The words of a
 * second try keep their times, unmatched (confidence under
 * STG_ALIGN_CONF_MATCH). Turns the order contrast off (read it first).
 * 0, EBB_ECANCELED, EBB_ENOMEM. */
int stg_align_again(ebb_stage_ctx *ctx, stg_aco *a, const int16_t *pcm, uint64_t m, stg_aco_word *w,
                    const stg_aco_chunk *ch, size_t nch, const char *fit, double dur);
/* Words still EBB_PLACED_NONE spread between their neighbours within
 * [0, dur], unmatched; returns how many. */
size_t stg_align_place_unbacked(stg_aco_word *w, size_t nw, double dur);
/* Words placed where the vocals x hold no sound become spread and
 * unmatched (*moved of them). 0, EBB_ENOMEM, EBB_ECANCELED. */
int stg_align_unbacked(stg_aco_word *w, size_t nw, const float *x, uint64_t n, uint32_t rate,
                       size_t *moved);
/* Whether the lyrics fit the voice (align_fit.c says how); when not, logs
 * "the lyrics do not fit the voice: ..." and every word is unmatched.
 * Returns the words' median confidence. */
double stg_align_check_fit(ebb_stage_ctx *ctx, stg_aco_word *w, size_t nw, size_t aligned,
                           size_t nchunks, double gain, size_t ncontrast_words);

#endif
