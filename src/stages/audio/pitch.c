/* The `pitch` stage (pitch.h): reads AUDIO "vocals" (else "audio"), adds
 * TENSOR "f0" [frames, 3] (time s, f0 Hz or 0, voicing probability) and JSON
 * "notes". On a CUDA device the d'(tau) rows are computed by the pitch_cmndf
 * kernel in device memory owned by this stage (ebb_dev_alloc), freed before
 * run returns; elsewhere on the CPU (backend "cpu") or by the kernel's host
 * twin (backend "kernel"). */
#include "stages/audio/pitch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stages/audio/decode.h"
#include "stages/audio/st_util.h"
#include "stages/options.h"
#include "stages/audio/wav_encode.h"
#include "stages/kernels/kernels.h"

typedef enum { BK_AUTO, BK_CPU, BK_KERNEL } pitch_backend_opt;

typedef struct pitch_state {
  stg_pitch_params p;
  double salience_melody, salience_vocals_only;
  double salience_mix, salience_mix_db, salience_mix_silent_db, salience_mix_min_s;
  double salience_mix_gap_s;
  int rate; /* analysis rate; 0: the input's */
  pitch_backend_opt backend;
} pitch_state;

/* The options, each written once (stages/options.h); stg_pitch_defaults
 * takes its defaults from here too. */
#define PITCH_OPTIONS(NUM, INT, STR, BOOL, SEP, ...)                                               \
  NUM(fmin, 65, 20, 4000, "lowest f0 searched, Hz")                                                \
  SEP NUM(fmax, 1000, 40, 20000, "highest f0 searched, Hz") SEP                                    \
  INT(rate, 16000, 0, 384000,                                                                      \
      "analysis sample rate: other input rates are resampled to it (hop and frame are samples "    \
      "at this rate); 0: analyse at the input's rate") SEP                                         \
  INT(hop, 160, 1, 65536, "samples between frames (10 ms at 16 kHz)") SEP                          \
  INT(frame, 1024, 64, 65536,                                                                      \
      "analysis frame, samples; the YIN integration window is half of it") SEP                     \
  NUM(threshold, 0.1, 0.01, 0.99,                                                                  \
      "yin: absolute threshold on d'; pyin: mean of the Beta(2, b) threshold prior") SEP           \
  STR(method, "pyin",                                                                              \
      "pyin (HMM-smoothed, Mauch & Dixon 2014) or yin (de Cheveigne & Kawahara 2002)") SEP         \
  NUM(preemphasis, 0.97, 0, 0.999,                                                                 \
      "d' is computed on x[n] - a x[n-1], which favours the voice over bass and drums in a mix; "  \
      "0: off") SEP                                                                                \
  NUM(silence_db, -60, -200, 0, "frames below this RMS level (dBFS) are unvoiced") SEP             \
  NUM(gate_voicing, 0.1, 0, 1,                                                                     \
      "pyin: a note-length voiced run whose mean voicing probability is below this becomes "       \
      "unvoiced (separation residue in rests); 0: off") SEP                                        \
  NUM(gate_range_db, 20, 0, 200,                                                                   \
      "pyin: a note-length voiced run whose mean level is more than this many dB below the "       \
      "track's loud level (95th percentile) becomes unvoiced; 0: off") SEP                         \
  NUM(consonant_ms, 150, 0, 2000,                                                                  \
      "pyin: an unvoiced stretch up to this long next to a voiced run, within consonant_db of "    \
      "its level and ending at a quiet frame or another run (a sung word's consonants, breath), "  \
      "takes the run's pitch; 0: off") SEP                                                         \
  NUM(consonant_db, 8, 0, 100, "see consonant_ms") SEP                                             \
  NUM(consonant_tilt_db, -100, -100, 100,                                                          \
      "consonant_ms: the stretch's spectral tilt (pre-emphasised minus plain level) must also be " \
      "this far above its voiced run's (noise-like); -100: any") SEP                               \
  NUM(min_note_ms, 70, 0, 10000, "shortest note kept") SEP                                         \
  NUM(split_semitones, 0.7, 0.05, 48,                                                              \
      "a pitch jump this large, held for split_ms, starts a new note") SEP                         \
  NUM(split_ms, 40, 0, 10000, "see split_semitones") SEP                                           \
  STR(backend, "auto",                                                                             \
      "auto (the GPU kernel on a CUDA device, else CPU), cpu, or kernel (the kernel; its host "    \
      "twin on the CPU device)") SEP /* note onsets (pitch_onsets.c) */                            \
  NUM(onset_threshold, 0.4, 0, 100,                                                                \
      "after a pitch change the note starts at the strongest onset (spectral flux, 1 = its 90th "  \
      "percentile) this strong up to onset_lookback_ms before the pitch turns; 0: no onsets, "     \
      "no re-attacks") SEP                                                                         \
  NUM(onset_lookback_ms, 90, 0, 1000, "see onset_threshold") SEP                                   \
  NUM(onset_lead_ms, 150, 0, 1000,                                                                 \
      "a note after an unvoiced gap starts at the strongest onset (onset_threshold) up to this "   \
      "long before its first voiced frame, when that is earlier than onset_shift_ms puts it (a "   \
      "sung word's first consonant, which pYIN does not voice); 0: off") SEP                       \
  BOOL(reattack_model, 1,                                                                          \
       "a note is split at the onset peaks that the re-attack model (a small neural network "      \
       "trained on rendered melodies) rates at reattack_logit or more; false: at those whose "     \
       "score reaches reattack_score") SEP                                                         \
  NUM(reattack_logit, 0.4, -50, 50,                                                                \
      "reattack_model: the log-odds of a re-attack a peak must reach") SEP                         \
  NUM(reattack_score_min, 5, -100, 100,                                                            \
      "reattack_model: a peak must also score at least this (see reattack_score)") SEP             \
  NUM(reattack_score, 10, -100, 100,                                                               \
      "without reattack_model a note is split at a re-attack whose score reaches this: the rise "  \
      "of the level at the note's harmonics from its dip (dB) + 2.78 ln(onset strength) + 9.1 x "  \
      "the dip of the track's voicing probability") SEP                                            \
  INT(onset_harmonics, 12, 0, 100,                                                                 \
      "a re-attack's rise is measured on the energy at this many harmonics of the "                \
      "note's pitch, where a chord struck in the dip does not fill it; 0: the whole spectrum") SEP \
  NUM(reattack_min_ms, 130, 0, 10000,                                                              \
      "a re-attack of the same pitch comes at least this long after the note's start") SEP         \
  NUM(reattack_rise_db, 4, 0, 60,                                                                  \
      "a re-attack's note starts where the level at its harmonics first rises this much above "    \
      "its dip before the onset peak (a slow attack's flux peaks late); 0: at the peak") SEP       \
  NUM(onset_shift_ms, 30, 0, 200,                                                                  \
      "every note onset is moved this much earlier: the detectors' delay") SEP                     \
  NUM(salience, 0.85, 0, 1,                                                                        \
      "pyin: share of the observation taken from the harmonic-summation melody salience of the "   \
      "analysed signal, which follows a melody that pYIN loses under the band; 0: off") SEP        \
  NUM(salience_height, 0.3, 0, 2,                                                                  \
      "the salience of each pitch is weighted by 2^(this x its octaves above fmin), so the "       \
      "melody above the accompaniment beats its own octave-below and twelfth-below "               \
      "subharmonics and the chords under it; 0: off") SEP                                          \
  NUM(salience_sharpen, 3, 1, 8,                                                                   \
      "pyin: each salience row, divided by its maximum, is raised to this power (its mass goes "   \
      "to its peaks; 1: the harmonic sums as they are)") SEP                                       \
  NUM(salience_vibrato, 3, 0, 10,                                                                  \
      "pyin: a salience peak whose pitch, followed from frame to frame, moves over "               \
      "+-salience_vibrato_ms (a sung note's vibrato, scoop or glide; a piano partial holds "       \
      "still) has its share of the frame's salience multiplied by up to 1 + this; 0: off") SEP     \
  NUM(salience_vibrato_ms, 60, 10, 1000,                                                           \
      "see salience_vibrato: the window on each side of the frame") SEP                            \
  NUM(salience_vibrato_cents, 15, 0.1, 1200,                                                       \
      "see salience_vibrato: the standard deviation of the peak's pitch (cents) over the window "  \
      "that takes the whole bonus") SEP                                                            \
  NUM(salience_model, 4, 0, 100,                                                                   \
      "pyin: each salience peak is multiplied by 1 + this x the voice model's probability that "   \
      "it is the sung voice (its stems, contour, level trend and periodicity; "                    \
      "bench/train_salience.py), the row's maximum kept; 0: off") SEP                              \
  NUM(register_semitones, 8, 0, 48,                                                                \
      "pyin: a second pass weighs down every pitch more than this many semitones from the "        \
      "median of the first pass's track around it (the melody's register), so the track does "     \
      "not stay on a subharmonic or a chord tone an octave or more away; 0: off") SEP              \
  NUM(register_window_ms, 4000, 100, 60000,                                                        \
      "see register_semitones: the median is taken over this long on each side") SEP               \
  NUM(salience_melody, 0.75, 0, 1,                                                                 \
      "share of the salience computed on the AUDIO item melody (the stricter pass of separate) "   \
      "when the job has one; the rest on the analysed signal") SEP                                 \
  NUM(salience_vocals_only, 0.6, 0, 1,                                                             \
      "a frame whose salience voicing on the analysed signal is above this while the melody "      \
      "item keeps under 5 % of it (a melody note doubling a chord tone, removed by the stricter "  \
      "pass) takes the analysed signal's salience alone; 1: never") SEP                            \
  NUM(salience_mix, 0.3, 0, 1,                                                                     \
      "pyin: where separate left the analysed signal salience_mix_db to salience_mix_silent_db "   \
      "under the mix (AUDIO item audio) for salience_mix_min_ms or longer, inside a gap in the "   \
      "melody of at most salience_mix_gap_ms, the frame takes the mix's salience at this weight "  \
      "(a melody note that the repeating accompaniment took whole); 0: off") SEP                   \
  NUM(salience_mix_db, 8, 0, 100,                                                                  \
      "salience_mix: the analysed signal at least this far under the mix") SEP                     \
  NUM(salience_mix_silent_db, 20, 0, 200,                                                          \
      "salience_mix: where the analysed signal is more than this under the mix, separate found "   \
      "no voice there (a rest), and the frame keeps its own salience") SEP                         \
  NUM(salience_mix_min_ms, 150, 0, 10000,                                                          \
      "salience_mix: the analysed signal must stay that far under the mix this long; a shorter "   \
      "quiet run is the gap between two notes") SEP                                                \
  NUM(salience_mix_gap_ms, 3000, 0, 60000, "see salience_mix")

EBB_STAGE_OPTIONS(PITCH_OPTIONS)

/* The analysis parameters of the table's values (the method is set apart). */
static void set_params(const stage_opts *v, stg_pitch_params *p) {
  p->fmin = v->fmin;
  p->fmax = v->fmax;
  p->hop = v->hop;
  p->frame = v->frame;
  p->threshold = v->threshold;
  p->silence_db = v->silence_db;
  p->preemphasis = v->preemphasis;
  p->gate_voicing = v->gate_voicing;
  p->gate_range_db = v->gate_range_db;
  p->consonant_s = v->consonant_ms / 1000.0;
  p->consonant_db = v->consonant_db;
  p->consonant_tilt_db = v->consonant_tilt_db;
  p->min_note_s = v->min_note_ms / 1000.0;
  p->split_semitones = v->split_semitones;
  p->split_s = v->split_ms / 1000.0;
  p->onset_threshold = v->onset_threshold;
  p->onset_lookback_s = v->onset_lookback_ms / 1000.0;
  p->onset_lead_s = v->onset_lead_ms / 1000.0;
  p->reattack_score = v->reattack_score;
  p->reattack_model = v->reattack_model;
  p->reattack_logit = v->reattack_logit;
  p->reattack_score_min = v->reattack_score_min;
  p->onset_shift_s = v->onset_shift_ms / 1000.0;
  p->onset_harmonics = v->onset_harmonics;
  p->reattack_min_s = v->reattack_min_ms / 1000.0;
  p->reattack_rise_db = v->reattack_rise_db;
  p->salience_weight = v->salience;
  p->salience_height = v->salience_height;
  p->salience_sharpen = v->salience_sharpen;
  p->salience_vibrato = v->salience_vibrato;
  p->salience_vibrato_s = v->salience_vibrato_ms / 1000.0;
  p->salience_vibrato_cents = v->salience_vibrato_cents;
  p->salience_model = v->salience_model;
  p->register_semitones = v->register_semitones;
  p->register_window_s = v->register_window_ms / 1000.0;
}

stg_pitch_params stg_pitch_defaults(void) {
  stg_pitch_params p = {0}; /* every field is an option: the table's defaults */
  stage_opts v;
  stage_opts_read("pitch", NULL, &v); /* no JSON: the defaults, cannot fail */
  set_params(&v, &p);
  p.method = strcmp(v.method, "yin") ? EBB_PITCH_PYIN : EBB_PITCH_YIN;
  return p;
}

static int pitch_load(ebb_stage_ctx *ctx, const char *options_json, void **state) {
  json_t *o = NULL;
  stage_opts v;
  int rc = stage_opts_parse("pitch", options_json, &o, &v);
  pitch_state *s = NULL;
  if (rc) {
    rc = stg_st_fail(ctx, rc, "%s", ebb_errmsg());
    goto done;
  }
  const char *method = v.method, *backend = v.backend;
  if (!(s = stg_st_calloc(1, sizeof *s))) {
    rc = stg_st_fail(ctx, EBB_ENOMEM, "out of memory");
    goto done;
  }
  s->p = stg_pitch_defaults();
  set_params(&v, &s->p);
  s->rate = v.rate;
  s->salience_melody = v.salience_melody;
  s->salience_vocals_only = v.salience_vocals_only;
  s->salience_mix = v.salience_mix;
  s->salience_mix_db = v.salience_mix_db;
  s->salience_mix_silent_db = v.salience_mix_silent_db;
  s->salience_mix_min_s = v.salience_mix_min_ms / 1000.0;
  s->salience_mix_gap_s = v.salience_mix_gap_ms / 1000.0;
  if (!strcmp(method, "pyin"))
    s->p.method = EBB_PITCH_PYIN;
  else if (!strcmp(method, "yin"))
    s->p.method = EBB_PITCH_YIN;
  else {
    rc = stg_st_fail(ctx, EBB_ECONFIG, "option method: \"%s\" is not pyin or yin", method);
    goto done;
  }
  if (!strcmp(backend, "auto"))
    s->backend = BK_AUTO;
  else if (!strcmp(backend, "cpu"))
    s->backend = BK_CPU;
  else if (!strcmp(backend, "kernel"))
    s->backend = BK_KERNEL;
  else {
    rc =
        stg_st_fail(ctx, EBB_ECONFIG, "option backend: \"%s\" is not auto, cpu or kernel", backend);
    goto done;
  }
  if (s->rate != 0 && s->rate < 1000) {
    rc = stg_st_fail(ctx, EBB_ECONFIG, "option rate: %d Hz is too low (0 or >= 1000)", s->rate);
    goto done;
  }
  if (s->salience_mix > 0.0 && s->salience_mix_db >= s->salience_mix_silent_db) {
    rc =
        stg_st_fail(ctx, EBB_ECONFIG,
                    "options salience_mix_db %g and salience_mix_silent_db %g: salience_mix_db "
                    "must be below salience_mix_silent_db (else no frame takes the mix's salience)",
                    s->salience_mix_db, s->salience_mix_silent_db);
    goto done;
  }
  if (s->p.fmin >= s->p.fmax) {
    rc = stg_st_fail(ctx, EBB_ECONFIG, "options fmin %g and fmax %g: fmin must be below fmax",
                     s->p.fmin, s->p.fmax);
    goto done;
  }
  *state = s;
  s = NULL;
done:
  stg_st_free(s);
  json_decref(o);
  return rc;
}

static void pitch_unload(ebb_stage_ctx *ctx, void *state) {
  (void)ctx;
  stg_st_free(state);
}

/* d' on the device: x and out in stage-owned device memory, one block per
 * frame. Returns 0, or an error after which the caller may fall back. */
static int cmndf_device(ebb_stage_ctx *ctx, const float *padded, const stg_pitch_geom *g,
                        float *out) {
  uint64_t dx = 0, dout = 0;
  size_t nx = g->padded_len * sizeof(float);
  size_t nout = g->n_frames * (size_t)(g->tau_max + 1) * sizeof(float);
  int rc;
  if ((rc = ebb_dev_alloc(ctx, nx, &dx)) || (rc = ebb_dev_alloc(ctx, nout, &dout)))
    goto done;
  if ((rc = ctx->host->copy_htod(ctx, dx, padded, nx)))
    goto done;
  /* in launches of a bounded size: the job's cancellation is checked
   * between them (a kernel cannot be stopped midway) */
  int hop = g->hop, w = g->w, tm = g->tau_max;
  size_t step = stg_pitch_launch_frames(g);
  for (size_t f0 = 0; f0 < g->n_frames; f0 += step) {
    if (ebb_cancelled(ctx)) {
      rc = stg_st_fail(ctx, EBB_ECANCELED, "cancelled at frame %zu of %zu", f0, g->n_frames);
      goto done;
    }
    int nf = (int)(g->n_frames - f0 < step ? g->n_frames - f0 : step);
    uint64_t x = dx + f0 * (uint64_t)hop * sizeof(float);
    uint64_t o = dout + f0 * (uint64_t)(tm + 1) * sizeof(float);
    void *params[] = {&x, &o, &nf, &hop, &w, &tm};
    const unsigned grid[3] = {(unsigned)nf, 1, 1}, block[3] = {EBB_PITCH_BLOCK, 1, 1};
    if ((rc =
             ctx->host->launch(ctx, stg_kernels_image(), EBB_PITCH_KERNEL, grid, block, 0, params)))
      goto done;
  }
  rc = ctx->host->copy_dtoh(ctx, out, dout, nout);
done:
  if (dout)
    ebb_dev_free(ctx, dout);
  if (dx)
    ebb_dev_free(ctx, dx);
  return rc;
}

/* *mono resampled in place to the option rate (0: left as it is). */
static int to_analysis_rate(ebb_stage_ctx *ctx, const pitch_state *s, const char *used,
                            float **mono, uint64_t *n, uint32_t *rate) {
  if (!s->rate || (uint32_t)s->rate == *rate)
    return 0;
  float *res = NULL;
  uint64_t nres = 0;
  int rc = stg_pcm_to_mono_rate(*mono, *n, 1, *rate, (uint32_t)s->rate, &res, &nres);
  if (rc)
    return stg_st_fail(ctx, rc, "resampling \"%s\" from %u to %d Hz: %s", used, *rate, s->rate,
                       ebb_errmsg());
  stg_st_free(*mono);
  *mono = res;
  *n = nres;
  *rate = (uint32_t)s->rate;
  return 0;
}

/* Mean square of the job's "audio" item (the mix), or 0 without one. */
static double mix_power(ebb_stage_ctx *ctx, const ebb_items *in) {
  static const char *const names[] = {"audio", NULL};
  float *a = NULL;
  uint64_t na = 0;
  uint32_t ra = 0;
  const char *used = NULL;
  if (stg_st_find_mono(ctx, in, names, &a, &na, &ra, &used) != 0)
    return 0.0;
  double e = 0.0;
  for (uint64_t i = 0; i < na; i++)
    e += (double)a[i] * a[i];
  stg_st_free(a);
  return na ? e / (double)na : 0.0;
}

/* The melody salience's share: the option's where the vocals (mono, n
 * samples) hold under 40 % of the mix's power, falling linearly to a third
 * of it at 80 % and above. The stricter pass removes chords the vocals keep
 * when the band dominates; where the melody dominates it only removes melody
 * notes that double chord tones. */
static double melody_share(ebb_stage_ctx *ctx, const pitch_state *s, const ebb_items *in,
                           const float *mono, uint64_t n) {
  double pm = mix_power(ctx, in), pv = 0.0;
  for (uint64_t i = 0; i < n; i++)
    pv += (double)mono[i] * mono[i];
  if (!(pm > 0.0) || n == 0)
    return s->salience_melody;
  double r = pv / (double)n / pm, f = 1.0 - (r - 0.4) / 0.6;
  f = f > 1.0 ? 1.0 : f < 1.0 / 3.0 ? 1.0 / 3.0 : f;
  return s->salience_melody * f;
}

/* The AUDIO item `name` as *sig: mono at the analysed signal's rate, n
 * samples (cut or zero-padded). EBB_ENOTFOUND when the job has none. */
static int aligned_item(ebb_stage_ctx *ctx, const pitch_state *s, const ebb_items *in,
                        const char *name, uint64_t n, uint32_t rate, float **sig) {
  const char *const names[] = {name, NULL};
  float *m = NULL;
  uint64_t mn = 0;
  uint32_t mrate = 0;
  const char *used = NULL;
  *sig = NULL;
  int rc = stg_st_find_mono(ctx, in, names, &m, &mn, &mrate, &used);
  if (rc)
    return rc;
  pitch_state at = *s;
  at.rate = (int)rate; /* the analysed signal's rate, whatever the option */
  if ((rc = to_analysis_rate(ctx, &at, used, &m, &mn, &mrate))) {
    stg_st_free(m);
    return rc;
  }
  float *out = stg_st_calloc(n ? n : 1, sizeof *out);
  if (!out) {
    stg_st_free(m);
    return stg_st_fail(ctx, EBB_ENOMEM, "out of memory for %llu samples of \"%s\"",
                       (unsigned long long)n, name);
  }
  memcpy(out, m, (size_t)(mn < n ? mn : n) * sizeof *out);
  stg_st_free(m);
  *sig = out;
  return 0;
}

/* The salience's signal: the "melody" item at the analysis rate, n samples
 * (cut or zero-padded), when the option asks for it and the job has one,
 * and its share in *share; else *sig stays NULL and the salience reads the
 * analysed signal. */
static int salience_signal(ebb_stage_ctx *ctx, const pitch_state *s, const ebb_items *in,
                           const float *mono, uint64_t n, uint32_t rate, float **sig,
                           double *share) {
  *sig = NULL;
  *share = 0.0;
  if (!(s->salience_melody > 0.0) || s->p.method != EBB_PITCH_PYIN || !(s->p.salience_weight > 0.0))
    return 0;
  int rc = aligned_item(ctx, s, in, "melody", n, rate, sig);
  if (rc)
    return rc == EBB_ENOTFOUND ? 0 : rc;
  *share = melody_share(ctx, s, in, mono, n);
  return 0;
}

/* Where separate took the melody out of the analysed signal whole (the
 * salience_mix option), the salience rows take the mix's
 * (stg_pitch_salience_fill), and the note gate judges those frames by the
 * mix's level, the signal they now follow: *gate_db (malloc'd; NULL when no
 * row was replaced) is the analysed signal's frame levels with the mix's in
 * the replaced frames. Nothing without a mix ("audio") apart from the
 * analysed signal. */
static int mix_fill(ebb_stage_ctx *ctx, const pitch_state *s, const ebb_items *in, const char *used,
                    const float *mono, const float *padded, uint64_t n, uint32_t rate,
                    const stg_pitch_geom *g, float *sal, float **gate_db) {
  *gate_db = NULL;
  if (!(s->salience_mix > 0.0) || !sal || !strcmp(used, "audio"))
    return 0;
  float *mix = NULL, *msal = NULL, *mpad = NULL, *mdb = NULL, *db = NULL;
  unsigned char *filled = NULL;
  size_t nf = g->n_frames, k = 0;
  int rc = aligned_item(ctx, s, in, "audio", n, rate, &mix);
  if (rc)
    return rc == EBB_ENOTFOUND ? 0 : rc;
  if (!(filled = stg_st_malloc(nf ? nf : 1))) {
    rc = ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %zu frames", nf);
    goto done;
  }
  int nb = stg_pitch_salience_bins(&s->p);
  double hop_s = (double)s->p.hop / rate;
  stg_pitch_fill fp = {.weight = s->salience_mix,
                       .ratio_db = s->salience_mix_db,
                       .silent_db = s->salience_mix_silent_db,
                       .gap_frames = (size_t)floor(s->salience_mix_gap_s / hop_s + 1e-6),
                       .min_frames = stg_pitch_frames_for(s->salience_mix_min_s, hop_s),
                       .hop = s->p.hop,
                       .win = s->p.frame / 2};
  /* the mix's salience only when some frame takes it */
  k = stg_pitch_salience_fill_mark(sal, nf, nb, mono, mix, n, &fp, filled);
  stg_st_log(ctx, 0, "%zu of %zu frames take the mix's salience (salience_mix)", k, nf);
  if (k == 0 || (rc = stg_pitch_salience(mix, n, rate, &s->p, nf, &msal)))
    goto done;
  stg_pitch_salience_fill_apply(sal, msal, nf, nb, fp.weight, filled);
  if ((rc = stg_pitch_pad(mix, n, g, &mpad)))
    goto done;
  mdb = stg_st_malloc((nf ? nf : 1) * sizeof *mdb);
  db = stg_st_malloc((nf ? nf : 1) * sizeof *db);
  if (!mdb || !db) {
    rc = ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %zu frame levels", nf);
    goto done;
  }
  stg_pitch_frame_levels(padded, g, db);
  stg_pitch_frame_levels(mpad, g, mdb);
  for (size_t f = 0; f < nf; f++)
    if (filled[f])
      db[f] = mdb[f];
  *gate_db = db;
  db = NULL;
done:
  stg_st_free(msal);
  stg_st_free(mix);
  stg_st_free(mpad);
  stg_st_free(mdb);
  stg_st_free(db);
  stg_st_free(filled);
  return rc;
}

/* The salience rows of mono, mixed with those of sig (when not NULL) by the
 * option's share: each row is a distribution over the bins scaled by its
 * frame's voicing, and so is their weighted mean. (A weighted geometric mean,
 * a pitch salient in both, did worse on bench/songtrace_real.py: F1 0.62 and
 * RPA 0.84 / 0.68 against 0.66 and 0.83 / 0.69.) Where the vocals' row is
 * clearly voiced (sum above salience_vocals_only) and sig's holds under 5 %
 * of it, the vocals' row stands alone: there the stricter pass removed a
 * melody note that doubles a chord tone, and mixing its empty row in only
 * lowers the voicing and lets a chord tone or the octave below win. With
 * salience_model the voice model then weighs each blended row's peaks
 * (stg_pitch_voice_weigh, which does the blend; cm: the difference
 * function, one of its features). */
static int melody_salience(const pitch_state *s, const float *mono, const float *sig, double share,
                           uint64_t n, const float *cm, const stg_pitch_geom *g, float **sal) {
  size_t nf = g->n_frames;
  int rc = stg_pitch_salience(mono, n, g->rate, &s->p, nf, sal);
  float *b = NULL;
  if (rc || (sig && (rc = stg_pitch_salience(sig, n, g->rate, &s->p, nf, &b))))
    return rc;
  /* the voice model reads each stem's row before the blend (pitch_voice.c) */
  stg_pitch_voice_in vin = {.mel = b,
                            .cm = cm,
                            .g = g,
                            .share = share,
                            .vocals_only = s->salience_vocals_only,
                            .fmin = s->p.fmin,
                            .gain = s->p.salience_model,
                            .power = s->p.salience_sharpen,
                            .half = stg_pitch_frames_for(s->p.salience_vibrato_s,
                                                         (double)s->p.hop / g->rate)};
  rc = stg_pitch_voice_weigh(*sal, nf, stg_pitch_salience_bins(&s->p), &vin);
  stg_st_free(b);
  return rc;
}

/* d' by the chosen backend into cm; *how names it for the log. A kernel
 * that fails for any reason but memory or cancellation falls back to the CPU. */
static int cmndf_any(ebb_stage_ctx *ctx, const pitch_state *s, const float *emph,
                     const stg_pitch_geom *g, float *cm, const char **how) {
  int on_gpu = ebb_device_kind(ctx) == EBB_DEV_KIND_CUDA;
  if (s->backend != BK_CPU && on_gpu) {
    int rc = cmndf_device(ctx, emph, g, cm);
    if (rc == 0) {
      *how = "gpu kernel";
      return 0;
    }
    if (rc == EBB_EOOM || rc == EBB_ECANCELED)
      return rc;
    stg_st_log(ctx, 2, "pitch kernel failed (%s); computing on the CPU", ebb_strerror(rc));
  }
  if (s->backend == BK_KERNEL && !on_gpu) {
    stg_pitch_cmndf_twin(emph, g, cm);
    *how = "kernel host twin";
  } else {
    stg_pitch_cmndf_cpu(emph, g, cm);
    *how = "cpu";
  }
  return 0;
}

static size_t voiced_frames(const float *frames, size_t nf) {
  size_t v = 0;
  for (size_t f = 0; f < nf; f++)
    v += frames[3 * f + 1] > 0.0f;
  return v;
}

/* The consonant fill (pitch_voicing.c) on the track, pYIN only. */
static int consonants(const pitch_state *s, const float *padded, const float *emph,
                      const stg_pitch_geom *g, float *frames) {
  if (s->p.method != EBB_PITCH_PYIN || !(s->p.consonant_s > 0.0) || g->n_frames == 0)
    return 0;
  float *e = stg_st_malloc(g->n_frames * sizeof *e), *d = stg_st_malloc(g->n_frames * sizeof *d);
  size_t r = (size_t)-1;
  if (e && d) {
    stg_pitch_frame_levels(emph, g, e);
    stg_pitch_frame_levels(padded, g, d);
    r = stg_pitch_voicing_fill(frames, g->n_frames, e, d, &s->p, (double)g->hop / g->rate);
  }
  stg_st_free(e);
  stg_st_free(d);
  if (r == (size_t)-1)
    return ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %zu frame levels", g->n_frames);
  return stg_st_stop() ? ebb_seterr(EBB_ECANCELED, "pitch: cancelled in the consonant fill") : 0;
}

/* The difference function is done: progress 0.6, then a cancellation is
 * answered (EBB_ECANCELED) before the tracking starts. */
static int halfway(ebb_stage_ctx *ctx) {
  if (ctx->host->progress)
    ctx->host->progress(ctx, 0.6);
  return ebb_cancelled(ctx) ? stg_st_fail(ctx, EBB_ECANCELED, "cancelled") : 0;
}

/* Contour character (stg_pitch_salience_vibrato) with the stage's options. */
static int salience_vibrato(const pitch_state *s, float *sal, const stg_pitch_geom *g,
                            uint32_t rate) {
  size_t half = stg_pitch_frames_for(s->p.salience_vibrato_s, (double)s->p.hop / rate);
  return stg_pitch_salience_vibrato(sal, g->n_frames, stg_pitch_salience_bins(&s->p),
                                    s->p.salience_vibrato, half, s->p.salience_vibrato_cents);
}

static int pitch_run_counted(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out) {
  pitch_state *s = state;
  static const char *const names[] = {"vocals", "audio", NULL};
  float *mono = NULL, *padded = NULL, *emph = NULL, *cm = NULL, *frames = NULL, *sal = NULL;
  float *salsig = NULL, *gate_db = NULL;
  double share = 0.0;
  stg_pitch_note *notes = NULL;
  char *notes_json = NULL;
  size_t n_notes = 0;
  uint64_t n = 0;
  uint32_t rate = 0;
  const char *used = NULL;
  int rc = stg_st_find_mono(ctx, in, names, &mono, &n, &rate, &used);
  if (rc == EBB_ENOTFOUND)
    return stg_st_fail(ctx, EBB_EINPUT, "no AUDIO item \"vocals\" or \"audio\" in the job");
  if (rc)
    return rc;
  if ((rc = to_analysis_rate(ctx, s, used, &mono, &n, &rate)) ||
      (rc = salience_signal(ctx, s, in, mono, n, rate, &salsig, &share)))
    goto done;
  stg_pitch_geom g;
  if ((rc = stg_pitch_geometry(&s->p, rate, n, &g))) {
    rc = stg_st_fail(ctx, rc, "%s", ebb_errmsg());
    goto done;
  }
  size_t ncm = g.n_frames * (size_t)(g.tau_max + 1);
  if ((rc = stg_pitch_pad(mono, n, &g, &padded)) ||
      (rc = stg_pitch_preemphasis(padded, g.padded_len, s->p.preemphasis, &emph)))
    goto oom;
  cm = stg_st_malloc(ncm * sizeof *cm);
  frames = stg_st_malloc(g.n_frames * 3 * sizeof *frames);
  if (!cm || !frames)
    goto oom;
  const char *how = NULL;
  if ((rc = cmndf_any(ctx, s, emph, &g, cm, &how)) ||
      (rc = stg_st_stopped(ctx, "the difference function")) || (rc = halfway(ctx)))
    goto done;
  /* the salience of the same signal (on the separated vocals the repeating
   * accompaniment is already weaker than in the mix; pitch_salience.c),
   * mixed with that of separate's stricter "melody" pass */
  if ((s->p.method == EBB_PITCH_PYIN && s->p.salience_weight > 0.0 &&
       ((rc = melody_salience(s, mono, salsig, share, n, cm, &g, &sal)) ||
        (rc = mix_fill(ctx, s, in, used, mono, padded, n, rate, &g, sal, &gate_db)) ||
        (rc = salience_vibrato(s, sal, &g, rate)))) ||
      (rc = stg_pitch_track_salience(cm, padded, &g, &s->p, sal, gate_db, frames)) ||
      (rc = consonants(s, padded, emph, &g, frames)) ||
      (rc = stg_pitch_notes(frames, g.n_frames, &s->p, &notes, &n_notes)) ||
      (rc = stg_pitch_refine_notes(mono, n, rate, &s->p, frames, g.n_frames, &notes, &n_notes)) ||
      (rc = stg_pitch_notes_json(notes, n_notes, &notes_json))) {
    rc = stg_st_fail(ctx, rc, "%s", ebb_errmsg());
    goto done;
  }
  stg_pitch_track_to_notes(frames, g.n_frames, notes, n_notes);
  uint64_t shape[2] = {g.n_frames, 3};
  if ((rc = ctx->host->add_tensor(out, "f0", frames, 2, shape)) ||
      (rc = ctx->host->add_json(out, "notes", notes_json)))
    goto done;
  stg_st_log(ctx, 1, "%s: %zu frames (%zu voiced), %zu notes, d' by %s, %s", used, g.n_frames,
             voiced_frames(frames, g.n_frames), n_notes, how,
             s->p.method == EBB_PITCH_YIN ? "yin" : "pyin");
  goto done;
oom:
  rc = stg_st_fail(ctx, EBB_ENOMEM, "out of memory for the pitch analysis of %llu samples",
                   (unsigned long long)n);
done:
  stg_st_free(mono);
  stg_st_free(padded);
  stg_st_free(emph);
  stg_st_free(cm);
  stg_st_free(frames);
  stg_st_free(sal);
  stg_st_free(salsig);
  stg_st_free(gate_db);
  stg_st_free(notes);
  stg_st_free(notes_json);
  return rc;
}

/* Declared needs (issue 17): the device buffers of cmndf_device exactly (the
 * padded input and the difference function, each rounded to the
 * allocator's 512 bytes) for the job's "vocals" (else "audio") at the
 * analysis rate; host: the buffers alive at the stage's host peak (below),
 * within 10 % of the measured peak on 5 minutes of the demo song
 * (pipeline_estimate). No input: 0 bytes plus the
 * per-second figures. */
static uint64_t round512(uint64_t n) { return (n + 511) & ~(uint64_t)511; }

static int pitch_estimate(const ebb_host_api *host, const char *options_json, const ebb_items *in,
                          ebb_estimate *out) {
  json_t *o = NULL;
  stage_opts v;
  int rc = stage_opts_parse("pitch", options_json, &o, &v);
  json_decref(o);
  if (rc)
    return rc;
  stg_pitch_params p = stg_pitch_defaults();
  set_params(&v, &p);
  ebb_item_info it = {.size = sizeof it};
  uint64_t n = 0;
  uint32_t rate = v.rate ? (uint32_t)v.rate : 16000;
  if (in && (host->item_find(in, "vocals", &it) >= 0 || host->item_find(in, "audio", &it) >= 0) &&
      it.kind == EBB_ITEM_AUDIO && it.rate) {
    uint32_t r = v.rate ? (uint32_t)v.rate : it.rate;
    n = (uint64_t)((double)it.frames * r / it.rate);
    rate = r;
  }
  stg_pitch_geom g, g1;
  if (stg_pitch_geometry(&p, rate, n, &g) || stg_pitch_geometry(&p, rate, rate, &g1))
    return EBB_ECONFIG;
  uint64_t ncm = (uint64_t)g.n_frames * (uint64_t)(g.tau_max + 1) * sizeof(float);
  out->device_bytes = n ? round512(g.padded_len * sizeof(float)) + round512(ncm) : 0;
  /* Host, at the stage's peak: whole-signal copies (the analysed signal,
   * padded, pre-emphasised; with the salience the "melody" item, and with
   * salience_mix the mix and its padded copy), the difference function, the
   * track, and two salience-sized tables per frame (the analysed signal's
   * rows and the melody's or the mix's while they are mixed in; or the
   * rows and pYIN's back pointers, the same size at the same 10 cents).
   * salience_model's peaks (under 400 bytes a frame) live only beside the
   * melody's rows, less than the mix's two copies that follow them. */
  int pyin = p.method == EBB_PITCH_PYIN, sal = pyin && p.salience_weight > 0.0;
  uint64_t signals =
      3 + (sal && v.salience_melody > 0.0) + 2 * (uint64_t)(sal && v.salience_mix > 0.0);
  uint64_t per_frame_host =
      (uint64_t)(g.tau_max + 1) * sizeof(float) + 3 * sizeof(float) +
      (uint64_t)(sal ? 2 : pyin) * (uint64_t)stg_pitch_salience_bins(&p) * sizeof(float);
  out->host_bytes = n ? signals * g.padded_len * sizeof(float) + g.n_frames * per_frame_host : 0;
  double per_frame_dev = (double)(g1.tau_max + 1) * sizeof(float);
  out->device_bytes_per_s = (double)rate / p.hop * per_frame_dev + rate * sizeof(float);
  out->host_bytes_per_s =
      (double)signals * rate * sizeof(float) + (double)rate / p.hop * (double)per_frame_host;
  return 0;
}

/* Work (the stage ABI's `work`): input_s * rate / hop + 1 frames at the
 * analysis rate (the `rate` option; 0, the input's, counts as 16 kHz), each
 * costing PITCH_FRAME_S (pYIN: its candidates, the salience rows, the
 * Viterbi step; YIN almost nothing) plus PITCH_POINT_S per point of `frame`
 * (the difference function's window), and PITCH_INPUT_S per second of input
 * (onsets, notes, the re-attack model, the salience of the whole signal).
 * Measured with `ebb run --device cpu` on songgen's song (one core of the
 * 2-core development machine, wall "done in"): 60 s at the defaults (pYIN,
 * hop 160, frame 1024) 4.04 s, hop 320 2.46 s (so 0.53 ms a frame, 0.88 s
 * the rest: 0.015 s/s), frame 2048 4.70 s; 1 s at hop 1 (16001 frames):
 * frame 8192 19.3 s, frame 65536 about 55 s (67.6 s beside another run), so
 * 3.8e-8 s a point; YIN at the defaults 0.37 s. At hop 1 the frames cost
 * more than at 160 (1.2 ms at frame 8192 against the model's 0.84): the
 * model is low there by about a third, never high. */
#define PITCH_FRAME_S 0.53e-3
#define PITCH_POINT_S 3.8e-8
#define PITCH_INPUT_S 0.015
#define PITCH_INPUT_YIN_S 0.002
double stg_pitch_work_s(int pyin, int hop, int frame, uint32_t rate, double input_s) {
  double frames = input_s * (rate ? rate : 16000) / (hop > 0 ? hop : 1) + 1.0;
  return input_s * (pyin ? PITCH_INPUT_S : PITCH_INPUT_YIN_S) +
         frames * ((pyin ? PITCH_FRAME_S : 0.0) + PITCH_POINT_S * frame);
}

static int pitch_work(const ebb_host_api *host, const char *options_json, double input_s,
                      ebb_work *out) {
  (void)host;
  json_t *o = NULL;
  stage_opts v;
  int rc = stage_opts_parse("pitch", options_json, &o, &v);
  int pyin = !rc && strcmp(v.method, "yin") != 0; /* v.method points into o */
  json_decref(o);
  if (rc)
    return rc;
  stg_pitch_params p = stg_pitch_defaults();
  set_params(&v, &p);
  out->cpu_s = stg_pitch_work_s(pyin, p.hop, p.frame, (uint32_t)v.rate, input_s);
  if (v.rate > 0) /* its input comes at decode's working rate (16 kHz unless set) */
    out->cpu_s += stg_audio_resample_work_s(input_s, 16000, (uint32_t)v.rate);
  snprintf(out->drivers, sizeof out->drivers, "hop %d, frame %d", p.hop, p.frame);
  return 0;
}

/* Its host working buffers are the stage's (stg_st_malloc: host_alloc). */
static int pitch_run(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out) {
  stg_st_host_begin(ctx);
  stg_st_watch(ctx);
  int rc = pitch_run_counted(ctx, state, in, out);
  stg_st_unwatch();
  stg_st_host_end();
  return rc;
}

const ebb_stage stg_stage_pitch = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "pitch",
    /* keys the result cache: bump it whenever the outputs change (2: the
     * re-attack model, issue 16, and the onset and salience steps before it;
     * 3: onset_lead_ms, issue 44; 4: the re-attack model retrained on
     * sets no benchmark reports, issue 44 session 25, and the salience's
     * sharpening, contour character and voice model of sessions 23-24,
     * which changed the outputs under 3; 5: the voice model's candidates,
     * weight and retraining, session 25) */
    .version = 5,
    .description = "vocal f0 by pYIN/YIN (GPU difference function) and note segmentation",
    .options_schema = stage_opts_schema,
    .needs_gpu = 1,
    .load = pitch_load,
    .run = pitch_run,
    .unload = pitch_unload,
    .release = NULL,
    .estimate = pitch_estimate,
    .work = pitch_work,
};
