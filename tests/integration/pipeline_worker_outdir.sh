#!/usr/bin/env bash
# An isolated stage kept loaded serves many jobs: each run must write to its
# own job's output directory, not to the one the first job's load named
# (job 2's files in job 1's directory would let one job read another's).
# Two pipelines kept loaded (release "never") under `ebb serve`: a Python SDK
# worker that writes a file into ctx.output_dir, and the test plugin's C
# stage "echo" run isolated in ebb-worker (it reports its output_dir); two
# jobs and two session items each, every one checked against its own
# directory. Once a run is over the job's directory is no longer the
# stage's: at unload (the server's stop) both see their load's private
# directory under DATA_DIR/scratch, not the last job's.
set -u
: "${EBB_TEST_PLUGIN_DIR:?}"
. "$(dirname "$0")/../lib/server.sh"
. "$(dirname "$0")/../lib/sdk_worker.sh"
sdk_worker "$T/dirs_worker.py" Dirs <<PYW
class Dirs(Stage):
    name = "dirs"

    def run(self, items, ctx):
        with open(os.path.join(ctx.output_dir, "dirs.txt"), "w") as f:
            f.write(ctx.output_dir)
        return [ctx.json("dirs", {"output_dir": ctx.output_dir})]

    def unload(self, ctx):
        with open("$T/py_unload.txt", "w") as f:
            f.write(ctx.output_dir)

PYW
cat > "$T/cfg.json" <<JSON
{"plugin_dirs": ["$EBB_TEST_PLUGIN_DIR/good"],
 "pipelines": {
  "py": {"stages": [{"stage": "dirs", "worker": "$T/dirs_worker.py"}], "release": "never"},
  "c": {"stages": [{"stage": "echo", "isolate": true}], "release": "never"}}}
JSON
echo "any input" > "$T/input.txt"
rm -f "$T/py_unload.txt" "$T/c_unload.txt"
export EBB_TEST_ECHO_UNLOAD_LOG="$T/c_unload.txt"
serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --device cpu

# said: the output_dir a result reports (item NAME); want: the directory it must be
check_dir() { # WHAT RESULT_JSON ITEM WANT
  local said
  said=$(python3 -c 'import json,sys
for it in json.loads(sys.argv[1]):
    if it.get("name") == sys.argv[2]:
        print(json.loads(it["text"])["output_dir"] if "text" in it else it["value"]["output_dir"])' "$2" "$3" 2>/dev/null)
  [ -n "$4" ] && [ "$said" = "$4" ] || fail "$1: the stage wrote to '$said', expected its own directory '$4'"
}
for p in py c; do
  item=dirs; [ $p = c ] && item=echo
  for n in 1 2; do
    req POST /v1/jobs -d "{\"pipeline\": \"$p\", \"input\": \"$T/input.txt\"}"
    [ "$CODE" = 202 ] || { fail "$p job $n: POST answered $CODE $BODY"; continue; }
    id=$(jget "$BODY" '["id"]')
    wait_done "$id"
    [ "$STATE" = succeeded ] || { fail "$p job $n: $STATE: $BODY"; continue; }
    want=$(jget "$BODY" '["output_dir"]')
    req GET "/v1/jobs/$id/result"
    items=$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])["result"]["items"]))' "$BODY")
    check_dir "$p job $n" "$items" $item "$want"
    if [ $p = py ]; then
      [ "$(cat "$want/dirs.txt" 2>/dev/null)" = "$want" ] || fail "$p job $n: no dirs.txt of its own in $want"
    fi
  done
  req POST /v1/sessions -d "{\"pipeline\": \"$p\"}"
  [ "$CODE" = 201 ] || { fail "$p session: $CODE $BODY"; continue; }
  s=$(jget "$BODY" '["id"]')
  for n in 1 2; do
    req POST "/v1/sessions/$s/items" -d "{\"input\": \"$T/input.txt\"}"
    [ "$CODE" = 200 ] || { fail "$p session item $n: $CODE $BODY"; continue; }
    want=$(jget "$BODY" '["output_dir"]')
    items=$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])["result"]["items"]))' "$BODY")
    check_dir "$p session item $n" "$items" $item "$want"
  done
  req DELETE "/v1/sessions/$s"
done
stop_server; rc=$?
[ "$rc" = 0 ] || fail "ebb serve exited $rc on SIGTERM"
for p in py c; do
  seen=$(cat "$T/${p}_unload.txt" 2>/dev/null)
  case "$seen" in
    "$T/data/scratch/"?*) ;;
    *) fail "$p: at unload the stage saw output directory '$seen', expected its load's under $T/data/scratch" ;;
  esac
done
if [ "$fails" -ne 0 ]; then echo "--- server log"; cat "$T/log"; exit 1; fi
echo "pipeline_worker_outdir: every run wrote to its own directory"
