#!/usr/bin/env bash
# songtrace on real instrument samples: the quick set of bench/songtrace_real.py
# (4 clips x 10 s rendered by fluidsynth from the GM soundfont of Debian's
# fluid-soundfont-gm: voice alone, saxophone over piano chords at 0 dB, flute
# over piano and drums at 0 dB, synth voice 6 dB under piano and drums),
# through `ebb run --pipeline songtrace --device cpu`, scored with mir_eval.
# Floors a little under what this set measures (issue 16): mean note F1@50
# 0.728, repeated notes 22/33 = 0.67, RPA 0.861 at/above the band, 0.370 at
# -6 dB with the mix's salience in separate's holes (salience_mix) and a
# re-attack whose pitch turns starting the new note; 0.730, 22/33, 0.861,
# 0.356 before them; 0.708, 22/33, 0.861, 0.356 when the first three floors
# were set: 0.68, 0.60, 0.82, 0.35.
# Missing fluidsynth, soundfont,
# numpy/scipy or mir_eval fails the test (scripts/install-deps.sh installs
# them).
set -euo pipefail
. "$(dirname "$0")/../lib/lock.sh"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ -x "$EBB" ] || { echo "FAIL: no ebb binary at $EBB" >&2; exit 1; }
[ -x /usr/bin/python3 ] || { echo "FAIL: /usr/bin/python3 is missing" >&2; exit 1; }
rm -rf "$EBB_TEST_TMP" && mkdir -p "$EBB_TEST_TMP"
/usr/bin/python3 "$ROOT/bench/songtrace_real.py" --ebb "$EBB" --quick --keep "$EBB_TEST_TMP/clips" \
  --floors 0.68,0.60,0.82,0.35 || { echo "FAIL: songtrace on real samples below its floors (or a tool is missing; see above)" >&2; exit 1; }
