#!/usr/bin/env bash
# ebb.torch.use() on the fake GPU: PyTorch's allocations go to the thread's
# ebb owner, o.release() matches fakegpu-smi's drop, a tensor alive at
# release is a leak naming its line (tests/python/torch_ebb_check.py).
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}" "${EBB_LIBCUDA:?}"
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/frameworks.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
need_python "$TORCH_PY" torch
fw_python "$TORCH_PY" "$EBB_SOURCE_DIR/tests/python/torch_ebb_check.py" || fail "torch_ebb_check.py"
[ $fails -eq 0 ] && echo "python_torch_ebb: ok"
exit $((fails > 0))
