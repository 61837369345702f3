/* The `separate` stage: vocals vs accompaniment from a mono mixture.
 *
 * Method: REPET-SIM (Rafii & Pardo, ISMIR 2012) with Fitzgerald's (DAFx 2010)
 * median-filter harmonic mask and a vocal band, over an STFT (dsp_repet.h has
 * the details). Either everything runs on the CPU (FFTW, stft.h; mask in
 * dsp_repet.c), or the STFT, magnitudes, mask medians and arithmetic, mask
 * application and inverse STFT run as ebb's own kernels
 * (src/stages/kernels/separate.cu) launched through ctx->host (host twins on
 * the fake GPU) and only the similarity search (which frames repeat which)
 * runs on the host. The two paths agree to float rounding
 * (tests/unit/stages_separate_paths.c).
 *
 * The functions below are the algorithm without the stage around it, so tests
 * and bench/bench_separate.c call them directly. */
#ifndef EBB_STAGES_AUDIO_SEPARATE_H
#define EBB_STAGES_AUDIO_SEPARATE_H

#include <stdint.h>

#include "ebb/stage.h"
#include "stages/audio/dsp_repet.h"
#include "stages/audio/stft.h"

/* Options in natural units (the stage's option names in brackets). */
typedef struct stg_sep_options {
  int n_fft;             /* [n_fft] 1024 */
  int hop;               /* [hop] 256 */
  int repeats;           /* [repeats] k of REPET-SIM, 30 */
  double min_distance_s; /* [min_distance] between repeating frames, 1.0 s */
  double max_lag_s;      /* [max_lag] similarity search radius, 30 s */
  int pool;              /* [similarity_pool] bins per similarity band, 4 */
  double quantile;       /* [repeat_quantile] of the repeating frames, 0.4 (0.5: median) */
  int hpss;              /* [hpss] harmonic mask on, 1 */
  double hpss_time_s;    /* harmonic median length, 0.2 s */
  double hpss_freq_hz;   /* percussive median length, 500 Hz */
  double vocal_low_hz;   /* [vocal_low_hz] 80 */
  double vocal_high_hz;  /* [vocal_high_hz] 6000 */
  double outside_gain;   /* [outside_gain] 0.3 */
  /* Not an option: polled during the long host part; 1 stops the run with
   * EBB_ECANCELED. NULL (the default): never. */
  int (*cancelled)(void *arg);
  void *cancel_arg;
} stg_sep_options;

/* The defaults of the stage's option table (separate.c, beside the table)
 * and of the fields that are not options. */
void stg_sep_options_default(stg_sep_options *o);
/* The stage's work estimate (its `work` hook): CPU seconds on the reference
 * core for input_s seconds at 16 kHz with options o (separate.c). */
double stg_separate_work_s(const stg_sep_options *o, double input_s);

/* The STFT shape and mask parameters for a signal of nx samples at rate.
 * EBB_EINVAL naming the option when one is out of range. */
int stg_sep_plan(const stg_sep_options *o, uint32_t rate, long long nx, stg_stft_shape *shape,
                 stg_repet_params *rp);

/* CPU path (FFTW). x, voc, acc: nx samples each, caller-owned (acc may be
 * NULL: the accompaniment is not computed); mag (optional, may be NULL): receives the mixture's magnitude spectrogram
 * (shape.nframes * shape.nbins). */
int stg_separate_cpu(const stg_sep_options *o, uint32_t rate, const float *x, long long nx,
                     float *voc, float *acc, float *mag);
/* The same, sharing with another pass over the same signal whose options
 * differ only in the REPET picks (separate's "melody" pass) what sh holds:
 * the harmonic mask's factor (shape.nframes * shape.nbins floats) and the
 * other pass's picks, made from this pass's similarity rows (see
 * stg_repet_share in dsp_repet.h; every *_ready 0 the first time). NULL:
 * nothing shared. Outputs are bit for bit those of stg_separate_cpu. */
int stg_separate_cpu_shared(const stg_sep_options *o, uint32_t rate, const float *x, long long nx,
                            float *voc, float *acc, float *mag, stg_repet_share *sh);

/* GPU path: the same (acc may be NULL too) through ctx's device (ctx->host dev_alloc, copies,
 * launch). image: the kernel image (stg_kernels_image()), NULL to launch by
 * name. Every device buffer (signal, the whole song's complex spectrogram
 * twice, magnitudes, mask, output) is allocated through ctx, so the stage
 * instance owns it, and freed before return on every path. When the first
 * launch fails (a real GPU and no image built, or an image without code for
 * this GPU), returns EBB_EUNSUPPORTED so the caller can run the CPU path. */
int stg_separate_gpu(ebb_stage_ctx *ctx, const void *image, const stg_sep_options *o, uint32_t rate,
                     const float *x, long long nx, float *voc, float *acc, float *mag);
/* The same, sharing the repeating frames' picks with another pass through
 * sh (its picks and npicks; the harmonic factor is on the device and not
 * shared here), as stg_separate_cpu_shared. NULL: nothing shared. */
int stg_separate_gpu_shared(ebb_stage_ctx *ctx, const void *image, const stg_sep_options *o,
                            uint32_t rate, const float *x, long long nx, float *voc, float *acc,
                            float *mag, stg_repet_share *sh);

/* Bytes of device memory stg_separate_gpu takes for nx samples (0 when the
 * options are invalid). */
uint64_t stg_separate_gpu_bytes(const stg_sep_options *o, uint32_t rate, long long nx);

#endif
