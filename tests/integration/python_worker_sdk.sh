#!/usr/bin/env bash
# The worker SDK (python/ebb/worker.py) against a host in Python
# (tests/python/worker_sdk_check.py), under the Python first on PATH (no
# NumPy: memoryviews) and under /usr/bin/python3 (Debian's NumPy: arrays).
set -u
: "${EBB_SOURCE_DIR:?}"
export PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$EBB_SOURCE_DIR/python:$EBB_SOURCE_DIR/tests/python
fails=0
for py in python3 /usr/bin/python3; do
  $py "$EBB_SOURCE_DIR/tests/python/worker_sdk_check.py" || { echo "FAIL: under $py" >&2; fails=$((fails + 1)); }
done
/usr/bin/python3 -c 'import numpy' 2>/dev/null || { echo "FAIL: /usr/bin/python3 has no NumPy (python3-numpy)" >&2; fails=$((fails + 1)); }
[ $fails -eq 0 ] && echo "python_worker_sdk: ok"
exit $((fails > 0))
