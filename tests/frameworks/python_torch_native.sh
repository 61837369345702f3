#!/usr/bin/env bash
# PyTorch's own caching allocator on the fake GPU, measured against
# fakegpu-smi at every step (tests/python/torch_native_check.py).
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}" "${EBB_LIBCUDA:?}"
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/frameworks.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
need_python "$TORCH_PY" torch
fw_python "$TORCH_PY" "$EBB_SOURCE_DIR/tests/python/torch_native_check.py" || fail "torch_native_check.py"
[ $fails -eq 0 ] && echo "python_torch_native: ok"
exit $((fails > 0))
