"""ebb.cupy.use() against CuPy (/opt/ebb-tools/cupy) on the fake GPU: CuPy's
allocations go to the thread's ebb owner, o.release() returns what
fakegpu-smi saw drop (within 2 MiB), an array alive at release is a leak
naming the line that made it. Run by tests/frameworks/python_cupy_ebb.sh."""
import os
import sys

import cupy
import ebb
import ebb.cupy
import numpy as np
from smi import Checks, used_mib

MiB = 1 << 20
c = Checks()
ebb.cupy.use()

with ebb.owner("arrays") as o:
    a = cupy.asarray(np.arange(1 << 20, dtype=np.int32))
    b = cupy.empty(256 * MiB, dtype=cupy.uint8)
    st = o.stats()
c.check(st["bytes"] >= 4 * MiB + 256 * MiB, "the owner holds %d bytes" % st["bytes"])
c.check((cupy.asnumpy(a) == np.arange(1 << 20, dtype=np.int32)).all(), "a round trip came back different")
del a, b
before = used_mib()
got = o.release()
after = used_mib()
print("arrays: o.release() = %d MiB; fakegpu-smi %d -> %d MiB" % (got.mib, before, after))
c.near(before - after, got / MiB, 2, "o.release() vs fakegpu-smi")
c.check(got.mib >= 258, "released only %d MiB" % got.mib)
c.check(got.leaks is None, "leaked: %s" % got.leaks)

with ebb.owner("forgetful") as o:
    kept = cupy.empty(64 * MiB, dtype=cupy.uint8); LINE = sys._getframe().f_lineno  # noqa
leaks = c.one_leak(o)
if leaks:
    k = leaks.leaks[0]
    print("leak reported:", str(leaks).replace("\n", " | "))
    c.check(k.size == 64 * MiB and k.owner == "forgetful", "leak %r" % k)
    c.check(k.file == os.path.abspath(__file__) and k.line == LINE,
            "leak site %s, expected %s:%d" % (k.site, os.path.abspath(__file__), LINE))
del kept
sys.exit(c.end("cupy_ebb_check"))
