"""PyTorch allocates through ebb: ebb.torch.use() makes ebb PyTorch's CUDA
allocator (torch.cuda.memory.change_current_allocator with a pluggable
allocator). Call it before the first CUDA tensor. Tensors then belong to
the thread's current ebb owner (`with ebb.owner("separate"):`), else the
device's "default" owner, each with the Python line that made it as its
site, and there is no PyTorch cache to empty: o.release() gives memory back
and reports a tensor still alive as a leak naming that line.

PyTorch calls libebb.so's own C functions, ebb_torch_alloc and
ebb_torch_free, for every tensor: no callback into Python. The site is
read by libebb from the allocating thread's own Python frames
(ebb_torch_python_sites, CPython 3.11); on another interpreter, or with
sites="python", the allocation is a ctypes callback that finds the site in
Python (slower), and with sites="off" blocks have no site ("torch"). The
free keeps libebb's late-free guard: a tensor still alive when its owner
was released (ebb freed its block as a leak) that dies later never frees a
newer tensor's block at the same address. Allocations PyTorch makes on its
own threads (autograd's backward) have no current owner: they go to the
device's "default" owner.

While ebb is PyTorch's allocator, torch.cuda's memory statistics
(memory_allocated, memory_reserved, their max_ forms, memory_stats,
memory_summary, reset_peak_memory_stats, reset_accumulated_memory_stats)
answer from ebb's figures for the device, memory_snapshot() lists ebb's
live blocks by owner and site, and empty_cache() gives ebb's cached
segments back; see docs/python.md for what they cannot say."""
import ctypes
import os
import sys

from . import _lib
from . import EbbError, caller_site

_installed = None
sites = None  # how blocks get their site: "c", "python" or "off" (after use())
sites_why = None  # why not "c", when "auto" chose "python"
_SITES = ("auto", "c", "python", "off")


class Unavailable(RuntimeError):
    """The framework (or its CUDA support) is not there."""


def __getattr__(name):
    if name == "last_error":  # the reason of the last allocation ebb refused
        return _last_error()
    raise AttributeError("module 'ebb.torch' has no attribute %r" % name)


def _last_error():
    buf = ctypes.create_string_buffer(512)
    n = ctypes.c_uint64()
    _lib.lib.ebb_torch_last_error(buf, len(buf), ctypes.byref(n))
    if not n.value:
        return None
    return EbbError(-3, buf.value.decode(errors="replace"))  # EBB_EOOM, as PyTorch says


def refused():
    """How many allocations ebb refused PyTorch in this process."""
    n = ctypes.c_uint64()
    _lib.lib.ebb_torch_last_error(None, 0, ctypes.byref(n))
    return n.value


# --- sites ------------------------------------------------------------------------
# void *alloc(ssize_t size, int device, cudaStream_t stream): PyTorch's
# CUDAPluggableAllocator signature (ebb_torch_alloc in ebb.h is the C twin)
_ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)


def _py_alloc(size, device, stream):
    if size <= 0:
        return None  # an empty tensor needs no memory
    try:
        p = ctypes.c_void_p()
        rc = _lib.lib.ebb_torch_alloc_on(size, device, stream, caller_site().encode(),
                                         ctypes.byref(p))
        if rc:
            raise EbbError(rc, "cuda:%d: alloc(%d bytes): %s"
                           % (device, size, _lib.lib.ebb_errmsg().decode(errors="replace")))
        return p.value
    except Exception as e:  # PyTorch turns NULL into its out-of-memory error
        sys.stderr.write("ebb.torch: %s\n" % e)
        return None


_py_alloc_cb = _ALLOC_FN(_py_alloc)  # kept alive for as long as PyTorch may call it


def _skip_dirs(torch):
    """The packages whose frames are never a site (ebb.caller_site's list),
    as their directories."""
    import importlib.util
    dirs = []
    for name in ("torch", "ebb", "numba", "cupy"):
        mod = sys.modules.get(name)
        path = getattr(mod, "__file__", None) if mod else None
        if path is None:
            spec = importlib.util.find_spec(name) if name not in sys.modules else None
            path = spec.origin if spec is not None else None
        if path:
            dirs.append(os.path.dirname(os.path.abspath(path)) + os.sep)
    return dirs


def _c_sites(torch):
    """Turns on libebb's reading of the allocating thread's Python frames,
    and checks it names the line Python itself names; returns None, or why
    not."""
    lib = _lib.lib
    api = ctypes.pythonapi
    cfg = _lib.sized(_lib.PythonSites)
    cfg.hexversion = sys.hexversion
    cfg.this_thread_state = ctypes.cast(api.PyGILState_GetThisThreadState, ctypes.c_void_p).value
    cfg.addr2line = ctypes.cast(api.PyCode_Addr2Line, ctypes.c_void_p).value
    skip = "\n".join(_skip_dirs(torch)).encode()
    cfg.skip = skip
    if lib.ebb_torch_python_sites(ctypes.byref(cfg)) != 0:
        return lib.ebb_errmsg().decode(errors="replace")
    buf = ctypes.create_string_buffer(1024)
    lib.ebb_torch_site(buf, len(buf))  # ctypes drops the GIL, as PyTorch's ops do
    want = caller_site()
    got = buf.value.decode(errors="replace")
    if got != want:
        lib.ebb_torch_python_sites(None)
        return "libebb read the site %r where Python says %r" % (got, want)
    return None


# --- torch.cuda's memory statistics, from ebb's figures ------------------------------
_baseline = {}  # ordinal -> totals at reset_accumulated_memory_stats


def _gpu_stats(ordinal):
    h = ctypes.c_void_p()
    lib = _lib.lib
    rc = lib.ebb_gpu_for_ordinal(int(ordinal), ctypes.byref(h))
    if rc:
        raise EbbError(rc, lib.ebb_errmsg().decode(errors="replace"))
    s = _lib.sized(_lib.GpuStats)
    rc = lib.ebb_gpu_get_stats(h, ctypes.byref(s))
    if rc:
        raise EbbError(rc, lib.ebb_errmsg().decode(errors="replace"))
    return h, s


def _stat(current, peak, total, base):
    total -= base
    return {"current": current, "peak": peak, "allocated": total,
            "freed": max(0, total - current)}


def _pools(all_):
    """ebb does not split its counters by PyTorch's pools: "all" is ebb's
    figure, the two pools read 0 (docs/python.md)."""
    zero = dict.fromkeys(all_, 0)
    return {"all": all_, "large_pool": zero, "small_pool": dict(zero)}


def memory_stats_nested(device=None):
    """torch.cuda.memory_stats_as_nested_dict's shape, from ebb's counters
    for the device (an ordinal; None: the current device)."""
    import torch
    ordinal = torch.cuda.current_device() if device is None else int(device)
    _, s = _gpu_stats(ordinal)
    b = _baseline.get(ordinal, {})
    alloc_b = _stat(s.allocated, s.allocated_peak, s.allocated_total, b.get("allocated", 0))
    blocks = _stat(s.blocks, s.blocks_peak, s.blocks_total, b.get("blocks", 0))
    zero = {"current": 0, "peak": 0, "allocated": 0, "freed": 0}
    return {
        "allocated_bytes": _pools(alloc_b),
        "active_bytes": _pools(dict(alloc_b)),
        "requested_bytes": _pools(dict(alloc_b)),
        "reserved_bytes": _pools(_stat(s.reserved, s.reserved_peak, s.reserved_total,
                                       b.get("reserved", 0))),
        "inactive_split_bytes": _pools(dict(zero)),
        "allocation": _pools(blocks),
        "active": _pools(dict(blocks)),
        "segment": _pools(_stat(s.segments, s.segments_peak, s.segments_total,
                                b.get("segments", 0))),
        "inactive_split": _pools(dict(zero)),
        "oversize_allocations": dict(zero),
        "oversize_segments": dict(zero),
        "num_alloc_retries": s.oom_retries - b.get("oom_retries", 0),
        "num_ooms": refused() - b.get("ooms", 0),
        "num_sync_all_streams": 0,
        "num_device_alloc": s.seg_allocs - b.get("seg_allocs", 0),
        "num_device_free": s.seg_frees - b.get("seg_frees", 0),
        "max_split_size": -1,
    }


def _reset_peaks(device=None):
    import torch
    h, _ = _gpu_stats(torch.cuda.current_device() if device is None else int(device))
    _lib.lib.ebb_gpu_reset_peaks(h)


def _reset_accumulated(device=None):
    import torch
    ordinal = torch.cuda.current_device() if device is None else int(device)
    _, s = _gpu_stats(ordinal)
    _baseline[ordinal] = {"allocated": s.allocated_total, "blocks": s.blocks_total,
                          "reserved": s.reserved_total, "segments": s.segments_total,
                          "oom_retries": s.oom_retries, "ooms": refused(),
                          "seg_allocs": s.seg_allocs, "seg_frees": s.seg_frees}


def _empty_cache():
    """torch.cuda.empty_cache(): ebb's cached segments go to the driver (no
    release hooks: PyTorch's call means its own cache only)."""
    import torch
    h, _ = _gpu_stats(torch.cuda.current_device())
    r = _lib.sized(_lib.Released)
    _lib.lib.ebb_gpu_release(h, 2, ctypes.byref(r))  # EBB_GPU_RELEASE_NO_HOOKS


def _owner_handles(h):
    """The C handles of the owners on device handle h that this process's
    Python knows (ebb.owner, ebb.current), and the device's default owner."""
    from . import _by_handle
    out = [lib_h for lib_h, o in list(_by_handle.items())
           if lib_h and getattr(o.device, "_h", None) == h.value]
    d = _lib.lib.ebb_gpu_default_owner(h)
    return out + ([d] if d and d not in out else [])


def _live_blocks(oh):
    from . import LeakReport
    pp = ctypes.POINTER(_lib.LeakList)()
    if _lib.lib.ebb_owner_blocks(oh, ctypes.byref(pp)) != 0 or not pp:
        return []
    try:
        return [b for b in LeakReport(pp).leaks if not b.pinned]
    finally:
        _lib.lib.ebb_leak_list_free(pp)


def _block_row(ordinal, b):
    """One live ebb block in the shape of a torch.cuda.memory_snapshot()
    segment: a segment of its own (ebb does not list its segments' layout)
    holding one active block whose frame is the block's site, named by its
    owner."""
    frame = {"filename": b.file, "line": b.line or 0, "name": b.owner}
    block = {"address": b.addr, "size": b.size, "requested_size": b.size,
             "state": "active_allocated", "frames": [frame]}
    return {"device": ordinal, "address": b.addr, "total_size": b.size,
            "allocated_size": b.size, "active_size": b.size, "requested_size": b.size,
            "stream": 0, "segment_type": "large" if b.size > (1 << 20) else "small",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [frame],
            "blocks": [block], "owner": b.owner, "site": b.site}


def snapshot():
    """torch.cuda.memory._snapshot()'s shape from ebb: every live block of
    the owners this process's Python knows (and each device's default
    owner), one row each, largest first, named by owner and site."""
    import torch
    segments, seen = [], set()
    for ordinal in range(torch.cuda.device_count()):
        try:
            h, _ = _gpu_stats(ordinal)
        except EbbError:
            continue
        h = ctypes.c_void_p(h.value)
        for oh in _owner_handles(h):
            for b in _live_blocks(oh):
                if (ordinal, b.addr) not in seen:
                    seen.add((ordinal, b.addr))
                    segments.append(_block_row(ordinal, b))
    segments.sort(key=lambda r: -r["total_size"])
    return {"segments": segments,
            "device_traces": [[] for _ in range(torch.cuda.device_count())]}


def _snapshot(*_args, **_kw):
    return snapshot()


def _wrap_statistics(torch):
    C = torch._C
    C._cuda_memoryStats = memory_stats_nested
    C._cuda_resetPeakMemoryStats = _reset_peaks
    C._cuda_resetAccumulatedMemoryStats = _reset_accumulated
    C._cuda_emptyCache = _empty_cache
    C._cuda_memorySnapshot = _snapshot


# --- use ------------------------------------------------------------------------------
def use(sites=None):
    """Installs ebb as PyTorch's CUDA allocator (once; later calls return the
    same allocator). sites: how a block gets its site, "auto" (default, or
    $EBB_TORCH_SITES): read from C where libebb knows the interpreter's
    frames, else "python" (a callback per allocation); "off": none. Raises
    Unavailable when PyTorch is not installed or has no CUDA, and
    RuntimeError when PyTorch has already allocated on the GPU (it cannot
    switch allocators then)."""
    global _installed
    if _installed is not None:
        return _installed
    want = sites or os.environ.get("EBB_TORCH_SITES") or "auto"
    if want not in _SITES:
        raise ValueError("ebb.torch.use(sites=%r): one of %s (or $EBB_TORCH_SITES)"
                         % (want, ", ".join(_SITES)))
    try:
        import torch
    except ImportError as e:
        raise Unavailable("ebb.torch.use(): PyTorch is not installed in this Python (%s)" % e) from e
    if not torch.cuda.is_available():
        raise Unavailable("ebb.torch.use(): PyTorch %s has no usable CUDA (torch.version.cuda=%s, "
                          "torch.cuda.is_available() is False)"
                          % (torch.__version__, torch.version.cuda))
    mode, why = want, None
    if want in ("auto", "c"):
        why = _c_sites(torch)
        mode = "c" if why is None else "python"
        if why is not None and want == "c":
            raise RuntimeError("ebb.torch.use(sites='c'): %s" % why)
    lib = _lib.lib
    if mode == "python":
        alloc_fn = ctypes.cast(_py_alloc_cb, ctypes.c_void_p).value
    else:
        alloc_fn = ctypes.cast(lib.ebb_torch_alloc, ctypes.c_void_p).value
    free_fn = ctypes.cast(lib.ebb_torch_free, ctypes.c_void_p).value
    mem = torch.cuda.memory
    # what CUDAPluggableAllocator(path, alloc, free) does with the two
    # symbols it looks up, given the two function addresses instead
    alloc = mem._CUDAAllocator(torch._C._cuda_customAllocator(alloc_fn, free_fn))
    try:
        mem.change_current_allocator(alloc)
    except RuntimeError as e:
        lib.ebb_torch_python_sites(None)
        raise RuntimeError("ebb.torch.use() must run before PyTorch's first CUDA allocation: %s"
                           % e) from e
    _wrap_statistics(torch)
    from . import _streams
    _streams.hook_torch_record_stream()
    _installed = alloc
    globals()["sites"] = mode
    globals()["sites_why"] = why
    return alloc
