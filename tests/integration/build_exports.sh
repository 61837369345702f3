#!/usr/bin/env bash
# ebb and ebb-worker export only what must be found at run time: the kernel
# host twins (cmake/ebb.dynamic-list), not every symbol (-rdynamic). (That
# the twins are still found with dlsym, the tests that run kernels through
# ebb show: stages_pitch_songtrace.) A plugin stage still loads, in ebb and
# in ebb-worker: it needs no ebb symbol, it gets the host table at init.
set -u
: "${EBB:?}" "${EBB_WORKER:?}" "${EBB_BUILD_DIR:?}"
. "$(dirname "$0")/../lib/common.sh"
command -v nm > /dev/null || { echo "FAIL: nm (binutils) is not installed" >&2; exit 1; }

for bin in "$EBB" "$EBB_WORKER"; do
  name=$(basename "$bin")
  nm -D --defined-only "$bin" | awk '{print $NF}' | sed 's/@.*//' | sort -u > "$T/$name.exports" ||
    fail "$name: nm -D failed"
  echo "--- $name exports $(wc -l < "$T/$name.exports") symbols"
  grep -qx 'fakegpu_twin_pitch_cmndf' "$T/$name.exports" || fail "$name: the pitch twin is not exported"
  grep -qx 'fakegpu_twin_ebb_stft_window' "$T/$name.exports" || fail "$name: the STFT twin is not exported"
  # internal functions of every room stay inside. main too, unless a shared
  # library the program loads refers to it: the linker then must export it
  # (libpulse, which espeak-ng's audio output brings, has a weak `main`).
  main=main
  for lib in $(ldd "$bin" | awk '$3 ~ /^\// {print $3}'); do
    if nm -D "$lib" 2>/dev/null | grep -qE ' [Uw] main$'; then
      echo "--- $name: $lib refers to main, so the linker exports it"
      main=""
      break
    fi
  done
  for internal in mem_allocator_create dev_open pl_registry_create wrk_wire_send \
                  pl_item_from_wire base_log $main; do
    grep -qx "$internal" "$T/$name.exports" && fail "$name exports the internal symbol $internal"
  done
  others=$(grep -v '^fakegpu_twin_' "$T/$name.exports" | grep '^ebb_' | head -5)
  [ -z "$others" ] || fail "$name exports ebb internals: $others"
done

# a plugin stage loads in ebb and in ebb-worker
export EBB_PLUGIN_PATH="$EBB_BUILD_DIR/examples/stages"
"$EBB" stages > "$T/plugin-stages.txt" 2>&1 || fail "ebb stages with the plugin: exit $?"
grep -q 'checksum' "$T/plugin-stages.txt" || fail "ebb stages does not list the plugin stage: $(cat "$T/plugin-stages.txt")"
printf 'abc' > "$T/in.txt"
cat > "$T/p.json" <<JSON
{"pipelines": {"iso": {"stages": [{"stage": "checksum", "isolate": true}]},
               "inproc": {"stages": [{"stage": "checksum"}]}}}
JSON
for p in iso inproc; do
  "$EBB" run --pipeline $p --config "$T/p.json" --device cpu --no-cache -o "$T/out-$p" \
    "$T/in.txt" > "$T/$p.out" 2> "$T/$p.err" || fail "plugin pipeline $p: exit $?: $(cat "$T/$p.err")"
  cat "$T/$p.out"
  grep -q '^\[checksum\] 3 bytes, fnv1a64 ' "$T/$p.out" || fail "$p: the plugin did not run"
done

[ $fails -eq 0 ] && echo "build_exports: ok"
exit $((fails > 0))
