"""Stream-ordered reuse under ebb.torch.use() (issue 40), on the fake GPU in
its simulated-time mode (FAKEGPU_KERNEL_US=1000000: queued work completes only when
something waits for it, and an event recorded after it is not ready until
then, as on a GPU whose kernels still run):

1. a tensor made and freed on a side stream with its work still pending:
   a tensor on the default stream does not get its memory; once the side
   stream is synchronised it does;
2. record_stream: a tensor made on the default stream, used on a side
   stream (Tensor.record_stream) and freed with that work pending: the
   default stream does not get its memory back before the side stream's
   work is done.
Run by tests/frameworks/python_torch_streams.sh."""
import sys

import ebb
import ebb.torch
import torch
from smi import Checks

c = Checks()
ebb.torch.use()
N = 16 << 20  # bytes: a segment of its own
side = torch.cuda.Stream()


def pending_work():
    """Work that keeps the current stream busy: about a second of spinning
    on a GPU (torch.cuda._sleep), one simulated kernel on the fake."""
    torch.cuda._sleep(2 * 10 ** 9)


with torch.cuda.stream(side):
    pending_work()
if side.query():
    print("skipped: this fake completes every launch at the call (no FAKEGPU_KERNEL_US)")
    sys.exit(77)
side.synchronize()

with ebb.owner("streams"):
    with torch.cuda.stream(side):
        x = torch.empty(N, dtype=torch.uint8, device="cuda")
        x.fill_(1)
        pending_work()  # the side stream is busy past the free
    xp = x.data_ptr()
    del x  # freed on the side stream, its fill still queued
    y = torch.empty(N, dtype=torch.uint8, device="cuda")
    busy = not side.query()  # else the check below proves nothing (a slow machine)
    print("1. freed on the side stream at 0x%x; the default stream's tensor at 0x%x" % (xp, y.data_ptr()))
    c.check(y.data_ptr() != xp or not busy,
            "the default stream got memory the side stream's pending work uses")
    side.synchronize()
    z = torch.empty(N, dtype=torch.uint8, device="cuda")
    print("   after side.synchronize(): 0x%x" % z.data_ptr())
    c.check(z.data_ptr() == xp, "after the side stream's work was done, its block was not reused")
    del y, z

    a = torch.empty(N, dtype=torch.uint8, device="cuda")
    ap = a.data_ptr()
    with torch.cuda.stream(side):
        a.record_stream(side)
        a.fill_(2)
        pending_work()
    del a  # freed on the default stream, where nothing is pending
    b = torch.empty(N, dtype=torch.uint8, device="cuda")
    busy = not side.query()
    print("2. record_stream: freed at 0x%x; next default-stream tensor at 0x%x" % (ap, b.data_ptr()))
    c.check(b.data_ptr() != ap or not busy, "record_stream was ignored: the block went back to the default "
            "stream while the side stream still used it")
    side.synchronize()
    d = torch.empty(N, dtype=torch.uint8, device="cuda")
    c.check(d.data_ptr() == ap, "after the side stream's work was done, the block was not reused")
    del b, d
    torch.cuda.synchronize()
sys.exit(c.end("torch_streams_check"))
