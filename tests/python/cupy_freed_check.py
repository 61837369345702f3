"""A CuPy array kept past its ebb owner's release with policy "none" (the
default "host" keeps a CuPy array's block, docs/python.md): ebb frees its memory as a
leak and gives it back to the driver; the next kernel that reads the array
faults on the fake with CUDA_ERROR_ILLEGAL_ADDRESS (700), as on a GPU
(tests/fakegpu/fakecuda_params.c reads the layout of CuPy's NVRTC cubins).
Prints "fault: ..." or "no fault". Run by tests/frameworks/python_cupy_freed.sh."""
import warnings

import cupy
import ebb
import ebb.cupy

ebb.cupy.use()
live = cupy.ones(1 << 20, dtype=cupy.float32)
with ebb.owner("forgetful") as o:
    kept = cupy.ones(1 << 20, dtype=cupy.float32)
    live += kept  # both live: no fault
    cupy.cuda.Device().synchronize()
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ebb.LeakWarning)
    got = o.release(policy="none")  # the old behaviour: freed under its holder
print("released %d MiB, leaks: %s" % (got.mib, got.leaks is not None), flush=True)
try:
    live += kept  # kept's memory went back to the driver
    cupy.cuda.Device().synchronize()
    print("no fault")
except Exception as e:  # noqa: BLE001 -- CuPy's CUDARuntimeError / CUDADriverError
    print("fault: %s: %s" % (type(e).__name__, str(e).splitlines()[0]))
