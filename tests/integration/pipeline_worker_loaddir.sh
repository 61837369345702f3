#!/usr/bin/env bash
# A worker's load has no job of its own (a pipeline loaded with POST
# /v1/pipelines/NAME/load, kept loaded, woken by POST /wake): what it writes
# while loading must go to a private directory of its own (0700, under
# DATA_DIR/scratch in a server, under $TMPDIR for `ebb run`), never into the
# server's working directory nor a job's, and that directory must be gone
# once the stage unloads (its worker exits). Each run still writes to its
# job's directory. The stage is a Python SDK worker that writes loaded.txt
# into ctx.output_dir at load and reports at run where that was.
# Before: POST load gave the worker DATA_DIR/pipelines/NAME (kept after the
# unload), a wake gave it "." (the server's working directory), `ebb run` the
# job's own directory.
set -u
. "$(dirname "$0")/../lib/server.sh"
. "$(dirname "$0")/../lib/sdk_worker.sh"
sdk_worker "$T/loaddir_worker.py" LoadDir <<PYW
class LoadDir(Stage):
    name = "loaddir"

    def load(self, options, ctx):
        self.load_dir = os.path.abspath(ctx.output_dir)
        with open(os.path.join(ctx.output_dir, "loaded.txt"), "w") as f:
            f.write("written at load\n")

    def run(self, items, ctx):
        kept = os.path.exists(os.path.join(self.load_dir, "loaded.txt"))
        return [ctx.json("loaddir", {"load_dir": self.load_dir, "kept": kept,
                                     "run_dir": os.path.abspath(ctx.output_dir)})]

PYW
cat > "$T/cfg.json" <<JSON
{"pipelines": {"py": {"stages": [{"stage": "loaddir", "worker": "$T/loaddir_worker.py"}]}}}
JSON
echo "any input" > "$T/input.txt"
mkdir -p "$T/cwd" "$T/tmp"
cd "$T/cwd" || exit 1 # the server's (and ebb run's) working directory: must stay empty
export TMPDIR=$T/tmp
SCRATCH=$T/data/scratch

# the load directories under SCRATCH now, one a line
load_dirs() { find "$SCRATCH" -mindepth 1 -maxdepth 1 2>/dev/null | sort; }
cwd_clean() { # WHEN
  [ -z "$(ls -A "$T/cwd")" ] || fail "$1: the worker wrote into the server's working directory: $(ls -A "$T/cwd")"
}
# one load directory, private, with the file the load wrote; its path in LD
one_load_dir() { # WHEN
  local dirs n
  dirs=$(load_dirs)
  n=$(printf '%s' "$dirs" | grep -c .)
  LD=
  [ "$n" = 1 ] || { fail "$1: expected one load directory under $SCRATCH, found $n: $dirs (data: $(find "$T/data" -name loaded.txt))"; return; }
  LD=$dirs
  case $(basename "$LD") in loaddir-*) ;; *) fail "$1: load directory $LD is not named after the stage" ;; esac
  [ "$(stat -c %a "$LD")" = 700 ] || fail "$1: load directory $LD has mode $(stat -c %a "$LD"), expected 700"
  [ -s "$LD/loaded.txt" ] || fail "$1: no loaded.txt in the load directory $LD"
}
# a job of py: what its result says (LOAD_DIR, KEPT, RUN_DIR) and its output_dir (OUT)
job() { # WHEN
  LOAD_DIR= KEPT= RUN_DIR= OUT=
  req POST /v1/jobs -d "{\"pipeline\": \"py\", \"input\": \"$T/input.txt\"}"
  [ "$CODE" = 202 ] || { fail "$1: POST /v1/jobs answered $CODE $BODY"; return; }
  local id
  id=$(jget "$BODY" '["id"]')
  wait_done "$id"
  [ "$STATE" = succeeded ] || { fail "$1: job $STATE: $BODY"; return; }
  OUT=$(jget "$BODY" '["output_dir"]')
  req GET "/v1/jobs/$id/result"
  local v
  v=$(python3 -c 'import json,sys
for it in json.loads(sys.argv[1])["result"]["items"]:
    if it.get("name") == "loaddir":
        v = it["value"]; print(v["load_dir"], v["kept"], v["run_dir"])' "$BODY")
  read -r LOAD_DIR KEPT RUN_DIR <<< "$v"
}

# after a load with no job (POST load, POST wake): nothing in the server's
# working directory, one private load directory (in LD), and a job on the
# pipeline that says the stage loaded there and ran in the job's directory
loaded_then_job() { # WHEN
  cwd_clean "$1"
  one_load_dir "$1"
  job "$1: the job"
  [ -n "$LD" ] && [ "$LOAD_DIR" = "$LD" ] || fail "$1: the stage says it loaded into '$LOAD_DIR', expected '$LD'"
  [ -n "$OUT" ] && [ "$RUN_DIR" = "$OUT" ] || fail "$1: the run wrote to '$RUN_DIR', expected its job's directory '$OUT'"
}

serve "$T/log" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --device cpu

# --- POST load: the load writes into its own private directory
req POST /v1/pipelines/py/load
[ "$CODE" = 200 ] || fail "load py: $CODE $BODY"
loaded_then_job "after POST load"
first=$LD
[ "$KEPT" = True ] || fail "the load directory's file was gone by the run (kept=$KEPT)"
[ ! -e "$OUT/loaded.txt" ] || fail "the load's file is in the job's directory $OUT"
req POST /v1/pipelines/py/unload
[ "$CODE" = 200 ] || fail "unload py: $CODE $BODY"
[ -n "$first" ] && [ -e "$first" ] && fail "the load directory $first is still there after the unload: $(ls -A "$first")"
[ -z "$(load_dirs)" ] || fail "load directories left after the unload: $(load_dirs)"

# --- sleep and POST wake: the wake is a load in a new worker, with no job
req POST /v1/pipelines/py/load
[ "$CODE" = 200 ] || fail "load py again: $CODE $BODY"
one_load_dir "after the second load"
second=$LD
[ -n "$second" ] && [ "$second" = "$first" ] && fail "the second load reused the first load's directory $first"
req POST /v1/pipelines/py/sleep
[ "$CODE" = 200 ] || fail "sleep py: $CODE $BODY"
[ -n "$second" ] && [ -e "$second" ] && fail "asleep (its worker stopped): the load directory $second is still there"
req POST /v1/pipelines/py/wake
[ "$CODE" = 200 ] || fail "wake py: $CODE $BODY"
loaded_then_job "after POST wake"
req POST /v1/pipelines/py/unload
[ -z "$(load_dirs)" ] || fail "load directories left after the second unload: $(load_dirs)"

# --- a load directory a killed server left is removed at the next start
stop_server; rc=$?
[ "$rc" = 0 ] || fail "ebb serve exited $rc on SIGTERM"
mkdir -p "$SCRATCH/loaddir-left"
echo x > "$SCRATCH/loaddir-left/loaded.txt"
serve "$T/log2" --config "$T/cfg.json" --data-dir "$T/data" --input-dir "$T" --device cpu
[ -z "$(load_dirs)" ] || fail "the load directory a killed server left is still there: $(load_dirs)"
grep -q 'removed 1 worker load directory left by the last server' "$T/log2" ||
  fail "the server did not say it removed the load directory left behind"
stop_server; rc=$?
[ "$rc" = 0 ] || fail "the second ebb serve exited $rc on SIGTERM"
cwd_clean "at the end of the server"

# --- ebb run: the load directory is under $TMPDIR and goes with the run
"$EBB" run --config "$T/cfg.json" --pipeline py "$T/input.txt" -o "$T/out" > "$T/run.log" 2>&1 ||
  fail "ebb run exited $?: $(cat "$T/run.log")"
said=$(python3 -c 'import json,sys
for it in json.load(open(sys.argv[1]))["items"]:
    if it.get("name") == "loaddir":
        print(it["value"]["load_dir"])' "$T/out/result.json" 2>/dev/null)
case $said in "$T/tmp/loaddir-"*) ;; *) fail "ebb run: the stage loaded into '$said', expected a directory under \$TMPDIR $T/tmp" ;; esac
[ -z "$(ls -A "$T/tmp")" ] || fail "ebb run left its load directory under \$TMPDIR: $(ls -A "$T/tmp")"
[ ! -e "$T/out/loaded.txt" ] || fail "ebb run: the load's file is in the job's directory $T/out"
cwd_clean "after ebb run"

if [ "$fails" -ne 0 ]; then echo "--- server log"; cat "$T/log"; exit 1; fi
echo "pipeline_worker_loaddir: loads wrote to private directories, gone after unload"
