"""The Numba plug-in (NUMBA_CUDA_MEMORY_MANAGER=ebb.numba) on the fake GPU:
three owners take 1, 2 and 3 GiB of Numba device arrays in turn and each
o.release() returns what fakegpu-smi sees go (within 2 MiB); a forgotten
array is a leak reported with this file's line; the process ends at 0 bytes
with the context released (Numba's hold on it included). Run under
/usr/bin/python3 (Debian's python3-numba) by tests/integration/python_numba.sh."""
import os
import sys

import ebb  # before numba: NUMBA_CUDA_DRIVER = $EBB_LIBCUDA
import numpy as np
from numba import cuda
from smi import Checks, used_mib

GiB, MiB = 1 << 30, 1 << 20
c = Checks()
c.check(os.environ.get("NUMBA_CUDA_MEMORY_MANAGER") == "ebb.numba", "the plug-in is not selected")
c.check(used_mib() == 0, "a context before any array: %d MiB" % used_mib())

for i, gib in enumerate((1, 2, 3)):
    with ebb.owner("stage%d" % i) as o:
        a = cuda.device_array(gib * GiB, dtype=np.uint8)
        b = cuda.to_device(np.arange(1024, dtype=np.float32))
        c.check(float(b.copy_to_host()[1023]) == 1023.0, "a round trip through the device")
        st = o.stats()
        c.check(st["bytes"] == gib * GiB + 4096 and st["blocks"] == 2,
                "stage%d: owner holds %d bytes in %d blocks" % (i, st["bytes"], st["blocks"]))
    del a, b
    print("stage%d: %d GiB of Numba arrays" % (i, gib))
    c.release(o, "stage%d" % i, gib * 1024)

# A forgotten array under leak policy "none": ebb frees its block under it
# (as for an array ebb cannot reach), and its late free must be harmless.
ebb.set_leak_policy("none")
with ebb.owner("forgetful") as o:
    kept = cuda.device_array(256 * MiB, dtype=np.uint8); LINE = sys._getframe().f_lineno  # noqa
leaks = c.one_leak(o)
ebb.set_leak_policy("host")
if leaks:
    k = leaks.leaks[0]
    print("leak reported:", k, "->", str(leaks).splitlines()[1].strip())
    c.check(k.size == 256 * MiB and k.owner == "forgetful", "leak %r" % k)
    c.check(k.file == os.path.abspath(__file__) and k.line == LINE,
            "leak site %s, expected %s:%d" % (k.site, __file__, LINE))
# The forgotten array's address goes to the next block of its size; when
# Numba drops the forgotten array at last, that late free must not free the
# block that has the address now.
with ebb.owner("successor") as o2:
    succ = cuda.device_array(256 * MiB, dtype=np.uint8)
same = succ.device_ctypes_pointer.value == kept.device_ctypes_pointer.value
del kept  # Numba frees it now: ebb already did, quietly
st = o2.stats()
print("successor at the forgotten array's address: %s; it holds %d MiB after the late free"
      % (same, st["bytes"] // MiB))
c.check(same, "the successor did not get the leaked block's address: this check proves nothing")
c.check(st["bytes"] == 256 * MiB, "the late free of a leaked array freed its successor's block: "
        "the successor holds %d bytes" % st["bytes"])
del succ
c.release(o2, "successor", 256)

# An array kept past its owner's release under the default policy ("host"):
# the report names it and its site, its block goes back, and its next use
# raises ebb.ReleasedError naming the owner instead of reading freed memory.
with ebb.owner("held") as o3:
    held = cuda.to_device(np.arange(1 << 20, dtype=np.float32)); HLINE = sys._getframe().f_lineno  # noqa
before = used_mib()
leaks = c.one_leak(o3)
if leaks:
    k = leaks.leaks[0]
    print("held array:", str(leaks).splitlines()[-1].strip())
    c.check(k.holder == "__main__.held" and k.line == HLINE and "unusable" in k.action,
            "holder %r, site %s, action %r" % (k.holder, k.site, k.action))
c.check(before - used_mib() >= 2, "the held array's block did not go back (%d -> %d MiB)"
        % (before, used_mib()))
try:
    held.copy_to_host()
    c.check(False, "a Numba array on a released owner's memory was used without an error")
except ebb.ReleasedError as e:
    print("its next use:", e)
    c.check("'held'" in str(e), "the error does not name the owner: %s" % e)
del held

ctx = used_mib()
r = ebb.release(context=True)
print("end: ebb.release(context=True) = %d MiB (context %d MiB, released=%s); fakegpu-smi %d -> %d MiB"
      % (r.mib, r.context_bytes // MiB, r.context_released, ctx, used_mib()))
c.check(r.context_released, "context not released: %s" % r.context_error)
c.check(used_mib() == 0, "the process holds %d MiB at the end" % used_mib())
sys.exit(c.end("numba_check"))
