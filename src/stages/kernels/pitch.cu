// YIN's difference function and cumulative mean normalised difference
// (de Cheveigne & Kawahara 2002, steps 2-3), one analysis frame per block.
// Thread t computes d(tau) for tau = t+1, t+1+blockDim.x, ...; thread 0 then
// normalises the row sequentially. The arithmetic is written with explicit
// round-to-nearest intrinsics (no fused multiply-add) so that the host twin
// in pitch_twin.c, plain float C, gives bit-identical results.
//
// Parameters: x (padded mono signal), out (n_frames x (tau_max+1) floats),
// n_frames, hop, w (integration window), tau_max.
extern "C" __global__ void pitch_cmndf(const float *x, float *out, int n_frames, int hop, int w,
                                       int tau_max) {
  int f = blockIdx.x;
  if (f >= n_frames)
    return;
  const float *fr = x + (size_t)f * (size_t)hop;
  float *o = out + (size_t)f * (size_t)(tau_max + 1);
  for (int tau = (int)threadIdx.x + 1; tau <= tau_max; tau += (int)blockDim.x) {
    float s = 0.0f;
    for (int j = 0; j < w; j++) {
      float d = __fsub_rn(fr[j], fr[j + tau]);
      s = __fadd_rn(s, __fmul_rn(d, d));
    }
    o[tau] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    o[0] = 1.0f;
    float run = 0.0f;
    for (int tau = 1; tau <= tau_max; tau++) {
      run = __fadd_rn(run, o[tau]);
      o[tau] = run > 0.0f ? __fdiv_rn(__fmul_rn(o[tau], (float)tau), run) : 1.0f;
    }
  }
}
