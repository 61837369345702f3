#!/usr/bin/env bash
# Issue 40's done-when test: torchcrepe (its shipped weights) three times in
# ebb owners released between calls, with the fake's kernel argument check
# on: no call may run a kernel on freed device memory
# (tests/python/torch_crepe_check.py). Fails on ebb before issue 40's fix:
# the second call faults with 700 ("an illegal memory access").
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}" "${EBB_LIBCUDA:?}"
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/frameworks.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300 FAKEGPU_CHECK_ARGS=1
need_python "$TORCH_PY" torchcrepe
fw_python "$TORCH_PY" "$EBB_SOURCE_DIR/tests/python/torch_crepe_check.py" 2>"$T/err" ||
  { grep -a "fakegpu: kernel" "$T/err" | head -3 >&2; tail -n 5 "$T/err" >&2; fail "torch_crepe_check.py"; }
[ $fails -eq 0 ] && echo "python_torch_crepe: ok"
exit $((fails > 0))
