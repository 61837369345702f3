"""A pytest plug-in (`-p ebb_cupy_pytest`): CuPy allocates through ebb
(ebb.cupy.use()) for the whole run, under an owner named "cupy-tests"."""
import ebb
import ebb.cupy


def pytest_configure(config):
    ebb.cupy.use()
    config._ebb_owner = ebb.owner("cupy-tests").__enter__()
