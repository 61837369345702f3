"""Release hooks that free memory ebb does not manage (a framework's own
cache, as PyTorch's caching allocator is): ebb.release() and o.release()
answer what the process's usage dropped, hooks included, and that equals
what fakegpu-smi (a separate process) saw go, within 2 MiB. The "framework"
here takes its memory straight from the driver ($EBB_LIBCUDA, cuMemAlloc_v2
in the primary context ebb also uses). Run by
tests/integration/python_release_outside.sh."""
import ctypes
import os
import sys

import ebb
from smi import Checks, used_mib

MiB = 1 << 20
c = Checks()
cu = ctypes.CDLL(os.environ["EBB_LIBCUDA"])


def ok(rc, what):
    if rc != 0:
        raise RuntimeError("%s: CUDA error %d" % (what, rc))


class FrameworkCache:
    """Memory a framework keeps from the driver after its tensors are gone."""

    def __init__(self):
        self.blocks = []

    def take(self, nbytes):
        p = ctypes.c_uint64()
        ok(cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(nbytes)), "cuMemAlloc_v2")
        self.blocks.append(p.value)

    def empty(self):
        for p in self.blocks:
            ok(cu.cuMemFree_v2(ctypes.c_uint64(p)), "cuMemFree_v2")
        self.blocks = []


dev = ebb.device("cuda:0")
with ebb.owner("warmup") as w:
    dev.free(w.alloc(2 * MiB))  # ebb starts the primary context; the framework uses it too
w.release()
ctx = ctypes.c_void_p()
ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "cuDevicePrimaryCtxRetain")
ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
cache = FrameworkCache()
ebb.on_release(cache.empty, "framework cache")

# 1. ebb.release(): the hook empties 256 MiB ebb never saw
cache.take(256 * MiB)
before = used_mib()
r = ebb.release()
after = used_mib()
print("ebb.release(): %d MiB (ebb's segments %d MiB, outside ebb %d MiB); fakegpu-smi %d -> %d MiB"
      % (r.mib, r.segment_bytes // MiB, r.outside_bytes // MiB, before, after))
c.near(r.outside_bytes / MiB, 256, 2, "ebb.release(): outside_bytes")
c.near(before - after, r / MiB, 2, "ebb.release() vs fakegpu-smi")

# 2. an owner's release: its own 96 MiB plus 128 MiB a hook frees
o = ebb.owner("stage")
with o:
    a = o.alloc(96 * MiB)
    cache.take(128 * MiB)
dev.free(a)
before = used_mib()
r = o.release()
after = used_mib()
print("o.release(): %d MiB (ebb's segments %d MiB, outside ebb %d MiB); fakegpu-smi %d -> %d MiB"
      % (r.mib, r.segment_bytes // MiB, r.outside_bytes // MiB, before, after))
c.near(r.segment_bytes / MiB, 96, 2, "o.release(): segment_bytes")
c.near(r.outside_bytes / MiB, 128, 2, "o.release(): outside_bytes")
c.near(before - after, r / MiB, 2, "o.release() vs fakegpu-smi")

# 3. nothing outside: the figure is ebb's own, outside_bytes 0
with o:
    a = o.alloc(64 * MiB)
dev.free(a)
r = o.release()
c.check(r.outside_bytes == 0 and r.segment_bytes == r, "plain release: %d bytes, outside %d"
        % (r, r.outside_bytes))

# 4. the context: ebb's context figure is not counted twice
ok(cu.cuDevicePrimaryCtxRelease_v2(0), "cuDevicePrimaryCtxRelease_v2")
before = used_mib()
r = ebb.release(context=True)
after = used_mib()
print("ebb.release(context=True): %d MiB (context %d MiB, outside %d MiB); fakegpu-smi %d -> %d MiB"
      % (r.mib, r.context_bytes // MiB, r.outside_bytes // MiB, before, after))
c.check(r.context_released, "context not released: %s" % r.context_error)
c.near(before - after, r / MiB, 2, "ebb.release(context=True) vs fakegpu-smi")
c.check(after == 0, "the process holds %d MiB at the end" % after)
sys.exit(c.end("release_outside_check"))
