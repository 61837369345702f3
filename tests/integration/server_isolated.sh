#!/usr/bin/env bash
# A loaded pipeline with an isolated stage ("isolate": true: the stage runs in
# an ebb-worker process): the worker is started by the load and must survive
# the HTTP connection that asked for it (workers die with the thread that
# started them), so items in later connections run on it without a reload;
# while loaded, the memory is the worker's, not the server's; unload ends the
# worker and fakegpu-smi then lists neither.
set -u
: "${EBB:?}" "${FAKEGPU_SMI:?}" "${FAKEGPU_STATE:?}" "${EBB_TEST_TMP:?}"
T=$EBB_TEST_TMP
rm -rf "$T" && mkdir -p "$T"
rm -f "$FAKEGPU_STATE"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
SERVER=
trap '[ -n "$SERVER" ] && kill -TERM "$SERVER" 2>/dev/null && wait "$SERVER"' EXIT
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"iso": {"stages": [{"stage": "synthetic", "name": "w", "isolate": true, "cache": false,
                                   "options": {"weights_mib": 256}}]}}}
JSON
echo "any input" > "$T/input.txt"
"$EBB" serve --config "$T/cfg.json" --listen 127.0.0.1:0 --data-dir "$T/data" --input-dir "$T" > "$T/log" 2>&1 &
SERVER=$!
for _ in $(seq 100); do grep -q '^ebb: listening on' "$T/log" 2>/dev/null && break; sleep 0.1; done
URL=$(head -1 "$T/log" | sed -n 's/^ebb: listening on //p')
[ -n "$URL" ] || { echo "FAIL: no listening line"; cat "$T/log"; exit 1; }
req() {
  local m=$1 p=$2; shift 2
  local ct=() # JSON bodies say so (the server refuses other types for them)
  case " $* " in *" -d "*) ct=(-H 'Content-Type: application/json') ;; esac
  BODY=$(curl -s -o - -w '\n%{http_code}' -X "$m" "$URL$p" "${ct[@]}" "$@")
  CODE=${BODY##*$'\n'}
  BODY=${BODY%$'\n'*}
}
jget() { python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(eval("d"+sys.argv[2]))' "$1" "$2" 2>/dev/null; }
apps() { "$FAKEGPU_SMI" --query-compute-apps=pid,used_memory --format=csv,noheader,nounits; }

req POST /v1/sessions -d '{"pipeline": "iso"}'
[ "$CODE" = 201 ] || fail "session on iso: $CODE $BODY"
S=$(jget "$BODY" '["id"]')
sleep 0.3 # a worker killed with its connection's thread would be gone by now
others=$(apps | awk -F', *' -v p="$SERVER" '$1 != p {n++; s += $2} END {print n + 0, s + 0}')
set -- $others
[ "$1" = 1 ] && [ "$2" -ge 256 ] || fail "expected one worker holding the stage, fakegpu-smi: $(apps)"
worker=$(apps | awk -F', *' -v p="$SERVER" '$1 != p {print $1}')
for i in 1 2; do
  req POST "/v1/sessions/$S/items" -d "{\"input\": \"$T/input.txt\"}"
  [ "$CODE" = 200 ] || fail "item $i on the isolated pipeline: $CODE $BODY"
done
now=$(apps | awk -F', *' -v p="$SERVER" '$1 != p {print $1}')
[ "$now" = "$worker" ] || fail "the worker changed between items ($worker -> $now): it was reloaded"
req POST /v1/pipelines/iso/unload
[ "$CODE" = 200 ] || fail "unload: $CODE $BODY"
[ -z "$(apps)" ] || fail "after unload fakegpu-smi still lists: $(apps)"
kill -0 "$worker" 2>/dev/null && fail "worker $worker still running after unload"
kill -TERM "$SERVER"; wait "$SERVER"; rc=$?; SERVER=
[ "$rc" = 0 ] || fail "ebb serve exited $rc on SIGTERM"
if [ "$fails" -ne 0 ]; then echo "--- server log"; cat "$T/log"; exit 1; fi
echo "server_isolated: all checks passed"
