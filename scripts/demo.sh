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

demo_step_songtrace() {
  local wav=$BUILD_DIR/samples/demo.wav out=$DEMO_OUT/songtrace
  local lyrics=$BUILD_DIR/samples/demo.lyrics.txt
  say "songtrace: a generated song -> melody and lyric timing (ebb run --pipeline songtrace)"
  [ -f "$wav" ] || { echo "demo: $wav is missing (the build generates it: make build)" >&2; exit 1; }
  echo "input: $wav (26 s: a melody sung with words over chords and drums; truth in demo.truth.json)"
  echo "lyrics: $lyrics (align times each word against the voice itself, offline)"
  if [ -z "${EBB_WHISPER_URL:-}" ]; then
    echo "(no Whisper server, none needed for lyric timing; set EBB_WHISPER_URL=http://HOST:PORT/v1/audio/transcriptions"
    echo " or .../inference to transcribe too; the transcribe stage says it skipped)"
  fi
  rm -rf "$out" && mkdir -p "$out"
  local t0=$SECONDS
  "$EBB" run --pipeline songtrace --lyrics "$lyrics" --device "$DEMO_DEVICE" \
    --no-cache -o "$out" --timeline "$out/timeline.svg" "$wav"
  echo
  echo "demo: songtrace took $((SECONDS - t0)) s on $DEMO_DEVICE; outputs in $out:"
  ls -l "$out" | awk 'NR > 1 {printf "  %-22s %8d bytes\n", $9, $5}'
  local stem
  for stem in vocals accompaniment; do
    if [ -f "$out/$stem.flac" ]; then
      echo "demo: separated $stem written to $out/$stem.flac"
    else
      echo "demo: $out/$stem.flac is missing (the export stage writes the stems)" >&2
      exit 1
    fi
  done
  if [ -f "$out/lyrics.words.lrc" ]; then
    echo "demo: lyric lines with word times ($out/lyrics.words.lrc, enhanced LRC):"
    head -n 3 "$out/lyrics.words.lrc" | sed 's/^/  /'
  else
    echo "demo: no lyrics.words.lrc (see the [align] lines above)" >&2
  fi
  if command -v python3 >/dev/null 2>&1 && [ -f "$out/songtrace.json" ]; then
    python3 - "$out/songtrace.json" "$BUILD_DIR/samples/demo.truth.json" <<'PY' || true
import json, sys
est = json.load(open(sys.argv[1])); truth = json.load(open(sys.argv[2]))
notes = est.get("notes", {})
notes = notes.get("notes", notes) if isinstance(notes, dict) else notes
tn = truth.get("notes", [])
print(f"  melody: {len(notes)} notes found; the generated song has {len(tn)}")
for n in notes[:5]:
    print(f"    {n.get('onset', 0):6.2f} s - {n.get('offset', 0):6.2f} s  MIDI {n.get('midi')}")
ly = est.get("lyrics") or {}
words, tw = ly.get("words", []), truth.get("words", [])
if words:
    print(f"  lyrics: {len(words)} words placed ({ly.get('source')}); the first lines, word by word:")
    for line in sorted({w.get("line", 0) for w in words})[:2]:
        ws = [w for w in words if w.get("line", 0) == line]
        print("    " + "  ".join(f"{w['start']:.2f} {w['word']}" for w in ws))
if words and len(words) == len(tw):
    ok = sum(abs(a["start"] - b["start"]) <= 0.3 for a, b in zip(words, tw))
    print(f"  word onsets within 0.3 s of the truth: {ok} of {len(tw)}")
PY
  fi
}

# Without a GPU, the same pipeline once more on ebb's fake GPU, so the release
# lines show and fakegpu-smi (nvidia-smi's twin) confirms them from outside.
demo_step_fakegpu() {
  [ "$DEMO_DEVICE" = cpu ] || return 0
  local fg=$BUILD_DIR/fakegpu out=$DEMO_OUT/songtrace-fakegpu
  [ -f "$fg/libcuda.so.1" ] || return 0
  say "songtrace on the fake GPU (no GPU here): release after every stage, checked with fakegpu-smi"
  rm -rf "$out" && mkdir -p "$out"
  local hooklog=$out/fakegpu-smi.log
  cat > "$out/hook.sh" <<'SH'
used=$("$FAKEGPU_SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
       awk -F', *' -v p="$EBB_HOOK_PID" '$1 == p {s += $2} END {print s + 0}')
printf '  fakegpu-smi %-14s %-10s ebb holds %5d MiB\n' "$EBB_HOOK_EVENT" "$EBB_HOOK_STAGE" "$used" >> "$HOOK_LOG"
SH
  EBB_LIBCUDA=$fg/libcuda.so.1 EBB_LIBNVML=$fg/libnvidia-ml.so.1 FAKEGPU_SMI=$fg/fakegpu-smi \
    FAKEGPU_STATE=$out/device.state HOOK_LOG=$hooklog EBB_STAGE_HOOK="bash $out/hook.sh" \
    "$EBB" run --pipeline songtrace --device cuda --no-cache -o "$out" \
      --timeline "$out/timeline.svg" "$BUILD_DIR/samples/demo.wav" | grep -E 'released|done in'
  echo "what fakegpu-smi saw from outside, around each release:"
  cat "$hooklog"
  echo "timeline of device memory: $out/timeline.svg"
}

DEMO_STEPS=(devices songtrace fakegpu)

mkdir -p "$DEMO_OUT"
for step in "${DEMO_STEPS[@]}"; do
  "demo_step_$step"
done
say "demo done (device: $DEMO_DEVICE)"
