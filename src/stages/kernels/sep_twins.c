/* Host twins of the kernels in separate.cu. On the fake GPU
 * cuModuleGetFunction("X") resolves `fakegpu_twin_X` in the process and
 * cuLaunchKernel calls it once per launch; the twin walks the grid and the
 * block's threads itself, phase by phase, calling the same per-thread
 * functions (sep_kernels.h) as the kernel. Device pointers on the fake are
 * host addresses. The table at the end keeps this object (and so the
 * exported twins) in every program that links the separate stage. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device/kernel_twin.h"
#include "stages/kernels/kernels.h"
#include "stages/kernels/sep_kernels.h"

#define TW_PTR(p) ((float *)(uintptr_t)(*(const uint64_t *)(p)))
#define TW_I32(p) (*(const int *)(p))
#define TW_I64(p) (*(const long long *)(p))
#define TW_F32(p) (*(const float *)(p))

/* Twins are exported (test executables and ebb export their symbols) and
 * called only through dlsym, so they have no prototype elsewhere. */
void fakegpu_twin_ebb_stft_window(const dev_launch_dims *d, void **p);
void fakegpu_twin_ebb_fft_radix2(const dev_launch_dims *d, void **p);
void fakegpu_twin_ebb_stft_magnitude(const dev_launch_dims *d, void **p);
void fakegpu_twin_ebb_sep_apply_mask(const dev_launch_dims *d, void **p);
void fakegpu_twin_ebb_istft_overlap_add(const dev_launch_dims *d, void **p);
void fakegpu_twin_ebb_repet_mask(const dev_launch_dims *d, void **p);
void fakegpu_twin_ebb_hpss_harmonic(const dev_launch_dims *d, void **p);
void fakegpu_twin_ebb_mask_finish(const dev_launch_dims *d, void **p);

void fakegpu_twin_ebb_stft_window(const dev_launch_dims *d, void **p) {
  const float *x = TW_PTR(p[0]);
  long long nx = TW_I64(p[1]);
  const float *win = TW_PTR(p[2]);
  float *frames = TW_PTR(p[3]);
  int n = TW_I32(p[4]), hop = TW_I32(p[5]), pad = TW_I32(p[6]), f0 = TW_I32(p[7]);
  int bs = (int)d->block[0];
  for (unsigned b = 0; b < d->grid[0]; b++)
    for (int t = 0; t < bs; t++)
      stg_k_window(t, bs, (int)b + f0, x, nx, win, frames, n, hop, pad);
}

void fakegpu_twin_ebb_fft_radix2(const dev_launch_dims *d, void **p) {
  float *frames = TW_PTR(p[0]);
  const float *tw = TW_PTR(p[1]);
  int n = TW_I32(p[2]), log2n = TW_I32(p[3]);
  float sign = TW_F32(p[4]), scale = TW_F32(p[5]);
  int bs = (int)d->block[0];
  float *sh = malloc(d->shared_bytes ? d->shared_bytes : 1);
  if (!sh)
    abort(); /* a kernel cannot report errors; the fake has no other way out */
  for (unsigned b = 0; b < d->grid[0]; b++) {
    float *fr = frames + (long long)b * n * 2;
    for (int t = 0; t < bs; t++)
      stg_k_fft_load(t, bs, fr, sh, n, log2n);
    for (int half = 1; half < n; half <<= 1)
      for (int t = 0; t < bs; t++)
        stg_k_fft_stage(t, bs, sh, tw, n, half, sign);
    for (int t = 0; t < bs; t++)
      stg_k_fft_store(t, bs, fr, sh, n, scale);
  }
  free(sh);
}

void fakegpu_twin_ebb_stft_magnitude(const dev_launch_dims *d, void **p) {
  const float *frames = TW_PTR(p[0]);
  float *mag = TW_PTR(p[1]);
  int n = TW_I32(p[2]), nbins = TW_I32(p[3]);
  int bs = (int)d->block[0];
  for (unsigned b = 0; b < d->grid[0]; b++)
    for (int t = 0; t < bs; t++)
      stg_k_magnitude(t, bs, (int)b, frames, mag, n, nbins);
}

void fakegpu_twin_ebb_sep_apply_mask(const dev_launch_dims *d, void **p) {
  const float *mix = TW_PTR(p[0]);
  const float *mask = TW_PTR(p[1]);
  float *voc = TW_PTR(p[2]), *acc = TW_PTR(p[3]);
  int n = TW_I32(p[4]), nbins = TW_I32(p[5]);
  int bs = (int)d->block[0];
  for (unsigned b = 0; b < d->grid[0]; b++)
    for (int t = 0; t < bs; t++)
      stg_k_apply_mask(t, bs, (int)b, mix, mask, voc, acc, n, nbins);
}

void fakegpu_twin_ebb_istft_overlap_add(const dev_launch_dims *d, void **p) {
  const float *frames = TW_PTR(p[0]);
  const float *win = TW_PTR(p[1]);
  float *y = TW_PTR(p[2]);
  long long ny = TW_I64(p[3]);
  int n = TW_I32(p[4]), hop = TW_I32(p[5]), pad = TW_I32(p[6]), nframes = TW_I32(p[7]);
  int bs = (int)d->block[0];
  for (unsigned b = 0; b < d->grid[0]; b++)
    for (int t = 0; t < bs; t++)
      stg_k_overlap_add((long long)b * bs + t, frames, win, y, ny, n, hop, pad, nframes);
}

void fakegpu_twin_ebb_repet_mask(const dev_launch_dims *d, void **p) {
  const float *mag = TW_PTR(p[0]);
  const int *picks = (const int *)TW_PTR(p[1]);
  const int *npicks = (const int *)TW_PTR(p[2]);
  int k = TW_I32(p[3]);
  float *mask = TW_PTR(p[4]);
  int nbins = TW_I32(p[5]);
  float q = TW_F32(p[6]);
  int bs = (int)d->block[0];
  for (unsigned b = 0; b < d->grid[0]; b++)
    for (int t = 0; t < bs; t++)
      stg_k_repet_mask(t, bs, (int)b, mag, picks, npicks, k, mask, nbins, q);
}

void fakegpu_twin_ebb_hpss_harmonic(const dev_launch_dims *d, void **p) {
  const float *mag = TW_PTR(p[0]);
  float *harm = TW_PTR(p[1]);
  int nframes = TW_I32(p[2]), nbins = TW_I32(p[3]), ht = TW_I32(p[4]), f0 = TW_I32(p[5]);
  int bs = (int)d->block[0];
  for (unsigned b = 0; b < d->grid[0]; b++)
    for (int t = 0; t < bs; t++)
      stg_k_hpss_harm(t, bs, (int)b + f0, mag, harm, nframes, nbins, ht);
}

void fakegpu_twin_ebb_mask_finish(const dev_launch_dims *d, void **p) {
  const float *mag = TW_PTR(p[0]);
  const float *harm = TW_PTR(p[1]);
  float *mask = TW_PTR(p[2]);
  int nbins = TW_I32(p[3]), hpss = TW_I32(p[4]), hf = TW_I32(p[5]);
  int band_lo = TW_I32(p[6]), band_hi = TW_I32(p[7]);
  float gain = TW_F32(p[8]);
  int bs = (int)d->block[0];
  for (unsigned b = 0; b < d->grid[0]; b++)
    for (int t = 0; t < bs; t++)
      stg_k_mask_finish(t, bs, (int)b, mag, harm, mask, nbins, hpss, hf, band_lo, band_hi, gain);
}

static const struct {
  const char *name;
  dev_kernel_twin_fn fn;
} sep_twins[] = {
    {"ebb_stft_window", fakegpu_twin_ebb_stft_window},
    {"ebb_fft_radix2", fakegpu_twin_ebb_fft_radix2},
    {"ebb_stft_magnitude", fakegpu_twin_ebb_stft_magnitude},
    {"ebb_sep_apply_mask", fakegpu_twin_ebb_sep_apply_mask},
    {"ebb_istft_overlap_add", fakegpu_twin_ebb_istft_overlap_add},
    {"ebb_repet_mask", fakegpu_twin_ebb_repet_mask},
    {"ebb_hpss_harmonic", fakegpu_twin_ebb_hpss_harmonic},
    {"ebb_mask_finish", fakegpu_twin_ebb_mask_finish},
};

int stg_sep_kernel_has_twin(const char *name) {
  for (size_t i = 0; i < sizeof sep_twins / sizeof sep_twins[0]; i++)
    if (strcmp(sep_twins[i].name, name) == 0 && sep_twins[i].fn)
      return 1;
  return 0;
}
