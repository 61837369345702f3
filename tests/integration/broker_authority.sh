#!/usr/bin/env bash
# Authority does not travel through a peer (issue 45, docs/broker.md "Who
# may ask"). One fake 8 GiB device; server T has a token and an idle 2 GiB
# pipeline, server N has no token, server T2 has a token of its own.
#   1. a second local user (uid 65534, run with setpriv) is refused T's
#      unload directly (401), and its POST /v1/memory/reclaim on N makes T
#      give back nothing: T refuses N's ask (made for anyone) naming the
#      rule, its pipeline stays loaded, fakegpu-smi shows T's bytes held;
#   2. T's operator's `ebb reclaim` (an ask for itself) makes T give it back;
#   3. reloaded, T gives it to T2's admin's POST /v1/memory/reclaim (an ask
#      for a caller that proved a token).
# Needs root (to run the second user): skipped (77) otherwise.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB:?}"
if [ "$(id -u)" != 0 ] || ! command -v setpriv > /dev/null; then
  echo "SKIP: needs root and setpriv to run a second user"; exit 77
fi
. "$(dirname "$0")/../lib/broker.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"a": {"stages": [{"stage": "synthetic", "name": "w", "cache": false,
                                 "options": {"weights_mib": 2048, "touch": "sample"}}]}}}
JSON
printf 'tokenT-0123456789abcdef admin\n' > "$T/tokT"
printf 'tokenT2-0123456789abcdef admin\n' > "$T/tokT2"
chmod 600 "$T/tokT" "$T/tokT2"
nobody() { setpriv --reuid 65534 --regid 65534 --clear-groups "$@"; }
code() { # [curl args...]: the HTTP status
  curl -s -o "$T/body" -w '%{http_code}' "$@"
}
broker_serve T "$T/cfg.json" --token-file "$T/tokT"; UT=$URL
broker_serve N "$T/cfg.json"; UN=$URL
broker_serve T2 "$T/cfg.json" --token-file "$T/tokT2"; UT2=$URL
c=$(code -X POST -H "Authorization: Bearer tokenT-0123456789abcdef" "$UT/v1/pipelines/a/load")
[ "$c" = 200 ] || fail "loading a on T: $c $(cat "$T/body")"
heldT=$(held_by "$PID_T")
[ "$heldT" -ge 2048 ] || fail "T holds $heldT MiB after its load"
want=$((8192 << 20))

# --- 1. the second user: refused directly, and refused through N
c=$(nobody curl -s -o /dev/null -w '%{http_code}' -X POST "$UT/v1/pipelines/a/unload")
[ "$c" = 401 ] || fail "uid 65534's direct unload on T answered $c, expected 401"
nobody curl -s -w '\n%{http_code}' -X POST -H 'Content-Type: application/json' \
  -d "{\"device\": \"cuda:0\", \"bytes\": $want}" "$UN/v1/memory/reclaim" > "$T/n.json"
c=$(tail -1 "$T/n.json")
echo "uid 65534 through N: $(cat "$T/n.json")"
[ "$c" = 200 ] || fail "N's reclaim for uid 65534 answered $c"
[ "$(held_by "$PID_T")" = "$heldT" ] || fail "T gave for uid 65534 through N: its usage went from $heldT to $(held_by "$PID_T") MiB"
grep -q "\"pid\": *$PID_T, *\"skipped\": *\"[^\"]*forbidden[^\"]*token-protected" "$T/n.json" ||
  fail "N's answer does not name T's refusal: $(cat "$T/n.json")"
grep -q "refused an asker (pid $PID_N): broker: pid $PID_N (uid 0) asks for anyone" "$T/logT" ||
  fail "T did not log the refusal: $(grep broker "$T/logT")"
grep -q "gave back" "$T/logT" && fail "T logged a giving: $(grep 'gave back' "$T/logT")"

# --- 2. T's operator asks for itself: T gives
"$EBB" reclaim --device cuda:0 --bytes 8G --broker-dir "$BD" --wait 3 --hold 0.2 > "$T/op.out" 2>&1
cat "$T/op.out"
grep -q "^\[broker\] pid $PID_T (ebb serve) gave back [0-9]* MiB on cuda:0 .*pipeline a unloaded" "$T/op.out" ||
  fail "T did not give to its operator's ebb reclaim"
[ "$(held_by "$PID_T")" = 0 ] || fail "T still holds $(held_by "$PID_T") MiB after its operator's ebb reclaim"

# --- 3. T2's admin (a token holder) asks through T2: T gives
sleep 0.3 # the claim of step 2 (--hold 0.2) is over
c=$(code -X POST -H "Authorization: Bearer tokenT-0123456789abcdef" "$UT/v1/pipelines/a/load")
[ "$c" = 200 ] || fail "reloading a on T: $c $(cat "$T/body")"
c=$(code -X POST -H "Authorization: Bearer tokenT2-0123456789abcdef" -H 'Content-Type: application/json' \
  -d "{\"device\": \"cuda:0\", \"bytes\": $want}" "$UT2/v1/memory/reclaim")
echo "T2's admin: $c $(cat "$T/body")"
[ "$c" = 200 ] || fail "T2's reclaim answered $c"
[ "$(held_by "$PID_T")" = 0 ] || fail "T still holds $(held_by "$PID_T") MiB after T2's admin's reclaim"
grep -q "\"pid\": *$PID_T, *\"what\": *\"ebb serve\", *\"given_bytes\": *[1-9]" "$T/body" ||
  fail "T2's answer does not show T giving: $(cat "$T/body")"

for p in "${PIDS[@]}"; do kill -TERM "$p"; wait "$p" || fail "a server exited $? on SIGTERM"; done
PIDS=()
[ $fails -eq 0 ] && echo "broker_authority: ok"
exit $((fails > 0))
