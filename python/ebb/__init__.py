"""ebb in a Python process: owners for device memory, leak reports with
Python allocation sites, and release figures the driver confirms.

    import ebb
    with ebb.owner("separate") as o:     # allocations on this thread go to "separate"
        model = load_model()
        out = model(x)
    del model
    print(o.release())                    # bytes the driver got back
    ebb.release(context=True)             # and the context: the process holds 0 bytes

Frameworks allocate through ebb with ebb.torch.use(), ebb.cupy.use(), or
NUMBA_CUDA_MEMORY_MANAGER=ebb.numba. docs/python.md has the long form.
Pure Python over libebb.so (ctypes): found through $EBB_LIB, the checkout's
build/, the Python prefix's lib/, /usr/local/lib, or the loader's path.
"""
import ctypes
import os
import sys
import threading
import warnings

# Numba reads its driver path when it is imported: point it at the driver ebb
# uses (the fake GPU in tests) unless told otherwise, so both share a context.
if os.environ.get("EBB_LIBCUDA") and "numba" not in sys.modules:
    os.environ.setdefault("NUMBA_CUDA_DRIVER", os.environ["EBB_LIBCUDA"])

from . import _lib  # noqa: E402
from ._lib import lib  # noqa: E402

__all__ = ["Device", "Owner", "EbbError", "Leak", "LeakReport", "LeakWarning", "Released",
           "device", "owner", "current", "release", "on_release", "api_version", "version",
           "reclaim", "broker_join", "BrokerPeer", "ReleasedError", "set_leak_policy",
           "leak_policy"]

MiB = 1 << 20


def version():
    return lib.ebb_version_string().decode()


def api_version():
    return lib.ebb_api_version()


class EbbError(Exception):
    """An ebb call failed: .code (negative EBB_E... value), .name ("EBB_EOOM"),
    and the message ebb gave, which names what was wrong."""

    def __init__(self, code, message):
        self.code = code
        self.name = lib.ebb_errname(code).decode()
        self.message = message
        super().__init__("%s (%s)" % (message, self.name))


def _check(rc, what=None):
    if rc != 0:
        msg = lib.ebb_errmsg().decode(errors="replace")
        raise EbbError(rc, "%s: %s" % (what, msg) if what else msg)


class Leak:
    """A block its owner did not free: ebb freed it. site is "file.py:line"
    where it was allocated (the first frame outside the framework). holder:
    what still used it at the release (an attribute path such as
    "torchcrepe.infer.model.conv1.weight", or a description), None when
    nothing was found; action: what the leak policy did to the holder."""

    holder = None
    action = None

    def __init__(self, e):
        self.addr = e.addr
        self.size = e.size
        self.owner = e.owner.decode() if e.owner else "?"
        self.site = e.site.decode(errors="replace") if e.site else "?"
        self.backtrace = e.backtrace.decode(errors="replace") if e.backtrace else None
        self.pinned = bool(e.pinned)
        f, _, line = self.site.rpartition(":")
        self.file, self.line = (f, int(line)) if line.isdigit() else (self.site, None)

    def __repr__(self):
        held = ", held by %s" % self.holder if self.holder else ""
        return "<Leak %d bytes of %r at %s%s>" % (self.size, self.owner, self.site, held)


class LeakReport:
    """What an owner left behind when it was released or closed."""

    def __init__(self, ptr):
        ll = ptr.contents
        self.owner = ll.owner.decode() if ll.owner else "?"
        self.bytes = ll.bytes
        self.pinned_bytes = ll.pinned_bytes
        self.leaks = [Leak(ll.leaks[i]) for i in range(ll.count)]
        self.holders = []  # (root path or description, blocks, bytes, action): _holders
        self.kept = []  # Leak objects of blocks kept live for their holders (policy "keep")

    def __len__(self):
        return len(self.leaks) + len(self.kept)

    def __iter__(self):
        return iter(self.leaks)

    def lines(self):
        """The fixed log lines (docs/memory.md), then the holders found
        (docs/python.md)."""
        out = ["[%s] leaked %d MiB in %d blocks; freed by ebb"
               % (self.owner, self.bytes // MiB, len(self.leaks))] if self.leaks else []
        if self.kept:
            out.append("[%s] kept %d MiB in %d blocks that live objects still use"
                       % (self.owner, sum(k.size for k in self.kept) // MiB, len(self.kept)))
        for root, n, nbytes, action in self.holders:
            out.append("[%s]   %d MiB in %d blocks held by %s: %s"
                       % (self.owner, nbytes // MiB, n, root, action))
        for k in self.leaks + self.kept:
            out.append("[%s]   %d MiB (%d bytes) at %s" % (self.owner, k.size // MiB, k.size, k.site))
            if k.holder:
                out.append("[%s]     held by %s (%s)" % (self.owner, k.holder, k.action))
        return out

    def __str__(self):
        return "\n".join(self.lines())

    __repr__ = __str__


class LeakWarning(UserWarning):
    """Issued when an owner is released or closed with blocks still live;
    .report is the LeakReport."""

    def __init__(self, report):
        super().__init__(str(report))
        self.report = report


def _take_leaks(pp, device, rescued=None):
    rep = _holders_mod.merge(LeakReport(pp) if pp else None, rescued)
    if pp:
        lib.ebb_leak_list_free(pp)
    if rep is None:
        return None
    for k in rep.leaks:  # ebb freed them: a framework's late free must not free a successor
        if k.action is None or k.action.startswith("freed"):
            _framework_blocks.pop((device.label, k.addr), None)
    warnings.warn(LeakWarning(rep), stacklevel=3)
    return rep


class Released(int):
    """Bytes the driver got back (an int), with the details as attributes:
    segment_bytes, context_bytes, pinned_bytes, context_released,
    context_error, leaks (a LeakReport or None), and outside_bytes: what the
    process's own usage (NVML, as nvidia-smi shows it) dropped beyond ebb's
    segments and context while the release ran, i.e. what the release hooks
    freed in memory ebb does not manage (a framework's own cache emptied by
    a hook, a model dropped). The int is released + outside bytes."""

    def __new__(cls, r, leaks=None, outside=0):
        self = super().__new__(cls, r.released_bytes + outside)
        self.outside_bytes = outside
        for f in ("segment_bytes", "context_bytes", "pinned_bytes", "leaked_bytes"):
            setattr(self, f, getattr(r, f))
        self.context_released = bool(r.context_released)
        self.context_error = lib.ebb_errname(r.context_error).decode() if r.context_error else None
        self.leaks = leaks
        return self

    @property
    def mib(self):
        return int(self) // MiB


# --- blocks a framework plug-in holds --------------------------------------------
# A framework frees its memory when it drops its array, which may be long
# after ebb freed the block as a leak of a released owner, and after ebb
# handed the same address to another block. Each block a plug-in takes has a
# token; the plug-in's free frees the block only while the token is still
# the address's, so a late free of a leaked block never frees its successor.
_framework_blocks = {}  # (device label, addr) -> token


def _framework_alloc(dev, nbytes, site):
    """(addr, token) of a block for a framework plug-in (ebb.numba, ebb.cupy)."""
    addr = dev.alloc(nbytes, site=site)
    token = object()
    _framework_blocks[(dev.label, addr)] = token
    return addr, token


def _framework_free(dev, addr, token):
    """Frees the block if it is still the one `token` names; False if ebb
    already freed it (a leak of a released owner)."""
    key = (dev.label, addr)
    if _framework_blocks.get(key) is not token:
        return False
    del _framework_blocks[key]
    return dev.free(addr, missing_ok=True)


# --- release hooks: Python callables run by every release ---------------------
_hooks = {}  # handle -> (CFUNCTYPE object, fn): kept alive while registered
_context_holders = []  # callables that drop a framework's own context (ebb.numba)


def on_release(fn, name=None):
    """Registers fn() to drop something cached; every release runs it (in
    registration order, with the C ones). Returns a handle for
    remove_on_release."""

    def tramp(_arg, fn=fn):
        try:
            fn()
        except Exception as e:  # a failing hook must not stop the others
            warnings.warn("ebb: release hook %r failed: %s" % (name or fn, e))

    cb = _lib.HOOK_FN(tramp)
    h = ctypes.c_uint64()
    _check(lib.ebb_release_hook_add((name or getattr(fn, "__name__", "python")).encode(), cb,
                                    None, ctypes.byref(h)), "on_release")
    _hooks[h.value] = (cb, fn)
    return h.value


def remove_on_release(handle):
    _check(lib.ebb_release_hook_remove(handle), "remove_on_release")
    _hooks.pop(handle, None)


# --- devices -------------------------------------------------------------------
class Device:
    """One device and its caching allocator. spec: "auto" (default; the first
    GPU, else the CPU), "cpu", "cuda", "cuda:N". Opening the same device twice
    shares one allocator."""

    def __init__(self, spec=None, _handle=None):
        spec = spec or os.environ.get("EBB_DEVICE", "auto")
        if _handle is None:
            h = ctypes.c_void_p()
            _check(lib.ebb_gpu_open(spec.encode(), ctypes.byref(h)), "ebb.Device(%r)" % spec)
            _handle = h.value
            self._owns = True
        else:
            self._owns = False
        self._h = _handle
        info = _lib.sized(_lib.GpuInfo)
        _check(lib.ebb_gpu_get_info(self._h, ctypes.byref(info)))
        self.label = info.label.decode()
        self.name = info.name.decode(errors="replace")
        self.ordinal = info.ordinal
        self.is_cuda = bool(info.is_cuda)
        self.total_bytes = info.total_bytes
        self._default = None
        _open_handles.setdefault(self.label, [self._h, 0])[1] += 1

    def __repr__(self):
        return "<ebb.Device %s %r>" % (self.label, self.name)

    @property
    def handle(self):
        if not self._h:
            raise EbbError(-15, "ebb.Device %s is closed" % self.label)
        return self._h

    def stats(self):
        """A dict: reserved, allocated, cached (+ peaks), segments, blocks,
        pinned, the driver's free/total, ctx_active, context_bytes,
        driver_used_by_process and unattributed (memory taken behind ebb's back)."""
        s = _lib.sized(_lib.GpuStats)
        _check(lib.ebb_gpu_get_stats(self.handle, ctypes.byref(s)))
        return {f: getattr(s, f) for f, _ in _lib.GpuStats._fields_ if f != "size"}

    def owner(self, name, parent=None):
        return Owner(name, parent=parent, device=self)

    @property
    def default_owner(self):
        """Memory allocated on this device with no owner current goes here."""
        if self._default is None:
            self._default = Owner._wrap(lib.ebb_gpu_default_owner(self.handle), self)
        return self._default

    def alloc(self, nbytes, site=None):
        """Device memory for the calling thread's current owner (else the
        default owner). Returns the address (an int). site defaults to the
        caller's "file.py:line"."""
        addr = ctypes.c_uint64()
        _check(lib.ebb_gpu_alloc(self.handle, int(nbytes), (site or caller_site()).encode(),
                                 ctypes.byref(addr)), "alloc(%d bytes)" % nbytes)
        return addr.value

    def free(self, addr, missing_ok=False):
        """Frees a block. missing_ok: quietly accept a block ebb already freed
        as a leak (a framework's late free)."""
        rc = lib.ebb_free(self.handle, int(addr))
        if rc == -6 and missing_ok:  # EBB_ENOTFOUND
            return False
        _check(rc, "free(0x%x)" % addr)
        return True

    def keep(self, addr):
        """The live block at addr stays allocated through its owner's
        releases (still the owner's) until it is freed."""
        _check(lib.ebb_keep(self.handle, int(addr)), "keep(0x%x)" % addr)

    def lookup(self, addr):
        """(owner name, size) of the live block at addr."""
        o, n = ctypes.c_void_p(), ctypes.c_uint64()
        _check(lib.ebb_lookup(self.handle, int(addr), ctypes.byref(o), ctypes.byref(n)))
        return lib.ebb_owner_get_name(o).decode(), n.value

    def release(self, context=False):
        """Runs the release hooks, gives every cached segment and idle pinned
        buffer back to the driver, and with context=True the context too
        (when nothing is live). Returns the bytes the driver got back."""
        return _release(self.handle, context)

    def mark(self, label):
        _check(lib.ebb_gpu_mark(self.handle, label.encode()))

    def write_timeline(self, path):
        """The memory timeline as .svg or .json."""
        _check(lib.ebb_gpu_write_timeline(self.handle, os.fspath(path).encode()), str(path))

    def close(self):
        if self._h and self._owns:
            entry = _open_handles.get(self.label)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del _open_handles[self.label]
            lib.ebb_gpu_close(self._h)
        self._h = None


_default_device = None
_dev_lock = threading.Lock()
# label -> [handle, Device objects on it not closed]: what a release
# measures. libebb shares one handle per device among its opens (counted), so
# a device is measured once, and as long as the program has it open, even
# after the Device object is gone.
_open_handles = {}


def device(spec=None):
    """The process's default Device (opened on first use: $EBB_DEVICE or
    "auto"), or a Device for spec."""
    global _default_device
    if spec is not None:
        return Device(spec)
    with _dev_lock:
        if _default_device is None:
            _default_device = Device()
        return _default_device


def _device_for_ordinal(ordinal):
    h = ctypes.c_void_p()
    _check(lib.ebb_gpu_for_ordinal(int(ordinal), ctypes.byref(h)), "cuda:%d" % ordinal)
    d = device()
    if d._h == h.value:
        return d
    return Device(_handle=h.value)


def _process_used(handles):
    """The bytes NVML says this process holds on these devices (0 where it
    cannot say: no NVML, or a container that hides the process from it)."""
    total = 0
    for h in handles:
        s = _lib.sized(_lib.GpuStats)
        if lib.ebb_gpu_get_stats(h, ctypes.byref(s)) == 0:
            total += s.driver_used_by_process
    return total


def _outside(handles, before, r):
    """What the process gave back beyond ebb's own figure (see Released)."""
    drop = before - _process_used(handles)
    return max(0, drop - r.released_bytes)


def _release(handle, context):
    handles = [handle] if handle is not None else [h for h, _ in list(_open_handles.values())]
    before = _process_used(handles)
    r = _lib.sized(_lib.Released)
    _check(lib.ebb_gpu_release(handle, 0, ctypes.byref(r)), "release")
    if context:
        # a framework's own hold on the context goes first (ebb's still keeps
        # it alive), then ebb's: the context goes back when ebb lets go, and
        # ebb measures it
        for drop in list(_context_holders):
            drop()
        r2 = _lib.sized(_lib.Released)
        _check(lib.ebb_gpu_release(handle, 1 | 2, ctypes.byref(r2)), "release(context=True)")
        for f in ("released_bytes", "segment_bytes", "context_bytes", "pinned_bytes"):
            setattr(r, f, getattr(r, f) + getattr(r2, f))
        r.context_released, r.context_error = r2.context_released, r2.context_error
    return Released(r, outside=_outside(handles, before, r))


def release(context=False, device=None):
    """Release on every open device (or on `device`): hooks, cached segments,
    idle pinned buffers, and with context=True the contexts, including a
    framework's (Numba's) when ebb's plugin runs it. Returns the bytes the
    driver got back (a Released int)."""
    return _release(device.handle if device is not None else None, context)


def reclaim(nbytes, device="cuda:0", broker_dir=None, timeout=2.0):
    """Asks the ebb processes sharing the GPU (docs/broker.md) to give memory
    back until nbytes are free on device ("cuda:N"), before this process
    allocates outside ebb. Returns a dict: satisfied, free_before,
    free_after, given_bytes, peers_asked, peers_skipped, and message (what
    each peer keeps and why, when not satisfied). Raises EbbError for a bad
    device or broker directory."""
    r = _lib.sized(_lib.ReclaimResult)
    rc = lib.ebb_reclaim(device.encode(), int(nbytes),
                         broker_dir.encode() if broker_dir else None, float(timeout),
                         ctypes.byref(r))
    out = {f: getattr(r, f) for f, _ in _lib.ReclaimResult._fields_ if f != "size"}
    out["satisfied"] = rc == 0
    out["message"] = ""
    if rc == -3:  # EBB_EOOM: not all could be had; the rest is a real error
        out["message"] = lib.ebb_errmsg().decode(errors="replace")
    else:
        _check(rc, "reclaim")
    return out


class BrokerPeer:
    """This process registered as a broker peer (broker_join); leave() (or
    the end of a with block) unregisters it."""

    def __init__(self, handle):
        self._h = handle

    def leave(self):
        h, self._h = self._h, None
        if h:
            lib.ebb_broker_leave(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.leave()

    def __del__(self):
        self.leave()


def broker_join(broker_dir=None, what=None):
    """Registers this process in the broker directory (docs/broker.md) so that
    other processes on its GPUs (ebb serve, ebb reclaim, ebb.reclaim) can ask
    it for memory: a request runs release(context=True) on that device (the
    on_release hooks, e.g. a framework's cache; ebb's cached segments; the
    context when nothing is live) on a thread of ebb's, and answers with the
    bytes the driver got back. Offers only devices this process has open.
    Returns a BrokerPeer."""
    h = ctypes.c_void_p()
    _check(lib.ebb_broker_join(broker_dir.encode() if broker_dir else None,
                               what.encode() if what else None, ctypes.byref(h)), "broker_join")
    return BrokerPeer(h.value)


# --- owners ----------------------------------------------------------------------
_tls = threading.local()
_by_handle = {}  # C handle -> Owner, for current()


def caller_site(skip=("ebb", "numba", "cupy", "torch")):
    """"file.py:line" of the innermost frame outside ebb and the frameworks.
    A frame is theirs by its module's package, not by its path: a checkout
    in a directory named ebb/ holds the caller's own files too."""
    f = sys._getframe(1)
    while f is not None:
        fn = f.f_code.co_filename
        pkg = str(f.f_globals.get("__name__", "")).partition(".")[0]
        if pkg not in skip and not fn.startswith("<frozen"):
            return "%s:%d" % (fn, f.f_lineno)
        f = f.f_back
    return "?"


class Owner:
    """Who device memory belongs to. `with owner:` makes it the current owner
    of the calling thread (what framework allocations are attributed to)."""

    def __init__(self, name, parent=None, device=None):
        self.device = device or (parent.device if parent else globals()["device"]())
        self.parent = parent
        self.name = name
        h = ctypes.c_void_p()
        _check(lib.ebb_owner_open(self.device.handle, name.encode(),
                                  parent._handle if parent else None, ctypes.byref(h)),
               "owner %r" % name)
        self._h = h.value
        self.last_leaks = None
        _by_handle[self._h] = self

    @classmethod
    def _wrap(cls, h, dev):
        o = cls.__new__(cls)
        o.device, o.parent, o._h, o.last_leaks = dev, None, h, None
        o.name = lib.ebb_owner_get_name(h).decode()
        _by_handle[h] = o
        return o

    @property
    def _handle(self):
        if not self._h:
            raise EbbError(-15, "owner %r is closed" % self.name)
        return self._h

    def __repr__(self):
        return "<ebb.Owner %r on %s>" % (self.name, self.device.label)

    def __enter__(self):
        _check(lib.ebb_push(self._handle), "owner %r" % self.name)
        stack = getattr(_tls, "stack", None)
        if stack is None:
            stack = _tls.stack = []
        stack.append(self)
        return self

    def __exit__(self, *exc):
        lib.ebb_pop()
        _tls.stack.pop()
        return False

    def stats(self):
        """A dict: bytes, bytes_peak, bytes_total, blocks (+ peak, total),
        tree_bytes (with descendants), pinned_bytes, pinned_peak, quota, refused."""
        u = _lib.sized(_lib.OwnerUsage)
        _check(lib.ebb_owner_get_usage(self._handle, ctypes.byref(u)), "owner %r" % self.name)
        return {f: getattr(u, f) for f, _ in _lib.OwnerUsage._fields_ if f != "size"}

    def alloc(self, nbytes, site=None):
        addr = ctypes.c_uint64()
        _check(lib.ebb_alloc(self._handle, int(nbytes), (site or caller_site()).encode(),
                             ctypes.byref(addr)), "owner %r: alloc(%d bytes)" % (self.name, nbytes))
        return addr.value

    def quota(self, nbytes):
        _check(lib.ebb_owner_quota(self._handle, int(nbytes)), "owner %r" % self.name)

    def live_blocks(self):
        """The blocks this owner and its children hold now: a LeakReport of
        what a release would reclaim (nothing is freed), or None."""
        pp = ctypes.POINTER(_lib.LeakList)()
        _check(lib.ebb_owner_blocks(self._handle, ctypes.byref(pp)), "owner %r" % self.name)
        if not pp:
            return None
        try:
            return LeakReport(pp)
        finally:
            lib.ebb_leak_list_free(pp)

    def release(self, keep=False, policy=None):
        """The end of this owner's work: blocks it still holds are freed and
        reported as leaks (a LeakWarning; also .last_leaks), release hooks
        run, cached memory goes back to the driver. Live PyTorch tensors,
        CuPy and Numba arrays still on those blocks are named in the report
        and made safe first, as the leak policy says (policy, else
        ebb.leak_policy(): "host", "error", "keep" or "none"; docs/python.md).
        keep=True frees nothing live. Returns the bytes the driver got back
        (a Released int)."""
        rescued = None if keep else _holders_mod.rescue(self, policy)
        pp = ctypes.POINTER(_lib.LeakList)()
        r = _lib.sized(_lib.Released)
        handles = [self.device.handle]
        before = _process_used(handles)
        _check(lib.ebb_owner_release(self._handle, 1 if keep else 0, ctypes.byref(pp),
                                     ctypes.byref(r)), "owner %r: release" % self.name)
        self.last_leaks = _take_leaks(pp, self.device, rescued)
        return Released(r, self.last_leaks, _outside(handles, before, r))

    def park(self):
        """Moves the owner's blocks to host memory keeping their addresses;
        returns the device bytes given back."""
        n = ctypes.c_uint64()
        _check(lib.ebb_owner_park(self._handle, ctypes.byref(n)), "owner %r: park" % self.name)
        return n.value

    def wake(self):
        _check(lib.ebb_owner_wake(self._handle), "owner %r: wake" % self.name)

    def close(self, policy=None):
        """Closes the owner (and its children); what they hold is a leak,
        and its holders are made safe as release() does (a block kept by
        policy "keep" is freed all the same: close a kept owner last)."""
        if not self._h:
            return None
        rescued = _holders_mod.rescue(self, policy)
        pp = ctypes.POINTER(_lib.LeakList)()
        lib.ebb_owner_close(self._h, ctypes.byref(pp))
        _by_handle.pop(self._h, None)
        self._h = None
        self.last_leaks = _take_leaks(pp, self.device, rescued)
        return self.last_leaks


def owner(name, parent=None, device=None):
    """A new owner on `device` (default: ebb.device()); use it as
    `with ebb.owner("separate") as o:`."""
    return Owner(name, parent=parent, device=device)


def current():
    """The calling thread's current owner (innermost `with`), or None."""
    stack = getattr(_tls, "stack", None)
    return stack[-1] if stack else None


from . import _holders as _holders_mod  # noqa: E402  (uses the names above)
from ._holders import ReleasedError  # noqa: E402,F401


def set_leak_policy(policy):
    """What ebb does with live tensors and arrays on the memory of an owner
    being released: "host" (default; $EBB_LEAK_POLICY), "error", "keep" or
    "none" (docs/python.md, "Holders of released memory")."""
    _holders_mod.set_policy(policy)


def leak_policy():
    return _holders_mod.get_policy()
