/* The `pitch` stage and its analysis: the fundamental frequency of the vocal
 * track by pYIN (Mauch & Dixon, "pYIN: a fundamental frequency estimator using
 * probabilistic threshold distributions", ICASSP 2014) on top of YIN's
 * cumulative mean normalised difference (de Cheveigne & Kawahara, "YIN, a
 * fundamental frequency estimator for speech and music", JASA 111(4), 2002),
 * then note segmentation.
 *
 * The expensive part, the difference function d(tau) and its cumulative mean
 * normalisation d'(tau) for every frame, has three interchangeable backends:
 * the CPU loop here, the GPU kernel src/stages/kernels/pitch.cu (one frame per
 * block) and that kernel's host twin (the same float32 arithmetic, run on the
 * host; the fake GPU runs it too). Everything after d' runs on the host. */
#ifndef EBB_STAGES_AUDIO_PITCH_H
#define EBB_STAGES_AUDIO_PITCH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "ebb/stage.h"

extern const ebb_stage stg_stage_pitch;

typedef enum { EBB_PITCH_PYIN = 0, EBB_PITCH_YIN = 1 } stg_pitch_method;

typedef struct stg_pitch_params {
  double fmin, fmax; /* Hz search range (65, 1000) */
  int hop;           /* samples between frames (160) */
  int frame;         /* analysis frame in samples (1024): window = frame/2 */
  double threshold;  /* YIN: the absolute threshold; pYIN: mean of the Beta prior (0.1) */
  stg_pitch_method method;
  double silence_db;      /* frames quieter than this (dBFS RMS) are unvoiced (-60) */
  double preemphasis;     /* d' is computed on y[n] = x[n] - a x[n-1] (0.97; 0 = off) */
  double min_note_s;      /* shorter notes are dropped (0.07) */
  double split_semitones; /* a jump this large ... (0.7) */
  double split_s;         /* ... held this long starts a new note (0.04) */
  /* pYIN only: a note-length run of voiced frames (segmented as for notes)
   * is made unvoiced when its mean voicing probability is below gate_voicing
   * (0.1) or its mean level is more than gate_range_db (20) below the track's
   * loud level (the 95th percentile of frame levels). 0 turns either off. */
  double gate_voicing, gate_range_db;
  /* Consonants (pitch_voicing.c): an unvoiced stretch of at most
   * consonant_s next to a voiced run, within consonant_db of
   * the run's level on the pre-emphasised signal and ending at a quiet
   * frame or another run, takes the run's pitch; with consonant_tilt_db
   * above -100 it must also be noise-like: its tilt (pre-emphasised minus
   * plain level) at least that far above the run's.
   * consonant_s 0: off. */
  double consonant_s, consonant_db, consonant_tilt_db;
  /* Onsets (pitch_onsets.c): a note is split at its re-attacks. Every onset
   * peak inside it (spectral flux, at least EBB_PITCH_REATTACK_MIN_ODF) gets
   * a score in dB, the rise of the level from its dip plus weighted terms
   * for the peak's strength and the dip of the track's voicing; the best
   * one at or above reattack_score splits the note, the peaks within
   * reattack_min_s of it drop out, and so on. onset_threshold (0: no
   * onsets at all) is the strength of the peak a note that follows a pitch
   * change starts at, up to onset_lookback_s before the pitch turns. Every
   * note's onset is then moved onset_shift_s earlier, the detectors' delay
   * (pYIN voices a frame once the note fills its window). */
  double onset_threshold, onset_lookback_s, reattack_score, onset_shift_s;
  /* A note after an unvoiced gap starts at the strongest onset up to
   * onset_lead_s before its first voiced frame, when that lies earlier than
   * onset_shift_s would put it (a sung word's first consonant); 0: off. */
  double onset_lead_s;
  /* The rise is measured on the energy at the first
   * onset_harmonics harmonics of the note's pitch (0: the whole spectrum):
   * a chord struck in the dip fills it in the whole spectrum, not there. */
  int onset_harmonics;
  /* A re-attack of the same pitch comes at least reattack_min_s after the
   * note's start (and at least min_note_s). */
  double reattack_min_s;
  /* A re-attack's note starts where the level first rises reattack_rise_db
   * above its dip before the onset peak (the dip is the level's minimum
   * over [peak - 60 ms, peak + 20 ms]): the flux peaks late on a slow
   * attack. 0: at the peak. */
  double reattack_rise_db;
  /* When reattack_model is set, a peak splits the note by the re-attack
   * model's log-odds instead (stg_pitch_reattack_logit on the peak's
   * features, pitch_onsets.c): at least reattack_logit, best first, and
   * only where its score above also reaches reattack_score_min. */
  int reattack_model;
  double reattack_logit, reattack_score_min;
  /* pYIN only: the share of the voiced observation that comes from the
   * melody salience of the mixture when one is given (0..1). */
  double salience_weight;
  /* The salience at a pitch o octaves above fmin is weighted by
   * 2^(salience_height * o) before its row is normalised (0: off). */
  double salience_height;
  /* Each salience row is raised to this power after it is normalised to
   * its maximum (its mass goes to its peaks): 3 (4 until issue 44's
   * session 23). */
  double salience_sharpen;
  /* pYIN only: when register_semitones > 0, a second Viterbi pass weighs
   * each pitch by exp(-d^2 / 2) for d = (its distance from the median of the
   * first pass's voiced track over +-register_window_s) - register_semitones,
   * in semitones, where d > 0. */
  double register_semitones, register_window_s;
  /* pYIN only, when salience_vibrato > 0 (issue 44): a salience peak whose
   * interpolated pitch, followed from frame to frame, moves over
   * +-salience_vibrato_s (a sung pitch's vibrato, scoop or glide; a piano
   * partial holds still) has its bins multiplied by 1 + salience_vibrato x
   * min(1, its standard deviation / salience_vibrato_cents), the row's sum
   * kept (stg_pitch_salience_vibrato). */
  double salience_vibrato, salience_vibrato_s, salience_vibrato_cents;
  /* pYIN only, when salience_model > 0 (issue 44): each peak of the
   * blended salience row has its bins multiplied by 1 + salience_model x
   * the voice model's probability that it is the sung voice, the row's
   * maximum kept (stg_pitch_voice_weigh, pitch_voice.c). */
  double salience_model;
} stg_pitch_params;

/* The defaults of the stage's option table (pitch.c, beside the table). */
stg_pitch_params stg_pitch_defaults(void);

/* Frame layout. Frame f is centred on sample f*hop of the input; the kernels
 * read padded[f*hop .. f*hop + w + tau_max) of the zero-padded signal. */
typedef struct stg_pitch_geom {
  uint32_t rate;
  int hop, w, tau_min, tau_max;
  size_t n_frames;
  size_t pad_left, padded_len;
} stg_pitch_geom;

/* The stage's work estimate (its `work` hook, pitch.c): CPU seconds on the
 * reference core for input_s seconds analysed at rate (0: 16 kHz) with pYIN
 * (pyin 1) or YIN, hop and frame. */
double stg_pitch_work_s(int pyin, int hop, int frame, uint32_t rate, double input_s);
/* Checks params against the rate and fills *g. EBB_EINVAL names the value. */
int stg_pitch_geometry(const stg_pitch_params *p, uint32_t rate, uint64_t n_samples,
                       stg_pitch_geom *g);
/* *padded: malloc'd g->padded_len floats (caller frees). */
int stg_pitch_pad(const float *x, uint64_t n, const stg_pitch_geom *g, float **padded);
/* The first-order pre-emphasis y[n] = x[n] - a x[n-1] of a padded signal, the
 * input of d'. It tilts the spectrum towards the voice's formant region and
 * away from bass, kick and pad fundamentals (like the spectral weighting of
 * aubio's yinfft); the silence gate still uses the unfiltered signal.
 * *out: malloc'd len floats (caller frees). */
int stg_pitch_preemphasis(const float *padded, size_t len, double a, float **out);

/* d'(tau) for every frame into out[f * (tau_max + 1) + tau], tau 0..tau_max
 * (d'(0) = 1). cpu: an 8-lane loop; twin: the GPU kernel's host twin. */
void stg_pitch_cmndf_cpu(const float *padded, const stg_pitch_geom *g, float *out);
void stg_pitch_cmndf_twin(const float *padded, const stg_pitch_geom *g, float *out);
/* Frames per launch of the difference function (pitch_yin.c): small enough
 * that a cancellation is seen between launches within 100 ms. */
size_t stg_pitch_launch_frames(const stg_pitch_geom *g);
/* onset peaks weaker than this (1 = the 90th percentile) are no re-attacks */
#define EBB_PITCH_REATTACK_MIN_ODF 0.15
/* The re-attack model (pitch_reattack.c): a multilayer perceptron, one
 * hidden layer, trained by bench/train_reattack.py on the onset peaks of
 * rendered melodies (docs/songtrace.md, pitch step 7). x holds
 * EBB_PITCH_REATTACK_NFEAT features in the order pitch_onsets.c builds
 * them; the result is the log-odds that the peak is a note's attack. */
#define EBB_PITCH_REATTACK_NFEAT 70
double stg_pitch_reattack_logit(const float *x);
/* The model's log-odds for the check vector stored with its weights (a
 * training peak's features; rounded to float as the stage's are) in *got,
 * and what the trainer computed for it in *want. */
void stg_pitch_reattack_check(double *got, double *want);
/* Developers: when this environment variable names a file, the pitch stage
 * appends a line for every candidate re-attack peak (time s, the onset the
 * split would give before onset_shift_ms, the linear score, the features);
 * bench/train_reattack.py reads it. One job at a time. */
#define EBB_PITCH_REATTACK_FEATURES_ENV "EBB_PITCH_REATTACK_FEATURES"
/* The kernel's name in the fatbin (its twin is fakegpu_twin_<name>), block size. */
#define EBB_PITCH_KERNEL "pitch_cmndf"
#define EBB_PITCH_BLOCK 128u

/* The frames that span at least s seconds at hop_s seconds a frame: s /
 * hop_s rounded up, where a ratio within 1e-6 of a whole number counts as
 * that number (hop_s comes from the track's float times: 10 ms is stored as
 * 0.0099999998 s, and 0.12 s of it must be 12 frames, not 13). */
/* The frame step of a track (frames[3 * f] = time s), 0.01 s when it has
 * fewer than two frames or no positive step. */
static inline double stg_pitch_frame_step(const float *frames, size_t nf) {
  double h = nf > 1 ? (double)(frames[3] - frames[0]) : 0.0;
  return h > 0.0 ? h : 0.01;
}
static inline size_t stg_pitch_frames_for(double s, double hop_s) {
  double r = s / hop_s;
  return r <= 0.0 ? 0 : (size_t)ceil(r - 1e-6);
}


/* As stg_pitch_track, with an optional melody salience (pYIN only; NULL:
 * none) from stg_pitch_salience over the same frames. */
int stg_pitch_track_salience(const float *cmndf, const float *padded, const stg_pitch_geom *g,
                             const stg_pitch_params *p, const float *sal, const float *gate_db,
                             float *frames);
/* Each frame's level in dBFS over its analysis window (g->w + g->tau_max
 * samples of padded from f * hop): what the note gate compares. db has
 * g->n_frames entries. gate_db in stg_pitch_track_salience: these levels as
 * the gate is to see them (NULL: padded's own). */
void stg_pitch_frame_levels(const float *padded, const stg_pitch_geom *g, float *db);

/* pitch_salience.c: the harmonic-summation salience of x (typically the mix,
 * while pYIN runs on the separated vocals) on pYIN's grid: *sal is malloc'd
 * n_frames x B floats (B = 10-cent bins from fmin to fmax), each row a
 * distribution over the bins whose sum is the frame's salience voicing. */
int stg_pitch_salience(const float *x, uint64_t n, uint32_t rate, const stg_pitch_params *p,
                       size_t n_frames, float **sal);
/* Contour character (salience_vibrato; see stg_pitch_params): each
 * row's peaks (at most 8, strongest first, at least EBB_PITCH_VIBRATO_PEAK
 * of its maximum, their positions interpolated by a parabola through the
 * log of three bins) are each linked to the nearest free peak of the row
 * before within 50 cents; a peak's
 * contour over +-half frames (at least half + 1 frames of it) gives the
 * standard deviation s of its position in cents, and the bins of the peak's
 * lobe (down to the minima on each side) are multiplied by 1 + gain x
 * min(1, s / cents).
 * Each row then sums to what it summed to before: the frame's voicing does
 * not change, only which pitch holds it. sal: nf rows of nb bins, changed
 * in place; the peaks are the function's own, freed before it returns
 * (0, or EBB_ENOMEM with sal as it was). gain 0: nothing changes. */
#define EBB_PITCH_VIBRATO_PEAK 0.05
int stg_pitch_salience_vibrato(float *sal, size_t nf, int nb, double gain, size_t half,
                               double cents);
/* A salience row's peak, as the contour steps see it (pitch_salience.c):
 * at most EBB_PITCH_ROW_PEAKS a row, strongest first (ties by bin), each at
 * least EBB_PITCH_VIBRATO_PEAK of the row's maximum; pos is its bin
 * interpolated by a parabola through the log of three bins, [lo, hi] its
 * lobe down to the minima on each side; prev / next index the peak it
 * continues in the row before / after (-1: none). */
#define EBB_PITCH_ROW_PEAKS 8
typedef struct stg_pitch_peak {
  float pos;
  int bin, lo, hi;
  int prev, next;
} stg_pitch_peak;
/* The peaks of row r (nb bins) into pk: at most maxn (<=
 * EBB_PITCH_VOICE_PEAKS), each at least floor_share of the row's maximum;
 * their number. The contour step takes EBB_PITCH_ROW_PEAKS at
 * EBB_PITCH_VIBRATO_PEAK; the voice model (session 25) more and weaker
 * ones, EBB_PITCH_VOICE_PEAKS at EBB_PITCH_VOICE_FLOOR (0.1 of the row
 * before its 3rd power): a sung voice under a louder chord is often a peak
 * under 5 % of the sharpened row's maximum. */
#define EBB_PITCH_VOICE_PEAKS 16
#define EBB_PITCH_VOICE_FLOOR 0.001
int stg_pitch_row_peaks_at(const float *r, int nb, stg_pitch_peak *pk, int maxn,
                           double floor_share);
/* Links each peak of cur (row f) to the nearest free peak of pre (row
 * f - 1) within 50 cents, strongest first (sets cur[i].prev, pre[j].next). */
void stg_pitch_link_rows(stg_pitch_peak *pre, int npre, stg_pitch_peak *cur, int ncur);

/* Which salience peak is the voice (salience_model; pitch_voice.c, issue
 * 44). On the rows of the analysed signal (voc, nf rows of nb bins) and of
 * the melody item (mel, or NULL), before they are blended: each peak of the
 * blended row (at most EBB_PITCH_VOICE_PEAKS, each at least
 * EBB_PITCH_VOICE_FLOOR of its maximum) gets EBB_PITCH_VOICE_NFEAT features (its pitch, its height
 * and share in the blended, vocals and melody rows, its contour's movement
 * and length, the level trend along it over 100 ms, d' (cm, the analysed
 * signal's difference function on g's frames) at its period and half
 * period, the row at its octaves), and the voice model (a perceptron
 * trained by bench/train_salience.py) the probability that it is the sung
 * voice. voc is then blended with mel (stg_pitch_salience_blend with share
 * and vocals_only) and, when gain > 0, each peak's lobe multiplied by (1 +
 * gain x its probability) raised to power (the salience's sharpening, so
 * the weight acts as on the row before it was sharpened; 0 counts as 1),
 * every frame's probabilities taken before any row is weighed, each row
 * then scaled back to its maximum (its other
 * peaks fall under the likely voice, and the row's sum with them). half: the
 * contour window in frames on each side (salience_vibrato_ms). With
 * EBB_PITCH_SALIENCE_FEATURES_ENV naming a file, a line per peak (frame,
 * Hz, features) is appended to it whatever the gain. Returns 0, EBB_ENOMEM
 * (voc blended, not weighed) or EBB_EIO (the dump file). */
#define EBB_PITCH_VOICE_NFEAT 21
typedef struct stg_pitch_voice_in {
  const float *mel, *cm;
  const stg_pitch_geom *g;
  double share, vocals_only, fmin, gain;
  double power; /* the weight 1 + gain x p is raised to it (0: 1) */
  size_t half;
} stg_pitch_voice_in;
int stg_pitch_voice_weigh(float *voc, size_t nf, int nb, const stg_pitch_voice_in *in);
/* The voice model's log-odds for features x (EBB_PITCH_VOICE_NFEAT). */
double stg_pitch_voice_logit(const float *x);
/* Its log-odds for the check vector stored with its weights (*got) and what
 * the trainer computed (*want). */
void stg_pitch_voice_check(double *got, double *want);
#define EBB_PITCH_SALIENCE_FEATURES_ENV "EBB_PITCH_SALIENCE_FEATURES"
/* The blend of one row: dst = (1 - w) r + w q, w = share unless r's sum is
 * above vocals_only while q's is under 5 % of it (then w = 0). dst may be
 * r. */
void stg_pitch_salience_blend_row(float *dst, const float *r, const float *q, int nb, double share,
                                  double vocals_only);

/* B, the salience's bins (10 cents each) from fmin to fmax. */
int stg_pitch_salience_bins(const stg_pitch_params *p);
/* obs[b] = (1 - w) obs[b] + w row[b] for the voiced bins; returns the mixed
 * voicing probability (1 - w) vp + w sum(row). */
double stg_pitch_salience_mix(const float *row, int nb, double w, double vp, double *obs);

/* sal = (1 - share) sal + share mel, row by row (nf rows of nb bins), but
 * for a row of sal whose sum (its voicing) is above vocals_only while mel's
 * row sums to under 5 % of it: that row of sal stays as it is (the melody
 * pass removed a melody note there; its empty row would only dilute it). */
void stg_pitch_salience_blend(float *sal, const float *mel, size_t nf, int nb, double share,
                              double vocals_only);

/* Where `separate` took (nearly) everything out of the analysed signal x:
 * each frame f of sal (nf rows of nb bins) that is unvoiced (its sum under
 * EBB_PITCH_FILL_VOICED) and lies in a run of such frames at most
 * gap_frames long with a voiced frame on each side (a hole in the melody,
 * not before its first note or after its last) becomes weight x the mix's
 * row (mixsal, same shape) where x is between ratio_db and silent_db under
 * mix (energy over the win samples centred on f * hop) for at least
 * min_frames frames in a row. More than silent_db under, separate found no
 * voice there (a rest); a shorter quiet run is the gap between two notes.
 * x and mix are n samples at the same rate. filled (nf flags) is set to 1
 * at the rows replaced, 0 elsewhere. Returns the number of rows replaced. */
#define EBB_PITCH_FILL_VOICED 0.5
typedef struct stg_pitch_fill {
  double weight, ratio_db, silent_db;
  size_t gap_frames, min_frames;
  int hop, win;
} stg_pitch_fill;
size_t stg_pitch_salience_fill(float *sal, const float *mixsal, size_t nf, int nb, const float *x,
                               const float *mix, uint64_t n, const stg_pitch_fill *fp,
                               unsigned char *filled);
/* The two halves of stg_pitch_salience_fill, so the mix's salience need
 * only be computed when a frame is to take it: _mark sets filled (nf
 * flags) at the frames the rule picks and returns their number; _apply
 * replaces those rows by weight x mixsal's. */
size_t stg_pitch_salience_fill_mark(const float *sal, size_t nf, int nb, const float *x,
                                    const float *mix, uint64_t n, const stg_pitch_fill *fp,
                                    unsigned char *filled);
void stg_pitch_salience_fill_apply(float *sal, const float *mixsal, size_t nf, int nb,
                                   double weight, const unsigned char *filled);

typedef struct stg_pitch_note {
  double onset, offset; /* seconds */
  double hz;            /* median f0 of the note */
  int midi;             /* round(69 + 12 log2(hz / 440)) */
} stg_pitch_note;

/* The gate above, in place on an f0 track (frames[3 f + 1] set to 0 for the
 * runs it drops). level_db[f]: frame f's RMS level, dBFS. Returns 0 or
 * EBB_ENOMEM. */
int stg_pitch_gate(float *frames, size_t n_frames, const float *level_db,
                   const stg_pitch_params *p);

/* The consonant fill (see consonant_s above) on an f0 track (layout as
 * above) with each frame's level on the pre-emphasised (emph_db) and plain
 * (plain_db) signal, frames hop_s apart. Returns the frames it voiced, or
 * (size_t)-1 out of memory. */
size_t stg_pitch_voicing_fill(float *frames, size_t nf, const float *emph_db, const float *plain_db,
                              const stg_pitch_params *p, double hop_s);

/* Segments an f0 track (layout as above) into notes. *notes is malloc'd
 * (caller frees; NULL when *n == 0). */
int stg_pitch_notes(const float *frames, size_t n_frames, const stg_pitch_params *p,
                    stg_pitch_note **notes, size_t *n);
/* The onset detection function of x (SuperFlux, normalised to the 90th
 * percentile of its sounding frames) and each frame's level (dBFS) at the
 * pitch frames (frame f centred on sample f*hop): odf and level_db hold
 * n_frames floats each. */
int stg_pitch_onset_strength(const float *x, uint64_t n, uint32_t rate, int hop, size_t n_frames,
                             float *odf, float *level_db);
/* The level (dBFS) of x's energy at the harmonics of ref_hz[f] (the
 * bins nearest the first `harmonics` multiples up to 6 kHz and their
 * neighbours; the whole spectrum where ref_hz[f] is 0) on the same frames
 * as stg_pitch_onset_strength: harm_db holds n_frames floats. */
int stg_pitch_harmonic_level(const float *x, uint64_t n, uint32_t rate, int hop, size_t n_frames,
                             const float *ref_hz, int harmonics, float *harm_db);
/* Refines notes from stg_pitch_notes with the onsets (see the params): may
 * split notes and move onsets earlier; *notes is replaced (realloc'd). */
int stg_pitch_notes_onsets(const float *frames, size_t n_frames, const float *odf,
                           const float *level_db, const stg_pitch_params *p, stg_pitch_note **notes,
                           size_t *n);

/* The whole refinement the stage runs: the onset function of mono, the
 * level at the harmonics of each frame's reference pitch (the note it lies
 * in, else one that ended or starts within 0.3 s; option onset_harmonics, 0:
 * the whole spectrum's level), then stg_pitch_notes_onsets. Nothing to do
 * when onset_threshold is 0. */
int stg_pitch_refine_notes(const float *mono, uint64_t n, uint32_t rate, const stg_pitch_params *p,
                           const float *frames, size_t nf, stg_pitch_note **notes, size_t *n_notes);

/* After the refinement a note may start before the track turns to its
 * pitch: the frames from its onset that still hold the previous note's
 * pitch (within half a semitone; its release) take this note's pitch, up to
 * the first frame that does not. */
void stg_pitch_track_to_notes(float *frames, size_t nf, const stg_pitch_note *notes, size_t n);

/* {"notes":[{"onset","offset","midi","hz","name"}],"count":N}; *out malloc'd. */
int stg_pitch_notes_json(const stg_pitch_note *notes, size_t n, char **out);

typedef enum { EBB_PITCH_BACKEND_CPU = 0, EBB_PITCH_BACKEND_TWIN = 1 } stg_pitch_backend;

/* The whole analysis on the host: mono samples -> f0 track. *frames is
 * malloc'd (*n_frames * 3 floats; caller frees). */
int stg_pitch_analyze(const float *mono, uint64_t n, uint32_t rate, const stg_pitch_params *p,
                      stg_pitch_backend backend, float **frames, size_t *n_frames);

#endif
