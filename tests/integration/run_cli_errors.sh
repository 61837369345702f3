#!/usr/bin/env bash
# `ebb run` usage and input errors: each exits 2 with ONE clear message on
# stderr that names the file / stage / option, and touches no device. Also
# --help, the songtrace pipeline on a build without all its stages, and
# `ebb pipelines` / `ebb stages` with a config and plugins.
set -u
: "${EBB:?}" "${EBB_TEST_PLUGIN_DIR:?}" "${EBB_EXAMPLE_PLUGIN_DIR:?}"
. "$(dirname "$0")/../lib/common.sh"
echo "x" > "$T/in.txt"
# the driver must not even be loaded for any of these
export EBB_LIBCUDA="${EBB_ABORTCUDA:?}" EBB_LIBNVML="$EBB_ABORTCUDA" ABORTCUDA_MARK="$T/loaded"

# expect2 NAME PATTERN... -- ARGS: exit 2, one stderr line matching every pattern
expect2() {
  local name=$1
  shift
  local pats=()
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  "$EBB" "$@" > "$T/out" 2> "$T/err"
  local rc=$?
  [ "$rc" = 2 ] || fail "$name: exit $rc, want 2; stderr: $(cat "$T/err")"
  [ "$(wc -l < "$T/err")" = 1 ] || fail "$name: want one line on stderr, got: $(cat "$T/err")"
  for p in "${pats[@]}"; do
    grep -qF -- "$p" "$T/err" || fail "$name: stderr lacks '$p': $(cat "$T/err")"
  done
  echo "$name: $(cat "$T/err")"
}

cfg() { printf '%s\n' "$2" > "$T/$1"; }

expect2 "no pipeline" "--pipeline NAME is required" -- run "$T/in.txt"
expect2 "no input" "exactly one INPUT" -- run --pipeline synthetic
expect2 "two inputs" "exactly one INPUT" -- run --pipeline synthetic "$T/in.txt" "$T/in.txt"
expect2 "unknown option" "unknown option '--bogus'" -- run --pipeline synthetic --bogus "$T/in.txt"
expect2 "missing value" "--device needs a value" -- run --pipeline synthetic "$T/in.txt" --device
expect2 "unknown pipeline" "unknown pipeline 'nope'" "synthetic" -- run --pipeline nope "$T/in.txt"
expect2 "missing input" "input $T/none.wav" "No such file" -- run --pipeline synthetic "$T/none.wav"
expect2 "bad release" "'sometimes'" "idle:SECONDS" -- \
  run --pipeline synthetic --release sometimes "$T/in.txt"
expect2 "bad idle" "'idle:soon'" -- run --pipeline synthetic --release idle:soon "$T/in.txt"
expect2 "bad timeline" "--timeline $T/t.png" ".svg or .json" -- \
  run --pipeline synthetic --timeline "$T/t.png" "$T/in.txt"
expect2 "bad log format" "--log-format yaml" -- run --pipeline synthetic --log-format yaml "$T/in.txt"
expect2 "bad device spec" "--device gpu0" -- run --pipeline synthetic --device gpu0 "$T/in.txt"
expect2 "missing config" "config $T/none.json" "cannot open" -- \
  run --pipeline x --config "$T/none.json" "$T/in.txt"

cfg syntax.json '{"pipelines": {
  "p": {"stages": [ {"stage": "synthetic",, } ]}
}}'
expect2 "JSON syntax" "$T/syntax.json:2:" "JSON syntax error" -- \
  run --pipeline p --config "$T/syntax.json" "$T/in.txt"
cfg unknown.json '{"pipelines": {"p": {"stages": [{"stage": "synthetic"}, {"stage": "nonesuch", "name": "n"}]}}}'
expect2 "unknown stage" "$T/unknown.json" "pipeline 'p' stage 'n'" "unknown stage 'nonesuch'" -- \
  run --pipeline p --config "$T/unknown.json" "$T/in.txt"
cfg type.json '{"pipelines": {"p": {"stages": [{"stage": "synthetic", "name": "w", "options": {"weights_mib": "lots"}}]}}}'
expect2 "wrong option type" "$T/type.json" "stage 'w'" "option 'weights_mib'" "must be a number, got a string" -- \
  run --pipeline p --config "$T/type.json" "$T/in.txt"
cfg optname.json '{"pipelines": {"p": {"stages": [{"stage": "synthetic", "options": {"weight_mib": 1}}]}}}'
expect2 "unknown option name" "no option 'weight_mib'" "weights_mib" -- \
  run --pipeline p --config "$T/optname.json" "$T/in.txt"
cfg iso.json '{"pipelines": {"p": {"stages": [{"stage": "synthetic", "isolate": true, "options": {"weight_mib": 1}}]}}}'
expect2 "isolate" "no option 'weight_mib'" "stage 'synthetic'" -- \
  run --pipeline p --config "$T/iso.json" "$T/in.txt"
cfg badkey.json '{"pipelines": {"p": {"stages": [{"stage": "synthetic", "timeout": 3}]}}}'
expect2 "unknown stage key" "unknown key \"timeout\"" "timeout_s" -- \
  run --pipeline p --config "$T/badkey.json" "$T/in.txt"
cfg badabi.json "{\"plugin_dirs\": [\"$EBB_TEST_PLUGIN_DIR/bad_abi\"], \"pipelines\": {}}"
expect2 "plugin ABI" "$EBB_TEST_PLUGIN_DIR/bad_abi/bad_abi.so" "ABI version 99" -- \
  run --pipeline synthetic --config "$T/badabi.json" "$T/in.txt"
cfg noinit.json "{\"plugin_dirs\": [\"$EBB_TEST_PLUGIN_DIR/no_init\"]}"
expect2 "plugin without init" "no_init.so" "no ebb_plugin_init symbol" -- \
  run --pipeline synthetic --config "$T/noinit.json" "$T/in.txt"
mkdir -p "$T/junk" && echo "not a library" > "$T/junk/junk.so"
cfg junk.json '{"plugin_dirs": ["junk"]}'
expect2 "unreadable plugin" "$T/junk.json: plugin_dirs" "$T/junk/junk.so" "cannot load" -- \
  run --pipeline synthetic --config "$T/junk.json" "$T/in.txt"
EBB_PLUGIN_PATH="$EBB_TEST_PLUGIN_DIR/bad_abi" expect2 "EBB_PLUGIN_PATH plugin ABI" \
  "EBB_PLUGIN_PATH" "bad_abi.so" -- run --pipeline synthetic "$T/in.txt"
expect2 "pipelines: bad config" "$T/syntax.json:2:" -- pipelines --config "$T/syntax.json"
expect2 "stages: bad plugin" "bad_abi.so" -- stages --config "$T/badabi.json"

# songtrace: every stage this build lacks is named; the first missing one fails the run
missing=""
for s in decode separate transcribe align pitch export; do
  "$EBB" stages | grep -q "^$s " || { missing=$s; break; }
done
if [ -n "$missing" ]; then
  expect2 "songtrace without $missing" "unknown stage '$missing'" -- \
    run --pipeline songtrace "$T/in.txt"
  "$EBB" pipelines | grep -q "\[missing: no stage '$missing' in this build\]" ||
    fail "ebb pipelines does not mark '$missing' missing"
else
  echo "songtrace: every stage is built in; checking it is not refused as unknown"
  "$EBB" run --pipeline songtrace --device cpu --no-cache -o "$T/o" "$T/in.txt" > /dev/null 2> "$T/err"
  grep -q "unknown stage" "$T/err" && fail "songtrace: $(cat "$T/err")"
fi

# --help, pipelines and stages
"$EBB" run --help > "$T/help" || fail "run --help exited $?"
for w in "--pipeline NAME" "--release" "after-stage|after-job|idle:SECONDS|never" "--timeline" \
         "--cache-dir" "--no-cache" "Exit status"; do
  grep -qF -- "$w" "$T/help" || fail "run --help lacks $w"
done
"$EBB" --help | grep -q "^  run " || fail "ebb --help does not list run"
cfg good.json "{\"plugin_dirs\": [\"$EBB_EXAMPLE_PLUGIN_DIR\"], \"pipelines\": {\"mine\": {\"release\": \"after-job\", \"stages\": [{\"stage\": \"checksum\", \"name\": \"sum\"}, {\"stage\": \"synthetic\", \"timeout_s\": 5}]}}}"
"$EBB" pipelines --config "$T/good.json" > "$T/pl" || fail "pipelines exited $?"
cat "$T/pl"
grep -q "^synthetic  (built-in, release after-stage)" "$T/pl" || fail "pipelines: no synthetic"
grep -q "^songtrace  (built-in" "$T/pl" || fail "pipelines: no songtrace"
grep -q "^mine  ($T/good.json, release after-job)" "$T/pl" || fail "pipelines: no mine"
grep -q "^  1. sum (checksum)$" "$T/pl" || fail "pipelines: stage list of mine"
grep -q "^  2. synthetic  timeout 5 s$" "$T/pl" || fail "pipelines: timeout of mine"
"$EBB" pipelines --config "$T/good.json" --json | python3 -c '
import json, sys
p = {x["name"]: x for x in json.load(sys.stdin)}
assert [s["name"] for s in p["synthetic"]["stages"]] == ["a", "b", "c"]
assert [s["stage"] for s in p["songtrace"]["stages"]] == ["decode", "separate", "transcribe", "align", "pitch", "export"]
assert p["mine"]["stages"][0]["available"] is True' || fail "pipelines --json"
"$EBB" stages --config "$T/good.json" > "$T/st" || fail "stages exited $?"
cat "$T/st"
grep -q "^synthetic  v1  (built-in)" "$T/st" || fail "stages: synthetic"
for o in weights_mib activations_mib cache_mib leak_mib outside_mib fail run_ms; do
  grep -qE "^    $o +(number|string)" "$T/st" || fail "stages: synthetic option $o"
done
grep -q "^checksum  v1  ($EBB_EXAMPLE_PLUGIN_DIR/checksum.so)" "$T/st" || fail "stages: plugin"
grep -qE "^    chunk_kib +integer, default 1024" "$T/st" || fail "stages: plugin option"
"$EBB" stages --json | python3 -c '
import json, sys
s = {x["name"]: x for x in json.load(sys.stdin)}
o = s["synthetic"]["options"]
assert o["weights_mib"]["type"] == "number" and "default" in o["weights_mib"]' || fail "stages --json"
[ -e "$T/loaded" ] && fail "the driver library was loaded: $(cat "$T/loaded")"

# a top-level typo is named, not reported as an unknown pipeline
cfg typo.json '{"pipelins": {"p": {"stages": [{"stage": "synthetic"}]}}}'
expect2 "top-level typo" "$T/typo.json" 'unknown key "pipelins"' -- \
  run --pipeline p --config "$T/typo.json" "$T/in.txt"

# names go into log lines and URLs: odd characters are refused
cfg badname.json '{"pipelines": {"my pipe": {"stages": [{"stage": "synthetic"}]}}}'
expect2 "bad pipeline name" "$T/badname.json" "pipeline name 'my pipe' is not allowed" -- \
  run --pipeline synthetic --config "$T/badname.json" "$T/in.txt"
cfg badstage.json '{"pipelines": {"p": {"stages": [{"stage": "synthetic", "name": "a]\nb"}]}}}'
expect2 "bad stage name" "$T/badstage.json" "stage name 'a]?b' is not allowed" -- \
  run --pipeline p --config "$T/badstage.json" "$T/in.txt"

# a stage refusing its input (decode on a file that is not audio) is bad
# input too: exit 2, with the stage and the file named
echo "not audio at all" > "$T/notaudio.wav"
"$EBB" run --pipeline songtrace --device cpu --no-cache -o "$T/o" "$T/notaudio.wav" > "$T/out" 2> "$T/err"
rc=$?
[ "$rc" = 2 ] || fail "decode on a non-audio file: exit $rc, want 2; stderr: $(cat "$T/err")"
grep -q "stage 'decode'.*$T/notaudio.wav" "$T/err" || fail "decode on a non-audio file: $(cat "$T/err")"

[ "$fails" = 0 ] && echo "PASS" || echo "$fails failure(s)"
exit $((fails > 0))
