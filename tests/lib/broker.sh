# Sourced by the broker's integration tests (issue 35) after `set -u` and
# their checks: fakegpu.sh (a fresh fake device, apps, held_by), plus
#   BD       the broker directory ($T/broker)
#   HOLD     fakegpu-hold, a foreign process that holds device memory
#   PIDS     the servers started; all are killed when the test exits
#   broker_serve NAME CONFIG [flags...]
#            an `ebb serve` on a free loopback port over CONFIG, data dir
#            $T/dataNAME, log $T/logNAME, registered in $BD; sets PID, URL,
#            PID_NAME and URL_NAME, and ends the test when it does not listen
#            or register within 10 s / 5 s.
#   post URL [curl flags...]
#            a POST; prints the HTTP status, the body goes to $T/post.out
#   free_mib the first fake device's free MiB (fakegpu-smi)
#   leave_free MIB
#            a foreign filler (fakegpu-hold, in PIDS, its pid in FILLER)
#            takes all but MIB of the device's free memory; waits up to 5 s
. "$(dirname "${BASH_SOURCE[0]}")/fakegpu.sh"
HOLD="$(dirname "$FAKEGPU_SMI")/fakegpu-hold"
BD=$T/broker
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -KILL "$p"; done 2>/dev/null; wait 2>/dev/null' EXIT

broker_serve() {
  local n=$1 cfg=$2 url=
  shift 2
  "$EBB" serve --listen 127.0.0.1:0 --config "$cfg" --data-dir "$T/data$n" --no-cache \
    --broker-dir "$BD" "$@" > "$T/log$n" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  eval "PID_$n=$PID"
  for _ in $(seq 100); do
    url=$(head -1 "$T/log$n" 2>/dev/null | sed -n 's/^ebb: listening on //p')
    [ -n "$url" ] && break
    sleep 0.1
  done
  [ -n "$url" ] || { echo "FAIL: server $n did not listen:"; cat "$T/log$n"; exit 1; }
  URL=$url
  eval "URL_$n=$url"
  for _ in $(seq 50); do [ -S "$BD/$PID.sock" ] && return 0; sleep 0.1; done
  echo "FAIL: server $n did not register $BD/$PID.sock:"; ls -la "$BD"; cat "$T/log$n"
  exit 1
}

post() { curl -s -o "$T/post.out" -w '%{http_code}' -X POST "$@"; }
free_mib() { "$FAKEGPU_SMI" --query-gpu=memory.free --format=csv,noheader,nounits | head -1; }
leave_free() { # MIB: a foreign filler takes the rest
  local fill=$(( $(free_mib) - 300 - $1 ))
  "$HOLD" --alloc "$fill" --wait < /dev/null > /dev/null &
  FILLER=$!
  PIDS+=($FILLER)
  for _ in $(seq 50); do [ "$(free_mib)" -le $(( $1 + 50 )) ] && break; sleep 0.1; done
}
