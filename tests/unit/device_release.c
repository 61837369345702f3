/* The acceptance test: this process (A) allocates 1 GiB on the device
 * through ebb's device layer; the smi, run as a separate process, reports A's
 * usage including the context; A releases everything and its context; the
 * smi reports nothing for A. The GPU-wide memory.used goes back to where it
 * was. On the fake the numbers are exact (context 300 MiB by default); on a
 * real GPU (EBB_REAL_GPU=1, nvidia-smi) the context is whatever the driver
 * takes and is printed. */
#include <string.h>
#include <unistd.h>

#include "device/device.h"
#include "support/devtest.h"
#include "test.h"

static int real;

static void run_release(dev_seg_kind kind) {
  const char *kname = kind == EBB_SEG_VMM ? "VMM" : "plain";
  pid_t me = getpid();
  long long gpu_before = dt_smi_used_mib();
  REQUIRE(gpu_before >= 0);
  CHECK_EQ_INT(dt_smi_proc_mib(me), 0);

  dev_device *d = NULL;
  REQUIRE(dev_open("cuda:0", &d) == 0);
  if (kind == EBB_SEG_VMM && !dev_supports_vmm(d)) {
    fprintf(stderr, "note: no VMM on this device; the VMM case is not run\n");
    dev_close(d);
    return;
  }
  CHECK_EQ_INT(dev_activate(d), 0);
  long long ctx_mib = dt_smi_proc_mib(me);
  dev_dseg s;
  REQUIRE(dev_seg_alloc(d, 1ull << 30, kind, &s) == 0);
  CHECK_EQ_U64(s.size, 1ull << 30);
  /* Touch it for real so a real driver commits it. */
  CHECK_EQ_INT(dev_memset8(d, s.addr, 0x5a, s.size), 0);
  CHECK_EQ_INT(dev_synchronize(d), 0);

  long long held = dt_smi_proc_mib(me);
  long long gpu_held = dt_smi_used_mib();
  fprintf(stderr,
          "%s: context %lld MiB; with 1 GiB: process %lld MiB, GPU used %lld MiB "
          "(was %lld)\n",
          kname, ctx_mib, held, gpu_held, gpu_before);
  if (!real) {
    CHECK_MSG(ctx_mib == 300, "the smi shows %lld MiB for the context alone, want 300", ctx_mib);
    CHECK_MSG(held == 1024 + 300, "the smi shows %lld MiB for A, want 1024 + 300 (context)", held);
    CHECK_EQ_INT(gpu_held - gpu_before, 1024 + 300);
  } else if (held > 0) {
    CHECK_MSG(held >= 1024 + ctx_mib - 2, "nvidia-smi shows %lld MiB for A, want >= 1024 + %lld",
              held, ctx_mib);
  } else {
    fprintf(stderr, "note: nvidia-smi does not list this process (PID namespace?); using the "
                    "GPU-wide memory.used instead\n");
    CHECK_MSG(gpu_held - gpu_before >= 1024, "GPU memory.used rose by %lld MiB, want >= 1024",
              gpu_held - gpu_before);
  }

  CHECK_EQ_INT(dev_seg_free(d, &s), 0);
  long long ctx_only = dt_smi_proc_mib(me);
  if (!real)
    CHECK_MSG(ctx_only == 300, "after freeing the segment A holds %lld MiB, want 300 (context)",
              ctx_only);
  CHECK_EQ_INT(dev_ctx_release(d), 0);
  CHECK(!dev_ctx_active(d));

  long long after = dt_smi_proc_mib(me);
  long long gpu_after = dt_smi_used_mib();
  fprintf(stderr, "%s: after release: process %lld MiB, GPU used %lld MiB\n", kname, after,
          gpu_after);
  CHECK_MSG(after == 0, "after releasing everything the smi still reports %lld MiB for A", after);
  if (!real)
    CHECK_EQ_INT(gpu_after, gpu_before);
  else
    CHECK_MSG(gpu_after <= gpu_before + 16, "GPU memory.used %lld MiB after release, was %lld",
              gpu_after, gpu_before);
  uint64_t nvml = 1;
  CHECK_EQ_INT(dev_process_used(d, me, &nvml), 0);
  CHECK_EQ_U64(nvml, 0);
  dev_close(d);
}

static void test_plain_1gib(void) { run_release(EBB_SEG_PLAIN); }
static void test_vmm_1gib(void) { run_release(EBB_SEG_VMM); }

int main(void) {
  real = dt_real_gpu();
  if (real && dt_smi_used_mib() < 0) {
    fprintf(stderr, "SKIP: nvidia-smi cannot be run\n");
    return DT_SKIP;
  }
  RUN(test_plain_1gib);
  RUN(test_vmm_1gib);
  return TEST_END();
}
