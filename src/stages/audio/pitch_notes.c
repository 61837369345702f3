/* Note segmentation of an f0 track (pitch.h). A note is a run of voiced
 * frames; it ends at an unvoiced frame or where the pitch leaves the note's
 * running median by more than split_semitones for split_s or longer (shorter
 * excursions, e.g. vibrato overshoot or an octave blip, are skipped, not
 * counted). Its MIDI pitch is the rounded median of its frames in semitones;
 * runs shorter than min_note_s are dropped. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"
#include "stages/audio/midi.h"
#include "stages/audio/pitch.h"
#include "stages/audio/st_util.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(const double *v, size_t n, double *tmp) {
  memcpy(tmp, v, n * sizeof *v);
  qsort(tmp, n, sizeof *tmp, cmp_double);
  return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

typedef struct note_list {
  stg_pitch_note *v;
  size_t n, cap;
} note_list;

static int push(note_list *l, stg_pitch_note n) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 32;
    stg_pitch_note *v = realloc(l->v, cap * sizeof *v);
    if (!v)
      return ebb_seterr(EBB_ENOMEM, "pitch: out of memory for notes");
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = n;
  return 0;
}

/* The next run of voiced frames from *i: [*start, *end), its frames' MIDI
 * values in vals[0..*nv). *i moves past it; returns 0 at the end. */
static int next_run(const float *frames, size_t nf, size_t sustain, const stg_pitch_params *p,
                    size_t *i, size_t *start, size_t *end, double *vals, double *tmp, size_t *nv) {
#define VOICED(k) (frames[3 * (k) + 1] > 0.0f)
#define MIDI(k) stg_midi_from_hz(frames[3 * (k) + 1])
  while (*i < nf && !VOICED(*i))
    (*i)++;
  if (*i >= nf)
    return 0;
  size_t n = 0;
  *start = *i;
  vals[n++] = MIDI(*i);
  double ref = vals[0];
  size_t j = *i + 1, e = j;
  while (j < nf && VOICED(j)) {
    if (fabs(MIDI(j) - ref) > p->split_semitones) {
      size_t k = j; /* how long does the excursion last (same side)? */
      double side = MIDI(j) - ref;
      while (k < nf && VOICED(k) && fabs(MIDI(k) - ref) > p->split_semitones &&
             (MIDI(k) - ref) * side > 0)
        k++;
      if (k - j >= sustain)
        break; /* a new note starts at j */
      j = k;   /* a blip: skip it */
      e = j;
      continue;
    }
    vals[n++] = MIDI(j);
    if (n <= 8 || n % 4 == 0)
      ref = median(vals, n, tmp);
    j++;
    e = j;
  }
#undef VOICED
#undef MIDI
  *end = e;
  *nv = n;
  *i = e;
  return 1;
}

static size_t sustain_frames(const float *frames, size_t nf, const stg_pitch_params *p,
                             double *hop_s) {
  double h = stg_pitch_frame_step(frames, nf);
  *hop_s = h;
  size_t sustain = stg_pitch_frames_for(p->split_s, h);
  return sustain < 1 ? 1 : sustain;
}

int stg_pitch_gate(float *frames, size_t nf, const float *level_db, const stg_pitch_params *p) {
  if (nf == 0 || !(p->gate_voicing > 0.0 || p->gate_range_db > 0.0))
    return 0;
  double hop_s;
  size_t sustain = sustain_frames(frames, nf, p, &hop_s);
  double *vals = stg_st_malloc(nf * sizeof *vals), *tmp = stg_st_malloc(nf * sizeof *tmp);
  if (!vals || !tmp) {
    stg_st_free(vals);
    stg_st_free(tmp);
    return ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %zu frames", nf);
  }
  for (size_t f = 0; f < nf; f++)
    tmp[f] = level_db[f];
  qsort(tmp, nf, sizeof *tmp, cmp_double);
  double loud = tmp[(size_t)(0.95 * (double)(nf - 1))];
  size_t i = 0, start, end, nv;
  while (next_run(frames, nf, sustain, p, &i, &start, &end, vals, tmp, &nv)) {
    double vp = 0.0, db = 0.0;
    for (size_t f = start; f < end; f++) {
      vp += frames[3 * f + 2];
      db += level_db[f];
    }
    vp /= (double)(end - start);
    db /= (double)(end - start);
    if ((p->gate_voicing > 0.0 && vp < p->gate_voicing) ||
        (p->gate_range_db > 0.0 && db < loud - p->gate_range_db))
      for (size_t f = start; f < end; f++)
        frames[3 * f + 1] = 0.0f;
  }
  stg_st_free(vals);
  stg_st_free(tmp);
  return 0;
}

int stg_pitch_notes(const float *frames, size_t nf, const stg_pitch_params *p,
                    stg_pitch_note **notes, size_t *n_notes) {
  *notes = NULL;
  *n_notes = 0;
  if (nf == 0)
    return 0;
  double hop_s;
  size_t sustain = sustain_frames(frames, nf, p, &hop_s);
  double *vals = stg_st_malloc(nf * sizeof *vals), *tmp = stg_st_malloc(nf * sizeof *tmp);
  note_list l = {0};
  int rc = 0;
  if (!vals || !tmp) {
    rc = ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %zu frames", nf);
    goto done;
  }
  size_t i = 0, start, end, nv;
  while (next_run(frames, nf, sustain, p, &i, &start, &end, vals, tmp, &nv)) {
    double dur = (double)(end - start) * hop_s;
    if (end - start >= stg_pitch_frames_for(p->min_note_s, hop_s)) {
      double m = median(vals, nv, tmp);
      stg_pitch_note n = {.onset = frames[3 * start],
                          .offset = frames[3 * start] + dur,
                          .hz = stg_midi_to_hz(m),
                          .midi = (int)lround(m)};
      if ((rc = push(&l, n)))
        goto done;
    }
  }
  *notes = l.v;
  *n_notes = l.n;
  l.v = NULL;
done:
  stg_st_free(l.v);
  stg_st_free(vals);
  stg_st_free(tmp);
  return rc;
}

static void note_name(int midi, char *buf, size_t n) {
  static const char *const names[12] = {"C",  "C#", "D",  "D#", "E",  "F",
                                        "F#", "G",  "G#", "A",  "A#", "B"};
  int pc = ((midi % 12) + 12) % 12, oct = (midi - pc) / 12 - 1;
  snprintf(buf, n, "%s%d", names[pc], oct);
}

int stg_pitch_notes_json(const stg_pitch_note *notes, size_t n, char **out) {
  json_t *root = json_object(), *arr = json_array();
  for (size_t i = 0; i < n; i++) {
    char name[16];
    note_name(notes[i].midi, name, sizeof name);
    json_array_append_new(arr,
                          json_pack("{s:f,s:f,s:i,s:f,s:s}", "onset",
                                    round(notes[i].onset * 1000.0) / 1000.0, "offset",
                                    round(notes[i].offset * 1000.0) / 1000.0, "midi", notes[i].midi,
                                    "hz", round(notes[i].hz * 100.0) / 100.0, "name", name));
  }
  json_object_set_new(root, "notes", arr);
  json_object_set_new(root, "count", json_integer((json_int_t)n));
  *out = json_dumps(root, JSON_INDENT(1) | JSON_REAL_PRECISION(10));
  json_decref(root);
  return *out ? 0 : ebb_seterr(EBB_ENOMEM, "pitch: out of memory for the notes JSON");
}
