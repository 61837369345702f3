/* The `export` stage: writes the songtrace results into the job's output
 * directory and adds each file as a FILE item of the same name:
 *   songtrace.json  everything: notes, an f0 summary, lyrics, transcript,
 *                   the job's items and this stage's settings;
 *   melody.mid      the notes as a Standard MIDI File (midi.h);
 *   lyrics.lrc      [mm:ss.xx] per lyric line, only when there are words;
 *   lyrics.words.lrc  the same lines in the enhanced LRC form, each word
 *                   after its own <mm:ss.xx> ("[00:02.00]<00:02.00>of
 *                   <00:02.50>your"), written with lyrics.lrc (lrc format);
 *   pitch.csv       time,f0_hz,voicing per f0 frame;
 *   vocals.flac, accompaniment.flac  the separate stage's stems.
 * Option `formats`: comma-separated subset of json,midi,lrc,csv; option
 * `stems`: flac (default), wav or none. */
#ifndef EBB_STAGES_AUDIO_EXPORT_H
#define EBB_STAGES_AUDIO_EXPORT_H

#include <stddef.h>

#include "ebb/stage.h"

extern const ebb_stage stg_stage_export;

/* "[mm:ss.xx]" for t seconds (rounded to centiseconds) into buf (>= 16). */
void stg_lrc_timestamp(double t, char *buf, size_t n);

/* export_stems.c */
enum { EBB_STEMS_NONE = 0, EBB_STEMS_FLAC = 1, EBB_STEMS_WAV = 2 };
/* "flac" | "wav" | "none" -> *out; EBB_ECONFIG names anything else. */
int stg_export_stems_parse(ebb_stage_ctx *ctx, const char *s, int *out);
/* Writes the AUDIO items "vocals" and "accompaniment" as DIR/vocals.EXT and
 * DIR/accompaniment.EXT (mode: FLAC or WAV, 16-bit) and adds each as a FILE
 * item; an absent item is logged and skipped (a stale file of that name is
 * removed). */
int stg_export_stems(ebb_stage_ctx *ctx, const ebb_items *in, ebb_items *out, const char *dir,
                     int mode);

#endif
