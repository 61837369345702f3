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
    kept.set(np.full(64 * MiB, 7, dtype=np.uint8))  # a copy (the fake runs no kernel)
# A CuPy array cannot change its memory in place: under the default leak
# policy ("host") ebb keeps its block, names it and its holder, and frees it
# with the array
before = used_mib()
leaks = c.one_leak(o)
if leaks:
    k = (leaks.leaks + leaks.kept)[0]
    print("leak reported:", str(leaks).replace("\n", " | "))
    c.check(k.size == 64 * MiB and k.owner == "forgetful", "leak %r" % k)
    c.check(k.file == os.path.abspath(__file__) and k.line == LINE,
            "leak site %s, expected %s:%d" % (k.site, os.path.abspath(__file__), LINE))
    c.check(leaks.kept and k.holder == "__main__.kept" and k.action.startswith("kept"),
            "the array was not kept, or its holder not named: %r (%s)" % (k.holder, k.action))
c.check(o.stats()["bytes"] == 64 * MiB, "the kept block left its owner: %d bytes"
        % o.stats()["bytes"])
c.check(int(kept[12345]) == 7, "the kept array lost its bytes")
c.check(used_mib() == before, "kept memory went back to the driver (%d -> %d MiB)"
        % (before, used_mib()))
del kept  # CuPy frees it now: a plain free of a live block
c.check(o.stats()["bytes"] == 0, "the kept block was not freed with its array")
c.check(o.release().mib >= 64, "the kept block's segment did not go back after its array died")
sys.exit(c.end("cupy_ebb_check"))
