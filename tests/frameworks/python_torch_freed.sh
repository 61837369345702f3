#!/usr/bin/env bash
# A PyTorch kernel on a tensor whose memory ebb's owner release gave back
# faults with CUDA_ERROR_ILLEGAL_ADDRESS (700) on the fake, as on a GPU
# (tests/python/torch_freed_check.py); FAKEGPU_CHECK_ARGS=0 turns the check off.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}" "${EBB_LIBCUDA:?}"
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/frameworks.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
need_python "$TORCH_PY" torch
out=$(fw_python "$TORCH_PY" "$EBB_SOURCE_DIR/tests/python/torch_freed_check.py" 2>"$T/err1")
echo "$out"
grep -q "^fault: .*illegal memory access" <<<"$out" ||
  { cat "$T/err1" >&2; fail "a kernel on freed memory did not raise PyTorch's illegal memory access"; }
grep -q "fakegpu: kernel .* in device memory that was freed" "$T/err1" ||
  fail "the fake did not say which argument pointed into freed memory"
out=$(FAKEGPU_CHECK_ARGS=0 fw_python "$TORCH_PY" "$EBB_SOURCE_DIR/tests/python/torch_freed_check.py" 2>"$T/err2")
echo "FAKEGPU_CHECK_ARGS=0: $out"
grep -q "^no fault" <<<"$out" || { cat "$T/err2" >&2; fail "FAKEGPU_CHECK_ARGS=0 still faulted"; }
[ $fails -eq 0 ] && echo "python_torch_freed: ok"
exit $((fails > 0))
