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

extern const ebb_stage ebb_stage_align;

/* Lowercase letters and digits of a word (UTF-8 bytes >= 0x80 kept as they
 * are; apostrophes and punctuation dropped) into out (NUL-terminated). */
void ebb_align_normalise(const char *word, char *out, size_t n);
/* Levenshtein distance of the normalised words / the longer length, in
 * [0, 1]; two words that normalise to empty have distance 0. */
double ebb_align_word_distance(const char *a, const char *b);

/* Aligns lyric words a[0..na) to transcript words b[0..nb): map[i] is the
 * index in b matched to a[i], or -1. Matches are strictly increasing in b.
 * Returns 0 or EBB_ENOMEM. */
int ebb_align_words(const char *const *a, size_t na, const char *const *b, size_t nb, int *map);

typedef struct ebb_span {
  double start, end;
} ebb_span;

typedef struct ebb_vad_params {
  double win_s, hop_s;  /* analysis window/hop (0.02, 0.01) */
  double range_db;      /* active: within this much of the loud level (the 95th percentile) (20) */
  double floor_db;      /* ... and above this absolute level, dBFS (-55) */
  double fill_s;        /* gaps shorter than this inside activity are filled (0.03) */
  double min_active_s;  /* shorter activity is dropped (0.05) */
  double phrase_gap_s;  /* activity closer than this joins one phrase (0.35) */
  double min_phrase_s;  /* shorter phrases are dropped (0.45) */
  double max_aperiodicity; /* ... and active only where YIN's aperiodicity (min d', 5-frame
                            * median) is at most this (0.2); >= 1 turns the cue off */
} ebb_vad_params;

ebb_vad_params ebb_vad_defaults(void);
/* Sets the fields of vad that are align options to the defaults of the
 * stage's option table (align.c): ebb_vad_defaults uses it. */
void ebb_vad_table_defaults(ebb_vad_params *vad);

/* Voice activity segments and phrases (segments joined across short gaps).
 * *segs and *phrases are malloc'd (caller frees; may be NULL when the count
 * is 0). */
int ebb_vad(const float *x, uint64_t n, uint32_t rate, const ebb_vad_params *p, ebb_span **segs,
            size_t *nseg, ebb_span **phrases, size_t *nphr);

#endif
