"""Streams for the framework plug-ins: PyTorch's Tensor.record_stream told
to ebb's allocator (docs/python.md, "Streams").

PyTorch's pluggable allocator has a record_stream hook in C++
(CUDAPluggableAllocator::set_record_stream_fn) that its Python API does not
expose (torch 2.15: torch.cuda.memory.CUDAPluggableAllocator takes only
alloc and free), so a record_stream reaches ebb through Python: ebb.torch
wraps torch.Tensor.record_stream, which then also tells ebb
(ebb_record_stream), and the block's free waits for that stream's work too.
C++ callers of c10's recordStream (NCCL process groups) are not seen."""
import sys

from . import _device_for_ordinal
from ._lib import lib

_hooked = []


def hook_torch_record_stream():
    """Wraps torch.Tensor.record_stream once."""
    tensor = getattr(sys.modules.get("torch"), "Tensor", None)
    original = getattr(tensor, "record_stream", None)
    if _hooked or original is None:  # a torch without one (a stand-in, an old build)
        return

    def record_stream(self, stream):
        original(self, stream)
        if self.is_cuda:
            dev = _device_for_ordinal(self.device.index)
            # a storage not from ebb (made before ebb.torch.use()) is not ebb's to order
            lib.ebb_record_stream(dev.handle, self.untyped_storage().data_ptr(),
                                  int(stream.cuda_stream))

    record_stream.__doc__ = original.__doc__
    tensor.record_stream = record_stream
    _hooked.append(original)
