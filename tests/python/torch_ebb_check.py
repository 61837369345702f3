"""ebb.torch.use() against PyTorch (/opt/ebb-tools/torch) on the fake GPU:
PyTorch's allocations go to the calling thread's ebb owner; o.release()
returns what fakegpu-smi (a separate process) saw drop, within 2 MiB; a
tensor still alive at release is reported as a leak naming the Python line
that made it; such a tensor keeps its address from new tensors until it
dies, and its late free leaves other memory at that address alone
(libebb's late-free guard). Run by
tests/frameworks/python_torch_ebb.sh."""
import os
import sys
import threading
import warnings

import ebb
import ebb.torch
import torch
from smi import Checks, used_mib

MiB = 1 << 20
c = Checks()
ebb.torch.use()
dev = ebb.device("cuda:0")
# on this project's CPython (3.11) libebb reads the allocating line itself:
# PyTorch calls C, no Python callback per tensor
c.check(ebb.torch.sites == "c", "ebb.torch.sites is %r (%s), want 'c'"
        % (ebb.torch.sites, ebb.torch.sites_why))

# 1. allocations go to the current owner; its release is what the driver got
for i, width in enumerate((1024, 4096)):
    with ebb.owner("model%d" % i) as o:
        model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                                    torch.nn.Linear(width, width)).cuda()
        # an output buffer, no arithmetic (the fake keeps memory and bytes and
        # hosts no cuBLAS; a matmul would also make cuBLAS's workspace, kept
        # for the life of the process, this owner's leak)
        y = torch.empty_like(model[0].weight[:64])
        torch.cuda.synchronize()
        st = o.stats()
        params = sum(p.numel() * p.element_size() for p in model.parameters())
    print("model%d: %d parameter bytes; owner holds %d bytes in %d blocks (peak %d)"
          % (i, params, st["bytes"], st["blocks"], st["bytes_peak"]))
    c.check(st["bytes"] >= params + y.numel() * y.element_size(),
            "model%d: the owner holds %d bytes, fewer than the parameters and output (%d)"
            % (i, st["bytes"], params + y.numel() * y.element_size()))
    c.check(dev.default_owner.stats()["bytes"] == 0, "model%d: the default owner holds %d bytes"
            % (i, dev.default_owner.stats()["bytes"]))
    del model, y
    before = used_mib()
    got = o.release()
    after = used_mib()
    print("model%d: o.release() = %d MiB; fakegpu-smi %d -> %d MiB (-%d)"
          % (i, got.mib, before, after, before - after))
    c.near(before - after, got / MiB, 2, "model%d: o.release() vs fakegpu-smi" % i)
    c.check(got > 0, "model%d: nothing released" % i)
    c.check(got.leaks is None, "model%d leaked: %s" % (i, got.leaks))

# 2. another thread, another owner
seen = {}


def worker():
    with ebb.owner("thread") as t:
        x = torch.zeros(32 * MiB, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        seen["bytes"] = t.stats()["bytes"]
        del x
    seen["released"] = t.release()


with ebb.owner("main") as m:
    th = threading.Thread(target=worker)
    th.start()
    th.join(60)
    c.check(m.stats()["bytes"] == 0, "the main thread's owner got the thread's tensor: %d bytes"
            % m.stats()["bytes"])
c.check(seen.get("bytes") == 32 * MiB, "the thread's owner holds %s bytes, want %d"
        % (seen.get("bytes"), 32 * MiB))
m.release()

# 3. a tensor alive at release: a leak naming this line
with ebb.owner("forgetful") as o:
    kept = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda"); LINE = sys._getframe().f_lineno  # noqa
before = used_mib()
leaks = c.one_leak(o)
after = used_mib()
if leaks:
    k = leaks.leaks[0]
    print("leak reported:", str(leaks).replace("\n", " | "))
    c.check(k.size == 64 * MiB and k.owner == "forgetful", "leak %r" % k)
    c.check(k.file == os.path.abspath(__file__) and k.line == LINE,
            "leak site %s, expected %s:%d" % (k.site, os.path.abspath(__file__), LINE))
c.near(before - after, 64, 2, "the leaked tensor's memory went back")
del kept  # PyTorch frees it later: ebb already did, quietly
torch.cuda.synchronize()

# 4. a leaked tensor that PyTorch frees late: until then a new tensor does
# not get its address (PyTorch keys its allocations by address and aborts,
# "Trying to free a pointer not allocated here", on a second one), other
# memory may, and the late free leaves that memory alone
late = ebb.owner("late")
with late:
    old = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
with warnings.catch_warnings():
    warnings.simplefilter("ignore", ebb.LeakWarning)
    # ebb frees old's block as a leak (into its cache: no trim) under the
    # tensor, as for a tensor only C++ code holds, which no policy can reach
    late.close(policy="none")
old_ptr = old.data_ptr()
newer = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
c.check(newer.data_ptr() != old_ptr, "a new tensor got the address 0x%x that a live (leaked) "
        "tensor still holds" % old_ptr)


def block_live(ptr):
    try:
        dev.lookup(ptr)
        return True
    except ebb.EbbError:
        return False


other = dev.alloc(16 * MiB)  # not PyTorch's: the freed block, at the old address
c.check(other == old_ptr, "ebb's own allocation did not get the freed block at 0x%x (got 0x%x): "
        "the late-free check below proves nothing" % (old_ptr, other))
del old  # the leaked tensor dies now: its free must leave `other` alone
torch.cuda.synchronize()
c.check(block_live(other), "the leaked tensor's late free freed the block at 0x%x under "
        "its new owner" % other)
dev.free(other)
again = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
c.check(again.data_ptr() == old_ptr, "after its late free the address 0x%x stays kept from "
        "PyTorch" % old_ptr)
ptrs = (newer.data_ptr(), again.data_ptr())
del newer, again
torch.cuda.synchronize()
c.check(not any(block_live(p) for p in ptrs), "the tensors' own frees did not free their blocks")

# 5. torch.cuda's own memory questions answer from ebb's figures
def agree(label):
    st = dev.stats()
    ms = torch.cuda.memory_stats()
    pairs = (("memory_allocated()", torch.cuda.memory_allocated(), st["allocated"]),
             ("memory_reserved()", torch.cuda.memory_reserved(), st["reserved"]),
             ("max_memory_allocated()", torch.cuda.max_memory_allocated(), st["allocated_peak"]),
             ("max_memory_reserved()", torch.cuda.max_memory_reserved(), st["reserved_peak"]),
             ("memory_stats()['allocation.all.current']", ms["allocation.all.current"],
              st["blocks"]),
             ("memory_stats()['segment.all.current']", ms["segment.all.current"],
              st["segments"]))
    for what, theirs, ours in pairs:
        c.check(theirs == ours, "%s: torch.cuda.%s = %d, ebb says %d" % (label, what, theirs, ours))
    return st


with ebb.owner("stats") as o:
    a = torch.empty(24 * MiB, dtype=torch.uint8, device="cuda"); a_line = sys._getframe().f_lineno
    st = agree("a 24 MiB tensor")
    # memory_snapshot(): ebb's live blocks, named by owner and site
    snap = torch.cuda.memory_snapshot()
    row = next((r for r in snap if r["address"] == a.data_ptr()), None)
    c.check(row is not None, "memory_snapshot() has no row at the 24 MiB tensor's 0x%x (%d rows)"
            % (a.data_ptr(), len(snap)))
    if row is not None:
        fr = row["blocks"][0]["frames"][0]
        c.check(row["total_size"] == 24 * MiB and row["blocks"][0]["state"] == "active_allocated"
                and fr["name"] == "stats" and fr["line"] == a_line
                and fr["filename"].endswith("torch_ebb_check.py"),
                "memory_snapshot()'s row of the 24 MiB tensor: %r, want 24 MiB, owner 'stats', "
                "torch_ebb_check.py:%d" % (row, a_line))
    c.check(sum(r["total_size"] for r in snap) <= st["allocated"] and len(snap) == st["blocks"],
            "memory_snapshot(): %d rows, %d bytes; ebb has %d blocks, %d bytes allocated"
            % (len(snap), sum(r["total_size"] for r in snap), st["blocks"], st["allocated"]))
    c.check(st["allocated"] >= 24 * MiB, "ebb's allocated %d < the 24 MiB tensor" % st["allocated"])
    b = torch.empty(40 * MiB, dtype=torch.uint8, device="cuda")
    del b
    peak = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    st = agree("after reset_peak_memory_stats()")
    c.check(torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated() < peak,
            "reset_peak_memory_stats(): max_memory_allocated() %d, memory_allocated() %d, "
            "the peak before %d" % (torch.cuda.max_memory_allocated(),
                                    torch.cuda.memory_allocated(), peak))
    b = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
    del b
    c.check(torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated() + 8 * MiB,
            "an 8 MiB tensor after the reset is not in max_memory_allocated(): %d, now %d"
            % (torch.cuda.max_memory_allocated(), torch.cuda.memory_allocated()))
    agree("after the reset and an 8 MiB tensor")
    summary = torch.cuda.memory_summary()
    c.check("PyTorch CUDA memory summary" in summary and "Allocated memory" in summary,
            "memory_summary() does not look like PyTorch's: %r" % summary[:200])
    # its rows' current usage ("| Allocated memory | 56 MiB | ..."; PyTorch
    # floors to the unit it prints) is ebb's figure
    st = dev.stats()
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for row, ours in (("Allocated memory", st["allocated"]), ("GPU reserved memory", st["reserved"])):
        line = next((ln for ln in summary.splitlines() if ln.startswith("| " + row)), None)
        c.check(line is not None, "memory_summary() has no '%s' row: %r" % (row, summary[:400]))
        if line is None:
            continue
        num, unit = line.split("|")[2].split()
        lo = int(num) * units[unit]
        c.check(lo <= ours < lo + units[unit], "memory_summary() '%s' now %s %s, ebb says %d "
                "bytes" % (row, num, unit, ours))
    torch.cuda.reset_accumulated_memory_stats()
    c.check(torch.cuda.memory_stats()["allocation.all.allocated"] == 0,
            "reset_accumulated_memory_stats(): %d allocations still counted"
            % torch.cuda.memory_stats()["allocation.all.allocated"])
    del a
torch.cuda.empty_cache()  # ebb's cached segments go to the driver
c.check(dev.stats()["cached"] == 0, "empty_cache() left %d bytes cached in ebb"
        % dev.stats()["cached"])
o.release()
sys.exit(c.end("torch_ebb_check"))
