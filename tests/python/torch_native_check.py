"""PyTorch (the default wheel, /opt/ebb-tools/torch) on the fake GPU with
its own caching allocator: CUDA is available; a tensor sent to the device
and back returns the same bytes; at every step the change in
torch.cuda.memory_reserved() equals the change in what fakegpu-smi (a
separate process) shows this process holding, within 2 MiB, and
torch.cuda.mem_get_info()'s free equals fakegpu-smi's free; empty_cache()
shows the drop. Run by tests/frameworks/frameworks_torch_native.sh."""
import os
import subprocess
import sys

import torch
from smi import Checks, used_mib

MiB = 1 << 20
c = Checks()


def smi_free_mib():
    out = subprocess.run([os.environ["FAKEGPU_SMI"], "--query-gpu=memory.free",
                          "--format=csv,noheader,nounits", "--id=0"], check=True,
                         capture_output=True, text=True).stdout
    return int(out.split()[0])


if not torch.cuda.is_available():
    print("FAIL: torch.cuda.is_available() is False on the fake (torch %s, CUDA %s, "
          "device count %d)" % (torch.__version__, torch.version.cuda, torch.cuda.device_count()))
    sys.exit(1)
print("torch %s (CUDA %s) sees %d device(s): %s"
      % (torch.__version__, torch.version.cuda, torch.cuda.device_count(),
         torch.cuda.get_device_name(0)))

# the round trip
host = torch.arange(1 << 20, dtype=torch.int32).view(torch.uint8)[: (1 << 20) + 13].clone()
back = host.to("cuda").to("cpu")
c.check(torch.equal(host, back), "a tensor to the device and back came back different")
torch.cuda.synchronize()

last = {"reserved": torch.cuda.memory_reserved(), "smi": used_mib()}


def step(label):
    torch.cuda.synchronize()
    reserved, smi = torch.cuda.memory_reserved(), used_mib()
    d_res = (reserved - last["reserved"]) / MiB
    d_smi = smi - last["smi"]
    free, _total = torch.cuda.mem_get_info()
    print("%-28s memory_reserved %6d MiB (%+6.0f)  fakegpu-smi %6d MiB (%+5d)  "
          "mem_get_info free %6d MiB, fakegpu-smi free %6d MiB"
          % (label, reserved // MiB, d_res, smi, d_smi, free // MiB, smi_free_mib()))
    c.near(d_res, d_smi, 2, "%s: change in memory_reserved() vs fakegpu-smi's" % label)
    c.near(free // MiB, smi_free_mib(), 1, "%s: mem_get_info() free vs fakegpu-smi free" % label)
    last.update(reserved=reserved, smi=smi)


step("after the round trip")
a = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda")
a.fill_(7)
step("a 512 MiB tensor")
bs = [torch.ones(1 << 18, device="cuda") for _ in range(64)]  # 64 x 1 MiB
step("64 tensors of 1 MiB")
# a model's weights (48 MiB, copied from the host) and an output buffer; no
# arithmetic: the fake keeps memory and bytes (and hosts no cuBLAS)
model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.Linear(2048, 2048),
                            torch.nn.Linear(2048, 2048)).cuda()
y = torch.empty_like(model[0].weight)
step("a model and its output")
del a, bs, model, y
step("all deleted (PyTorch caches)")
c.check(torch.cuda.memory_reserved() > 500 * MiB,
        "PyTorch's cache should still hold the freed blocks: reserved %d MiB"
        % (torch.cuda.memory_reserved() // MiB))
held = used_mib()
torch.cuda.empty_cache()
step("empty_cache()")
print("empty_cache(): fakegpu-smi %d -> %d MiB" % (held, used_mib()))
c.check(held - used_mib() >= 500, "empty_cache() gave back only %d MiB" % (held - used_mib()))
# what stays is the segments of live blocks (cuBLAS's workspace)
c.check(torch.cuda.memory_reserved() - torch.cuda.memory_allocated() <= 2 * MiB,
        "after empty_cache PyTorch still caches %d bytes (reserved %d, allocated %d)"
        % (torch.cuda.memory_reserved() - torch.cuda.memory_allocated(),
           torch.cuda.memory_reserved(), torch.cuda.memory_allocated()))
sys.exit(c.end("torch_native_check"))
