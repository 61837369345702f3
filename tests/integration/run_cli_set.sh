#!/usr/bin/env bash
# `ebb run --set STAGE.OPTION=VALUE` (repeatable) and `--lyrics FILE`: a
# value is typed and checked like the config's options (exit 2 with one line
# naming the stage and the option), it reaches the stage (a.fail=run fails
# the job), operator-only options are the command line's to set (it is the
# operator), --lyrics is align's lyrics (a FIFO is refused by align at once,
# never read), and --help shows both; `ebb stages` shows each option's trust.
set -u
: "${EBB:?}" "${EBB_BUILD_DIR:?}"
. "$(dirname "$0")/../lib/common.sh"
"$EBB_BUILD_DIR/songgen" --seed 2 --seconds 6 "$T" song > /dev/null || { fail "songgen failed"; exit 1; }
cat > "$T/cfg.json" <<'JSON'
{"pipelines": {"la": {"stages": [{"stage": "decode"}, {"stage": "align"}]}}}
JSON
run() { timeout 60 "$EBB" run --device cpu --no-cache -o "$T/out" "$@" > "$T/log" 2> "$T/err"; }
expect() { # name exit-status patterns... -- args
  local name=$1 want=$2 pats=()
  shift 2
  while [ "$1" != "--" ]; do pats+=("$1"); shift; done
  shift
  run "$@"
  local rc=$?
  [ "$rc" = "$want" ] || fail "$name: exit $rc, want $want; stderr: $(cat "$T/err")"
  for p in "${pats[@]}"; do
    grep -qF -- "$p" "$T/err" || fail "$name: stderr lacks '$p': $(cat "$T/err")"
  done
}
S=(--pipeline synthetic "$T/song.wav")
expect "unknown stage" 2 "--set nosuch.opt=1" "no stage 'nosuch'" "its stages: a, b, c" -- "${S[@]}" --set nosuch.opt=1
[ "$(wc -l < "$T/err")" = 1 ] || fail "unknown stage: want one line on stderr, got: $(cat "$T/err")"
expect "a number given text" 2 "option 'snap_ms' of stage 'align' must be a number, got a string" -- \
  --config "$T/cfg.json" --pipeline la "$T/song.wav" --set align.snap_ms=x
expect "out of bounds" 2 "option 'snap_ms' of stage 'align' must be between 0 and 5000" -- \
  --config "$T/cfg.json" --pipeline la "$T/song.wav" --set align.snap_ms=99999
expect "unknown option" 2 "stage 'align' has no option 'nosuch'" -- \
  --config "$T/cfg.json" --pipeline la "$T/song.wav" --set align.nosuch=1
expect "no dot" 2 "expected STAGE.OPTION=VALUE" -- "${S[@]}" --set a=1
expect "no value" 2 "expected STAGE.OPTION=VALUE" -- "${S[@]}" --set a.fail
# the value reaches the stage, the last --set of an option wins
expect "a.fail=run" 1 "job failed" -- "${S[@]}" --set a.weights_mib=1 --set a.fail=load --set a.fail=run
grep -q "run" "$T/err" || fail "a.fail=run: the failure is not the run's: $(cat "$T/err")"
run "${S[@]}" --set a.weights_mib=1 --set 'b.fail=""' --set c.weights_mib=2 ||
  fail "JSON values (an empty string, numbers): $(cat "$T/err")"
# operator-only options are the command line's
expect "decode.max_seconds=1 (operator-only) on a 6 s input" 2 "max_seconds" -- \
  --config "$T/cfg.json" --pipeline la "$T/song.wav" --set decode.max_seconds=1
# --lyrics: the align stage's lyrics
mkfifo "$T/fifo"
t0=$(date +%s)
expect "--lyrics naming a FIFO" 2 "option lyrics" "not a regular file" -- \
  --config "$T/cfg.json" --pipeline la "$T/song.wav" --lyrics "$T/fifo"
[ $(($(date +%s) - t0)) -lt 20 ] || fail "--lyrics with a FIFO held the run"
printf 'Hello from the\nwhisper test server\n' > "$T/lyrics.txt"
run --config "$T/cfg.json" --pipeline la "$T/song.wav" --lyrics "$T/lyrics.txt" ||
  fail "--lyrics FILE: $(cat "$T/err")"
head -c $((5 * 1024 * 1024)) /dev/zero | tr '\0' 'a' > "$T/huge.txt"
expect "--lyrics over the 4 MiB a lyrics file may have" 2 "more than the 4194304" -- \
  --config "$T/cfg.json" --pipeline la "$T/song.wav" --lyrics "$T/huge.txt"
expect "--lyrics missing" 2 "--lyrics $T/missing.txt" -- \
  --config "$T/cfg.json" --pipeline la "$T/song.wav" --lyrics "$T/missing.txt"
expect "--lyrics without an align stage" 2 "pipeline 'synthetic' has no align stage" -- \
  "${S[@]}" --lyrics "$T/lyrics.txt"
# `ebb stages` shows who may set each option
"$EBB" stages > "$T/stages"
grep -qE '^    lyrics +string, default "", operator-only path' "$T/stages" ||
  fail "ebb stages does not show align.lyrics as operator-only: $(grep lyrics "$T/stages")"
grep -qE '^    snap_ms +number, .*, job ' "$T/stages" ||
  fail "ebb stages does not show align.snap_ms as job-settable: $(grep snap_ms "$T/stages")"
"$EBB" stages --json > "$T/stages.json"
python3 - "$T/stages.json" <<'PY' || fail "ebb stages --json: a trust level is missing or wrong"
import json, sys
st = {s["name"]: s["options"] for s in json.load(open(sys.argv[1]))}
assert all("trust" in o for s in st.values() for o in s.values())
assert st["transcribe"]["api_key"]["trust"] == "operator" and st["transcribe"]["api_key"]["format"] == "secret"
assert st["transcribe"]["url"]["format"] == "url" and st["pitch"]["hop"]["trust"] == "job"
PY
"$EBB" run --help > "$T/help"
grep -q -- "--set STAGE.OPTION=VALUE" "$T/help" && grep -q -- "--lyrics FILE" "$T/help" ||
  fail "ebb run --help does not show --set and --lyrics"
exit $((fails > 0))
