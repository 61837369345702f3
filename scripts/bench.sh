#!/usr/bin/env bash
# Runs every benchmark program in BUILD_DIR/bench/ (make bench calls this).
# The CUDA device the benchmarks measure is the fake GPU from BUILD_DIR/fakegpu
# on a state file of its own, unless EBB_BENCH_REAL_GPU=1 (then the real
# driver, if any). Each program prints its own ratios.
set -u
BUILD="${1:-build}"
if [ ! -d "$BUILD/bench" ]; then
  echo "bench.sh: no $BUILD/bench directory; build first (make build)" >&2
  exit 2
fi
BUILD="$(cd "$BUILD" && pwd)"
STATE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/ebb-bench.XXXXXX")"
trap 'rm -rf "$STATE_DIR"' EXIT
if [ "${EBB_BENCH_REAL_GPU:-0}" != 1 ]; then
  export EBB_LIBCUDA="$BUILD/fakegpu/libcuda.so.1"
  export EBB_LIBNVML="$BUILD/fakegpu/libnvidia-ml.so.1"
  export FAKEGPU_SMI="$BUILD/fakegpu/fakegpu-smi"
  export FAKEGPU_STATE="$STATE_DIR/fakegpu.state"
  # room for the 10 000-block trim benchmark
  export FAKEGPU_MEMORY_MIB="${FAKEGPU_MEMORY_MIB:-81920}"
fi
status=0
found=0
for prog in "$BUILD"/bench/*; do
  [ -f "$prog" ] && [ -x "$prog" ] || continue
  found=1
  echo "=== $(basename "$prog")"
  if ! "$prog"; then
    echo "bench.sh: $(basename "$prog") failed" >&2
    status=1
  fi
  echo
done
if [ "$found" = 0 ]; then
  echo "bench.sh: no benchmark programs in $BUILD/bench" >&2
  exit 2
fi
exit $status
