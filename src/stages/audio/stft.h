/* Short-time Fourier transform on the CPU (FFTW, single precision), the
 * reference the GPU kernels are checked against. Conventions shared with the
 * kernels (sep_kernels.h): periodic Hann window of n points, hop h, frames
 * centred (the signal is padded with n/2 zeros on both sides, frame f starts
 * at sample f*h - n/2), nframes = 1 + (nx + 2*(n/2) - n) / h rounded up so the
 * last sample is covered; the spectrum is kept for bins 0..n/2 (nbins),
 * frame-major; the inverse is the least-squares overlap-add (Griffin & Lim
 * 1984): sum of windowed frames over the sum of squared windows. */
#ifndef EBB_STAGES_AUDIO_STFT_H
#define EBB_STAGES_AUDIO_STFT_H

#include <stdint.h>

typedef struct stg_stft_shape {
  int n; /* FFT size, a power of two (64 .. 4096: the FFT kernel keeps a frame in shared memory) */
  int hop; /* 1 .. n */
  int log2n;
  int nbins; /* n/2 + 1 */
  int pad;   /* n/2 */
  int nframes;
  long long nx; /* signal length in samples */
} stg_stft_shape;

/* Fills *s for a signal of nx samples. EBB_EINVAL (message names the value)
 * when n is not a power of two in range, hop is out of range, or the frame
 * count would not fit an int. */
int stg_stft_shape_init(stg_stft_shape *s, int n, int hop, long long nx);

/* The periodic Hann window, n floats (computed in double). */
void stg_stft_hann(int n, float *win);
/* Forward twiddles for the radix-2 kernel: tw[2m], tw[2m+1] = cos, -sin of
 * 2*pi*m/n for m < n/2 (n floats). */
void stg_stft_twiddles(int n, float *tw);

/* Forward STFT of x (s->nx samples): spec (complex, interleaved re/im,
 * nframes * nbins * 2 floats) and/or mag (nframes * nbins floats); either may
 * be NULL. Caller owns all buffers. */
int stg_stft_forward_cpu(const stg_stft_shape *s, const float *x, float *spec, float *mag);

/* FFTW's planner is not thread-safe: whoever plans or destroys a plan holds
 * this lock (1: take it, 0: give it back). */
void stg_fftw_plan_lock(int lock);

/* Inverse STFT of spec (nframes * nbins complex) into y (s->nx samples). */
int stg_stft_inverse_cpu(const stg_stft_shape *s, const float *spec, float *y);

#endif
