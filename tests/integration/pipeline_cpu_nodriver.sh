#!/usr/bin/env bash
# Acceptance (issue #4): a CPU-only run (--device cpu) of a synthetic pipeline
# never calls the driver. EBB_LIBCUDA and EBB_LIBNVML point at a library whose
# every entry point aborts (tests/support/abortcuda.c); with ABORTCUDA_MARK
# the library also records being loaded at all, so the test proves nothing
# even dlopen'ed it. The same run with the release lines, leak report and
# outside-memory report of the CPU device.
set -u
: "${EBB:?}" "${EBB_ABORTCUDA:?}"
. "$(dirname "$0")/../lib/common.sh"
[ -f "$EBB_ABORTCUDA" ] || { echo "FAIL: $EBB_ABORTCUDA was not built" >&2; exit 1; }
echo "x" > "$T/input.txt"
export EBB_LIBCUDA="$EBB_ABORTCUDA" EBB_LIBNVML="$EBB_ABORTCUDA" ABORTCUDA_MARK="$T/loaded"

# the built-in synthetic pipeline
"$EBB" run --pipeline synthetic --device cpu --no-cache -o "$T/out" "$T/input.txt" \
  > "$T/out.log" 2> "$T/err"
rc=$?
cat "$T/out.log"
[ "$rc" = 0 ] || fail "ebb run --device cpu exited $rc: $(cat "$T/err")"
[ -e "$T/loaded" ] && fail "the driver library was loaded: $(cat "$T/loaded")"
for s in a b c; do
  grep -qE "^\[$s\] done in [0-9.]+ s, peak [0-9]+ MiB, host peak [0-9]+ MiB$" "$T/out.log" || fail "no done line for $s"
  grep -qE "^\[$s\] released [0-9]+ MiB of device memory \(cpu\)$" "$T/out.log" ||
    fail "no release line for $s"
done
grep -q '"device": "cpu"' "$T/out/result.json" || fail "result.json does not say cpu"

# leaks, memory outside ebb, failure and a plugin, all on the CPU device
cat > "$T/cfg.json" <<JSON
{"plugin_dirs": ["${EBB_EXAMPLE_PLUGIN_DIR:-/nonexistent}"],
 "pipelines": {"p": {"stages": [
  {"stage": "synthetic", "name": "leaky", "cache": false, "options": {"weights_mib": 8, "leak_mib": 16}},
  {"stage": "synthetic", "name": "outsider", "cache": false, "options": {"weights_mib": 8, "outside_mib": 32}},
  {"stage": "checksum", "cache": false}]},
  "bad": {"stages": [{"stage": "synthetic", "cache": false, "options": {"fail": "run"}}]}}}
JSON
"$EBB" run --pipeline p --config "$T/cfg.json" --device cpu --no-cache -o "$T/out" \
  "$T/input.txt" > "$T/out2.log" 2> "$T/err2"
rc=$?
cat "$T/out2.log"
[ "$rc" = 0 ] || fail "p exited $rc: $(cat "$T/err2")"
grep -q '^\[leaky\] leaked 16 MiB in 1 blocks; freed by ebb$' "$T/out2.log" || fail "no leak line"
grep -q '^\[outsider\] 32 MiB held outside ebb (taken from the driver directly)$' "$T/out2.log" ||
  fail "no outside line"
grep -q '^\[checksum\] 2 bytes, fnv1a64' "$T/out2.log" || fail "the plugin did not run"
"$EBB" run --pipeline bad --config "$T/cfg.json" --device cpu --no-cache -o "$T/out" \
  "$T/input.txt" > /dev/null 2> "$T/err3"
rc=$?
[ "$rc" = 1 ] || fail "fail=run exited $rc"
grep -q "fail=run" "$T/err3" || fail "fail=run message: $(cat "$T/err3")"
[ -e "$T/loaded" ] && fail "the driver library was loaded: $(cat "$T/loaded")"

# the other commands never touch the driver either
"$EBB" pipelines > /dev/null || fail "ebb pipelines exited $?"
"$EBB" stages > /dev/null || fail "ebb stages exited $?"
[ -e "$T/loaded" ] && fail "the driver library was loaded by pipelines/stages"

[ "$fails" = 0 ] && echo "PASS" || echo "$fails failure(s)"
exit $((fails > 0))
