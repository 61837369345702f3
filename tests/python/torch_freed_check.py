"""A PyTorch kernel on memory freed behind PyTorch's back faults as on a GPU:
a tensor made in an ebb owner outlives o.release(policy="none") (ebb frees
its block as a leak and hands the memory back to the driver, the old
behaviour: the default policy "host" would move the tensor to host memory
first, docs/python.md); the next kernel that reads it
leaves the context with CUDA_ERROR_ILLEGAL_ADDRESS (700), which PyTorch
raises as "an illegal memory access". The fake reads the kernel's parameter
layout from PyTorch's own images (tests/fakegpu/fakecuda_params.c). With
FAKEGPU_CHECK_ARGS=0 the same launch goes unnoticed. Prints "fault" or
"no fault". Run by tests/frameworks/python_torch_freed.sh."""
import warnings

import ebb
import ebb.torch
import torch

ebb.torch.use()
live = torch.ones(1 << 20, device="cuda")
with ebb.owner("forgetful") as o:
    kept = torch.ones(1 << 20, device="cuda")
    live.add_(kept)  # both live: no fault
    torch.cuda.synchronize()
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ebb.LeakWarning)
    got = o.release(policy="none")
print("released %d MiB, leaks: %s" % (got.mib, got.leaks is not None))
try:
    live.add_(kept)  # kept's storage went back to the driver
    torch.cuda.synchronize()
    print("no fault")
except RuntimeError as e:
    print("fault: %s" % str(e).splitlines()[0])
