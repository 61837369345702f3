/* bench_separate: quality and speed of the `separate` stage's algorithm,
 * measured side by side in one run.
 *  - SDR improvement of the vocal estimate over the mixture (dB) on generated
 *    mixes (a vibrato "voice" over a repeating drum + chord loop, 0 dB; see
 *    tests/unit/stages_separate_mix.h), mean and min over seeds;
 *  - speed in seconds of audio per second of wall time for the CPU path
 *    (FFTW) and the GPU path (ebb's kernels; without a GPU the kernels run as
 *    their host twins through a host-memory shim, so this measures the twins,
 *    not a GPU), with the CPU path's mask and the similarity search (the only
 *    part of the GPU path left on the host) timed on their own.
 * Usage: bench_separate [seconds_per_mix] [mixes] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "stages/audio/separate.h"
#include "stages_separate_mix.h"
#include "stages_separate_shim.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 20.0;
  int mixes = argc > 2 ? atoi(argv[2]) : 4;
  if (seconds < 3 || mixes < 1) {
    fprintf(stderr, "usage: bench_separate [seconds_per_mix >= 3] [mixes >= 1]\n");
    return 2;
  }
  stg_sep_options o;
  stg_sep_options_default(&o);
  double sum_cpu = 0, min_cpu = 1e9, sum_gpu = 0, min_gpu = 1e9;
  double t_cpu = 0, t_gpu = 0, t_mask = 0, t_sim = 0, audio = 0, max_diff = 0;
  uint64_t dev_peak = 0;
  printf("separate: REPET-SIM + HPSS, n_fft %d, hop %d, k %d, %d mixes of %.0f s at 16 kHz\n",
         o.n_fft, o.hop, o.repeats, mixes, seconds);
  for (int s = 1; s <= mixes; s++) {
    sep_mix m;
    if (sep_mix_make(&m, (uint64_t)s, 16000, seconds) < 0)
      return 1;
    float *v = malloc(sizeof(float) * m.n), *a = malloc(sizeof(float) * m.n);
    float *vg = malloc(sizeof(float) * m.n), *ag = malloc(sizeof(float) * m.n);
    stg_stft_shape shape;
    stg_repet_params rp;
    if (!v || !a || !vg || !ag || stg_sep_plan(&o, m.rate, m.n, &shape, &rp) < 0)
      return 1;
    float *mag = malloc(sizeof(float) * (size_t)shape.nframes * shape.nbins);
    float *mask = malloc(sizeof(float) * (size_t)shape.nframes * shape.nbins);
    double t0 = now();
    if (stg_separate_cpu(&o, m.rate, m.mix, m.n, v, a, mag) < 0) {
      fprintf(stderr, "CPU path: %s\n", ebb_errmsg());
      return 1;
    }
    double t1 = now();
    shim_ctx sh;
    shim_init(&sh, EBB_DEV_KIND_CUDA);
    if (stg_separate_gpu(&sh.base, NULL, &o, m.rate, m.mix, m.n, vg, ag, NULL) < 0) {
      fprintf(stderr, "GPU path: %s\n", ebb_errmsg());
      return 1;
    }
    double t2 = now();
    stg_repet_vocal_mask(mag, shape.nframes, shape.nbins, &rp, mask);
    double t3 = now();
    int *picks = malloc(sizeof(int) * (size_t)shape.nframes * rp.k);
    int *npicks = malloc(sizeof(int) * (size_t)shape.nframes);
    if (!picks || !npicks)
      return 1;
    stg_repet_picks(mag, shape.nframes, shape.nbins, &rp, picks, npicks);
    double t4 = now();
    free(picks), free(npicks);
    t_cpu += t1 - t0;
    t_gpu += t2 - t1;
    t_mask += t3 - t2;
    t_sim += t4 - t3;
    audio += seconds;
    if (sh.peak_bytes > dev_peak)
      dev_peak = sh.peak_bytes;
    double base = sep_sdr(m.voice, m.mix, m.n);
    double gc = sep_sdr(m.voice, v, m.n) - base, gg = sep_sdr(m.voice, vg, m.n) - base;
    for (long long i = 0; i < m.n; i++)
      if (fabs((double)v[i] - vg[i]) > max_diff)
        max_diff = fabs((double)v[i] - vg[i]);
    printf("  mix %d: vocal SDR %+.2f dB (mixture %.2f dB) -> improvement CPU %.2f dB, GPU %.2f dB\n",
           s, sep_sdr(m.voice, v, m.n), base, gc, gg);
    sum_cpu += gc;
    sum_gpu += gg;
    if (gc < min_cpu)
      min_cpu = gc;
    if (gg < min_gpu)
      min_gpu = gg;
    free(mask), free(mag), free(v), free(a), free(vg), free(ag);
    sep_mix_free(&m);
  }
  printf("SDR improvement (vocals vs mixture): CPU mean %.2f dB min %.2f dB | GPU mean %.2f dB min %.2f dB\n",
         sum_cpu / mixes, min_cpu, sum_gpu / mixes, min_gpu);
  printf("largest sample difference CPU vs GPU path: %.3g\n", max_diff);
  printf("speed (s of audio per s):  CPU/FFTW %.1fx   GPU path (kernel host twins) %.1fx   "
         "ratio GPU/CPU %.2f\n",
         audio / t_cpu, audio / t_gpu, t_cpu / t_gpu);
  printf("CPU path's mask (similarity, medians, HPSS) alone: %.1fx (%.0f%% of the CPU path)\n",
         audio / t_mask, 100.0 * t_mask / t_cpu);
  printf("similarity search alone (the GPU path's host part): %.1fx (%.0f%% of the CPU path, "
         "%.0f%% of the GPU path)\n",
         audio / t_sim, 100.0 * t_sim / t_cpu, 100.0 * t_sim / t_gpu);
  printf("GPU path device memory for %.0f s: %.1f MiB (%.2f MiB per second of audio)\n", seconds,
         dev_peak / 1048576.0, dev_peak / 1048576.0 / seconds);
  return 0;
}
