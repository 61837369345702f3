#!/usr/bin/env bash
# Nothing reads ebb's own log: the live page (GET /v1/events) and /metrics
# are fed by the event bus (src/base/events.c), of which the log is one more
# subscriber. The same job (stage a, stage b that leaks 4 MiB) runs on a
# fresh fake GPU under three servers whose logs differ:
#   1. --log-format text (the fixed lines: "[a] released N MiB of GPU memory")
#   2. --log-format json (the same facts, one JSON object a line)
#   3. EBB_LOG_LEVEL=error: the release and leak lines are not written at all
#      (the strongest rewording there is), which a page that learnt its
#      releases and leaks from the log (as GET /v1/events once did, with a
#      tap and sscanf over "leaked %llu MiB in %zu blocks") would show blank.
# The figures the page and /metrics show (releases per stage with bytes, the
# leak with its bytes and site, the job's states and per-stage bytes, the
# fact counters) must be the same in all three, and present.
set -u
: "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300 EBB_EVENTS_INTERVAL_MS=50
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "demo": {"stages": [{"stage": "synthetic", "name": "a", "options": {"weights_mib": 64, "activations_mib": 32}},
                      {"stage": "synthetic", "name": "b", "options": {"weights_mib": 128, "leak_mib": 4}}]}}}
JSON
echo "any input" > "$T/input.txt"
PY=$EBB_SOURCE_DIR/tests/integration/server_events_facts.py
run() { # NAME ARGS...: a fresh device and data dir, one job; its figures in $T/NAME.json
  local name=$1; shift
  rm -f "$FAKEGPU_STATE"
  serve "$T/$name.log" --config "$T/cfg.json" --data-dir "$T/data-$name" --input-dir "$T" \
    --no-cache "$@"
  drive "$T/$name.log" sh -c "timeout 60 python3 '$PY' figures '$URL' '$T/input.txt' > '$T/$name.json'"
}
run text --log-format text
run json --log-format json
EBB_LOG_LEVEL=error run quiet --log-format text

grep -q '^\[a\] released [0-9]* MiB of GPU memory$' "$T/text.log" ||
  fail "the text log has no '[a] released N MiB of GPU memory' line"
grep -q '^\[b\] leaked 4 MiB in 1 blocks; freed by ebb$' "$T/text.log" ||
  fail "the text log has no '[b] leaked 4 MiB in 1 blocks; freed by ebb' line"
grep -q '"msg":"released [0-9]* MiB of GPU memory"' "$T/json.log" ||
  fail "the JSON log has no release line"
grep -q 'released [0-9]* MiB\|leaked' "$T/quiet.log" &&
  fail "EBB_LOG_LEVEL=error still wrote release or leak lines: $(grep 'released\|leaked' "$T/quiet.log" | head -3)"
for n in json quiet; do
  cmp -s "$T/text.json" "$T/$n.json" ||
    fail "the page's figures differ between --log-format text and the $n run:
text:  $(cat "$T/text.json")
$n: $(cat "$T/$n.json")"
done
[ -s "$T/text.json" ] || fail "no figures were read"
# a level that is none is refused, naming the variable
out=$(EBB_LOG_LEVEL=loud "$EBB" version 2>&1); rc=$?
[ $rc -eq 2 ] || fail "EBB_LOG_LEVEL=loud: ebb exited $rc, expected 2"
echo "$out" | grep -q 'EBB_LOG_LEVEL=loud: expected debug, info, warn or error' ||
  fail "EBB_LOG_LEVEL=loud: the error does not name it: $out"
echo "figures (all three runs): $(cat "$T/text.json")"
[ $fails -eq 0 ] && echo "server_events_logs: all checks passed"
exit $((fails > 0))
