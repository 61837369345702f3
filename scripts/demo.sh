#!/usr/bin/env bash
# `make demo` runs this as: scripts/demo.sh BUILD_DIR
#
# The demo is a list of steps run in order (DEMO_STEPS below). Each step is a
# function demo_step_<name>; it may read and set the variables under "shared
# state". To add a step (e.g. the songtrace pipeline), write its function and
# append its name to DEMO_STEPS; nothing else has to change.
#
# The demo uses whatever GPU this machine has (the real libcuda.so.1, unless
# EBB_LIBCUDA says otherwise) and falls back to the CPU device when there is
# none; it never changes the GPU's settings.
set -euo pipefail

BUILD_DIR=${1:-build}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$ROOT/$BUILD_DIR ;; esac
EBB=$BUILD_DIR/ebb
[ -x "$EBB" ] || { echo "demo: $EBB is missing; run 'make build' first" >&2; exit 1; }

# --- shared state (set by steps, read by later ones) -------------------------
DEMO_DEVICE=cpu        # what the later steps pass to --device: cuda:0 or cpu
DEMO_GPU_NAME=""       # the GPU's name when there is one
DEMO_OUT=${DEMO_OUT:-$BUILD_DIR/demo-out}   # where steps write their results

say() { printf '\n== %s\n' "$*"; }

# --- steps -------------------------------------------------------------------
demo_step_devices() {
  say "devices: what ebb can use here (ebb devices)"
  local out
  out=$("$EBB" devices)
  printf '%s\n' "$out"
  if grep -q '^cuda:0' <<<"$out"; then
    DEMO_DEVICE=cuda:0
    DEMO_GPU_NAME=$(grep -m1 '^cuda:0' <<<"$out" | sed 's/^cuda:0 *//')
    echo "demo: found a GPU: cuda:0 ($DEMO_GPU_NAME); the next steps run on it"
  else
    DEMO_DEVICE=cpu
    local why
    why=$(grep -m1 '^no CUDA device:' <<<"$out" | sed 's/^no CUDA device: //; s/; the CPU device is available$//')
    echo "demo: no GPU (${why:-no CUDA device reported})"
    echo "demo: the next steps run on the CPU device"
  fi
  echo
  "$EBB" version
}

# Later steps (the synthetic and songtrace pipelines) are appended here.
DEMO_STEPS=(devices)

mkdir -p "$DEMO_OUT"
for step in "${DEMO_STEPS[@]}"; do
  "demo_step_$step"
done
say "demo done (device: $DEMO_DEVICE)"
