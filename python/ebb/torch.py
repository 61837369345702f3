"""PyTorch allocates through ebb: ebb.torch.use() makes ebb PyTorch's CUDA
allocator (torch.cuda.memory.change_current_allocator with a pluggable
allocator). Call it before the first CUDA tensor. Tensors then belong to
the thread's current ebb owner (`with ebb.owner("separate"):`), else the
device's "default" owner, each with the Python line that made it as its
site, and there is no PyTorch cache to empty: o.release() gives memory back
and reports a tensor still alive as a leak naming that line.

The allocation side is a ctypes callback (it needs the Python stack for the
site) that calls libebb.so's ebb_torch_alloc_at; the free side is
libebb.so's ebb_torch_free, plain C, so PyTorch can free tensors while the
interpreter shuts down. The two keep libebb's late-free guard: a tensor
still alive when its owner was released (ebb freed its block as a leak)
that dies later never frees a newer tensor's block at the same address. Allocations PyTorch makes on
its own threads (autograd's backward) have no current owner: they go to the
device's "default" owner."""
import ctypes
import sys

from . import _lib
from . import EbbError, caller_site

_installed = None
last_error = None  # the EbbError of the last allocation ebb refused (PyTorch says only "out of memory")


class Unavailable(RuntimeError):
    """The framework (or its CUDA support) is not there."""


# void *alloc(ssize_t size, int device, cudaStream_t stream): PyTorch's
# CUDAPluggableAllocator signature (ebb_torch_alloc in ebb.h is the C twin)
_ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)


def _alloc(size, device, _stream):
    global last_error
    if size <= 0:
        return None  # an empty tensor needs no memory
    try:
        p = ctypes.c_void_p()
        rc = _lib.lib.ebb_torch_alloc_at(size, device, caller_site().encode(), ctypes.byref(p))
        if rc:
            raise EbbError(rc, "cuda:%d: alloc(%d bytes): %s"
                           % (device, size, _lib.lib.ebb_errmsg().decode(errors="replace")))
        return p.value
    except Exception as e:  # PyTorch turns NULL into its out-of-memory error
        last_error = e
        sys.stderr.write("ebb.torch: %s\n" % e)
        return None


_alloc_cb = _ALLOC_FN(_alloc)  # kept alive for as long as PyTorch may call it


def use():
    """Installs ebb as PyTorch's CUDA allocator (once; later calls return the
    same allocator). Raises Unavailable when PyTorch is not installed or has
    no CUDA, and RuntimeError when PyTorch has already allocated on the GPU
    (it cannot switch allocators then)."""
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
    alloc_fn = ctypes.cast(_alloc_cb, ctypes.c_void_p).value
    free_fn = ctypes.cast(_lib.lib.ebb_torch_free, ctypes.c_void_p).value
    # what CUDAPluggableAllocator(path, alloc, free) does with the two
    # symbols it looks up, given the two function addresses instead
    alloc = mem._CUDAAllocator(torch._C._cuda_customAllocator(alloc_fn, free_fn))
    try:
        mem.change_current_allocator(alloc)
    except RuntimeError as e:
        raise RuntimeError("ebb.torch.use() must run before PyTorch's first CUDA allocation: %s"
                           % e) from e
    _installed = alloc
    return alloc
