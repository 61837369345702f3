#!/usr/bin/env bash
# torch.cuda.graph on the fake GPU, natively and under ebb.torch: a small
# model captured and replayed 10 times; under ebb.torch o.release() equals
# fakegpu-smi's drop within 1 MiB (tests/python/torch_graph_check.py).
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}" "${EBB_LIBCUDA:?}"
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/frameworks.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
need_python "$TORCH_PY" torch
fw_python "$TORCH_PY" "$EBB_SOURCE_DIR/tests/python/torch_graph_check.py" ||
  fail "torch_graph_check.py (native)"
fw_python "$TORCH_PY" "$EBB_SOURCE_DIR/tests/python/torch_graph_check.py" ebb ||
  fail "torch_graph_check.py ebb"
[ $fails -eq 0 ] && echo "python_torch_graph: ok"
exit $((fails > 0))
