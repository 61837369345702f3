# Sourced by the cluster_* tests: the redis tools they need, fail(), a free
# loopback PORT for their redis-server, the node/redis bookkeeping (NPID,
# URL, RPID) and the cleanup that stops them all on exit.
command -v redis-server >/dev/null || { echo "FAIL: redis-server missing (scripts/install-deps.sh installs it)"; exit 1; }
command -v redis-cli >/dev/null || { echo "FAIL: redis-cli missing (redis-tools)"; exit 1; }
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
RPID= ; declare -A NPID URL
cleanup() {
  for n in "${!NPID[@]}"; do kill -TERM "${NPID[$n]}" 2>/dev/null; done
  for n in "${!NPID[@]}"; do wait "${NPID[$n]}" 2>/dev/null; done
  [ -n "$RPID" ] && kill -TERM "$RPID" 2>/dev/null && wait "$RPID" 2>/dev/null
}
trap 'cleanup >/dev/null 2>&1 || true' EXIT
rcli() { redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }
