/* Spoken and sung words for the synthetic songs and the lyrics benchmark:
 * espeak-ng (libespeak-ng, a Debian package) speaks a text and reports where
 * each word starts; an LPC vocoder re-sings that speech on any pitch contour
 * and stretches it to any length, so a song's f0 truth stays exact while its
 * words are real phones an acoustic model can hear.
 *
 * espeak-ng is optional at build time (EBB_HAVE_ESPEAK): without it
 * stg_speech_say fails with EBB_ENOLIB naming the package. */
#ifndef EBB_STAGES_AUDIO_SPEECH_H
#define EBB_STAGES_AUDIO_SPEECH_H

#include <stddef.h>
#include <stdint.h>

/* Speaks text (UTF-8, US English voice) at `rate` Hz. *x (n samples, peak
 * about 0.5) is malloc'd, caller frees. When word_s is not NULL, *word_s and
 * *word_at (malloc'd, *nwords entries each) hold each word espeak reports:
 * its start in seconds and its byte offset in text (espeak may leave a
 * word out, e.g. an unstressed "the" run into the word before, and may
 * report an empty word at the end: match by offset). Serialised internally (espeak-ng has global state). Errors:
 * EBB_ENOLIB (built without libespeak-ng), EBB_EIO (espeak failed),
 * EBB_ENOMEM. */
int stg_speech_say(const char *text, uint32_t rate, float **x, uint64_t *n, double **word_s,
                   size_t **word_at, size_t *nwords);

/* A pronunciation of word in CMU (ARPAbet) phones, "W IH S P ER Z", from
 * espeak-ng's letter-to-sound rules (its IPA, mapped phone by phone) into
 * out. EBB_ENOLIB without libespeak-ng; EBB_EINPUT when espeak gives a
 * sound with no CMU phone or out is too small. */
int stg_speech_phones(const char *word, char *out, size_t n);

/* Trims leading and trailing near-silence (5 ms frames more than 40 dB under
 * the loudest): *first and *count delimit what is left (count 0: silent). */
void stg_speech_trim(const float *x, uint64_t n, uint32_t rate, uint64_t *first, uint64_t *count);

/* The sung frequency at output time t seconds (0: unvoiced). */
typedef double (*stg_f0_fn)(double t, void *user);

/* Re-sings speech x[0..nx) at `rate` into y[0..ny) (added to y): linear
 * time stretch by ny/nx, LPC spectral envelope of the speech (order
 * 2 + rate/1000, 25 ms frames, 5 ms hop, pre-emphasised), excited by a
 * harmonic pulse train at f0(t) where the speech is periodic and by noise
 * where it is not. noise_seed makes the noise repeatable. gain scales the
 * result. Returns 0 or EBB_ENOMEM. */
int stg_vocode(const float *x, uint64_t nx, uint32_t rate, stg_f0_fn f0, void *user,
               uint64_t noise_seed, double gain, int hold_vowels, float *y, uint64_t ny);

#endif
