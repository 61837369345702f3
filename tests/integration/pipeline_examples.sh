#!/usr/bin/env bash
# The shipped example configs are valid and do what their descriptions say:
# synthetic-gpu.json lists and checks; synthetic-faults reports its leak and
# its memory outside ebb; checksum.json runs the example plugin (its
# plugin_dirs pointed at this build's examples/stages).
set -u
: "${EBB:?}" "${EBB_SOURCE_DIR:?}" "${EBB_EXAMPLE_PLUGIN_DIR:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
E="$EBB_SOURCE_DIR/examples/configs"
printf 'abc' > "$T/in.txt"

"$EBB" pipelines --config "$E/synthetic-gpu.json" > "$T/pl" || fail "synthetic-gpu.json: exit $?"
grep -q "^synthetic-gpu  ($E/synthetic-gpu.json, release after-stage)" "$T/pl" ||
  fail "synthetic-gpu.json: $(cat "$T/pl")"
grep -q "^synthetic-faults " "$T/pl" || fail "synthetic-faults missing"

"$EBB" run --pipeline synthetic-faults --config "$E/synthetic-gpu.json" --device cuda --no-cache \
  -o "$T/out" "$T/in.txt" > "$T/out.log" 2> "$T/err" || fail "synthetic-faults: exit $?: $(cat "$T/err")"
cat "$T/out.log"
grep -q '^\[leaky\] leaked 64 MiB in 1 blocks; freed by ebb$' "$T/out.log" || fail "no leak line"
grep -q '^\[outsider\] 128 MiB held outside ebb (taken from the driver directly)$' "$T/out.log" ||
  fail "no outside line"

sed "s|\"../../build/examples/stages\"|\"$EBB_EXAMPLE_PLUGIN_DIR\"|" "$E/checksum.json" > "$T/checksum.json"
grep -q "$EBB_EXAMPLE_PLUGIN_DIR" "$T/checksum.json" || fail "checksum.json: plugin_dirs not as expected"
"$EBB" run --pipeline checksum --config "$T/checksum.json" --device cuda --no-cache -o "$T/out" \
  "$T/in.txt" > "$T/out2.log" 2> "$T/err2" || fail "checksum: exit $?: $(cat "$T/err2")"
cat "$T/out2.log"
# FNV-1a 64 of "abc"
grep -q '^\[checksum\] 3 bytes, fnv1a64 e71fa2190541574b$' "$T/out2.log" || fail "checksum value"
[ "$fails" = 0 ] && echo "PASS" || echo "$fails failure(s)"
exit $((fails > 0))
