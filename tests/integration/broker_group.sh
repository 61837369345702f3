#!/usr/bin/env bash
# --broker-group (issue 35, docs/broker.md): processes of two users share one
# broker directory; each side checks the other's credentials on the socket.
# The second user is a bare uid run with setpriv (no account is created):
# uid 4201 with the group "users" (gid 100) as its primary group. One fake
# 8 GiB device shared by both users (its state file opened to them).
#   1. root's `ebb serve --broker-group users` makes the directory 2770
#      root:users and its socket 0660; uid 4201's `ebb reclaim` is answered
#      (root's server gives back its idle pipeline);
#   2. uid 4201's `ebb serve --broker-group users` registers in the same
#      directory; root's `ebb reclaim` asks it and is given its pipeline;
#   3. uid 4202 (group 4202, outside "users") is told the directory is not
#      its user's or groups', exit 2 (it could not list it anyway);
#   4. uid 4203 with "users" only as a supplementary group gets into the
#      directory but every peer refuses it, naming its uid and the group rule.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
if [ "$(id -u)" != 0 ] || ! command -v setpriv > /dev/null || ! getent group users > /dev/null; then
  echo "SKIP: needs root, setpriv and the group 'users' to run a second user"; exit 77
fi
GID=$(getent group users | cut -d: -f3)
BD=/tmp/ebb-broker-group-$$
W=/tmp/ebb-broker-group-$$-u  # the second user's data directory
P=/tmp/ebb-broker-group-$$-pub # what the other users run and read
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -KILL "$p"; done 2>/dev/null; wait 2>/dev/null; rm -rf "$BD" "$W" "$P"' EXIT
rm -rf "$BD" "$W" "$P"
mkdir -p "$W" && chown 4201:"$GID" "$W"
# The other users cannot reach into a build tree under a private directory
# (a clone in `mktemp -d`, mode 0700): ebb, the fake driver, its state file
# and the config go to a directory open to all.
mkdir -p "$P" && chmod 755 "$P" || { echo "FAIL: cannot make $P"; exit 1; }
cp "$EBB" "$P/ebb" && cp "$EBB_LIBCUDA" "$P/libcuda.so.1" && cp "$EBB_LIBNVML" "$P/libnvidia-ml.so.1" ||
  { echo "FAIL: cannot copy ebb and the fake driver to $P"; exit 1; }
EBB=$P/ebb
export EBB_LIBCUDA=$P/libcuda.so.1 EBB_LIBNVML=$P/libnvidia-ml.so.1 FAKEGPU_STATE=$P/fakegpu.state
cat > "$P/cfg.json" <<'JSON'
{"pipelines": {"p": {"stages": [{"stage": "synthetic", "name": "w", "cache": false,
                     "options": {"weights_mib": 1024, "touch": "sample"}}]}}}
JSON
chmod 644 "$P/cfg.json"
"$FAKEGPU_SMI" > /dev/null 2>&1 # creates the device's state file
chmod 666 "$FAKEGPU_STATE"
as() { # UID GID [--groups G] -- CMD...: runs CMD as that user
  local u=$1 g=$2; shift 2
  local extra=(--clear-groups)
  [ "$1" = --groups ] && { extra=(--groups "$2"); shift 2; }
  [ "$1" = -- ] && shift
  $EXEC setpriv --reuid "$u" --regid "$g" "${extra[@]}" env HOME="$W" XDG_RUNTIME_DIR="$W/run" "$@"
}
EXEC=
as_bg() { EXEC=exec as "$@"; } # in a background subshell: the same pid as the program
wait_listen() { # LOG PID: sets URL
  URL=
  for _ in $(seq 100); do URL=$(head -1 "$1" 2>/dev/null | sed -n 's/^ebb: listening on //p'); [ -n "$URL" ] && break; sleep 0.1; done
  [ -n "$URL" ] || { echo "FAIL: a server did not listen:"; cat "$1"; exit 1; }
  for _ in $(seq 50); do [ -S "$BD/$2.sock" ] && return 0; sleep 0.1; done
  echo "FAIL: server $2 did not register in $BD:"; ls -la "$BD"; cat "$1"; exit 1
}
load() { local c; c=$(curl -s -o /dev/null -w '%{http_code}' -X POST "$1/v1/pipelines/p/load"); [ "$c" = 200 ] || fail "load on $1: $c"; }

# --- 1. root's server, asked by the second user
"$EBB" serve --listen 127.0.0.1:0 --config "$P/cfg.json" --data-dir "$T/dataR" --no-cache \
  --broker-dir "$BD" --broker-group users > "$T/logR" 2>&1 &
R=$!; PIDS+=($R)
wait_listen "$T/logR" "$R"; UR=$URL
[ "$(stat -c '%a %U %G' "$BD")" = "2770 root users" ] || fail "the directory is $(stat -c '%a %U %G' "$BD"), expected 2770 root users"
[ "$(stat -c '%a' "$BD/$R.sock")" = 660 ] || fail "root's socket is mode $(stat -c '%a' "$BD/$R.sock"), expected 660"
load "$UR"
as 4201 "$GID" -- "$EBB" reclaim --device cuda:0 --bytes 7G --broker-dir "$BD" --wait 2 --hold 0.2 > "$T/u1.out" 2>&1
rc=$?; cat "$T/u1.out"
grep -q "^\[broker\] pid $R (ebb serve) gave back 1324 MiB on cuda:0 .*pipeline p unloaded" "$T/u1.out" ||
  fail "uid 4201 (group users) was not given root's pipeline (exit $rc)"

# --- 2. the second user's server, asked by root
as_bg 4201 "$GID" -- "$EBB" serve --listen 127.0.0.1:0 --config "$P/cfg.json" --data-dir "$W/data" \
  --no-cache --broker-dir "$BD" --broker-group users > "$T/logU" 2>&1 &
U=$!; PIDS+=($U)
wait_listen "$T/logU" "$U"; UU=$URL
[ "$(stat -c '%u %a' "$BD/$U.sock")" = "4201 660" ] || fail "uid 4201's socket: $(stat -c '%u %a' "$BD/$U.sock")"
load "$UU"
sleep 0.3 # the claim of step 1 (--hold 0.2) is over
"$EBB" reclaim --device cuda:0 --bytes 7G --broker-dir "$BD" --wait 2 --hold 0.2 > "$T/r.out" 2>&1
rc=$?; cat "$T/r.out"
[ $rc = 0 ] || fail "root's reclaim exited $rc"
grep -q "^\[broker\] pid $U (ebb serve) gave back 1324 MiB on cuda:0 .*pipeline p unloaded" "$T/r.out" ||
  fail "root was not given uid 4201's pipeline"
grep -q "^\[broker\] pid $U (ebb serve) gave back" "$T/logU" || fail "uid 4201's server logged no giving"

# --- 3. outside the group: not even the directory
load "$UR"
as 4202 4202 -- "$EBB" reclaim --device cuda:0 --bytes 7G --broker-dir "$BD" --wait 1 > "$T/o.out" 2>&1
rc=$?; cat "$T/o.out"
[ $rc = 2 ] || fail "uid 4202 (outside the group) exited $rc, expected 2"
grep -q "broker directory $BD: group-writable (mode 2770) but neither this user nor its groups own it" "$T/o.out" ||
  fail "uid 4202 is not told why the directory is not for it"

# --- 4. the group only as a supplementary group: the peers refuse it
sleep 0.3
as 4203 4203 --groups "$GID" -- "$EBB" reclaim --device cuda:0 --bytes 7G --broker-dir "$BD" --wait 1 > "$T/s.out" 2>&1
rc=$?; cat "$T/s.out"
[ $rc = 1 ] || fail "uid 4203 exited $rc, expected 1"
grep -q "pid $R skipped: .*uid 4203 (primary gid 4203) may not ask this process: not its user, root, or of its --broker-group (gid $GID) as primary group" "$T/s.out" ||
  fail "root's server does not refuse uid 4203 naming the rule"
[ "$(curl -s "$UR/v1/pipelines" | grep -o '"loaded": *true' | head -1)" ] || fail "root's pipeline went to a refused asker"
curl -s "$UR/metrics" | grep -q '^ebb_broker_requests_refused_total [1-9]' || fail "root's server counted no refusal"

kill -TERM "$R" "$U"; wait "$R" "$U" || fail "a server exited $? on SIGTERM"
[ $fails -eq 0 ] && echo "broker_group: ok"
exit $((fails > 0))
