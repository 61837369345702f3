"""scripts/gpu-check.sh step 8: a small PyTorch model allocating through ebb
(ebb.torch.use()) on a real GPU; ebb's release figures printed against what
nvidia-smi ($FAKEGPU_SMI, same flags) saw go. Exit 0 when they agree within
2 MiB and the process ends holding only what PyTorch's own context keeps."""
import sys

import ebb
import ebb.torch
import torch
from smi import Checks, used_mib

c = Checks()
ebb.torch.use()
MiB = 1 << 20
# cuBLAS's workspace lives as long as the process: taken at the first matmul,
# here, by the default owner (inside model0 it would be model0's leak)
w = torch.ones(64, 64, device="cuda")
(w @ w).sum().item()
del w
for i, width in enumerate((4096, 8192, 16384)):
    with ebb.owner("model%d" % i) as o:
        model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                                    torch.nn.Linear(width, width)).cuda()
        y = model(torch.randn(64, width, device="cuda"))
        torch.cuda.synchronize()
        peak = o.stats()["bytes_peak"]
    del model, y
    before = used_mib()
    got = o.release()
    after = used_mib()
    print("model%d (width %d): peak %d MiB; ebb released %d MiB; nvidia-smi %d -> %d MiB (-%d)"
          % (i, width, peak // MiB, got.mib, before, after, before - after))
    c.near(before - after, got / MiB, 2, "model%d: ebb vs nvidia-smi" % i)
    c.check(got.leaks is None, "model%d leaked: %s" % (i, got.leaks))
r = ebb.release(context=True)
print("context: ebb released %d MiB more (context_released=%s, %s); the process holds %d MiB "
      "(PyTorch's CUDA runtime keeps its own context)"
      % (r.mib, r.context_released, r.context_error, used_mib()))
sys.exit(c.end("torch_check"))
