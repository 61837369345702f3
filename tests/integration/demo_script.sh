#!/usr/bin/env bash
# `make demo` runs scripts/demo.sh: it must work as a newcomer runs it (no
# EBB_LIBCUDA: the real driver if any, else the CPU; then the fake GPU step),
# produce the songtrace outputs, and show the release lines confirmed by
# fakegpu-smi.
set -u
: "${EBB_SOURCE_DIR:?}" "${EBB_BUILD_DIR:?}" "${EBB_TEST_TMP:?}"
. "$(dirname "$0")/../lib/lock.sh"
rm -rf "$EBB_TEST_TMP" && mkdir -p "$EBB_TEST_TMP"
unset EBB_LIBCUDA EBB_LIBNVML FAKEGPU_STATE EBB_WHISPER_URL EBB_STAGE_HOOK
export DEMO_OUT=$EBB_TEST_TMP/out
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
"$EBB_SOURCE_DIR/scripts/demo.sh" "$EBB_BUILD_DIR" > "$EBB_TEST_TMP/log" 2>&1
rc=$?
cat "$EBB_TEST_TMP/log"
[ "$rc" = 0 ] || fail "demo.sh exited $rc"
for f in songtrace.json melody.mid pitch.csv timeline.svg; do
  [ -s "$DEMO_OUT/songtrace/$f" ] || fail "demo output $f missing"
done
grep -q "pipeline songtrace done" "$EBB_TEST_TMP/log" || fail "songtrace did not finish"
if grep -q "the next steps run on the CPU device" "$EBB_TEST_TMP/log"; then
  # no GPU here: the fake GPU step shows the releases, confirmed from outside
  grep -qE '^\[separate\] released [0-9]+ MiB of GPU memory$' "$EBB_TEST_TMP/log" || fail "no release line for separate"
  grep -qE '^\[pitch\] released [0-9]+ MiB of GPU memory$' "$EBB_TEST_TMP/log" || fail "no release line for pitch"
  grep -qE 'fakegpu-smi after-stage +separate +ebb holds +0 MiB' "$EBB_TEST_TMP/log" || fail "fakegpu-smi does not confirm separate's release"
fi
[ "$fails" = 0 ] && echo "demo_script: ok" || exit 1
