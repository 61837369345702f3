#!/usr/bin/env bash
# gpu-check: one call on a machine with a real NVIDIA GPU.
#
#   scripts/gpu-check.sh [BUILD_DIR]        (default build-gpu)
#
# 1. prints the GPU, its driver and its memory (nvidia-smi, read-only queries)
# 2. builds ebb with this machine's nvcc into BUILD_DIR
# 3. runs `ebb devices` and `ebb version` against the real libcuda.so.1
#    (EBB_LIBCUDA / EBB_LIBNVML are unset)
# 4. runs the device tests against the real driver (EBB_REAL_GPU=1: the tests
#    drop the fake driver's paths and skip, saying so, only what needs the fake)
# 5. prints the GPU's memory.used/free/total before and after
# Later steps (the synthetic and songtrace pipelines, the released-vs-nvidia-smi
# table) go in the marked place below.
#
# It never changes the card's settings: no persistence mode, clocks, resets or
# compute mode; only nvidia-smi queries. Everything it prints is also written
# to BUILD_DIR/gpu-check.log. Exit status: 0 when every step passed.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-build-gpu}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
mkdir -p "$BUILD"
LOG=$BUILD/gpu-check.log
exec > >(tee "$LOG") 2>&1

failures=()
step() { printf '\n===== %s\n' "$*"; }
fail() { echo "gpu-check: FAILED: $*"; failures+=("$*"); }
QUERY=(--query-gpu=memory.used,memory.free,memory.total --format=csv,noheader,nounits)
gpu_mem() { # label
  printf 'GPU memory %-28s (used, free, total MiB): ' "$1"
  nvidia-smi "${QUERY[@]}" | paste -sd';' -
}

# --- 1. the machine ----------------------------------------------------------
step "1. the GPU ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(hostname))"
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu-check: nvidia-smi not found: this script is for a machine with an NVIDIA GPU and driver"
  exit 2
fi
nvidia-smi -L
nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv
gpu_mem "before anything"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sed 's/^/  process already on the GPU (pid, MiB): /'

# --- 2. build ------------------------------------------------------------------
step "2. build into $BUILD"
NVCC=$(command -v nvcc || true)
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -n "$NVCC" ]; then
  "$NVCC" --version | tail -2
else
  echo "note: no nvcc found; ebb builds without its GPU kernels (host twins only)"
fi
"$ROOT/scripts/install-deps.sh" || fail "install-deps"
if cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEBB_CUDA_KERNELS=ON \
     ${NVCC:+-DEBB_NVCC_PROGRAM=$NVCC} >"$BUILD/cmake-configure.log" 2>&1 &&
   cmake --build "$BUILD" -j "$JOBS" >"$BUILD/cmake-build.log" 2>&1; then
  echo "built: $BUILD/ebb"
else
  tail -40 "$BUILD/cmake-configure.log" "$BUILD/cmake-build.log" 2>/dev/null
  fail "build (logs: $BUILD/cmake-configure.log, $BUILD/cmake-build.log)"
  echo "gpu-check: cannot go on without a build"
  exit 1
fi

# --- 3. ebb against the real driver ------------------------------------------
unset EBB_LIBCUDA EBB_LIBNVML FAKEGPU_STATE FAKEGPU_SMI
step "3. ebb devices / ebb version against the real libcuda.so.1"
"$BUILD/ebb" devices || fail "ebb devices"
"$BUILD/ebb" devices --json || fail "ebb devices --json"
"$BUILD/ebb" version || fail "ebb version"
"$BUILD/ebb" devices | grep -q '^cuda:0' || fail "ebb devices does not list cuda:0 on a GPU machine"
gpu_mem "after devices/version"

# --- 4. device tests against the real driver ---------------------------------
step "4. device tests with EBB_REAL_GPU=1"
echo "(fake-only checks are skipped with a message; see the test output)"
device_test_summary() { # the per-test lines and what each test said about the GPU
  grep -E "^ *[0-9]+/[0-9]+ Test|^[0-9]+: (ok|FAIL|note|SKIP|real driver|plain:|VMM:|.*:[0-9]+: )|% tests passed" \
    "$BUILD/device-tests.log" | sed 's/^[0-9]*: //'
}
if (cd "$BUILD" && EBB_REAL_GPU=1 ctest -R '^device_' --output-on-failure --timeout 300 -V \
      >"$BUILD/device-tests.log" 2>&1); then
  device_test_summary
else
  device_test_summary
  fail "device tests (log: $BUILD/device-tests.log)"
fi
gpu_mem "after the device tests"

# ============================================================================
# LATER STEPS GO HERE (added by later issues; keep each one a numbered step):
#   5. synthetic pipeline: ebb run --pipeline synthetic on cuda:0, its
#      "[stage] released N MiB" lines
#   6. songtrace pipeline on a generated song
#   7. the released-vs-nvidia-smi table: per stage, what ebb says it released
#      and what nvidia-smi's memory.used says went back
# ============================================================================

# --- end -------------------------------------------------------------------------
step "summary"
gpu_mem "at the end"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits | sed 's/^/  process still on the GPU (pid, MiB): /'
if [ ${#failures[@]} -eq 0 ]; then
  echo "gpu-check: all steps passed (log: $LOG)"
  exit 0
fi
printf 'gpu-check: %d step(s) failed:\n' ${#failures[@]}
printf '  - %s\n' "${failures[@]}"
exit 1
