#!/usr/bin/env bash
# The Redis queue trusts no entry (issue 31; docs/scale-out.md, "Entries"):
# stream entries and job hashes written straight into Redis by someone other
# than ebb (a uid '../../x', no uid, options that are not JSON or not an
# object, an input name with '/', a shared input outside --shared-dir or
# through a symlink, a shared input whose content is not its name) are
# acknowledged, moved to the dead-letter stream PREFIX:deadletter and
# logged; their jobs end failed naming why; nothing is written or read
# outside the directories; nothing stays pending; a good job still runs.
set -u
: "${EBB:?}" "${FAKEGPU_SMI:?}"
. "$(dirname "$0")/../lib/cluster.sh"
mkdir -p "$T/shared/inputs" "$T/in"
start_redis
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"quick": {"stages": [{"stage": "synthetic", "name": "q", "options": {"weights_mib": 1}}]}}}
JSON
echo "good input" > "$T/in/input.txt"
FAKEGPU_STATE="$T/gpu" "$EBB" serve --config "$T/cfg.json" --listen 127.0.0.1:0 --data-dir "$T/data" \
  --input-dir "$T/in" --no-cache --queue "redis://127.0.0.1:$PORT/0" --queue-prefix t --node-id n1 \
  --lease 3 --shared-dir "$T/shared" > "$T/log-n1" 2>&1 &
NPID[n1]=$!
node_up n1
S=t:stream:quick
for _ in $(seq 50); do rcli XINFO GROUPS "$S" 2>/dev/null | grep -q ebb-nodes && break; sleep 0.1; done

uid() { python3 -c 'import secrets; print(secrets.token_hex(16))'; }
job() { # uid kind ref name options
  rcli HSET "t:job:$1" pipeline quick owner "" options "$5" input_kind "$2" input_ref "$3" \
    input_name "$4" state queued attempt 0 created 1 submitted_on x > /dev/null
  rcli XADD "$S" '*' uid "$1" > /dev/null
}
# 1-2: the entry itself
rcli XADD "$S" '*' uid '../../x' > /dev/null
rcli XADD "$S" '*' foo bar > /dev/null
# 3-9: the job's hash
U3=$(uid); rcli SET "t:input:$U3" data > /dev/null; job "$U3" redis "t:input:$U3" in.txt '{"q": {"weights_mib": 2'
U4=$(uid); job "$U4" shared /etc/passwd passwd ''
U5=$(uid); rcli SET "t:input:$U5" data > /dev/null; job "$U5" redis "t:input:$U5" '../../../evil' ''
hex=$(printf 'x' | sha256sum | cut -c1-64)
ln -s /etc/passwd "$T/shared/inputs/$hex"
U6=$(uid); job "$U6" shared "$T/shared/inputs/$hex" in.txt ''
U7=$(uid); rcli SET "t:input:$U7" data > /dev/null; job "$U7" redis "t:input:$U7" in.txt '[1, 2]'
hex2=$(printf 'y' | sha256sum | cut -c1-64); echo "not y" > "$T/shared/inputs/$hex2"
U8=$(uid); job "$U8" shared "$T/shared/inputs/$hex2" in.txt ''
U9=$(uid); rcli SET "t:input:$U9" data > /dev/null; job "$U9" tape "t:input:$U9" in.txt ''

for _ in $(seq 100); do [ "$(rcli XLEN t:deadletter)" -ge 9 ] && break; sleep 0.1; done
n=$(rcli XLEN t:deadletter)
[ "$n" = 9 ] || fail "t:deadletter holds $n entries, expected 9"
pending=$(rcli XPENDING "$S" ebb-nodes | head -1)
[ "$pending" = 0 ] || fail "$pending entries of $S stay pending"
[ "$(rcli XLEN "$S")" = 0 ] || fail "entries stay in $S: $(rcli XRANGE "$S" - +)"
rcli XRANGE t:deadletter - + > "$T/dead"
grep -q 'not one ebb makes' "$T/dead" || fail "the dead letter of uid ../../x does not say why: $(cat "$T/dead")"
grep -q 'has no uid' "$T/dead" || fail "the dead letter of an entry without uid does not say why"
for u in "$U3:not valid JSON" "$U4:not --shared-dir/inputs/SHA256" "$U5:not a plain file name" \
         "$U6:cannot be opened within --shared-dir" "$U7:not a JSON object" \
         "$U8:does not hold what its name says" "$U9:neither redis nor shared"; do
  id=${u%%:*} why=${u#*:}
  [ "$(rcli HGET "t:job:$id" state)" = failed ] || fail "job $id ($why): state $(rcli HGET "t:job:$id" state)"
  rcli HGET "t:job:$id" error_message | grep -qF "$why" ||
    fail "job $id: the error does not say '$why': $(rcli HGET "t:job:$id" error_message)"
  grep -qF "$why" "$T/dead" || fail "no dead letter says '$why'"
done
grep -q 'moved to t:deadletter' "$T/log-n1" || fail "the node did not log the dead letters"
[ ! -e "$T/x" ] && [ ! -e "$T/data/x" ] && [ ! -e "$T/evil" ] && [ ! -e "$T/data/jobs/evil" ] ||
  fail "a hostile entry wrote outside the job directories"
! grep -rqs 'root:' "$T/data/jobs" || fail "/etc/passwd was copied into a job directory"

# a good job still runs
out=$(curl -s -X POST "${URL[n1]}/v1/jobs" -H 'Content-Type: application/json' \
  -d "{\"pipeline\": \"quick\", \"input\": \"$T/in/input.txt\"}")
id=$(jget "$out" '["id"]')
st=
for _ in $(seq 100); do
  st=$(jget "$(curl -s "${URL[n1]}/v1/jobs/$id")" '["state"]')
  [ "$st" = succeeded ] && break; sleep 0.1
done
[ "$st" = succeeded ] || fail "a good job after the hostile entries ended '$st'"
if [ "$fails" -ne 0 ]; then echo "--- node log"; tail -40 "$T/log-n1"; exit 1; fi
echo "cluster_entries: all checks passed"
