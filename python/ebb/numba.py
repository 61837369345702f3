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
load the same driver library ($EBB_LIBCUDA)."""
import contextlib
import ctypes
import weakref

from numba import cuda as _cuda
from numba.cuda import GetIpcHandleMixin, HostOnlyCUDAMemoryManager, MemoryInfo, MemoryPointer

import ebb as _ebb

_managers = weakref.WeakSet()


class EbbNumbaManager(GetIpcHandleMixin, HostOnlyCUDAMemoryManager):
    def initialize(self):
        self._dev = _ebb._device_for_ordinal(self.context.device.id)
        self._defer = 0
        self._pending = []
        _managers.add(self)

    def memalloc(self, size):
        addr = self._dev.alloc(max(int(size), 1), site=_ebb.caller_site())
        ref = weakref.ref(self)
        dev = self._dev

        def finalizer():
            mgr = ref()
            if mgr is not None and mgr._defer:
                mgr._pending.append(addr)
                return
            try:
                dev.free(addr, missing_ok=True)
            except Exception:  # interpreter shutdown: ebb goes with the process
                pass

        return MemoryPointer(weakref.proxy(self.context), ctypes.c_uint64(addr), size,
                             finalizer=finalizer)

    def _flush(self):
        pending, self._pending = self._pending, []
        for addr in pending:
            self._dev.free(addr, missing_ok=True)

    def get_memory_info(self):
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
        s = mgr._dev.stats()
        if s["reserved"] or s["pinned_reserved"]:
            return  # blocks are live: the context stays, ebb reports EBB_EBUSY
    while driver.pop_active_context() is not None:
        pass
    for gpu in devices._runtime.gpus:
        if gpu.primary_context is not None:
            gpu.primary_context.reset()
            gpu.release_primary_context()


_ebb._context_holders.append(_drop_numba_contexts)
_numba_memory_manager = EbbNumbaManager
