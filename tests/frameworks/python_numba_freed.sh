#!/usr/bin/env bash
# A Numba array kept past its ebb owner's release: a kernel launched on it
# faults with CUDA_ERROR_ILLEGAL_ADDRESS (700) on the fake, as on a GPU
# (tests/python/numba_freed_check.py); FAKEGPU_CHECK_ARGS=0 turns the check off.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}" "${EBB_LIBCUDA:?}"
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/frameworks.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
cubin=$EBB_BUILD_DIR/fakegpu/args-images/args.cubin
[ -f "$cubin" ] || { echo "no $cubin (built with nvcc): skipped"; exit 77; }
/usr/bin/python3 -c "import numba" 2>/dev/null || { fail "python3-numba is not installed (scripts/install-deps.sh)"; exit 1; }
export NUMBA_CUDA_MEMORY_MANAGER=ebb.numba
out=$(fw_python /usr/bin/python3 "$EBB_SOURCE_DIR/tests/python/numba_freed_check.py" "$cubin" 2>"$T/err1")
echo "$out"
grep -Eq "^fault: .*(700|ILLEGAL)" <<<"$out" ||
  { tail -n 5 "$T/err1" >&2; fail "a kernel on the freed Numba array did not fault with 700"; }
grep -q "fakegpu: kernel .* in device memory that was freed" "$T/err1" ||
  fail "the fake did not say which argument pointed into freed memory"
out=$(FAKEGPU_CHECK_ARGS=0 fw_python /usr/bin/python3 "$EBB_SOURCE_DIR/tests/python/numba_freed_check.py" "$cubin" 2>"$T/err2")
echo "FAKEGPU_CHECK_ARGS=0: $out"
grep -q "^no fault" <<<"$out" || { tail -n 5 "$T/err2" >&2; fail "FAKEGPU_CHECK_ARGS=0 still faulted"; }
[ $fails -eq 0 ] && echo "python_numba_freed: ok"
exit $((fails > 0))
