#!/usr/bin/env bash
# THE SWITCH ACCEPTANCE. On a fake device too small to hold two pipelines at
# once (2048 MiB; A and B each take ~1200 MiB with the context), with a live
# session on A running an item, loading B succeeds without any out-of-memory:
# A's session is drained (its item in flight finishes) and stopped, A is
# verifiably gone (the manager's free-memory lines before/after unload, and
# fakegpu-smi, run by the EBB_STAGE_HOOK between A's unload and B's load,
# shows the server at 0 MiB), then B loads; fakegpu-smi polled from outside
# during the switch never sees A and B held together. Switching back to A
# (its need is now known and does not fit beside B) goes the same way. A
# pipeline larger than the device fails cleanly (503) and the server goes on. The idle server holds 0 bytes (fakegpu-smi lists nothing for
# its pid) after unload and after release; SIGTERM exits 0.
set -u
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=2048 FAKEGPU_CONTEXT_MIB=300
SAMPLER=
trap '{ [ -n "$SAMPLER" ] && kill "$SAMPLER"; stop_server; } >/dev/null 2>&1 || true' EXIT
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "A": {"stages": [{"stage": "synthetic", "name": "a1", "cache": false,
                    "options": {"weights_mib": 600, "run_ms": 1500}},
                   {"stage": "synthetic", "name": "a2", "cache": false,
                    "options": {"weights_mib": 300}}]},
  "B": {"stages": [{"stage": "synthetic", "name": "b1", "cache": false,
                    "options": {"weights_mib": 900}}]},
  "huge": {"stages": [{"stage": "synthetic", "name": "h", "cache": false,
                       "options": {"weights_mib": 4096}}]}}}
JSON
echo "any input" > "$T/input.txt"
# the hook: what fakegpu-smi says the server holds at each pipeline event
export HOOK_LOG="$T/hook.log" HOOK_EVENTS='pipeline-*' EBB_STAGE_HOOK="sh $SMI_HOOK"
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T"
smi_used() { held_by "$SERVER"; } # MiB this server holds per fakegpu-smi
gib_line() { # pipeline when -> the GiB figure of the last such line
  grep -F "[pipeline $1] GPU memory free $2: " "$T/log" | tail -1 | sed 's/.*: \([0-9.]*\) GiB$/\1/'
}

# a live session on A (opening it loads A)
req POST /v1/sessions -d '{"pipeline": "A"}'
[ "$CODE" = 201 ] || fail "open session on A: $CODE $BODY"
SID=$(jget "$BODY" '["id"]')
usedA=$(smi_used)
[ "$usedA" -ge 1150 ] && [ "$usedA" -le 1300 ] || fail "A loaded: fakegpu-smi says $usedA MiB, expected ~1200"
req POST "/v1/sessions/$SID/items" -d "{\"input\": \"$T/input.txt\"}"
[ "$CODE" = 200 ] && [ "$(jget "$BODY" '["state"]')" = succeeded ] || fail "item on A: $CODE $BODY"
[ "$(smi_used)" -ge 1150 ] || fail "A's stages were released after an item (should stay loaded)"
grep -q 'done in' "$T/log" || fail "the item did not run the stages"
nloads=$(grep -c 'a1 load\|\[a1\] load' "$T/log")

# an item in flight (1.5 s) while B is loaded
curl -s -o "$T/item2" -w '%{http_code}' -X POST "$URL/v1/sessions/$SID/items" \
  -H 'Content-Type: application/json' -d "{\"input\": \"$T/input.txt\"}" > "$T/item2.code" &
ITEM=$!
# sample fakegpu-smi from outside during the switch
( while :; do smi_used; sleep 0.02; done ) > "$T/samples" &
SAMPLER=$!
sleep 0.5
req POST /v1/pipelines/B/load
[ "$CODE" = 200 ] || fail "load B while A has a live session: $CODE $BODY"
wait "$ITEM"
kill "$SAMPLER"; wait "$SAMPLER" 2>/dev/null; SAMPLER=
[ "$(cat "$T/item2.code")" = 200 ] || fail "the item in flight during the switch failed: $(cat "$T/item2.code") $(cat "$T/item2")"
# order: item done, A unloaded (before/after lines), then B loaded
ln_before=$(grep -n 'pipeline A\] GPU memory free before unload' "$T/log" | head -1 | cut -d: -f1)
ln_after=$(grep -n 'pipeline A\] GPU memory free after unload' "$T/log" | head -1 | cut -d: -f1)
ln_load=$(grep -n 'pipeline B\] GPU memory free after load' "$T/log" | head -1 | cut -d: -f1)
[ -n "$ln_before" ] && [ -n "$ln_after" ] && [ -n "$ln_load" ] &&
  [ "$ln_before" -lt "$ln_after" ] && [ "$ln_after" -lt "$ln_load" ] ||
  fail "log lines missing or out of order (before unload $ln_before, after unload $ln_after, B after load $ln_load)"
grep -q '^\[pipeline A\] stopped 1 session (drained)' "$T/log" || fail "no drained-session line for A"
b=$(gib_line A 'before unload'); a=$(gib_line A 'after unload'); l=$(gib_line B 'after load')
echo "A before unload $b GiB, after unload $a GiB; B after load $l GiB"
python3 -c "import sys; b,a,l=map(float,sys.argv[1:]); sys.exit(0 if 0.7<=b<=0.9 and a>=1.99 and 0.8<=l<=0.95 else 1)" "$b" "$a" "$l" ||
  fail "free memory: before unload $b, after unload $a (expected 2.00: A and the context gone), B after load $l"
min=$(sort -n "$T/samples" | head -1); max=$(sort -n "$T/samples" | tail -1)
echo "fakegpu-smi during the switch: min $min MiB, max $max MiB ($(wc -l < "$T/samples") samples)"
[ "${max:-9999}" -le 1300 ] || fail "fakegpu-smi saw $max MiB during the switch: A and B were held together"
# from outside, between A's unload and B's load
hookA=$(grep '^pipeline-unloaded A ' "$T/hook.log" | head -1)
hookB=$(grep -n '^pipeline-loaded B ' "$T/hook.log" | head -1)
echo "hook: $hookA / $hookB"
set -- $hookA
[ "${4:-x}" = 0 ] || fail "fakegpu-smi after A's unload: '${4:-no hook line}' MiB, expected 0 (hook log: $(cat "$T/hook.log"))"
[ "${3:-0}" -ge $((1150 << 20)) ] || fail "A's unload handed back ${3:-?} bytes, expected ~1264 MiB"
[ "$(grep -n '^pipeline-unloaded A ' "$T/hook.log" | head -1 | cut -d: -f1)" -lt "${hookB%%:*}" ] ||
  fail "B was loaded before A's unload was measured"
usedB=$(smi_used)
[ "$usedB" -ge 1150 ] && [ "$usedB" -le 1300 ] || fail "B loaded: fakegpu-smi says $usedB MiB"
grep -qi 'out of memory\|out of device memory\|EBB_EOOM' "$T/log" && fail "out of memory during the switch: $(grep -i 'out of' "$T/log")"
# A's session is stopped: items are refused, closing still works
req POST "/v1/sessions/$SID/items" -d "{\"input\": \"$T/input.txt\"}"
[ "$CODE" = 409 ] && [ "$(jget "$BODY" '["error"]["code"]')" = conflict ] || fail "item on a stopped session: $CODE $BODY"
case $BODY in *"pipeline 'A' was unloaded"*) ;; *) fail "the refusal does not say why: $BODY" ;; esac
req GET /v1/pipelines
python3 -c '
import json,sys
d={p["name"]:p for p in json.loads(sys.argv[1])["pipelines"]}
assert d["B"]["loaded"] and not d["A"]["loaded"], d
assert d["A"]["need_bytes"] >= 1150<<20, d["A"]' "$BODY" || fail "/v1/pipelines after the switch: $BODY"
req DELETE "/v1/sessions/$SID"
[ "$CODE" = 200 ] || fail "close the stopped session: $CODE $BODY"

# back to A through a new session: A's need is known (~1200 MiB) and does not
# fit beside B, so B goes first
req POST /v1/sessions -d '{"pipeline": "A"}'
[ "$CODE" = 201 ] || fail "session on A again: $CODE $BODY"
SID2=$(jget "$BODY" '["id"]')
grep -q '\[pipeline B\] GPU memory free after unload' "$T/log" || fail "B was not unloaded before A came back"
req POST "/v1/sessions/$SID2/items" -d "{\"input\": \"$T/input.txt\"}"
[ "$CODE" = 200 ] || fail "item on A after switching back: $CODE $BODY"

# a pipeline larger than the device fails cleanly (its need is unknown, so A
# is unloaded first, as for any switch)
req POST /v1/pipelines/huge/load
[ "$CODE" = 503 ] && [ "$(jget "$BODY" '["error"]["code"]')" = out_of_memory ] || fail "huge load: $CODE $BODY"
req GET /healthz
[ "$CODE" = 200 ] || fail "server not answering after the failed load"

# unload: the idle server holds nothing
req DELETE "/v1/sessions/$SID2"
req POST /v1/pipelines/A/unload
[ "$CODE" = 200 ] || fail "unload A: $CODE $BODY"
[ "$(smi_used)" = 0 ] || fail "after unload fakegpu-smi shows $(smi_used) MiB for the server"
apps | grep -q "^$SERVER," &&
  fail "fakegpu-smi still lists the server's pid after unload"
req POST /v1/release
[ "$CODE" = 200 ] || fail "release: $CODE $BODY"
[ "$(smi_used)" = 0 ] || fail "after release fakegpu-smi shows $(smi_used) MiB"
req GET /v1/memory
[ "$(jget "$BODY" '["context"]["held"]')" = False ] || fail "context still held when idle: $BODY"
stop_server; rc=$?
[ "$rc" = 0 ] || fail "ebb serve exited $rc on SIGTERM"
if [ "$fails" -ne 0 ]; then echo "--- server log"; cat "$T/log"; exit 1; fi
echo "server_switch: all checks passed"
