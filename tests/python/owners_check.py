"""The Python package over libebb.so on the fake GPU, no framework: three
owners take 1, 2 and 3 GiB in turn and each o.release() returns what
fakegpu-smi sees go (within 2 MiB); a forgotten block is a leak reported
with this file's line; the process ends at 0 bytes with the context released.
Run by tests/integration/python_owners.sh."""
import sys

import ebb
from smi import Checks, used_mib

GiB, MiB = 1 << 30, 1 << 20
c = Checks()
dev = ebb.device()
c.check(dev.is_cuda and dev.label == "cuda:0", "device: %r" % dev)
c.check(used_mib() == 0, "opening made a context: %d MiB" % used_mib())

for i, gib in enumerate((1, 2, 3)):
    with ebb.owner("stage%d" % i) as o:
        c.check(ebb.current() is o, "current owner is %r" % ebb.current())
        blocks = [dev.alloc(gib * GiB // 4) for _ in range(4)]
        st = o.stats()
        c.check(st["bytes"] == gib * GiB and st["blocks"] == 4, "stage%d stats %r" % (i, st))
        c.check(dev.lookup(blocks[0]) == ("stage%d" % i, gib * GiB // 4), "lookup")
    for b in blocks:
        dev.free(b)
    c.release(o, "stage%d" % i, gib * 1024)
    o.close()

# a forgotten block: a leak, with the line that allocated it
o = ebb.owner("forgetful")
with o:
    kept = dev.alloc(1 * GiB); FORGOT_LINE = sys._getframe().f_lineno  # noqa: E702
leaks = c.one_leak(o)
if leaks:
    k = leaks.leaks[0]
    c.check(k.size == GiB and k.owner == "forgetful", "leak %r" % k)
    c.check(k.file.endswith("owners_check.py") and k.line == FORGOT_LINE,
            "leak site %s, expected owners_check.py:%d" % (k.site, FORGOT_LINE))
    print("leak reported:", leaks)
c.check(not dev.free(kept, missing_ok=True), "ebb freed the leaked block already")
try:
    dev.free(kept)
    c.check(False, "a second free did not raise")
except ebb.EbbError as e:
    c.check(e.name == "EBB_ENOTFOUND", "double free: %s" % e)

# park and wake: the physical memory goes, the address stays
o = ebb.owner("sleeper")
p = o.alloc(256 * MiB)
awake = used_mib()
c.check(o.park() == 256 * MiB, "park gave back a different figure")
c.check(awake - used_mib() == 256, "park: fakegpu-smi %d -> %d MiB" % (awake, used_mib()))
o.wake()
c.check(used_mib() == awake and dev.lookup(p) == ("sleeper", 256 * MiB), "wake")
dev.free(p)
o.release()
o.close()

# errors name what was wrong
try:
    ebb.Device("tpu:1")
    c.check(False, "a bad spec did not raise")
except ebb.EbbError as e:
    c.check("tpu:1" in str(e), "bad spec message: %s" % e)

# release hooks run on release
ran = []
h = ebb.on_release(lambda: ran.append(1), name="test-cache")
ebb.release()
c.check(ran == [1], "release hook ran %d times" % len(ran))
ebb.remove_on_release(h)

# framework hooks say clearly when their framework is missing
import importlib.util  # noqa: E402
import ebb.cupy  # noqa: E402
import ebb.torch  # noqa: E402
for mod, fw, what in ((ebb.torch, "torch", "PyTorch"), (ebb.cupy, "cupy", "CuPy")):
    if importlib.util.find_spec(fw) is None:
        try:
            mod.use()
            c.check(False, "%s.use() without %s did not raise" % (mod.__name__, what))
        except ebb.torch.Unavailable as e:
            c.check("%s is not installed" % what in str(e), "%s message: %s" % (what, e))
    else:
        print("%s is installed here: %s.use() without it is not checked" % (what, mod.__name__))

# ebb.torch.use() hands PyTorch an allocation callback and libebb.so's
# ebb_torch_free: checked with a stand-in for torch (only where PyTorch is
# absent) whose _cuda_customAllocator calls the two addresses as PyTorch does
if importlib.util.find_spec("torch") is None:
    import ctypes  # noqa: E402
    import os  # noqa: E402
    import types  # noqa: E402
    import warnings  # noqa: E402
    calls = {}

    class StandInCustom:
        def __init__(self, alloc_addr, free_addr):
            self.alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                          ctypes.c_void_p)(alloc_addr)
            self.free = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int,
                                         ctypes.c_void_p)(free_addr)
            calls["free_is_ebb"] = free_addr == ctypes.cast(ebb._lib.lib.ebb_torch_free,
                                                            ctypes.c_void_p).value

    class StandInWrapper:
        def __init__(self, raw):
            self.raw = raw

    mem = types.SimpleNamespace(_CUDAAllocator=StandInWrapper,
                                change_current_allocator=lambda a: calls.update(current=a))
    fake = types.SimpleNamespace(__version__="stand-in", version=types.SimpleNamespace(cuda="12"),
                                 cuda=types.SimpleNamespace(is_available=lambda: True, memory=mem),
                                 _C=types.SimpleNamespace(_cuda_customAllocator=StandInCustom))
    sys.modules["torch"] = fake
    try:
        a = ebb.torch.use()
        c.check(calls.get("current") is a, "use() did not install the allocator")
        c.check(calls.get("free_is_ebb"), "the free function is not libebb's ebb_torch_free")
        with ebb.owner("torchy") as o:
            p = a.raw.alloc(8 * MiB, 0, None)
            q = a.raw.alloc(MiB, 0, None); QLINE = sys._getframe().f_lineno  # noqa
        c.check(p and o.stats()["bytes"] == 9 * MiB, "torch alloc not attributed: %r" % o.stats())
        a.raw.free(p, 8 * MiB, 0, None)
        c.check(o.stats()["bytes"] == MiB, "torch free")
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            leaks = o.release().leaks
        site = leaks.leaks[0].site if leaks else None
        c.check(site == "%s:%d" % (os.path.abspath(__file__), QLINE),
                "a torch block's leak site is %s, want this file's line %d" % (site, QLINE))
        a.raw.free(q, MiB, 0, None)  # freed by ebb already: quietly accepted
        o.close()
    finally:
        del sys.modules["torch"]
        ebb.torch._installed = None

ctx = used_mib()
got = ebb.release(context=True)
print("context: released %d MiB, fakegpu-smi %d -> %d MiB" % (got.mib, ctx, used_mib()))
c.check(got.context_released, "context not released: %s" % got.context_error)
c.check(used_mib() == 0, "process holds %d MiB at the end" % used_mib())
sys.exit(c.end("owners_check"))
