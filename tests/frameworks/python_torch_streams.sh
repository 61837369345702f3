#!/usr/bin/env bash
# Stream-ordered reuse under ebb.torch.use(): a tensor freed on a side stream
# with its work pending is not handed to the default stream before that work
# is done, and Tensor.record_stream holds a block back the same way
# (tests/python/torch_streams_check.py), on the fake in its simulated-time
# mode (FAKEGPU_KERNEL_US=1000000).
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}" "${EBB_LIBCUDA:?}"
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/frameworks.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300 FAKEGPU_KERNEL_US=1000000
need_python "$TORCH_PY" torch
fw_python "$TORCH_PY" "$EBB_SOURCE_DIR/tests/python/torch_streams_check.py"
rc=$?
[ $rc -eq 77 ] && exit 77 # a fake with no simulated kernel time: nothing can be pending
[ $rc -eq 0 ] || fail "torch_streams_check.py"
[ $fails -eq 0 ] && echo "python_torch_streams: ok"
exit $((fails > 0))
