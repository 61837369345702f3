"""A pytest plug-in (`-p ebb_cupy_pytest`): CuPy allocates through ebb
(ebb.cupy.use()) for the whole run, under an owner named "cupy-tests", and
ebb's allocator is put back before every test. When
$EBB_CUPY_PYTEST_REPORT names a file, the owner's totals are written there
at the end (blocks_total: how many allocations went through ebb), so a
caller can tell the plug-in was in use."""
import json
import os

import pytest

import ebb
import ebb.cupy

_owner = None


def pytest_configure(config):
    global _owner
    ebb.cupy.use()
    _owner = ebb.owner("cupy-tests").__enter__()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # before the test's fixtures: a CuPy test that swaps in a pool of its own
    # restores CuPy's default pool, not the allocator it found
    import cupy
    cupy.cuda.set_allocator(ebb.cupy._alloc)


def pytest_unconfigure(config):
    path = os.environ.get("EBB_CUPY_PYTEST_REPORT")
    if path and _owner is not None:
        with open(path, "w") as f:
            json.dump(_owner.stats(), f)
