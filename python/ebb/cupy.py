"""CuPy allocates through ebb: ebb.cupy.use() sets CuPy's allocator
(cupy.cuda.set_allocator) to one that takes device memory from ebb for the
thread's current owner, with the Python line that asked as the site. CuPy's
own memory pool is bypassed, so o.release() gives memory back."""
import gc

from . import EbbError, _device_for_ordinal, _framework_alloc, _framework_free, caller_site
from .torch import Unavailable

_installed = False


class _Block:
    """Frees the block when CuPy drops the memory (quietly if ebb already
    freed it as a leak of a released owner)."""
    __slots__ = ("dev", "addr", "token")

    def __init__(self, dev, addr, token):
        self.dev, self.addr, self.token = dev, addr, token

    def __del__(self):
        try:
            _framework_free(self.dev, self.addr, self.token)
        except Exception:  # interpreter shutdown
            pass


def _alloc(size):
    import cupy
    dev = _device_for_ordinal(cupy.cuda.runtime.getDevice())
    site = caller_site()
    try:
        addr, token = _framework_alloc(dev, max(int(size), 1), site)
    except EbbError as e:
        if e.name != "EBB_EOOM":
            raise
        # as CuPy's own pool does on out-of-memory: arrays that are garbage
        # but not yet collected (cycles) give their blocks back, then once
        # more; what still does not fit is CuPy's OutOfMemoryError, which
        # CuPy's callers and tests expect
        gc.collect()
        try:
            addr, token = _framework_alloc(dev, max(int(size), 1), site)
        except EbbError as e2:
            if e2.name != "EBB_EOOM":
                raise
            raise cupy.cuda.memory.OutOfMemoryError(int(size), dev.stats()["allocated"]) from e2
    mem = cupy.cuda.memory.UnownedMemory(addr, size, _Block(dev, addr, token), dev.ordinal)
    return cupy.cuda.memory.MemoryPointer(mem, 0)


def use():
    """Installs the allocator. Raises Unavailable when CuPy is not installed."""
    global _installed
    try:
        import cupy
    except ImportError as e:
        raise Unavailable("ebb.cupy.use(): CuPy is not installed in this Python (%s)" % e) from e
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.cuda.set_allocator(_alloc)
    _installed = True
