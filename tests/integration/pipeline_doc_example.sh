#!/usr/bin/env bash
# docs/stage-abi.md's complete minimal plugin is real: extract hello.c from
# the page, build it the way the page says (cc -shared -fPIC -I include, no
# ebb library), and run it through a config's plugin_dirs on the fake GPU.
set -u
: "${EBB:?}" "${EBB_SOURCE_DIR:?}" "${EBB_TEST_TMP:?}" "${FAKEGPU_STATE:?}"
. "$(dirname "$0")/../lib/lock.sh"
T=$EBB_TEST_TMP
rm -rf "$T" && mkdir -p "$T/plugins"
rm -f "$FAKEGPU_STATE"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
awk '/^`hello.c`/ {f = 1} f && /^```c$/ {p = 1; next} p && /^```$/ {exit} p {print}' \
  "$EBB_SOURCE_DIR/docs/stage-abi.md" > "$T/hello.c"
grep -q ebb_plugin_init "$T/hello.c" || { echo "FAIL: no example in docs/stage-abi.md" >&2; exit 1; }
${CC:-cc} -shared -fPIC -O2 -Wall -Werror -I "$EBB_SOURCE_DIR/include" -o "$T/plugins/hello.so" \
  "$T/hello.c" -Wl,--no-undefined || { echo "FAIL: the example does not build" >&2; exit 1; }
cat > "$T/hello.json" <<'JSON'
{"plugin_dirs": ["plugins"],
 "pipelines": {"hello": {"stages": [{"stage": "hello", "options": {"mib": 64}}]}}}
JSON
echo x > "$T/any-file.txt"
"$EBB" stages --config "$T/hello.json" | grep -q "^hello  v1" || fail "ebb stages does not list hello"
"$EBB" run --pipeline hello --config "$T/hello.json" --device cuda --no-cache -o "$T/out" \
  "$T/any-file.txt" > "$T/stdout" 2> "$T/stderr" || fail "run exited $?: $(cat "$T/stderr")"
cat "$T/stdout"
grep -q '^\[hello\] done in [0-9.]* s, peak 65 MiB, host peak [0-9]* MiB$' "$T/stdout" || fail "no done line"
grep -q '^\[hello\] released [0-9]* MiB of GPU memory$' "$T/stdout" || fail "no release line"
grep -q '"mib": 64' "$T/out/result.json" || fail "no hello item"
[ "$fails" = 0 ] && echo "PASS" || echo "$fails failure(s)"
exit $((fails > 0))
