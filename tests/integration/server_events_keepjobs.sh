#!/usr/bin/env bash
# The `hello` of GET /v1/events lists the jobs the store holds, found by
# asking the store for its newest ids, never guessed from the job count:
# 40 jobs under --keep-jobs 3 leave rows 38-40 (ids come from AUTOINCREMENT
# and --keep-jobs deletes the others), the server restarts on the same data
# directory, and hello lists exactly those three jobs, oldest first. (The
# guess it replaces, ids up to count + 16, found none of them: "jobs": [].)
set -u
: "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
export FAKEGPU_MEMORY_MIB=4096 FAKEGPU_CONTEXT_MIB=300
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"tiny": {"stages": [{"stage": "synthetic", "name": "t", "options": {"weights_mib": 2}}],
                        "release": "never"}}}
JSON
echo "any input" > "$T/input.txt"
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --no-cache \
  --keep-jobs 3
ids=($(timeout 60 python3 "$EBB_SOURCE_DIR/tests/integration/server_events_facts.py" \
  submit "$URL" "$T/input.txt" 40))
[ ${#ids[@]} -eq 40 ] || fail "40 jobs were not all accepted and run: ${#ids[@]} ids"
# the store keeps 3 once the last has ended (the pruning follows the job's end)
for _ in $(seq 50); do
  req GET "/v1/jobs/${ids[36]}"
  [ "$CODE" = 404 ] && break
  sleep 0.1
done
[ "$CODE" = 404 ] || fail "job 37 is still in the store under --keep-jobs 3: $CODE"
stop_server || fail "ebb serve exited $? on SIGTERM"

serve "$T/log2" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --no-cache \
  --keep-jobs 3
drive "$T/log2" timeout 30 python3 "$EBB_SOURCE_DIR/tests/integration/server_events_facts.py" \
  hello "$URL" "${ids[37]}" "${ids[38]}" "${ids[39]}"
[ $fails -eq 0 ] && echo "server_events_keepjobs: all checks passed"
exit $((fails > 0))
