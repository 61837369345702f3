#!/usr/bin/env bash
# Issue 17: a worker's death is released and said. An isolated synthetic
# stage holds its weights and activations (and its own context) in its worker
# while its run sleeps; SIGKILL to the worker from outside: the job fails
# (exit 1), and the release line names the bytes the worker held and the
# cause, `[w] released N MiB of GPU memory (worker exited: killed by
# SIGKILL)`, N equal (+-2 MiB) to what fakegpu-smi listed for the worker
# just before the kill; afterwards nothing is left on the device.
set -u
: "${EBB:?}" "${EBB_WORKER:?}"
. "$(dirname "$0")/../lib/fakegpu.sh"
export FAKEGPU_CONTEXT_MIB=300 FAKEGPU_MEMORY_MIB=8192
EBBPID=
trap '[ -n "$EBBPID" ] && kill -9 "$EBBPID" 2>/dev/null' EXIT
echo "any input" > "$T/input.txt"
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"p": {"stages": [
  {"stage": "synthetic", "name": "w", "isolate": true, "cache": false, "timeout_s": 60,
   "options": {"weights_mib": 512, "activations_mib": 256, "touch": "sample", "run_ms": 60000}}]}}}
JSON

"$EBB" run --pipeline p --config "$T/cfg.json" --device cuda --no-cache -o "$T/out" \
  "$T/input.txt" > "$T/stdout" 2> "$T/stderr" &
EBBPID=$!
# the worker: the process fakegpu-smi lists, other than ebb, once it holds
# the context + weights + activations (its run is sleeping then)
want=$((300 + 512 + 256))
wpid= held=
for _ in $(seq 300); do
  read -r wpid held < <(apps | awk -F', *' -v e="$EBBPID" -v w="$want" \
    '$1 != e && $2 >= w {print $1, $2; exit}')
  [ -n "$wpid" ] && break
  kill -0 "$EBBPID" 2>/dev/null || break
  sleep 0.1
done
[ -n "$wpid" ] || { fail "no worker holding $want MiB appeared: $(apps); $(cat "$T/stderr")"; exit 1; }
sleep 0.3 # the host's sampler (every 50 ms) has seen the same figure
held=$(apps | awk -F', *' -v p="$wpid" '$1 == p {print $2}')
echo "worker pid $wpid holds $held MiB (fakegpu-smi); killing it"
kill -9 "$wpid"
for _ in $(seq 300); do kill -0 "$EBBPID" 2>/dev/null || break; sleep 0.1; done
wait "$EBBPID"
rc=$?
EBBPID=
cat "$T/stdout" "$T/stderr"
[ "$rc" = 1 ] || fail "ebb run exited $rc, expected 1 (the job failed)"
grep -q "worker pid $wpid" "$T/stderr" || fail "the error does not name worker pid $wpid"
line=$(grep -E '^\[w\] released [0-9]+ MiB of GPU memory \(worker exited: killed by SIGKILL\)$' \
  "$T/stdout")
[ -n "$line" ] || fail "no '[w] released N MiB of GPU memory (worker exited: killed by SIGKILL)' line"
n=$(echo "$line" | awk '{print $3}')
d=$((${n:-0} - ${held:-0}))
echo "release line says ${n:-?} MiB; fakegpu-smi listed $held MiB for the worker before the kill"
[ -n "$n" ] && [ "${d#-}" -le 2 ] || fail "the line says ${n:-?} MiB, the worker held $held MiB"
[ "$(grep -c 'released' "$T/stdout")" = 1 ] || fail "more than one release line for w"
[ -z "$(apps)" ] || fail "device not empty afterwards: $(apps)"

[ "$fails" = 0 ] && echo "PASS" || echo "$fails failure(s)"
exit $((fails > 0))
