"""libebb.so through ctypes: where it is found, the structs of
include/ebb/ebb.h, and the function prototypes. Internal to the package."""
import ctypes
import os
import shutil
import sys

c_u32, c_u64, c_i64, c_int = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int64, ctypes.c_int
c_char_p, c_void_p, c_size_t = ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t
c_ssize_t = ctypes.c_ssize_t

API_MAJOR = 1  # EBB_API_VERSION_MAJOR this package is written against


class GpuInfo(ctypes.Structure):
    _fields_ = [("size", c_u32), ("label", ctypes.c_char * 32), ("name", ctypes.c_char * 128),
                ("ordinal", c_int), ("is_cuda", c_int), ("total_bytes", c_u64),
                ("free_bytes", c_u64)]


class GpuStats(ctypes.Structure):
    _fields_ = [("size", c_u32), ("reserved", c_u64), ("reserved_peak", c_u64),
                ("allocated", c_u64), ("allocated_peak", c_u64), ("cached", c_u64),
                ("segments", c_u64), ("blocks", c_u64), ("pinned_reserved", c_u64),
                ("pinned_allocated", c_u64), ("driver_free", c_u64), ("driver_total", c_u64),
                ("ctx_active", c_int), ("context_bytes", c_u64),
                ("driver_used_by_process", c_u64), ("unattributed", c_i64),
                # API 1.3
                ("reserved_total", c_u64), ("allocated_total", c_u64),
                ("segments_peak", c_u64), ("segments_total", c_u64), ("blocks_peak", c_u64),
                ("blocks_total", c_u64), ("seg_allocs", c_u64), ("seg_frees", c_u64),
                ("oom_retries", c_u64)]


class OwnerUsage(ctypes.Structure):
    _fields_ = [("size", c_u32), ("bytes", c_u64), ("bytes_peak", c_u64), ("bytes_total", c_u64),
                ("blocks", c_u64), ("blocks_peak", c_u64), ("blocks_total", c_u64),
                ("tree_bytes", c_u64), ("pinned_bytes", c_u64), ("pinned_peak", c_u64),
                ("quota", c_u64), ("refused", c_u64)]


class LeakEntry(ctypes.Structure):
    _fields_ = [("addr", c_u64), ("size", c_u64), ("owner", c_char_p), ("site", c_char_p),
                ("backtrace", c_char_p), ("pinned", c_int)]


class LeakList(ctypes.Structure):
    _fields_ = [("owner", c_char_p), ("count", c_u64), ("bytes", c_u64),
                ("pinned_bytes", c_u64), ("leaks", ctypes.POINTER(LeakEntry))]


class Released(ctypes.Structure):
    _fields_ = [("size", c_u32), ("released_bytes", c_u64), ("segment_bytes", c_u64),
                ("context_bytes", c_u64), ("pinned_bytes", c_u64), ("leaked_bytes", c_u64),
                ("leaked_blocks", c_u64), ("context_released", c_int), ("context_error", c_int),
                ("callbacks_run", c_int), ("callbacks_failed", c_int)]


class PythonSites(ctypes.Structure):
    _fields_ = [("size", c_u32), ("hexversion", c_u32), ("this_thread_state", c_void_p),
                ("addr2line", c_void_p), ("skip", c_char_p)]


class ReclaimResult(ctypes.Structure):
    _fields_ = [("size", c_u32), ("free_before", c_u64), ("free_after", c_u64),
                ("given_bytes", c_u64), ("peers_asked", c_int), ("peers_skipped", c_int)]


def sized(cls):
    s = cls()
    s.size = ctypes.sizeof(cls)
    return s


HOOK_FN = ctypes.CFUNCTYPE(None, c_void_p)
P = ctypes.POINTER

_PROTOS = {
    "ebb_api_version": (c_int, []),
    "ebb_version_string": (c_char_p, []),
    "ebb_errmsg": (c_char_p, []),
    "ebb_errname": (c_char_p, [c_int]),
    "ebb_gpu_open": (c_int, [c_char_p, P(c_void_p)]),
    "ebb_gpu_close": (None, [c_void_p]),
    "ebb_gpu_get_info": (c_int, [c_void_p, P(GpuInfo)]),
    "ebb_gpu_get_stats": (c_int, [c_void_p, P(GpuStats)]),
    "ebb_gpu_for_ordinal": (c_int, [c_int, P(c_void_p)]),
    "ebb_gpu_default_owner": (c_void_p, [c_void_p]),
    "ebb_gpu_alloc": (c_int, [c_void_p, c_size_t, c_char_p, P(c_u64)]),
    "ebb_gpu_release": (c_int, [c_void_p, ctypes.c_uint, P(Released)]),
    "ebb_reclaim": (c_int, [c_char_p, c_u64, c_char_p, ctypes.c_double, P(ReclaimResult)]),
    "ebb_broker_join": (c_int, [c_char_p, c_char_p, P(c_void_p)]),
    "ebb_broker_leave": (None, [c_void_p]),
    "ebb_gpu_mark": (c_int, [c_void_p, c_char_p]),
    "ebb_gpu_write_timeline": (c_int, [c_void_p, c_char_p]),
    "ebb_owner_open": (c_int, [c_void_p, c_char_p, c_void_p, P(c_void_p)]),
    "ebb_owner_close": (None, [c_void_p, P(P(LeakList))]),
    "ebb_owner_get_name": (c_char_p, [c_void_p]),
    "ebb_owner_quota": (c_int, [c_void_p, c_u64]),
    "ebb_owner_get_usage": (c_int, [c_void_p, P(OwnerUsage)]),
    "ebb_owner_release": (c_int, [c_void_p, ctypes.c_uint, P(P(LeakList)), P(Released)]),
    "ebb_owner_park": (c_int, [c_void_p, P(c_u64)]),
    "ebb_owner_wake": (c_int, [c_void_p]),
    "ebb_leak_list_free": (None, [P(LeakList)]),
    "ebb_push": (c_int, [c_void_p]),
    "ebb_pop": (c_int, []),
    "ebb_current": (c_void_p, [c_void_p]),
    "ebb_alloc": (c_int, [c_void_p, c_size_t, c_char_p, P(c_u64)]),
    "ebb_free": (c_int, [c_void_p, c_u64]),
    "ebb_lookup": (c_int, [c_void_p, c_u64, P(c_void_p), P(c_u64)]),
    "ebb_release_hook_add": (c_int, [c_char_p, HOOK_FN, c_void_p, P(c_u64)]),
    "ebb_release_hook_remove": (c_int, [c_u64]),
    "ebb_torch_alloc_at": (c_int, [c_ssize_t, c_int, c_char_p, P(c_void_p)]),  # API 1.2
    "ebb_torch_python_sites": (c_int, [P(PythonSites)]),  # API 1.3
    "ebb_torch_site": (c_int, [c_char_p, c_size_t]),
    "ebb_torch_last_error": (c_int, [c_char_p, c_size_t, P(c_u64)]),
    "ebb_gpu_reset_peaks": (c_int, [c_void_p]),
    # API 1.3: streams, the live blocks of an owner, blocks kept through releases
    "ebb_gpu_alloc_on": (c_int, [c_void_p, c_size_t, c_char_p, c_u64, P(c_u64)]),
    "ebb_free_on": (c_int, [c_void_p, c_u64, c_u64]),
    "ebb_record_stream": (c_int, [c_void_p, c_u64, c_u64]),
    "ebb_torch_alloc_on": (c_int, [c_ssize_t, c_int, c_void_p, c_char_p, P(c_void_p)]),
    "ebb_owner_blocks": (c_int, [c_void_p, P(P(LeakList))]),
    "ebb_keep": (c_int, [c_void_p, c_u64]),
}


def _candidates():
    env = os.environ.get("EBB_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    # running from the checkout: python/ebb/ -> build/
    checkout = os.path.dirname(os.path.dirname(here))
    out.append(os.path.join(checkout, "build", "libebb.so"))
    # next to the `ebb` on PATH: build/ebb -> build/libebb.so; P/bin/ebb -> P/lib
    exe = shutil.which("ebb")
    if exe:
        d = os.path.dirname(os.path.realpath(exe))
        out += [os.path.join(d, "libebb.so"), os.path.join(d, "..", "lib", "libebb.so")]
    # run from the checkout's root
    out.append(os.path.join(os.getcwd(), "build", "libebb.so"))
    # `cmake --install --prefix P` then `pip install ./python` into P's Python
    for prefix in (sys.prefix, "/usr/local", "/usr"):
        out.append(os.path.join(prefix, "lib", "libebb.so"))
    out.append("libebb.so.1")  # the loader's own search (LD_LIBRARY_PATH, ld.so.cache)
    return out


def load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path + " (absent)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        break
    else:
        raise ImportError("ebb: cannot load libebb.so; tried: %s. Build it (make build) or set "
                          "EBB_LIB to its path." % "; ".join(tried))
    for name, (res, args) in _PROTOS.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    major = lib.ebb_api_version() // 1000
    if major != API_MAJOR:
        raise ImportError("ebb: %s implements API %d.x, this package needs %d.x"
                          % (lib._name, major, API_MAJOR))
    return lib


class _LazyLib:
    """libebb.so, loaded on first use: `import ebb` (and the worker SDK, which
    needs no library) works where it is not built; the first call says why
    it cannot be loaded."""

    def __getattr__(self, name):
        real = _loaded[0] if _loaded else None
        if real is None:
            real = load()
            _loaded.append(real)
        v = getattr(real, name)
        setattr(self, name, v)
        return v


_loaded = []
lib = _LazyLib()
