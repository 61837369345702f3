// STFT, masking and inverse STFT kernels of the `separate` stage. The
// per-thread arithmetic lives in sep_kernels.h and is shared with the host
// twins in sep_twins.c (the fake GPU runs those); keep the phase structure of
// each kernel identical to its twin.
#include "sep_kernels.h"

// grid.x = frames, one block per frame.
// f0: the first frame of this launch (frames go in bounded launches).
extern "C" __global__ void ebb_stft_window(const float *x, long long nx, const float *win,
                                           float *frames, int n, int hop, int pad, int f0) {
  stg_k_window(threadIdx.x, blockDim.x, blockIdx.x + f0, x, nx, win, frames, n, hop, pad);
}

// In-place radix-2 complex FFT of n = 2^log2n points, one frame per block,
// n * 2 floats of dynamic shared memory.
extern "C" __global__ void ebb_fft_radix2(float *frames, const float *tw, int n, int log2n,
                                          float sign, float scale) {
  extern __shared__ float sh[];
  float *fr = frames + (long long)blockIdx.x * n * 2;
  stg_k_fft_load(threadIdx.x, blockDim.x, fr, sh, n, log2n);
  __syncthreads();
  for (int half = 1; half < n; half <<= 1) {
    stg_k_fft_stage(threadIdx.x, blockDim.x, sh, tw, n, half, sign);
    __syncthreads();
  }
  stg_k_fft_store(threadIdx.x, blockDim.x, fr, sh, n, scale);
}

// grid.x = frames.
extern "C" __global__ void ebb_stft_magnitude(const float *frames, float *mag, int n,
                                              int nbins) {
  stg_k_magnitude(threadIdx.x, blockDim.x, blockIdx.x, frames, mag, n, nbins);
}

// grid.x = frames.
extern "C" __global__ void ebb_sep_apply_mask(const float *mix, const float *mask, float *voc,
                                              float *acc, int n, int nbins) {
  stg_k_apply_mask(threadIdx.x, blockDim.x, blockIdx.x, mix, mask, voc, acc, n, nbins);
}

// grid.x = ceil(ny / blockDim.x), one thread per output sample.
extern "C" __global__ void ebb_istft_overlap_add(const float *frames, const float *win,
                                                 float *y, long long ny, int n, int hop,
                                                 int pad, int nframes) {
  long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  stg_k_overlap_add(s, frames, win, y, ny, n, hop, pad, nframes);
}

// grid.x = frames. The REPET-SIM quantile q of the host-chosen frames -> mask.
extern "C" __global__ void ebb_repet_mask(const float *mag, const int *picks, const int *npicks,
                                          int k, float *mask, int nbins, float q) {
  stg_k_repet_mask(threadIdx.x, blockDim.x, blockIdx.x, mag, picks, npicks, k, mask, nbins, q);
}

// grid.x = frames. Harmonic spectrogram (median along time).
// f0: the first frame of this launch (frames go in bounded launches).
extern "C" __global__ void ebb_hpss_harmonic(const float *mag, float *harm, int nframes,
                                             int nbins, int ht, int f0) {
  stg_k_hpss_harm(threadIdx.x, blockDim.x, blockIdx.x + f0, mag, harm, nframes, nbins, ht);
}

// grid.x = frames. Harmonic mask (median along frequency) and vocal band.
extern "C" __global__ void ebb_mask_finish(const float *mag, const float *harm, float *mask,
                                           int nbins, int hpss, int hf, int band_lo,
                                           int band_hi, float gain) {
  stg_k_mask_finish(threadIdx.x, blockDim.x, blockIdx.x, mag, harm, mask, nbins, hpss, hf,
                    band_lo, band_hi, gain);
}
