"""PyTorch allocates through ebb: ebb.torch.use() installs libebb.so's
ebb_torch_alloc / ebb_torch_free as PyTorch's CUDAPluggableAllocator. Call it
before the first CUDA tensor. Tensors then belong to the thread's current
ebb owner (`with ebb.owner("separate"):`), else the device's "default" owner,
and there is no PyTorch cache to empty: o.release() gives memory back."""
from . import _lib

_installed = None


class Unavailable(RuntimeError):
    """The framework (or its CUDA support) is not there."""


def use():
    """Installs ebb as PyTorch's CUDA allocator. Raises Unavailable when
    PyTorch is not installed or has no CUDA, and RuntimeError when PyTorch
    has already allocated on the GPU (it cannot switch allocators then)."""
    global _installed
    if _installed is not None:
        return _installed
    try:
        import torch
    except ImportError as e:
        raise Unavailable("ebb.torch.use(): PyTorch is not installed in this Python (%s)" % e) from e
    if not torch.cuda.is_available():
        raise Unavailable("ebb.torch.use(): PyTorch %s has no usable CUDA (torch.version.cuda=%s, "
                          "torch.cuda.is_available() is False)"
                          % (torch.__version__, torch.version.cuda))
    mem = torch.cuda.memory
    alloc = mem.CUDAPluggableAllocator(_lib.lib._name, "ebb_torch_alloc", "ebb_torch_free")
    try:
        mem.change_current_allocator(alloc)
    except RuntimeError as e:
        raise RuntimeError("ebb.torch.use() must run before PyTorch's first CUDA allocation: %s"
                           % e) from e
    _installed = alloc
    return alloc
