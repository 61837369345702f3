// The checks of the nvcc programs that drive the fake through the CUDA
// runtime (cudart_probe.cu, cudart_graphs.cu): each checked call is counted
// once by the runtime function it names (g_nnames) and every passed check
// once (g_checks); the first failure prints
//   FAIL line L: CALL answered X (NAME), want Y
// (or the EXPECT message) and exits 1.
#ifndef EBB_FAKEGPU_CUDART_CHECK_H
#define EBB_FAKEGPU_CUDART_CHECK_H

#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_names[512];
static int g_nnames, g_checks;

// Counts the runtime function a checked expression calls (its leading name).
static void note(const char *expr) {
  char name[64];
  size_t n = strcspn(expr, "( <");
  if (strncmp(expr, "cuda", 4) || n >= sizeof name)
    return;
  memcpy(name, expr, n);
  name[n] = 0;
  for (int i = 0; i < g_nnames; i++)
    if (!strcmp(g_names[i], name))
      return;
  if (g_nnames < 512)
    g_names[g_nnames++] = strdup(name);
}

#define EXPECT_RC(call, want)                                                          \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    note(#call);                                                                       \
    if (e_ != (want)) {                                                                \
      printf("FAIL line %d: %s answered %d (%s), want %d\n", __LINE__, #call, (int)e_, \
             cudaGetErrorName(e_), (int)(want));                                       \
      exit(1);                                                                         \
    }                                                                                  \
    g_checks++;                                                                        \
  } while (0)
#define OK(call) EXPECT_RC(call, cudaSuccess)
#define EXPECT(cond, ...)                 \
  do {                                    \
    if (!(cond)) {                        \
      printf("FAIL line %d: ", __LINE__); \
      printf(__VA_ARGS__);                \
      printf("\n");                       \
      exit(1);                            \
    }                                     \
    g_checks++;                           \
  } while (0)

#endif
