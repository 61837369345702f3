/* The `pitch` stage (pitch.h): reads AUDIO "vocals" (else "audio"), adds
 * TENSOR "f0" [frames, 3] (time s, f0 Hz or 0, voicing probability) and JSON
 * "notes". On a CUDA device the d'(tau) rows are computed by the pitch_cmndf
 * kernel in device memory owned by this stage (ebb_dev_alloc), freed before
 * run returns; elsewhere on the CPU (backend "cpu") or by the kernel's host
 * twin (backend "kernel"). */
#include "stages/audio/pitch.h"

#include <stdlib.h>
#include <string.h>

#include "stages/audio/st_util.h"
#include "stages/audio/wav_encode.h"
#include "stages/kernels/kernels.h"

typedef enum { BK_AUTO, BK_CPU, BK_KERNEL } pitch_backend_opt;

typedef struct pitch_state {
  ebb_pitch_params p;
  int rate; /* analysis rate; 0: the input's */
  pitch_backend_opt backend;
} pitch_state;

static const char pitch_schema[] =
    "{"
    "\"fmin\":{\"type\":\"number\",\"default\":65,\"description\":\"lowest f0 searched, Hz\"},"
    "\"fmax\":{\"type\":\"number\",\"default\":1000,\"description\":\"highest f0 searched, Hz\"},"
    "\"rate\":{\"type\":\"integer\",\"default\":16000,\"description\":\"analysis sample rate: "
    "other input rates are resampled to it (hop and frame are samples at this rate); 0: analyse at "
    "the input's rate\"},"
    "\"hop\":{\"type\":\"integer\",\"default\":160,\"description\":\"samples between frames "
    "(10 ms at 16 kHz)\"},"
    "\"frame\":{\"type\":\"integer\",\"default\":1024,\"description\":\"analysis frame, samples; "
    "the YIN integration window is half of it\"},"
    "\"threshold\":{\"type\":\"number\",\"default\":0.1,\"description\":\"yin: absolute threshold "
    "on d'; pyin: mean of the Beta(2, b) threshold prior\"},"
    "\"method\":{\"type\":\"string\",\"default\":\"pyin\",\"description\":\"pyin (HMM-smoothed, "
    "Mauch & Dixon 2014) or yin (de Cheveigne & Kawahara 2002)\"},"
    "\"preemphasis\":{\"type\":\"number\",\"default\":0.97,\"description\":\"d' is computed "
    "on x[n] - a x[n-1], which favours the voice over bass and drums in a mix; 0: off\"},"
    "\"silence_db\":{\"type\":\"number\",\"default\":-60,\"description\":\"frames below this RMS "
    "level (dBFS) are unvoiced\"},"
    "\"gate_voicing\":{\"type\":\"number\",\"default\":0.1,\"description\":\"pyin: a "
    "note-length voiced run whose mean voicing probability is below this becomes unvoiced "
    "(separation residue in rests); 0: off\"},"
    "\"gate_range_db\":{\"type\":\"number\",\"default\":20,\"description\":\"pyin: a "
    "note-length voiced run whose mean level is more than this many dB below the track's loud "
    "level (95th percentile) becomes unvoiced; 0: off\"},"
    "\"min_note_ms\":{\"type\":\"number\",\"default\":60,\"description\":\"shortest note kept\"},"
    "\"split_semitones\":{\"type\":\"number\",\"default\":0.7,\"description\":\"a pitch jump this "
    "large, held for split_ms, starts a new note\"},"
    "\"split_ms\":{\"type\":\"number\",\"default\":30,\"description\":\"see split_semitones\"},"
    "\"backend\":{\"type\":\"string\",\"default\":\"auto\",\"description\":\"auto (the GPU kernel "
    "on a CUDA device, else CPU), cpu, or kernel (the kernel; its host twin on the CPU device)\"},"
    /* note onsets (pitch_onsets.c), kept apart from the table above */
    "\"onset_threshold\":{\"type\":\"number\",\"default\":0.4,\"description\":\"a note is "
    "split at a re-attack: an onset (spectral flux, 1 = its 90th percentile) this strong where "
    "the level rises again after a dip; 0: off\"},"
    "\"onset_dip_db\":{\"type\":\"number\",\"default\":8,\"description\":\"see "
    "onset_threshold: how deep the dip before a re-attack is\"},"
    "\"onset_lookback_ms\":{\"type\":\"number\",\"default\":80,\"description\":\"after a "
    "pitch change the note starts at the strongest onset up to this long before the pitch "
    "turns\"},"
    "\"salience\":{\"type\":\"number\",\"default\":0.85,\"description\":\"pyin: share of "
    "the observation taken from the harmonic-summation melody salience of the analysed signal, "
    "which follows a melody that pYIN loses under the band; 0: off\"}"
    "}";

static int pitch_load(ebb_stage_ctx *ctx, const char *options_json, void **state) {
  json_t *o = NULL;
  int rc = ebb_st_options(ctx, options_json, &o);
  if (rc)
    return rc;
  pitch_state *s = calloc(1, sizeof *s);
  const char *method = NULL, *backend = NULL;
  double min_ms = 60, split_ms = 30;
  if (!s) {
    rc = ebb_st_fail(ctx, EBB_ENOMEM, "out of memory");
    goto done;
  }
  s->p = ebb_pitch_defaults();
  if ((rc = ebb_st_opt_number(ctx, o, "fmin", 65, 20, 4000, &s->p.fmin)) ||
      (rc = ebb_st_opt_number(ctx, o, "fmax", 1000, 40, 20000, &s->p.fmax)) ||
      (rc = ebb_st_opt_int(ctx, o, "rate", 16000, 0, 384000, &s->rate)) ||
      (rc = ebb_st_opt_int(ctx, o, "hop", 160, 1, 65536, &s->p.hop)) ||
      (rc = ebb_st_opt_int(ctx, o, "frame", 1024, 64, 65536, &s->p.frame)) ||
      (rc = ebb_st_opt_number(ctx, o, "threshold", 0.1, 0.01, 0.99, &s->p.threshold)) ||
      (rc = ebb_st_opt_number(ctx, o, "silence_db", -60, -200, 0, &s->p.silence_db)) ||
      (rc = ebb_st_opt_number(ctx, o, "preemphasis", 0.97, 0, 0.999, &s->p.preemphasis)) ||
      (rc = ebb_st_opt_number(ctx, o, "gate_voicing", 0.1, 0, 1, &s->p.gate_voicing)) ||
      (rc = ebb_st_opt_number(ctx, o, "gate_range_db", 20, 0, 200, &s->p.gate_range_db)) ||
      (rc = ebb_st_opt_number(ctx, o, "min_note_ms", 60, 0, 10000, &min_ms)) ||
      (rc = ebb_st_opt_number(ctx, o, "split_semitones", 0.7, 0.05, 48, &s->p.split_semitones)) ||
      (rc = ebb_st_opt_number(ctx, o, "split_ms", 30, 0, 10000, &split_ms)) ||
      (rc = ebb_st_opt_string(ctx, o, "method", "pyin", &method)) ||
      (rc = ebb_st_opt_string(ctx, o, "backend", "auto", &backend)))
    goto done;
  double look_ms = 80;
  if ((rc = ebb_st_opt_number(ctx, o, "onset_threshold", s->p.onset_threshold, 0, 100,
                              &s->p.onset_threshold)) ||
      (rc = ebb_st_opt_number(ctx, o, "onset_dip_db", s->p.onset_dip_db, 0, 100,
                              &s->p.onset_dip_db)) ||
      (rc = ebb_st_opt_number(ctx, o, "onset_lookback_ms", 80, 0, 1000, &look_ms)) ||
      (rc = ebb_st_opt_number(ctx, o, "salience", s->p.salience_weight, 0, 1,
                              &s->p.salience_weight)))
    goto done;
  s->p.onset_lookback_s = look_ms / 1000.0;
  s->p.min_note_s = min_ms / 1000.0;
  s->p.split_s = split_ms / 1000.0;
  if (!strcmp(method, "pyin"))
    s->p.method = EBB_PITCH_PYIN;
  else if (!strcmp(method, "yin"))
    s->p.method = EBB_PITCH_YIN;
  else {
    rc = ebb_st_fail(ctx, EBB_ECONFIG, "option method: \"%s\" is not pyin or yin", method);
    goto done;
  }
  if (!strcmp(backend, "auto"))
    s->backend = BK_AUTO;
  else if (!strcmp(backend, "cpu"))
    s->backend = BK_CPU;
  else if (!strcmp(backend, "kernel"))
    s->backend = BK_KERNEL;
  else {
    rc = ebb_st_fail(ctx, EBB_ECONFIG, "option backend: \"%s\" is not auto, cpu or kernel",
                     backend);
    goto done;
  }
  if (s->rate != 0 && s->rate < 1000) {
    rc = ebb_st_fail(ctx, EBB_ECONFIG, "option rate: %d Hz is too low (0 or >= 1000)", s->rate);
    goto done;
  }
  if (s->p.fmin >= s->p.fmax) {
    rc = ebb_st_fail(ctx, EBB_ECONFIG, "options fmin %g and fmax %g: fmin must be below fmax",
                     s->p.fmin, s->p.fmax);
    goto done;
  }
  *state = s;
  s = NULL;
done:
  free(s);
  json_decref(o);
  return rc;
}

static void pitch_unload(ebb_stage_ctx *ctx, void *state) {
  (void)ctx;
  free(state);
}

/* d' on the device: x and out in stage-owned device memory, one block per
 * frame. Returns 0, or an error after which the caller may fall back. */
static int cmndf_device(ebb_stage_ctx *ctx, const float *padded, const ebb_pitch_geom *g,
                        float *out) {
  uint64_t dx = 0, dout = 0;
  size_t nx = g->padded_len * sizeof(float);
  size_t nout = g->n_frames * (size_t)(g->tau_max + 1) * sizeof(float);
  int rc;
  if ((rc = ebb_dev_alloc(ctx, nx, &dx)) || (rc = ebb_dev_alloc(ctx, nout, &dout)))
    goto done;
  if ((rc = ctx->host->copy_htod(ctx, dx, padded, nx)))
    goto done;
  int nf = (int)g->n_frames, hop = g->hop, w = g->w, tm = g->tau_max;
  void *params[] = {&dx, &dout, &nf, &hop, &w, &tm};
  const unsigned grid[3] = {(unsigned)nf, 1, 1}, block[3] = {EBB_PITCH_BLOCK, 1, 1};
  if ((rc = ctx->host->launch(ctx, ebb_kernels_image(), EBB_PITCH_KERNEL, grid, block, 0, params)))
    goto done;
  rc = ctx->host->copy_dtoh(ctx, out, dout, nout);
done:
  if (dout)
    ebb_dev_free(ctx, dout);
  if (dx)
    ebb_dev_free(ctx, dx);
  return rc;
}

/* Splits re-attacks and moves late onsets (pitch_onsets.c). */
static int refine_notes(const float *mono, uint64_t n, uint32_t rate, const ebb_pitch_params *p,
                        const float *frames, size_t nf, ebb_pitch_note **notes, size_t *n_notes) {
  if (!(p->onset_threshold > 0.0) || *n_notes == 0)
    return 0;
  float *odf = malloc(nf * sizeof *odf), *db = malloc(nf * sizeof *db);
  int rc = odf && db ? 0 : ebb_seterr(EBB_ENOMEM, "pitch: out of memory for %zu onset frames", nf);
  if (!rc)
    rc = ebb_pitch_onset_strength(mono, n, rate, p->hop, nf, odf, db);
  if (!rc)
    rc = ebb_pitch_notes_onsets(frames, nf, odf, db, p, notes, n_notes);
  free(odf);
  free(db);
  return rc;
}

/* *mono resampled in place to the option rate (0: left as it is). */
static int to_analysis_rate(ebb_stage_ctx *ctx, const pitch_state *s, const char *used,
                            float **mono, uint64_t *n, uint32_t *rate) {
  if (!s->rate || (uint32_t)s->rate == *rate)
    return 0;
  float *res = NULL;
  uint64_t nres = 0;
  int rc = ebb_pcm_to_mono_rate(*mono, *n, 1, *rate, (uint32_t)s->rate, &res, &nres);
  if (rc)
    return ebb_st_fail(ctx, rc, "resampling \"%s\" from %u to %d Hz: %s", used, *rate, s->rate,
                       ebb_errmsg());
  free(*mono);
  *mono = res;
  *n = nres;
  *rate = (uint32_t)s->rate;
  return 0;
}

/* d' by the chosen backend into cm; *how names it for the log. A kernel
 * that fails for any reason but memory or cancellation falls back to the CPU. */
static int cmndf_any(ebb_stage_ctx *ctx, const pitch_state *s, const float *emph,
                     const ebb_pitch_geom *g, float *cm, const char **how) {
  int on_gpu = ebb_device_kind(ctx) == EBB_DEV_KIND_CUDA;
  if (s->backend != BK_CPU && on_gpu) {
    int rc = cmndf_device(ctx, emph, g, cm);
    if (rc == 0) {
      *how = "gpu kernel";
      return 0;
    }
    if (rc == EBB_EOOM || rc == EBB_ECANCELED)
      return rc;
    ebb_st_log(ctx, 2, "pitch kernel failed (%s); computing on the CPU", ebb_strerror(rc));
  }
  if (s->backend == BK_KERNEL && !on_gpu) {
    ebb_pitch_cmndf_twin(emph, g, cm);
    *how = "kernel host twin";
  } else {
    ebb_pitch_cmndf_cpu(emph, g, cm);
    *how = "cpu";
  }
  return 0;
}

static int pitch_run(ebb_stage_ctx *ctx, void *state, const ebb_items *in, ebb_items *out) {
  pitch_state *s = state;
  static const char *const names[] = {"vocals", "audio", NULL};
  float *mono = NULL, *padded = NULL, *emph = NULL, *cm = NULL, *frames = NULL, *sal = NULL;
  ebb_pitch_note *notes = NULL;
  char *notes_json = NULL;
  size_t n_notes = 0;
  uint64_t n = 0;
  uint32_t rate = 0;
  const char *used = NULL;
  int rc = ebb_st_find_mono(ctx, in, names, &mono, &n, &rate, &used);
  if (rc == EBB_ENOTFOUND)
    return ebb_st_fail(ctx, EBB_EINPUT, "no AUDIO item \"vocals\" or \"audio\" in the job");
  if (rc)
    return rc;
  if ((rc = to_analysis_rate(ctx, s, used, &mono, &n, &rate)))
    goto done;
  ebb_pitch_geom g;
  if ((rc = ebb_pitch_geometry(&s->p, rate, n, &g))) {
    rc = ebb_st_fail(ctx, rc, "%s", ebb_errmsg());
    goto done;
  }
  size_t ncm = g.n_frames * (size_t)(g.tau_max + 1);
  if ((rc = ebb_pitch_pad(mono, n, &g, &padded)) ||
      (rc = ebb_pitch_preemphasis(padded, g.padded_len, s->p.preemphasis, &emph)))
    goto oom;
  cm = malloc(ncm * sizeof *cm);
  frames = malloc(g.n_frames * 3 * sizeof *frames);
  if (!cm || !frames)
    goto oom;
  const char *how = NULL;
  if ((rc = cmndf_any(ctx, s, emph, &g, cm, &how)))
    goto done;
  if (ctx->host->progress)
    ctx->host->progress(ctx, 0.6);
  if (ebb_cancelled(ctx)) {
    rc = ebb_st_fail(ctx, EBB_ECANCELED, "cancelled");
    goto done;
  }
  /* the salience of the same signal: on the separated vocals the repeating
   * accompaniment is already weaker than in the mix (pitch_salience.c) */
  if ((s->p.method == EBB_PITCH_PYIN && s->p.salience_weight > 0.0 &&
       (rc = ebb_pitch_salience(mono, n, rate, &s->p, g.n_frames, &sal))) ||
      (rc = ebb_pitch_track_salience(cm, padded, &g, &s->p, sal, frames)) ||
      (rc = ebb_pitch_notes(frames, g.n_frames, &s->p, &notes, &n_notes)) ||
      (rc = refine_notes(mono, n, rate, &s->p, frames, g.n_frames, &notes, &n_notes)) ||
      (rc = ebb_pitch_notes_json(notes, n_notes, &notes_json))) {
    rc = ebb_st_fail(ctx, rc, "%s", ebb_errmsg());
    goto done;
  }
  size_t voiced = 0;
  for (size_t f = 0; f < g.n_frames; f++)
    voiced += frames[3 * f + 1] > 0.0f;
  uint64_t shape[2] = {g.n_frames, 3};
  if ((rc = ctx->host->add_tensor(out, "f0", frames, 2, shape)) ||
      (rc = ctx->host->add_json(out, "notes", notes_json)))
    goto done;
  ebb_st_log(ctx, 1, "%s: %zu frames (%zu voiced), %zu notes, d' by %s, %s", used, g.n_frames,
             voiced, n_notes, how, s->p.method == EBB_PITCH_YIN ? "yin" : "pyin");
  goto done;
oom:
  rc = ebb_st_fail(ctx, EBB_ENOMEM, "out of memory for the pitch analysis of %llu samples",
                   (unsigned long long)n);
done:
  free(mono);
  free(padded);
  free(emph);
  free(cm);
  free(frames);
  free(sal);
  free(notes);
  free(notes_json);
  return rc;
}

const ebb_stage ebb_stage_pitch = {
    .abi_version = EBB_STAGE_ABI_VERSION,
    .size = sizeof(ebb_stage),
    .name = "pitch",
    .version = 1,
    .description = "vocal f0 by pYIN/YIN (GPU difference function) and note segmentation",
    .options_schema = pitch_schema,
    .needs_gpu = 1,
    .load = pitch_load,
    .run = pitch_run,
    .unload = pitch_unload,
    .release = NULL,
};
