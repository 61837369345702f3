"""Numba's External Memory Management plug-in:

    NUMBA_CUDA_MEMORY_MANAGER=ebb.numba python3 app.py

Every device array Numba makes comes from ebb, owned by the thread's current
ebb owner (`with ebb.owner("a"):`), with the Python line that asked for it as
its site, so a forgotten array shows up in the owner's leak report. Frees are
immediate (into ebb's cache) except inside Numba's defer_cleanup(). Pinned
and mapped host memory stay Numba's own (HostOnlyCUDAMemoryManager).
ebb.release(context=True) also drops Numba's hold on the context when
nothing is left on the device, so the process can end at 0 bytes.

import ebb first (or set NUMBA_CUDA_DRIVER yourself) so that Numba and ebb
load the same driver library ($EBB_LIBCUDA).

An array ebb sub-allocated lives inside a larger driver allocation (a 2 MiB
segment, or more). Numba's device_memory_size() answers the size of the
allocation an array lives in; under this plug-in that is ebb's block (the
size asked for), not the segment: the module wraps
numba.cuda.cudadrv.driver.device_memory_size for arrays whose memory came
from ebb. A client that asks the driver itself (cuMemGetAddressRange, which
Numba's device_extents() and IPC handles use) still sees the whole segment:
the driver knows nothing of ebb's blocks, on the fake as on a GPU."""
import contextlib
import ctypes
import weakref

from numba import cuda as _cuda
from numba.cuda import GetIpcHandleMixin, HostOnlyCUDAMemoryManager, MemoryInfo, MemoryPointer
from numba.cuda.cudadrv import driver as _driver

import ebb as _ebb

_managers = weakref.WeakSet()


class _EbbPointer(MemoryPointer):
    """A MemoryPointer whose memory is an ebb block (its size is the
    block's, the size asked for)."""


def _ordinal_of(context):
    """The device ordinal of a context Numba is preparing. Numba's own
    contexts carry a Device whose .id is the ordinal; a context attached to
    a third party's primary context may carry anything as its device (Numba's
    own tests pass a weakref to a TestCase). Numba prepares a context only
    while it is current, so then the driver says which device it is on."""
    dev_id = getattr(context.device, "id", None)
    if isinstance(dev_id, int):
        return dev_id
    if _driver.USE_NV_BINDING:
        return int(_driver.driver.cuCtxGetDevice())
    from numba.cuda.cudadrv import drvapi
    d = drvapi.cu_device()
    _driver.driver.cuCtxGetDevice(ctypes.byref(d))
    return d.value


class EbbNumbaManager(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
    # Numba makes one manager per context and may reset() or close it
    # without ever calling initialize() (a context that was created but
    # never made current): the state reset() needs exists from the start.
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._dev = None
        self._defer = 0
        self._pending = []

    def initialize(self):
        if self._dev is None:
            self._dev = _ebb._device_for_ordinal(_ordinal_of(self.context))
        _managers.add(self)

    def memalloc(self, size):
        dev = self._dev
        addr, token = _ebb._framework_alloc(dev, max(int(size), 1), _ebb.caller_site())
        ref = weakref.ref(self)

        def finalizer():
            mgr = ref()
            if mgr is not None and mgr._defer:
                mgr._pending.append((addr, token))
                return
            try:
                _ebb._framework_free(dev, addr, token)
            except Exception:  # interpreter shutdown: ebb goes with the process
                pass

        return _EbbPointer(weakref.proxy(self.context), ctypes.c_uint64(addr), size,
                           finalizer=finalizer)

    def _flush(self):
        pending, self._pending = self._pending, []
        if self._dev is None:
            return
        for addr, token in pending:
            _ebb._framework_free(self._dev, addr, token)

    def get_memory_info(self):
        if self._dev is None:  # asked before the context was made current
            self.initialize()
        s = self._dev.stats()
        return MemoryInfo(free=s["driver_free"], total=s["driver_total"])

    def reset(self):
        super().reset()
        self._flush()

    @contextlib.contextmanager
    def defer_cleanup(self):
        with super().defer_cleanup():
            self._defer += 1
            try:
                yield
            finally:
                self._defer -= 1
                if not self._defer:
                    self._flush()

    @property
    def interface_version(self):
        return 1


def _drop_numba_contexts():
    """Numba retains the primary context of each device it used; give that
    retain back (without cuDevicePrimaryCtxReset, which would pull the
    context from under ebb) when ebb holds nothing on the device."""
    from numba.cuda.cudadrv import devices
    from numba.cuda.cudadrv.driver import driver
    for mgr in list(_managers):
        if mgr._dev is None:
            continue
        s = mgr._dev.stats()
        if s["reserved"] or s["pinned_reserved"]:
            return  # blocks are live: the context stays, ebb reports EBB_EBUSY
    while driver.pop_active_context() is not None:
        pass
    for gpu in devices._runtime.gpus:
        if gpu.primary_context is not None:
            gpu.primary_context.reset()
            gpu.release_primary_context()


def _allocation_size(devmem, _driver_size=_driver.device_memory_size):
    """numba.cuda.cudadrv.driver.device_memory_size, for an array or pointer
    whose memory is an ebb block: the block's size (Numba's answer is the
    size of the allocation the memory lives in; ebb's block is that
    allocation). Anything else (Numba's own pinned/managed memory, foreign
    pointers) goes to Numba's, which asks the driver."""
    if getattr(devmem, "_cuda_memsize_", None) is None:
        gpu = getattr(devmem, "gpu_data", devmem)
        base = getattr(gpu, "owner", None) if gpu is not None else None
        if isinstance(base, _EbbPointer):
            return base.size
    return _driver_size(devmem)


_driver.device_memory_size = _allocation_size
_ebb._context_holders.append(_drop_numba_contexts)
_numba_memory_manager = EbbNumbaManager
