/* The `export` stage: writes the songtrace results into the job's output
 * directory and adds each file as a FILE item of the same name:
 *   songtrace.json  everything: notes, an f0 summary, lyrics, transcript,
 *                   the job's items and this stage's settings;
 *   melody.mid      the notes as a Standard MIDI File (midi.h);
 *   lyrics.lrc      [mm:ss.xx] per lyric line, only when there are words;
 *   pitch.csv       time,f0_hz,voicing per f0 frame.
 * Option `formats`: comma-separated subset of json,midi,lrc,csv. */
#ifndef EBB_STAGES_AUDIO_EXPORT_H
#define EBB_STAGES_AUDIO_EXPORT_H

#include <stddef.h>

#include "ebb/stage.h"

extern const ebb_stage ebb_stage_export;

/* "[mm:ss.xx]" for t seconds (rounded to centiseconds) into buf (>= 16). */
void ebb_lrc_timestamp(double t, char *buf, size_t n);

#endif
