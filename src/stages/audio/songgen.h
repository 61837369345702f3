/* A deterministic synthetic song with ground truth, for the songtrace demo,
 * tests and the pitch benchmark: a singing-like melody (harmonic source shaped
 * by vowel formants, vibrato ~5.5 Hz +-30 cents, onset scoop, attack/release
 * envelopes, rests between phrases) over an accompaniment (chord pad, bass,
 * kick/snare/hi-hat) at 120 bpm. The same seed and parameters always give the
 * same samples on the same machine (a seeded PRNG; the words voice keeps
 * each word as espeak-ng first spoke it in the process, see songgen.c). */
#ifndef EBB_STAGES_AUDIO_SONGGEN_H
#define EBB_STAGES_AUDIO_SONGGEN_H

#include <stddef.h>
#include <stdint.h>

/* The voice: one vowel per note (formant synthesis), or each note's word
 * spoken by espeak-ng and re-sung on the note's pitch (speech.h), so the
 * song has lyrics an acoustic model can hear. The melody (notes, f0 truth)
 * and the accompaniment are the same for both. */
typedef enum { EBB_SONG_VOICE_VOWELS = 0, EBB_SONG_VOICE_WORDS = 1 } stg_song_voice;

typedef struct stg_songgen_params {
  uint64_t seed;      /* any value; 0 is a valid seed */
  uint32_t rate;      /* samples per second; 8000..96000 (16000 default) */
  double seconds;     /* about this long: 1 bar intro + 4 s phrases; >= 6 */
  double accomp_gain; /* accompaniment level relative to its design level (0 = silent) */
  stg_song_voice voice;
} stg_songgen_params;

/* The defaults: seed 1, 16 kHz, 26 s, accompaniment 0.5, vowels (the songs
 * the pitch tests and benchmark were tuned on; the demo sings words). */
stg_songgen_params stg_songgen_defaults(void);

typedef struct stg_song_note {
  double onset, offset; /* seconds; offset is where the release has ended */
  int midi;             /* the nominal pitch (vibrato and scoop around it) */
  int line;             /* the phrase (lyrics line) index, 0-based */
  const char *word;     /* static storage */
} stg_song_note;

typedef struct stg_song {
  uint32_t rate;
  uint64_t frames; /* samples per track (mono) */
  float *mix;      /* vocals + accompaniment, peak-normalised to 0.9 */
  float *vocals;   /* the vocal stem as it is in the mix */
  float *accomp;   /* the accompaniment stem as it is in the mix */
  stg_song_note *notes;
  size_t n_notes;
  int n_lines;     /* phrases */
  double f0_hop_s; /* 0.01: truth f0 frame spacing, frame i at i * f0_hop_s */
  size_t n_f0;
  float *f0_hz; /* per frame: the sung frequency, 0 when no note sounds */
  uint64_t seed;
  stg_song_voice voice;
} stg_song;

/* Synthesises a song. On success *out is the caller's (stg_song_destroy).
 * Fails with EBB_EINVAL (a parameter out of range, named), EBB_ENOMEM, or
 * for the words voice what stg_speech_say fails with (EBB_ENOLIB when ebb
 * was built without espeak-ng). */
int stg_songgen_create(const stg_songgen_params *p, stg_song **out);
void stg_song_destroy(stg_song *s); /* NULL: no-op */

/* The ground truth as JSON text: {"rate","duration","seed","tempo_bpm",
 * "notes":[{"onset","offset","midi","word","line"}], "phrases":[{"start","end"}],
 * "voice":"vowels"|"words", with words: "words":[{"word","start","end","line"}]
 * (each word sung over its note: start is the note's onset),
 * "f0":{"hop_s","hz":[...],"voiced":[0|1...]}}. *out is malloc'd (caller frees). */
int stg_song_truth_json(const stg_song *s, char **out);


/* Writes dir/base.wav (the mix), dir/base.vocals.wav, dir/base.accompaniment.wav
 * (16-bit PCM, mono), dir/base.truth.json and dir/base.lyrics.txt. dir must
 * exist. Fails with EBB_EIO naming the file. */
int stg_song_write(const stg_song *s, const char *dir, const char *base);

/* Writes one mono float track as a 16-bit PCM WAV via libsndfile. */
int stg_wav_write_mono(const char *path, const float *x, uint64_t frames, uint32_t rate);

#endif
