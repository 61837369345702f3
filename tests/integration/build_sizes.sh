#!/usr/bin/env bash
# Files of one concept and functions the length of a screen (issue 46,
# DESIGN.md "How we write C here"): no file of src/ over 900 lines and no
# function in it over 80 (tests/support/srcsize.py names each with its
# length; a function is counted from its signature to its closing brace at
# column 0, the layout .clang-format gives every function).
#  - first the check itself: a generated file with a 91-line function and
#    1,000 lines is refused with both named; one of 80 lines passes.
#  - EXCEPT: files left out, each with the reason (remove the line once the
#    file is split).
set -u
: "${EBB_SOURCE_DIR:?}"
. "$(dirname "$0")/../lib/common.sh"
CHECK=$EBB_SOURCE_DIR/tests/support/srcsize.py
EXCEPT=() # none today

# --- the check can fail ------------------------------------------------------
{
  echo '/* probe */'
  printf 'static int long_fn(int x) {\n'
  for i in $(seq 1 88); do printf '  x += %d;\n' "$i"; done
  printf '  return x;\n}\n'
  printf 'int short_fn(int x,\n             int y) {\n'
  for i in $(seq 1 76); do printf '  x += y * %d;\n' "$i"; done
  printf '  return x;\n}\n'
  for i in $(seq 1 828); do printf '/* filler %d */\n' "$i"; done
} > "$T/probe.c"
python3 "$CHECK" "$T/probe.c" > "$T/probe.out" 2>&1
rc=$?
[ $rc = 1 ] || fail "a 91-line function in a 1,000-line file: the check exited $rc, expected 1: $(cat "$T/probe.out")"
grep -q "probe.c:2: long_fn is 91 lines, over 80" "$T/probe.out" ||
  fail "the probe's long function is not named as 'probe.c:2: long_fn is 91 lines': $(cat "$T/probe.out")"
grep -q "probe.c: 1000 lines, over 900" "$T/probe.out" ||
  fail "the probe's 1,000 lines are not named: $(cat "$T/probe.out")"
grep -q short_fn "$T/probe.out" && fail "short_fn (80 lines) was named: $(cat "$T/probe.out")"
echo "--- the check refuses: $(tr '\n' ';' < "$T/probe.out")"

# --- src/ ----------------------------------------------------------------------
cd "$EBB_SOURCE_DIR" || exit 1
mapfile -t files < <(find src -name '*.[ch]' | LC_ALL=C sort)
[ "${#files[@]}" -gt 100 ] || fail "only ${#files[@]} files found under src/"
args=()
for e in "${EXCEPT[@]}"; do
  [ -f "$e" ] || fail "the exception $e does not exist: remove it from EXCEPT"
  args+=(--except "$e")
done
if python3 "$CHECK" "${args[@]}" "${files[@]}" > "$T/src.out" 2>&1; then
  echo "--- ${#files[@]} files of src/: none over 900 lines, no function over 80 (left out: ${EXCEPT[*]:-none})"
else
  fail "over the limits (split along a real seam): $(cat "$T/src.out")"
fi
exit $((fails > 0))
