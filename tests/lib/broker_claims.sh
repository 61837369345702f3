# Sourced by the claims tests (broker_claims, broker_claims_short) after
# `set -u`: broker.sh, one fake 16 GiB device (contexts 300 MiB), and
# servers A and B (A the more idle) each holding an idle 3 GiB pipeline p,
# loaded; plus
#   load URL     POST URL/v1/pipelines/p/load, ending the test unless 200
#   holder       a process that will allocate (it never does); its pid in HP
#   reclaim ...  ebb reclaim on cuda:0 over $BD (--broker-timeout 30, --wait 3)
#   reclaim_y WHY  Y (a new holder, pid in HY) reclaims 3000 MiB after X's
#                claim (pid HX, 3000 MiB): it must exit 0 (else fail with WHY)
#                and name X's claim; its output in $T/y.out
: "${EBB_BUILD_DIR:?}" "${EBB:?}"
. "$(dirname "${BASH_SOURCE[0]}")/broker.sh"
export FAKEGPU_MEMORY_MIB=16384 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"p": {"stages": [{"stage": "synthetic", "name": "w", "cache": false,
                     "options": {"weights_mib": 3072, "touch": "sample"}}]}}}
JSON
load() { local c; c=$(curl -s -o "$T/post.out" -w '%{http_code}' -X POST "$1/v1/pipelines/p/load"); [ "$c" = 200 ] || fail "load on $1: $c $(cat "$T/post.out")"; }
holder() { sleep 120 & PIDS+=($!); HP=$!; }
reclaim() { "$EBB" reclaim --device cuda:0 --broker-dir "$BD" --broker-timeout 30 --wait 3 "$@"; }
reclaim_y() {
  local rc
  holder; HY=$HP
  reclaim --bytes 3000MiB --for "$HY" --hold 60 > "$T/y.out" 2>&1
  rc=$?; cat "$T/y.out"
  [ $rc = 0 ] || fail "Y's reclaim exited $rc$1"
  grep -q "claimed by 1 other asker, not yet allocated (pid $HX 3000 MiB)" "$T/y.out" ||
    fail "Y does not name X's claim (pid $HX, 3000 MiB)"
}

broker_serve A "$T/cfg.json" --broker-timeout 30
load "$URL_A"
sleep 0.3 # A is the more idle
broker_serve B "$T/cfg.json" --broker-timeout 30
load "$URL_B"
