/* Host twin of pitch_cmndf (pitch.cu). Each CUDA thread's work is done in the
 * same order with the same float operations (x86-64 SSE float, no FMA
 * contraction under -std=c17), so results match the GPU bit for bit. The
 * barrier between the two phases is the loop boundary over threads. */
#include "stages/kernels/pitch_twin.h"

#include <stddef.h>

void fakegpu_twin_pitch_cmndf(const dev_launch_dims *dims, void **params) {
  const float *x = *(const float **)params[0];
  float *out = *(float **)params[1];
  int n_frames = *(int *)params[2], hop = *(int *)params[3], w = *(int *)params[4];
  int tau_max = *(int *)params[5];
  unsigned nthreads = dims->block[0];
  for (unsigned b = 0; b < dims->grid[0]; b++) {
    int f = (int)b;
    if (f >= n_frames)
      continue;
    const float *fr = x + (size_t)f * (size_t)hop;
    float *o = out + (size_t)f * (size_t)(tau_max + 1);
    for (unsigned t = 0; t < nthreads; t++) {
      for (int tau = (int)t + 1; tau <= tau_max; tau += (int)nthreads) {
        float s = 0.0f;
        for (int j = 0; j < w; j++) {
          float d = fr[j] - fr[j + tau];
          float sq = d * d;
          s = s + sq;
        }
        o[tau] = s;
      }
    }
    /* __syncthreads(); thread 0: */
    o[0] = 1.0f;
    float run = 0.0f;
    for (int tau = 1; tau <= tau_max; tau++) {
      run = run + o[tau];
      float num = o[tau] * (float)tau;
      o[tau] = run > 0.0f ? num / run : 1.0f;
    }
  }
}
