# Sourced by the tests that talk to the test Whisper server
# (tests/whisper_server), after their fail() (they run under
# `set -euo pipefail` and fail() exits):
#   start_whisper OUTFILE [args...]  starts it, waits (5 s at most) for its
#                "PORT n" line; sets PORT and PID
#   pids         processes killed when the test exits (add your own)
# Loopback requests bypass any proxy (no_proxy).
: "${EBB_BUILD_DIR:?}"
WHISPER="$EBB_BUILD_DIR/tests/whisper_server"
[ -x "$WHISPER" ] || fail "no test server at $WHISPER"
export no_proxy=127.0.0.1,localhost NO_PROXY=127.0.0.1,localhost
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
start_whisper() {
  local out=$1; shift
  : >"$out" # exists before the server's shell opens it, so sed can read it
  "$WHISPER" "$@" >"$out" 2>"$out.err" &
  PID=$!
  pids+=("$PID")
  for _ in $(seq 100); do
    PORT=$(sed -n 's/^PORT \([0-9][0-9]*\)$/\1/p' "$out" || true)
    [ -n "$PORT" ] && return 0
    sleep 0.05
  done
  fail "server printed no PORT line: $(cat "$out" "$out.err")"
}
