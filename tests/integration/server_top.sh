#!/usr/bin/env bash
# `ebb top` in tmux against a server on two fake devices (ebb serve --devices
# cuda:0,cuda:1; 'other' pinned to cuda:0, 'demo' to cuda:1), read with
# capture-pane: a section per device with its total, the owners (pipeline ▸
# stage) under the device that holds them while a job runs, an asleep owner
# marked asleep, the release figures of the stages (the unload's, as the
# events carry them), a narrow terminal (30x12) shows clipped lines and no
# wrapping, `q` quits. Then `ebb top --local --once` lists the server process
# from NVML, and with no server reachable `ebb top --once` shows the driver's
# view. The last screen is saved as build/artifacts/top.txt.
set -u
: "${EBB_BUILD_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_DEVICES=2 FAKEGPU_MEMORY_MIB=4096,3072 FAKEGPU_CONTEXT_MIB=300
command -v tmux >/dev/null || { echo "FAIL: tmux is missing (scripts/install-deps.sh installs it)"; exit 1; }
TM="tmux -L ebb-top-test-$$ -f /dev/null"
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {
  "other": {"devices": ["cuda:0"], "stages": [{"stage": "synthetic", "name": "o", "options": {"weights_mib": 320}}]},
  "demo": {"devices": ["cuda:1"], "stages": [{"stage": "synthetic", "name": "a", "options": {"weights_mib": 256, "activations_mib": 128, "run_ms": 2500}},
                      {"stage": "synthetic", "name": "b", "options": {"weights_mib": 512, "run_ms": 1500}}]}}}
JSON
echo "any input" > "$T/input.txt"
trap '{ $TM kill-server; stop_server; } >/dev/null 2>&1 || true' EXIT
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --no-cache \
  --devices cuda:0,cuda:1

$TM new-session -d -s top -x 120 -y 45 "env LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=xterm-256color $EBB top --server $URL; echo top-exited-\$? > $T/exit; sleep 30"
screen() { $TM capture-pane -p -t top > "$T/screen" 2>/dev/null; cat "$T/screen"; }
wait_screen() { # grep-pattern what [tries]
  for _ in $(seq "${3:-100}"); do
    screen | grep -q -- "$1" && return 0
    sleep 0.1
  done
  fail "$2 never appeared on ebb top's screen; last screen:"; cat "$T/screen" >&2
  return 1
}
wait_screen "$URL · live" "the live header"
curl -s -X POST "$URL/v1/pipelines/other/load" > "$T/load"
grep -q '"device":"cuda:0"' "$T/load" || fail "loading 'other' answered $(cat "$T/load")"
# owners by the device section they appear in: "cuda:N owner" lines
sections() {
  python3 - "$T/screen" <<'PY'
import re, sys
dev = None
for line in open(sys.argv[1], encoding="utf-8"):
    m = re.match(r"^(cuda:\d+)  ", line)
    if m:
        dev = m.group(1)
    elif re.match(r"^[A-Z]", line):
        dev = None
    m = re.match(r"^ (\S+ ▸ \S+) +([0-9.]+ [KMG]?i?B) +\S+ \S+( +asleep)?", line)
    if dev and m:
        print(dev, m.group(1).replace(" ", ""), m.group(3) and "asleep" or "held")
PY
}
curl -s -X POST "$URL/v1/jobs" -H 'Content-Type: application/json' \
  -d "{\"pipeline\": \"demo\", \"input\": \"$T/input.txt\"}" > "$T/job"
JOB=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["id"])' "$T/job" 2>/dev/null)
[ -n "$JOB" ] || { fail "POST /v1/jobs answered $(cat "$T/job")"; JOB=none; }
wait_screen "demo ▸ a  *[0-9.]* [MG]iB" "owner 'demo ▸ a' holding memory" 400
wait_screen "demo ▸ b  *[0-9.]* [MG]iB" "owner 'demo ▸ b' holding memory" 400
screen > /dev/null
SEC=$(sections)
grep -q "^cuda:0 other▸o held" <<<"$SEC" || fail "'other ▸ o' is not under cuda:0: $SEC"
grep -q "^cuda:1 demo▸b held" <<<"$SEC" || fail "'demo ▸ b' is not under cuda:1: $SEC"
grep -q "^cuda:0 demo" <<<"$SEC" && fail "a demo owner is under cuda:0: $SEC"
grep -Eq "^ \[.*\] [0-9.]+ [MG]iB / 4.00 GiB used" "$T/screen" || fail "no 4 GiB device (cuda:0) bar: $(cat "$T/screen")"
grep -Eq "^ \[.*\] [0-9.]+ [MG]iB / 3.00 GiB used" "$T/screen" || fail "no 3 GiB device (cuda:1) bar: $(cat "$T/screen")"
# the release figures of both stages, as GET /v1/jobs/1 reports them
for _ in $(seq 200); do
  S=$(curl -s "$URL/v1/jobs/$JOB" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')
  [ "$S" = succeeded ] && break
  sleep 0.1
done
[ "$S" = succeeded ] || fail "job 1 ended $S"
# with --devices demo stays loaded on cuda:1; its unload releases each stage:
# the figures the events carry for cuda:1 appear
curl -s -X POST "$URL/v1/pipelines/demo/unload" > "$T/unload"
sleep 1
timeout 2 curl -sN "$URL/v1/events" > "$T/events"
for st in a b; do
  MIB=$(python3 - "$T/events" "$st" <<'PY'
import json, sys
for block in open(sys.argv[1]).read().split("\n\n"):
    if "event: release" in block:
        d = json.loads(block.split("data: ", 1)[1])
        if d["device"] == "cuda:1" and d.get("stage") == sys.argv[2]:
            print("%.0f" % (d["bytes"] / 1048576))
PY
)
  [ -n "$MIB" ] || { fail "no release event of stage $st on cuda:1 after the unload ($(cat "$T/unload"))"; continue; }
  wait_screen "cuda:1  -$(tail -1 <<<"$MIB") MiB released by $st" "the release of stage $st on cuda:1 (-$MIB MiB)"
done
# asleep: 'other ▸ o' stays listed under cuda:0, marked asleep
curl -s -X POST "$URL/v1/pipelines/other/sleep" > "$T/sleep"
for _ in $(seq 50); do
  screen > /dev/null
  SEC=$(sections)
  grep -q "^cuda:0 other▸o asleep" <<<"$SEC" && break
  sleep 0.1
done
grep -q "^cuda:0 other▸o asleep" <<<"$SEC" || fail "'other ▸ o' not shown asleep under cuda:0 after $(cat "$T/sleep"): $(cat "$T/screen")"
wait_screen "^ other  *asleep  *sessions 0  *o on cuda:0" "pipeline 'other' asleep on cuda:0"
wait_screen "released by o (asleep)" "the sleep's release of o"
curl -s -X POST "$URL/v1/pipelines/other/wake" > /dev/null
cp "$T/screen" "$EBB_BUILD_DIR/artifacts/top.txt" 2>/dev/null ||
  { mkdir -p "$EBB_BUILD_DIR/artifacts" && cp "$T/screen" "$EBB_BUILD_DIR/artifacts/top.txt"; }

# a narrow, short terminal: lines are clipped to 30 columns, nothing wraps
$TM resize-window -t top -x 30 -y 12 2>/dev/null || $TM resize-pane -t top -x 30 -y 12
sleep 1.2
screen > /dev/null
W=$(python3 -c 'import sys; print(max([len(l.rstrip("\n")) for l in open(sys.argv[1], encoding="utf-8")] + [0]))' "$T/screen")
[ "$W" -le 30 ] || fail "narrow terminal: a line is $W columns wide: $(cat "$T/screen")"
grep -q "^ebb top" "$T/screen" || fail "narrow terminal: no header line: $(cat "$T/screen")"
[ "$(wc -l < "$T/screen")" -le 12 ] || fail "narrow terminal: more than 12 rows"
[ -f "$T/exit" ] && fail "ebb top exited in a narrow terminal: $(cat "$T/exit")"
$TM resize-window -t top -x 120 -y 45 2>/dev/null || true

# q quits with status 0
$TM send-keys -t top q
for _ in $(seq 50); do [ -f "$T/exit" ] && break; sleep 0.1; done
[ "$(cat "$T/exit" 2>/dev/null)" = top-exited-0 ] || fail "q did not quit ebb top (exit: $(cat "$T/exit" 2>/dev/null))"
$TM kill-server 2>/dev/null

# the driver's view: NVML lists the server (it holds the context while a
# pipeline is loaded)
curl -s -X POST -H "Content-Type: application/json" "$URL/v1/pipelines/demo/load" > /dev/null
OUT=$(COLUMNS=100 "$EBB" top --local --once)
echo "$OUT" | grep -Eq "^ +$SERVER +ebb +[0-9.]+ [MG]iB" || fail "ebb top --local does not list the server (pid $SERVER): $OUT"
OUT=$(COLUMNS=100 "$EBB" top --server http://127.0.0.1:1 --once)
echo "$OUT" | grep -q "no ebb server at http://127.0.0.1:1" || fail "no-server header missing: $OUT"
echo "$OUT" | grep -Eq "^ +$SERVER +ebb" || fail "with no server, the driver's view lacks pid $SERVER: $OUT"
"$EBB" top --server nonsense > /dev/null 2>&1; [ $? = 2 ] || fail "ebb top --server nonsense: exit not 2"

if [ "$fails" -ne 0 ]; then
  echo "--- server log"; cat "$T/log"; exit 1
fi
echo "server_top: all checks passed"
