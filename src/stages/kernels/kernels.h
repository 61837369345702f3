/* ebb's own GPU kernels, built into one image.
 *
 * Every .cu file in src/stages/kernels/ is compiled by nvcc (when the build found it:
 * CMake variable EBB_NVCC) into ONE fatbin for sm_80 and sm_90 plus
 * compute_90 PTX, embedded in ebb_stages as the array below. The .cu files are
 * compiled as one unit (a generated file #includes each of them), so give
 * file-local device helpers unique names or mark them static, and declare
 * kernels extern "C" so they are launched by their plain names. Adding a
 * kernel file (e.g. pitch.cu) needs no CMake change: drop it in this folder.
 *
 * Without nvcc the image is empty (stg_kernels_fatbin_size == 0): launch with
 * image NULL (by name); the fake GPU then runs each kernel's host twin
 * (`fakegpu_twin_<name>`, see src/device/kernel_twin.h), and on a real GPU the
 * launch fails, so a stage falls back to its CPU path and says so in its log.
 *
 * Every kernel needs a host twin in a .c file next to it that runs the same
 * per-thread arithmetic (share it through a header, as sep_kernels.h does), and
 * that twin must be referenced from code the stage calls (a table), or the
 * static library drops it. */
#ifndef EBB_STAGES_KERNELS_KERNELS_H
#define EBB_STAGES_KERNELS_KERNELS_H

#include <stddef.h>

extern const unsigned char stg_kernels_fatbin[];
extern const size_t stg_kernels_fatbin_size;

/* The image to pass to ctx->host->launch: the fatbin, or NULL when the build
 * had no nvcc (launch by name; twins on the fake). */
static inline const void *stg_kernels_image(void) {
  return stg_kernels_fatbin_size ? (const void *)stg_kernels_fatbin : NULL;
}

/* 1 when a host twin of separate.cu's kernel `name` is linked in. */
int stg_sep_kernel_has_twin(const char *name);

#endif
