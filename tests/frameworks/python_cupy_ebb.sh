#!/usr/bin/env bash
# ebb.cupy.use() on the fake GPU, with CuPy from /opt/ebb-tools/cupy (the
# venv the fake-runtime work installs): tests/python/cupy_ebb_check.py, then
# a slice of CuPy's own tests (of the cupy sdist under /opt/ebb-tools/cupy-src:
# the memory tests, and those of arrays' memory: get, owndata, DLPack,
# streams) twice, with CuPy's own pool and under ebb.cupy.use(): every test
# that passes with CuPy's pool must pass with ebb's allocator
# (tests/python/junit_pass_sets.py), among those in which the fake counted no
# kernel launch (tests/fakegpu/cupy_launches.py): a launch does nothing on the
# fake, so such a test reads whatever memory the allocator handed it.
set -u
: "${EBB_BUILD_DIR:?}" "${EBB_SOURCE_DIR:?}" "${FAKEGPU_SMI:?}" "${EBB_LIBCUDA:?}"
. "$(dirname "$0")/../lib/common.sh"
. "$(dirname "$0")/../lib/frameworks.sh"
export FAKEGPU_MEMORY_MIB=8192 FAKEGPU_CONTEXT_MIB=300
need_python "$CUPY_PY" cupy
need_python "$CUPY_PY" pytest
fw_python "$CUPY_PY" "$EBB_SOURCE_DIR/tests/python/cupy_ebb_check.py" || fail "cupy_ebb_check.py"

ver=$("$CUPY_PY" -c 'import cupy; print(cupy.__version__)')
tests=${EBB_CUPY_SRC:-/opt/ebb-tools/cupy-src}/cupy-$ver/tests
slice=(cupy_tests/cuda_tests/test_memory.py cupy_tests/cuda_tests/test_stream.py
       cupy_tests/core_tests/test_ndarray_get.py cupy_tests/core_tests/test_ndarray_owndata.py
       cupy_tests/core_tests/test_dlpack.py)
for f in "${slice[@]}"; do
  [ -f "$tests/$f" ] || { fail "CuPy's own $f is not in $tests (scripts/install-deps.sh unpacks them)"; exit 1; }
done
for run in cupy ebb; do
  plugin=()
  [ $run = ebb ] && plugin=(-p ebb_cupy_pytest)
  (cd "$tests" && timeout 240 env LD_LIBRARY_PATH="$(dirname "$EBB_LIBCUDA")" \
    EBB_CUPY_PYTEST_REPORT="$T/$run.owner.json" FAKEGPU_CUPY_RESULTS="$T/$run.tsv" \
    PYTHONPATH="$EBB_SOURCE_DIR/python:$EBB_SOURCE_DIR/tests/python:$EBB_SOURCE_DIR/tests/fakegpu" \
    "$CUPY_PY" -m pytest -q -p cupy_launches \
    -p no:cacheprovider "${plugin[@]}" --junitxml="$T/$run.xml" \
    "${slice[@]}" > "$T/$run.log" 2>&1)
  tail -1 "$T/$run.log" | sed "s/^/$run: /"
  [ -s "$T/$run.xml" ] || fail "pytest ($run) wrote no report: $(tail -5 "$T/$run.log")"
done
# the plug-in was in use: CuPy's allocations in the ebb run went through ebb
blocks=$(jget "$(cat "$T/ebb.owner.json" 2>/dev/null)" '["blocks_total"]')
echo "ebb run: $blocks allocations went through ebb"
[ "${blocks:-0}" -gt 0 ] || fail "the ebb run made no allocation through ebb (owner: $(cat "$T/ebb.owner.json" 2>/dev/null))"
if [ -s "$T/cupy.xml" ] && [ -s "$T/ebb.xml" ]; then
  "$CUPY_PY" "$EBB_SOURCE_DIR/tests/python/junit_pass_sets.py" "$T/cupy.xml" "$T/ebb.xml" \
    "$T/cupy.tsv" "$T/ebb.tsv" ||
    fail "ebb.cupy.use() loses CuPy memory tests that pass with CuPy's own pool (logs in $T)"
fi
[ $fails -eq 0 ] && echo "python_cupy_ebb: ok"
exit $((fails > 0))
