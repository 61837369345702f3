/* A Standard MIDI File writer for a monophonic melody: format 0, one track,
 * 480 ticks per quarter note, tempo 120 bpm (so 960 ticks per second and
 * note times map exactly to 1/960 s); and the one Hz <-> MIDI key formula. */
#ifndef EBB_STAGES_AUDIO_MIDI_H
#define EBB_STAGES_AUDIO_MIDI_H

#include <math.h>
#include <stddef.h>

#define EBB_MIDI_TPQ 480
#define EBB_MIDI_TEMPO_US 500000 /* per quarter: 120 bpm */

/* The MIDI key of a frequency, fractional (equal temperament, A4 = 440 Hz
 * = key 69, 12 keys an octave); hz > 0. */
static inline double stg_midi_from_hz(double hz) { return 69.0 + 12.0 * log2(hz / 440.0); }
/* The frequency of a (fractional) MIDI key: the inverse. */
static inline double stg_midi_to_hz(double key) { return 440.0 * pow(2.0, (key - 69.0) / 12.0); }

typedef struct stg_midi_note {
  double onset, offset; /* seconds, offset > onset */
  int key;              /* 0..127 */
  int velocity;         /* 1..127 */
} stg_midi_note;


/* Encodes the notes (any order; each is clamped to keys 0..127, a note
 * shorter than one tick lasts one tick) as an SMF: header MThd (format 0,
 * 1 track, division 480), track MTrk with a track name, tempo and time
 * signature meta events, note on/off on channel 1, end of track. Note offs
 * sort before note ons at the same tick. *out is malloc'd (caller frees). */
int stg_midi_encode(const stg_midi_note *notes, size_t n, unsigned char **out, size_t *len);

/* stg_midi_encode to a file; EBB_EIO names the path. */
int stg_midi_write(const char *path, const stg_midi_note *notes, size_t n);

#endif
