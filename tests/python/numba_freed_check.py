"""A Numba device array kept past its ebb owner's release with policy "none"
(NUMBA_CUDA_MEMORY_MANAGER=ebb.numba): ebb frees its memory as a leak and
gives it back to the driver; a kernel launched on it faults on the fake with
CUDA_ERROR_ILLEGAL_ADDRESS (700), as on a GPU. Numba cannot compile kernels
here (no NVVM), so the kernel is nvcc's args_add from
tests/fakegpu/args_kernels.cu (argv[1]: its cubin), loaded and launched
through Numba's own driver layer. Prints "fault: ..." or "no fault". Run by
tests/frameworks/python_numba_freed.sh."""
import ctypes
import sys
import warnings

import ebb  # noqa: F401 -- first, so Numba loads ebb's driver library
import numpy as np
from numba import cuda
from numba.cuda.cudadrv import driver


class Holder(ctypes.Structure):
    _fields_ = [("a", ctypes.c_int), ("p", ctypes.c_void_p), ("d", ctypes.c_double)]


def ptr(arr):
    return ctypes.c_void_p(arr.device_ctypes_pointer.value)


ctx = cuda.current_context()
with open(sys.argv[1], "rb") as f:
    fn = ctx.create_module_image(f.read()).get_function("args_add")
live = cuda.to_device(np.ones(1 << 18, np.float32))
other = cuda.to_device(np.ones(1 << 18, np.float64))


def launch(y):
    args = [ptr(live), ptr(y), ctypes.c_int(32), Holder(7, ptr(live).value, 1.5), ctypes.c_char(b"c"),
            ptr(other)]
    driver.launch_kernel(fn.handle, 1, 1, 1, 32, 1, 1, 0, 0, args)
    cuda.synchronize()


with ebb.owner("forgetful") as o:
    kept = cuda.to_device(np.ones(1 << 18, np.float32))
    launch(kept)  # all live: no fault
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ebb.LeakWarning)
    got = o.release(policy="none")  # the old behaviour: freed under its holder
print("released %d MiB, leaks: %s" % (got.mib, got.leaks is not None), flush=True)
try:
    launch(kept)  # kept's memory went back to the driver
    print("no fault")
except driver.CudaAPIError as e:
    print("fault: %s" % e)
