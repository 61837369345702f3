# Sourced by the tests that drive a fakegpu-hold process by hand (they run
# under `set -euo pipefail` with a fail() that exits):
#   start_hold  starts fakegpu-hold as coprocess A (its pid in apid), killed
#               when the test exits
#   say CMD     sends A one command; an answer that does not start with "ok"
#               (or none in 10 s) fails the test; the answer is in $reply
: "${FAKEGPU_SMI:?}"
HOLD="$(dirname "$FAKEGPU_SMI")/fakegpu-hold"
start_hold() {
  coproc A { exec "$HOLD"; }
  apid=$A_PID
  trap 'kill "$apid" 2>/dev/null || true' EXIT
}
say() {
  echo "$1" >&"${A[1]}"
  read -r -t 10 reply <&"${A[0]}" || fail "A did not answer '$1'"
  [[ $reply == ok* ]] || fail "A answered '$reply' to '$1'"
}
