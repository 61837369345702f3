#!/usr/bin/env bash
# No tensor left on memory ebb gave back: torchcrepe called three times in
# owners released between calls, under the leak policies "host" (default:
# the model moves to host memory and comes back), "error" (the next call
# raises ebb.ReleasedError) and "keep" (tests/python/torch_holders_check.py).
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}" "${EBB_LIBCUDA:?}"
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/frameworks.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
need_python "$TORCH_PY" torchcrepe
fw_python "$TORCH_PY" "$EBB_SOURCE_DIR/tests/python/torch_holders_check.py" ||
  fail "torch_holders_check.py"
[ $fails -eq 0 ] && echo "python_torch_holders: ok"
exit $((fails > 0))
