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
# 5. the synthetic pipeline and 6. songtrace on cuda:0, each followed by a
#    table of what ebb logged as released against what nvidia-smi saw
# 7. what the process holds after a job
# 8. libebb.so and the Python package: owners against nvidia-smi, and a small
#    PyTorch model through ebb.torch.use() and the three leaks example
#    (examples/torch/three_leaks.py, both modes) where PyTorch with CUDA is
#    installed (/opt/ebb-tools/torch, else python3's)
# 9. sleep/wake (issue 12): bench/memory_sleep on the real driver (wake GiB/s
#    vs a plain pinned copy vs unload+load; the weights checked at the same
#    addresses after the context was released and re-created), and
#    `ebb run --release sleep` with nvidia-smi at 0 for the process afterwards
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
# The GPU machine may reach no package mirror: bounded, so an apt-get that
# waits on the network cannot eat the machine's few minutes.
timeout 180 "$ROOT/scripts/install-deps.sh" || fail "install-deps (exit $?; the build may still work)"
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

# --- 5-7. pipelines, measured from outside with nvidia-smi ---------------------
# The hook runs nvidia-smi as a separate process around every release (ebb
# starts it with posix_spawn after the stage's release). Per-process figures
# come from --query-compute-apps; where the container hides processes from
# nvidia-smi, the GPU-wide memory.used is used instead (and said so).
cat > "$BUILD/gpu-check-hook.sh" <<'SH'
used=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
       awk -F', *' -v p="$EBB_HOOK_PID" '$1 == p {s += $2; n++} END {if (n) print s; else print "-"}')
gpu=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
echo "$EBB_HOOK_EVENT $EBB_HOOK_STAGE ${EBB_HOOK_RELEASED_BYTES:-0} $used $gpu" >> "$HOOK_LOG"
SH

# run_measured LABEL EBB-RUN-ARGS...: runs ebb with the hook, then prints the
# table of what ebb logged as released against what nvidia-smi saw go back.
run_measured() {
  local label=$1; shift
  local out=$BUILD/gpu-check-$label
  rm -rf "$out" && mkdir -p "$out"
  export HOOK_LOG=$out/hook.log
  EBB_STAGE_HOOK="bash $BUILD/gpu-check-hook.sh" "$BUILD/ebb" run --device cuda:0 --no-cache \
    -o "$out" --timeline "$out/timeline.svg" "$@" >"$out/stdout" 2>"$out/stderr"
  local rc=$?
  cat "$out/stdout"
  [ "$rc" = 0 ] || { tail -5 "$out/stderr"; fail "$label: ebb run exited $rc"; }
  echo
  echo "$label: released by ebb (its log line) against nvidia-smi (MiB)"
  awk -v logf="$out/stdout" '
    BEGIN {
      while ((getline l < logf) > 0)
        if (match(l, /^\[[^]]+\] released [0-9]+ MiB of GPU memory$/)) {
          split(l, w, " "); st = substr(w[1], 2, length(w[1]) - 2); logged[st] = w[3]
        }
      printf "  %-22s %12s %14s %14s %8s\n", "stage", "ebb logged", "process drop", "GPU-wide drop", "differ"
    }
    $1 == "before-release" { pb[$2] = $4; gb[$2] = $5 }
    $1 == "after-stage" || $1 == "after-job" {
      st = $2; key = ($1 == "after-job") ? "pipeline " st : st
      l = (key in logged) ? logged[key] : 0
      if ($1 == "after-job") { pd = "-"; gd = "-" } else {
        # listed before the release and gone after it: it holds 0
        pd = (pb[st] != "-") ? pb[st] - ($4 == "-" ? 0 : $4) : "-"
        gd = gb[st] - $5
      }
      ref = (pd != "-") ? pd : gd
      d = (ref != "-") ? l - ref : "-"
      if (l > 0 || (ref != "-" && ref != 0))
        printf "  %-22s %12s %14s %14s %8s\n", key, l, pd, gd, d
    }' "$HOOK_LOG"
  echo "  (hook log: $HOOK_LOG; timeline: $out/timeline.svg)"
  gpu_mem "after $label"
}

step "5. synthetic pipeline on cuda:0 (weights 1, 4 and 2 GiB with caches)"
cat > "$BUILD/gpu-check-synthetic.json" <<'JSON'
{"pipelines": {"gpucheck": {"stages": [
  {"stage": "synthetic", "name": "a", "cache": false, "options":
    {"weights_mib": 1024, "activations_mib": 256, "cache_mib": 256}},
  {"stage": "synthetic", "name": "b", "cache": false, "options":
    {"weights_mib": 4096, "activations_mib": 512, "cache_mib": 512, "leak_mib": 64}},
  {"stage": "synthetic", "name": "c", "cache": false, "options":
    {"weights_mib": 2048, "activations_mib": 256, "cache_mib": 256, "outside_mib": 128}}]}}}
JSON
run_measured synthetic --pipeline gpucheck --config "$BUILD/gpu-check-synthetic.json" "$ROOT/README.md"
echo "(also the built-in one: ebb run --pipeline synthetic)"
run_measured synthetic-builtin --pipeline synthetic "$ROOT/README.md"

step "6. songtrace on the generated song (GPU kernels from the fatbin)"
run_measured songtrace --pipeline songtrace "$BUILD/samples/demo.wav"
grep -E "^\[(separate|pitch)\]" "$BUILD/gpu-check-songtrace/stdout" | grep -iE "kernel|cpu|fall" || true

step "7. idle: the process holds nothing after a job (checked while it is still alive)"
awk '$1 == "after-job" {print "  after the job ebb holds (per process, MiB): " $4 "; GPU-wide used: " $5}' \
  "$BUILD/gpu-check-songtrace/hook.log"

# --- 8. libebb and the Python package on the real GPU ---------------------------
step "8. libebb.so + python/ebb: owners (1, 2, 3 GiB) and PyTorch through ebb.torch.use()"
PYENV=(env EBB_LIB="$BUILD/libebb.so" FAKEGPU_SMI="$(command -v nvidia-smi)"
       PYTHONPATH="$ROOT/python:$ROOT/tests/python" PYTHONDONTWRITEBYTECODE=1)
"${PYENV[@]}" python3 "$ROOT/tests/python/owners_check.py" || fail "python owners on the GPU"
# PyTorch: the venv scripts/install-deps.sh makes (the default wheel), else
# a python3 that has it
TORCH_PY=/opt/ebb-tools/torch/bin/python
[ -x "$TORCH_PY" ] || TORCH_PY=python3
if "$TORCH_PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  "${PYENV[@]}" "$TORCH_PY" "$ROOT/tests/python/torch_check.py" || fail "PyTorch through ebb.torch.use()"
  # the three leaks of a PyTorch service (examples/torch/three_leaks.py), each
  # mode in its own process: ebb's release line against nvidia-smi's drop
  for mode in hooks owners; do
    "${PYENV[@]}" "$TORCH_PY" "$ROOT/examples/torch/three_leaks.py" "$mode" --mib 1024 ||
      fail "examples/torch/three_leaks.py $mode: ebb's figure is not nvidia-smi's drop"
  done
  # issue 40: torchcrepe three times in released owners (no tensor left on
  # freed memory; the pitch of calls 2 and 3 equals call 1's), and
  # stream-ordered reuse against a kernel that really runs (torch.cuda._sleep)
  if "$TORCH_PY" -c 'import torchcrepe' 2>/dev/null; then
    "${PYENV[@]}" EBB_REAL_GPU=1 "$TORCH_PY" "$ROOT/tests/python/torch_holders_check.py" ||
      fail "torchcrepe three times in released owners (tests/python/torch_holders_check.py)"
  else
    echo "torchcrepe is not installed for $TORCH_PY (scripts/install-deps.sh): its step is skipped"
  fi
  "${PYENV[@]}" "$TORCH_PY" "$ROOT/tests/python/torch_streams_check.py" ||
    fail "stream-ordered reuse under PyTorch (tests/python/torch_streams_check.py)"
else
  echo "PyTorch with CUDA is not installed for $TORCH_PY: the PyTorch steps are skipped"
fi

# --- 9. sleep and wake on the real GPU -------------------------------------------
step "9. sleep/wake: reserved ranges across a context release, wake bandwidth"
if [ -x "$BUILD/bench/memory_sleep" ]; then
  EBB_BENCH_SLEEP_MIB=${EBB_BENCH_SLEEP_MIB:-4096} "$BUILD/bench/memory_sleep" > "$BUILD/gpu-check-sleep.txt" 2>&1
  rc=$?
  cat "$BUILD/gpu-check-sleep.txt"
  [ $rc -eq 0 ] && ! grep -q "failed\|changed" "$BUILD/gpu-check-sleep.txt" ||
    fail "sleep/wake bench on the GPU (see above)"
else
  fail "no $BUILD/bench/memory_sleep (build step failed?)"
fi
"$BUILD/ebb" run --pipeline synthetic --release sleep -o "$BUILD/gpu-check-sleep" "$ROOT/README.md" \
  > "$BUILD/gpu-check-sleep.log" 2>&1 || fail "ebb run --release sleep"
grep -E "asleep|awake" "$BUILD/gpu-check-sleep.log"
grep -q "asleep: device context released" "$BUILD/gpu-check-sleep.log" ||
  fail "ebb run --release sleep: the context was not released while asleep"

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
