#!/usr/bin/env bash
# songtrace on real instrument samples: the quick set of bench/songtrace_real.py
# (4 clips x 10 s rendered by fluidsynth from the GM soundfont of Debian's
# fluid-soundfont-gm: voice alone, saxophone over piano chords at 0 dB, flute
# over piano and drums at 0 dB, synth voice 6 dB under piano and drums),
# through `ebb run --pipeline songtrace --device cpu`, scored with mir_eval.
# Floors a little under what this set measures (issue 16): mean note F1@50
# 0.759, repeated notes 23/33 = 0.70, RPA 0.888 at/above the band, 0.280 at
# -6 dB with the re-attack model (session 14); 0.753, 23/33, 0.888, 0.269
# with a scoop joining its note (session 10); 0.759, 24/33, 0.888,
# 0.269 with separate's lower repeating quantile (repeat_quantile 0.4,
# melody_quantile 0.3; session 9). The -6 dB figure is one clip, the synth
# voice under the band, and it fell from 0.370: the stricter pass keeps
# more of the band there. On the benchmark's four 20-clip sets the mean RPA
# under the band held (0.761 against 0.752 before the quantiles), so the
# floor under it went from 0.35 to 0.25 and the others rose. Earlier:
# 0.728, 22/33, 0.861, 0.370 with the mix's salience in separate's holes;
# 0.708, 22/33, 0.861, 0.356 when the first floors were set (0.68, 0.60,
# 0.82, 0.35).
# The test also checks what --keep leaves (each clip's truth notes), that
# --misses accounts for every missed repeated note, and that bad --seeds,
# bad --floors and an --only that names no condition are refused by name.
# Missing fluidsynth, soundfont, numpy/scipy or mir_eval fails the test
# (scripts/install-deps.sh installs them).
set -euo pipefail
. "$(dirname "$0")/../lib/lock.sh"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ -x "$EBB" ] || { echo "FAIL: no ebb binary at $EBB" >&2; exit 1; }
[ -x /usr/bin/python3 ] || { echo "FAIL: /usr/bin/python3 is missing" >&2; exit 1; }
rm -rf "$EBB_TEST_TMP" && mkdir -p "$EBB_TEST_TMP"
out="$EBB_TEST_TMP/bench.txt"
/usr/bin/python3 "$ROOT/bench/songtrace_real.py" --ebb "$EBB" --quick --keep "$EBB_TEST_TMP/clips" \
  --misses --floors 0.72,0.66,0.85,0.25 >"$out" || { cat "$out"; echo "FAIL: songtrace on real samples below its floors (or a tool is missing; see above)" >&2; exit 1; }
cat "$out"
# the kept clips carry their truth notes
for c in voice_solo sax_piano_0dB flute_band_0dB synthvoice_band_-6dB; do
  [ "$(head -1 "$EBB_TEST_TMP/clips/$c.truth.csv")" = "onset,offset,midi" ] &&
    [ "$(wc -l <"$EBB_TEST_TMP/clips/$c.truth.csv")" -gt 5 ] ||
    { echo "FAIL: --keep left no truth notes for $c" >&2; exit 1; }
done
# --misses: the causes add up to the repeated notes ebb missed
/usr/bin/python3 - "$out" <<'PY' || { echo "FAIL: --misses does not account for every missed repeated note" >&2; exit 1; }
import re, sys
t = open(sys.argv[1]).read()
hit, n = map(int, re.search(r"^ebb .*repeated notes found (\d+)/(\d+)", t, re.M).groups())
m = re.search(r"missed repeated notes by cause: (\d+) of (\d+)", t)
causes = sum(int(x) for x in re.findall(r"^  [a-z0-9 -]+?\s+(\d+) \(voice", t, re.M))
ok = m and int(m.group(1)) == n - hit and int(m.group(2)) == n and causes == n - hit
print(f"misses: {n - hit} missed of {n}, causes sum to {causes}")
sys.exit(0 if ok else 1)
PY
# bad options name what was wrong
for bad in "--seeds 1x" "--seeds 5,5" "--floors 0.7,0.6" "--only nosuch"; do
  # shellcheck disable=SC2086
  if msg=$(/usr/bin/python3 "$ROOT/bench/songtrace_real.py" --ebb "$EBB" $bad 2>&1); then
    echo "FAIL: songtrace_real $bad was accepted" >&2; exit 1
  fi
  case "$msg" in *"${bad%% *}"*) ;; *) echo "FAIL: songtrace_real $bad: the error does not name the option: $msg" >&2; exit 1 ;; esac
done
# The benchmark's own set (seeds 1000: 20 clips x 16 s, what `make bench`
# prints), against floors a little under issue 16's goals: mean note F1@50
# 0.65, repeated notes 0.80, RPA 0.85 at/above the band and 0.65 at -6 dB.
# It measured 0.747, 174/214 = 0.813, 0.928 and 0.814 with the re-attack
# model (session 14), so the floors are 0.72, 0.79, 0.90 and 0.78.
# Under the sanitizers (EBB_TEST_SLOWDOWN > 1) the 20 clips alone took more
# than the 600 s limit on a loaded 2-core machine (2026-12-07); there the
# quick set above is what runs, and `make test` measures the full set.
if [ "${EBB_TEST_SLOWDOWN:-1}" -gt 1 ]; then
  echo "PASS: songtrace_real (the quick set's floors, truth notes kept, misses by cause, bad options; the benchmark's 20 clips run in the plain build only)"
  exit 0
fi
full="$EBB_TEST_TMP/bench-full.txt"
/usr/bin/python3 "$ROOT/bench/songtrace_real.py" --ebb "$EBB" --floors 0.72,0.79,0.90,0.78 \
  >"$full" || { cat "$full"; echo "FAIL: songtrace on the benchmark's 20 clips below its floors (see above)" >&2; exit 1; }
grep -E "^(ebb |aubio)|by timbre|^speed" "$full"
echo "PASS: songtrace_real (floors on the quick set and the benchmark, truth notes kept, misses by cause, bad options)"
