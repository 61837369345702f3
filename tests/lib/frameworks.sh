# Sourced by tests/frameworks/*.sh after common.sh: PyTorch and CuPy (venvs
# under /opt/ebb-tools, scripts/install-deps.sh) on the fake GPU.
#   TORCH_PY, CUPY_PY   the venvs' pythons ($EBB_TORCH_PYTHON, $EBB_CUPY_PYTHON override)
#   need_python PY WHAT  fails the test (exit 1) when PY cannot import WHAT
#   fw_python PY ARGS   runs PY with ebb's package, the tests' helpers and the
#                       fake driver where the CUDA runtime looks for libcuda.so.1
# EBB_FRAMEWORKS_FAKEGPU=DIR (a build's fakegpu/ directory) points every
# process at another build of the fake, e.g. one in development.
if [ -n "${EBB_FRAMEWORKS_FAKEGPU:-}" ]; then
  export EBB_LIBCUDA=$EBB_FRAMEWORKS_FAKEGPU/libcuda.so.1
  export EBB_LIBNVML=$EBB_FRAMEWORKS_FAKEGPU/libnvidia-ml.so.1
  export FAKEGPU_SMI=$EBB_FRAMEWORKS_FAKEGPU/fakegpu-smi
fi
TORCH_PY=${EBB_TORCH_PYTHON:-/opt/ebb-tools/torch/bin/python}
CUPY_PY=${EBB_CUPY_PYTHON:-/opt/ebb-tools/cupy/bin/python}
export EBB_LIB=$EBB_BUILD_DIR/libebb.so PYTHONDONTWRITEBYTECODE=1
rm -f "$FAKEGPU_STATE"
need_python() {
  if ! "$1" -c "import $2" > "$T/import.err" 2>&1; then
    echo "FAIL: $1 cannot import $2 (scripts/install-deps.sh installs it): $(tail -1 "$T/import.err")" >&2
    exit 1
  fi
}
fw_python() {
  local py=$1
  shift
  # the CUDA runtime (libcudart in the wheels) dlopens libcuda.so.1 by name
  LD_LIBRARY_PATH="$(dirname "$EBB_LIBCUDA")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    PYTHONPATH="$EBB_SOURCE_DIR/python:$EBB_SOURCE_DIR/tests/python" "$py" "$@"
}
