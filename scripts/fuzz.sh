#!/usr/bin/env bash
# Coverage-guided fuzzing of ebb's parsers with libFuzzer (clang).
#   scripts/fuzz.sh [SECONDS] [TARGET...]
# SECONDS per target (default 60); targets default to all of tests/fuzz/fuzz_*.c.
# Builds build-libfuzzer/ with clang, ASan+UBSan and -fsanitize=fuzzer, runs
# each target from a copy of its seed corpus (tests/fuzz/corpus/<target>/,
# crash-* files left out: they are known failures) with its dictionary, and
# leaves what libFuzzer found under build-libfuzzer/fuzz-out/<target>/:
# crash-*/leak-*/timeout-* files and the grown corpus. Exit status 1 when any
# target found something.
# Env: CC (default clang), FUZZ_BUILD (default build-libfuzzer), FUZZ_JOBS,
# EBB_FUZZ_KNOWN=1 (harnesses tolerate the bugs already recorded as crash-*
# files, so fuzzing goes on past them).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.c; do t=${f#tests/fuzz/fuzz_}; TARGETS+=("${t%.c}"); done
fi
CC=${CC:-clang}
B=${FUZZ_BUILD:-build-libfuzzer}
if ! printf 'int LLVMFuzzerTestOneInput(const unsigned char*d,unsigned long n){return 0;}' |
    "$CC" -x c -fsanitize=fuzzer -o /tmp/ebb-fuzz-probe.$$ - 2>/dev/null; then
  echo "fuzz.sh: $CC cannot build libFuzzer binaries (-fsanitize=fuzzer); install clang and" \
       "libclang-rt-dev (Debian: clang libclang-rt-14-dev)" >&2
  exit 2
fi
rm -f /tmp/ebb-fuzz-probe.$$
cmake -S . -B "$B" -DCMAKE_C_COMPILER="$CC" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DEBB_SANITIZE=ON -DEBB_FUZZ_LIBFUZZER=ON -DEBB_CUDA_KERNELS=OFF \
  -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link -fsanitize=float-cast-overflow" >/dev/null
cmake --build "$B" -j "${FUZZ_JOBS:-2}" --target "${TARGETS[@]/#/fuzz_}"
found=0
bin=$(cd "$B/tests" && pwd)
for t in "${TARGETS[@]}"; do
  out="$B/fuzz-out/$t"
  mkdir -p "$out/corpus" "$out/tmp"
  out=$(cd "$out" && pwd)
  find "tests/fuzz/corpus/$t" -maxdepth 1 -type f ! -name 'crash-*' -exec cp {} "$out/corpus/" \;
  dict=()
  [ -f "tests/fuzz/dict/$t.dict" ] && dict=(-dict="$PWD/tests/fuzz/dict/$t.dict")
  echo "== fuzz_$t for ${SECS}s"
  export EBB_TEST_TMP="$out/tmp"
  set +e
  (cd "$out" && "$bin/fuzz_$t" -max_total_time="$SECS" -max_len=65536 -timeout=10 \
     -rss_limit_mb=4096 -print_final_stats=1 "${dict[@]}" corpus \
     >log.txt 2>&1)
  rc=$?
  set -e
  grep -E '^(stat::number_of_executed_units|stat::new_units_added)|^#[0-9]+ +DONE' "$out/log.txt" || true
  if [ $rc -ne 0 ]; then
    found=1
    echo "fuzz_$t: FOUND something (exit $rc); see $out/log.txt:" >&2
    grep -m3 -E 'ERROR|invariant broken|runtime error' "$out/log.txt" >&2 || tail -5 "$out/log.txt" >&2
    ls "$out"/crash-* "$out"/leak-* "$out"/timeout-* "$out"/oom-* 2>/dev/null >&2 || true
  fi
done
exit $found
