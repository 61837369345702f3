/* ebb's own kernels (src/stages/kernels/separate.cu) and their host twins:
 * every extern "C" kernel in the .cu files has an exported twin; the radix-2
 * FFT twin matches a double-precision DFT and inverts itself; the embedded
 * image is a fatbin when the build had nvcc, empty otherwise. */
#include <dirent.h>
#include <math.h>

#include "stages/builtin.h"
#include "stages/kernels/kernels.h"
#include "stages/kernels/sep_kernels.h"
#include "stages/audio/stft.h"
#include "stages_separate_shim.h"
#include "test.h"

/* Kernels declared in one .cu file; each must have an exported twin. */
static int check_cu_file(const char *path, int is_separate) {
  FILE *f = fopen(path, "r");
  REQUIRE(f);
  char line[512];
  int kernels = 0;
  while (fgets(line, sizeof line, f)) {
    const char *k = strstr(line, "__global__ void ");
    if (!k)
      continue;
    k += strlen("__global__ void ");
    char name[128], sym[160];
    size_t n = strcspn(k, "(");
    REQUIRE(n < sizeof name);
    memcpy(name, k, n);
    name[n] = 0;
    snprintf(sym, sizeof sym, "%s%s", EBB_TWIN_PREFIX, name);
    CHECK_MSG(dlsym(RTLD_DEFAULT, sym) != NULL, "%s: kernel %s has no exported twin %s", path, name,
              sym);
    if (is_separate)
      CHECK_MSG(stg_sep_kernel_has_twin(name), "kernel %s is not in the twin table", name);
    kernels++;
  }
  fclose(f);
  return kernels;
}

/* Every kernel in every src/stages/kernels/ *.cu (they all go into the one
 * fatbin) can run on the fake GPU in a program that links the built-in
 * stages, as `ebb` does. */
static void test_every_kernel_has_a_twin(void) {
  size_t nstages = 0;
  CHECK(stg_builtin_stages(&nstages) != NULL && nstages >= 2);
  const char *src = getenv("EBB_SOURCE_DIR");
  REQUIRE(src);
  char dirpath[1024];
  snprintf(dirpath, sizeof dirpath, "%s/src/stages/kernels", src);
  DIR *d = opendir(dirpath);
  REQUIRE(d);
  struct dirent *e;
  int files = 0;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (len < 4 || strcmp(e->d_name + len - 3, ".cu") != 0)
      continue;
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dirpath, e->d_name);
    int is_sep = strcmp(e->d_name, "separate.cu") == 0;
    int n = check_cu_file(path, is_sep);
    fprintf(stderr, "  %s: %d kernels\n", e->d_name, n);
    if (is_sep)
      CHECK_EQ_INT(n, 8);
    files++;
  }
  closedir(d);
  CHECK(files >= 1);
}

static void test_fft_matches_dft(void) {
  for (int n = 64; n <= 2048; n *= 4) {
    int log2n = 0;
    while ((1 << log2n) < n)
      log2n++;
    int frames = 3;
    float *data = malloc(sizeof(float) * 2 * n * frames),
          *orig = malloc(sizeof(float) * 2 * n * frames);
    float *tw = malloc(sizeof(float) * n);
    uint64_t seed = 42;
    for (int i = 0; i < 2 * n * frames; i++) {
      seed = seed * 6364136223846793005ULL + 1;
      orig[i] = data[i] = (float)((double)(seed >> 11) / 9007199254740992.0 - 0.5);
    }
    stg_stft_twiddles(n, tw);
    shim_ctx sh;
    shim_init(&sh, EBB_DEV_KIND_CUDA);
    uint64_t d_data = (uint64_t)(uintptr_t)data, d_tw = (uint64_t)(uintptr_t)tw;
    float sign = 1.0f, scale = 1.0f;
    void *p[] = {&d_data, &d_tw, &n, &log2n, &sign, &scale};
    unsigned block = (unsigned)(n / 2 < EBB_KERNEL_MAX_THREADS ? n / 2 : EBB_KERNEL_MAX_THREADS);
    const unsigned g[3] = {(unsigned)frames, 1, 1}, b[3] = {block, 1, 1};
    REQUIRE(shim_launch(&sh.base, NULL, "ebb_fft_radix2", g, b, sizeof(float) * 2 * n, p) == 0);
    double num = 0, den = 0;
    for (int f = 0; f < frames; f++)
      for (int k = 0; k < n; k++) {
        double re = 0, im = 0;
        for (int t = 0; t < n; t++) {
          double a = -2 * M_PI * (double)k * t / n;
          double xr = orig[2 * (f * n + t)], xi = orig[2 * (f * n + t) + 1];
          re += xr * cos(a) - xi * sin(a);
          im += xr * sin(a) + xi * cos(a);
        }
        double dr = data[2 * (f * n + k)] - re, di = data[2 * (f * n + k) + 1] - im;
        num += dr * dr + di * di;
        den += re * re + im * im;
      }
    double err = sqrt(num / den);
    CHECK_MSG(err < 1e-5, "n=%d: FFT twin vs DFT relative error %g", n, err);
    /* inverse with scale 1/n gives the input back */
    sign = -1.0f;
    scale = 1.0f / (float)n;
    REQUIRE(shim_launch(&sh.base, NULL, "ebb_fft_radix2", g, b, sizeof(float) * 2 * n, p) == 0);
    num = den = 0;
    for (int i = 0; i < 2 * n * frames; i++) {
      num += ((double)data[i] - orig[i]) * ((double)data[i] - orig[i]);
      den += (double)orig[i] * orig[i];
    }
    CHECK_MSG(sqrt(num / den) < 1e-5, "n=%d: inverse(forward(x)) relative error %g", n,
              sqrt(num / den));
    free(data), free(orig), free(tw);
  }
}

static void test_block_size_does_not_matter(void) {
  /* a kernel's result must not depend on how many threads share the work */
  int n = 256, log2n = 8, frames = 2;
  float *a = malloc(sizeof(float) * 2 * n * frames), *b = malloc(sizeof(float) * 2 * n * frames);
  float *tw = malloc(sizeof(float) * n);
  for (int i = 0; i < 2 * n * frames; i++)
    a[i] = b[i] = (float)sin(0.37 * i) + (float)(i % 7) * 0.1f;
  stg_stft_twiddles(n, tw);
  shim_ctx sh;
  shim_init(&sh, EBB_DEV_KIND_CUDA);
  uint64_t da = (uint64_t)(uintptr_t)a, db = (uint64_t)(uintptr_t)b, dt = (uint64_t)(uintptr_t)tw;
  float sign = 1.0f, scale = 1.0f;
  void *pa[] = {&da, &dt, &n, &log2n, &sign, &scale};
  void *pb[] = {&db, &dt, &n, &log2n, &sign, &scale};
  const unsigned g[3] = {(unsigned)frames, 1, 1}, b128[3] = {128, 1, 1}, b32[3] = {32, 1, 1};
  REQUIRE(shim_launch(&sh.base, NULL, "ebb_fft_radix2", g, b128, sizeof(float) * 2 * n, pa) == 0);
  REQUIRE(shim_launch(&sh.base, NULL, "ebb_fft_radix2", g, b32, sizeof(float) * 2 * n, pb) == 0);
  CHECK_MSG(memcmp(a, b, sizeof(float) * 2 * n * frames) == 0,
            "FFT with 128 and 32 threads per block differ");
  free(a), free(b), free(tw);
}

static void test_embedded_image(void) {
  fprintf(stderr, "  embedded kernel image: %zu bytes\n", stg_kernels_fatbin_size);
  if (stg_kernels_fatbin_size == 0) {
    CHECK(stg_kernels_image() == NULL);
    return;
  }
  /* fatbin container magic 0xBA55ED50, little-endian */
  CHECK(stg_kernels_image() == (const void *)stg_kernels_fatbin);
  CHECK_MSG(stg_kernels_fatbin[0] == 0x50 && stg_kernels_fatbin[1] == 0xed &&
                stg_kernels_fatbin[2] == 0x55 && stg_kernels_fatbin[3] == 0xba,
            "the embedded image is not a fatbin (starts %02x %02x %02x %02x)",
            stg_kernels_fatbin[0], stg_kernels_fatbin[1], stg_kernels_fatbin[2],
            stg_kernels_fatbin[3]);
  CHECK(((uintptr_t)stg_kernels_fatbin & 7) == 0);
  /* every kernel's name is in the image */
  const char *names[] = {"ebb_stft_window",    "ebb_fft_radix2",        "ebb_stft_magnitude",
                         "ebb_sep_apply_mask", "ebb_istft_overlap_add", "ebb_repet_mask",
                         "ebb_hpss_harmonic",  "ebb_mask_finish"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    CHECK_MSG(memmem(stg_kernels_fatbin, stg_kernels_fatbin_size, names[i], strlen(names[i])),
              "kernel %s is not in the embedded image", names[i]);
}

int main(void) {
  RUN(test_every_kernel_has_a_twin);
  RUN(test_fft_matches_dft);
  RUN(test_block_size_does_not_matter);
  RUN(test_embedded_image);
  return TEST_END();
}
