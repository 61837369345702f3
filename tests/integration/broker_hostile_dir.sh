#!/usr/bin/env bash
# THE BROKER DIRECTORY IS HOSTILE INPUT (issue 45, docs/broker.md "The
# directory"). A shared directory (--broker-group users); planted there,
# once by this user and once by a group member (uid 4201, primary group
# users, run with setpriv): a FIFO named like a claim, a FIFO named like a
# peer's socket, a FIFO in the claims' lock's place, a symlink named like a
# claim, a 100 MB file named like a claim, a forged claim for a dead pid,
# and (by the member) a forged claim for pid 1 with its real start time.
# `ebb reclaim` and a server's load answer within --broker-timeout + 1 s,
# the junk is logged and ignored, the forged claims are dropped (removed).
# Needs root (the second user): skipped (77) otherwise.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB:?}"
if [ "$(id -u)" != 0 ] || ! command -v setpriv > /dev/null || ! getent group users > /dev/null; then
  echo "SKIP: needs root, setpriv and the group 'users' to run a second user"; exit 77
fi
. "$(dirname "$0")/../lib/broker.sh"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300
GID=$(getent group users | cut -d: -f3)
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"p": {"stages": [{"stage": "synthetic", "name": "w", "cache": false,
                                 "options": {"weights_mib": 256, "touch": "sample"}}]}}}
JSON
broker_serve A "$T/cfg.json" --broker-group users
member() { setpriv --reuid 4201 --regid "$GID" --clear-groups "$@"; }
start1=$(awk '{sub(/^.*\) /, ""); split($0, f, " "); print f[20]}' /proc/1/stat)
dead=$(sh -c 'echo $$')
far=$(( $(date +%s) + 365 * 86400 ))
plant() { # RUN-AS-PREFIX... : plants the junk in $BD
  "$@" mkfifo "$BD/claim.999" "$BD/424242.sock" &&
  "$@" ln -s /etc/passwd "$BD/claim.998" &&
  "$@" truncate -s 100M "$BD/claim.997" &&
  "$@" sh -c "rm -f '$BD/claims.lock'; mkfifo '$BD/claims.lock'" &&
  "$@" sh -c "printf '%s' '{\"v\":2,\"seq\":996,\"holder\":$dead,\"device\":\"$UUID\",\"bytes\":8589934592,\"base\":0,\"start\":0,\"until\":$far}' > '$BD/claim.996'" &&
  "$@" sh -c "printf '%s' '{\"v\":2,\"seq\":995,\"holder\":1,\"device\":\"$UUID\",\"bytes\":2147483648,\"base\":0,\"start\":$start1,\"until\":$(( $(date +%s) + 600 ))}' > '$BD/claim.995'" ||
    fail "planting the junk failed"
}
UUID=$("$FAKEGPU_SMI" --query-gpu=uuid --format=csv,noheader 2>/dev/null | head -1)
secs() { date +%s.%N; }
within() { # WHAT SECONDS LIMIT
  echo "--- $1: $2 s (limit $3 s)"
  [ "$(echo "$2 < $3" | bc)" = 1 ] || fail "$1 took $2 s, over $3 s"
}
for who in self member; do
  rm -rf "${BD:?}"/claim.* "$BD/424242.sock" "$BD/claims.lock"
  if [ $who = self ]; then plant env; else plant member; fi
  ls -la "$BD"
  t0=$(secs)
  timeout 20 "$EBB" reclaim --device cuda:0 --bytes 1G --broker-dir "$BD" --broker-timeout 2 --wait 1 \
    --hold 0.2 > "$T/r.$who" 2>&1
  rc=$?
  within "$who's junk: ebb reclaim" "$(echo "$(secs) - $t0" | bc)" 3
  cat "$T/r.$who"
  [ $rc = 0 ] || fail "ebb reclaim beside $who's junk exited $rc"
  for f in claim.999 claim.998 claim.997; do
    grep -q "ignoring $BD/$f in the broker directory" "$T/r.$who" || fail "$who's $f was not logged"
  done
  grep -q "ignoring $BD/424242.sock in the broker directory: a FIFO" "$T/r.$who" ||
    fail "$who's FIFO named like a peer was not logged"
  [ -e "$BD/claim.996" ] && fail "$who's forged claim for dead pid $dead was not dropped"
  if [ $who = member ]; then
    grep -q "dropping claim $BD/claim.995 (holder pid 1, 2048 MiB): its file belongs to another user than its holder" "$T/r.$who" ||
      fail "the member's claim for pid 1 was not dropped naming why"
    [ -e "$BD/claim.995" ] && fail "the member's claim for pid 1 is still there"
  fi
  # a load on the server claims through the same directory
  rm -f "$BD/claims.lock"; if [ $who = self ]; then mkfifo "$BD/claims.lock"; else member mkfifo "$BD/claims.lock"; fi
  t0=$(secs)
  c=$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 -X POST "$URL_A/v1/pipelines/p/load")
  within "$who's junk: a load" "$(echo "$(secs) - $t0" | bc)" 3
  [ "$c" = 200 ] || fail "the load beside $who's junk answered $c"
  curl -s -o /dev/null -X POST "$URL_A/v1/pipelines/p/unload"
done
grep -q "ignoring $BD/claims.lock in the broker directory: a FIFO" "$T/logA" ||
  fail "the server did not log the FIFO in the lock's place: $(grep broker "$T/logA")"
kill -TERM "$PID_A"; wait "$PID_A" || fail "the server exited $? on SIGTERM"; PIDS=()
[ $fails -eq 0 ] && echo "broker_hostile_dir: ok"
exit $((fails > 0))
