"""torch.cuda.graph on the fake GPU (issue 41): a small model captured and
replayed 10 times, natively or (argument `ebb`) under ebb.torch.use() inside
an ebb owner whose o.release() equals fakegpu-smi's drop within 1 MiB.
Kernels replay as no-ops (no arithmetic): this checks capture, the graph
queries PyTorch makes at the end of a capture (cuGraphGetNodes),
instantiation and launch. Run by tests/frameworks/python_torch_graph.sh."""
import sys

import torch

from smi import Checks, used_mib

MiB = 1 << 20
c = Checks()
under_ebb = len(sys.argv) > 1 and sys.argv[1] == "ebb"
if under_ebb:
    import ebb
    import ebb.torch
    ebb.torch.use()


def capture_and_replay():
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 64)).cuda()
    x = torch.zeros(8, 64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up on a side stream, as PyTorch's docs do
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
    for _ in range(10):
        g.replay()
    torch.cuda.synchronize()
    c.check(y.shape == (8, 64) and y.is_cuda, "the graph's output is %s" % (tuple(y.shape),))
    del g, y, model, x


try:
    if under_ebb:
        with ebb.owner("graph") as o:
            capture_and_replay()
        torch.cuda.synchronize()
        before = used_mib()
        got = o.release()
        after = used_mib()
        print("o.release() = %d MiB; fakegpu-smi %d -> %d MiB" % (got.mib, before, after))
        c.near(before - after, got / MiB, 1, "o.release() vs fakegpu-smi")
    else:
        capture_and_replay()
    print("captured and replayed 10 times")
except Exception as e:  # noqa: BLE001 - every error is the failure reported
    c.check(False, "capture/replay: %s: %s" % (type(e).__name__, str(e).splitlines()[0]))
sys.exit(c.end("torch_graph_check" + (" (ebb.torch)" if under_ebb else "")))
