"""Half precision through cuBLAS and cuBLASLt on the fake GPU (issue 41):
for fp16 and bf16, `a @ a`, nn.Linear, and an autocast forward of the three
model shapes (tests/python/fakegpu_models.py) run with no crash and no CUDA
error. With `ebb` as argument, under ebb.torch.use(): each model is built and
run inside its own ebb owner, and o.release() equals fakegpu-smi's drop (a
separate process) within 1 MiB. The kernels run as no-ops (the fake does no
arithmetic): this checks the driver calls, not the numbers.
The Whisper-sized encoder's attention runs through cuDNN's fused attention
(SDPA), as it does on a Hopper GPU: cuDNN loads a do-nothing PTX kernel
(nopCudnnHardwareDetection) before its first graph, and its flash-attention
launch is checked like any other; a step also runs it with cuDNN as the
only attention backend.
Run by tests/frameworks/python_torch_half.sh."""
import sys

import torch

import fakegpu_models
from smi import Checks, used_mib

MiB = 1 << 20
c = Checks()
under_ebb = len(sys.argv) > 1 and sys.argv[1] == "ebb"
if under_ebb:
    import ebb
    import ebb.torch
    ebb.torch.use()
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def step(label, fn):
    """Runs fn and synchronises; a Python exception (a CUDA error is one) is a
    failure naming the step."""
    try:
        fn()
        torch.cuda.synchronize()
        print("%s: ok" % label, flush=True)
    except Exception as e:  # noqa: BLE001 - every error is the failure reported
        c.check(False, "%s: %s: %s" % (label, type(e).__name__, str(e).splitlines()[0]))


def matmul(dt):
    a = torch.randn(64, 64, device="cuda").to(dt)
    b = a @ a
    assert b.dtype == dt and b.shape == (64, 64), "a @ a gave %s %s" % (b.dtype, tuple(b.shape))


def linear(dt):
    lin = torch.nn.Linear(64, 64).cuda().to(dt)
    y = lin(torch.zeros(8, 64, device="cuda", dtype=dt))
    assert y.dtype == dt, "Linear gave %s" % y.dtype


def cudnn_attention(dt):
    """Fused attention through cuDNN alone (no fallback to another kernel)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = torch.zeros(1, 8, 128, 64, device="cuda", dtype=dt)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        o = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert o.shape == q.shape, "attention gave %s" % (tuple(o.shape),)


def autocast_forward(name, dt):
    model = fakegpu_models.make(name)
    x = fakegpu_models.example_input(name)
    with torch.no_grad(), torch.autocast("cuda", dtype=dt):
        y = model(x)
    assert y.is_cuda, "%s: output not on the device" % name


for tag, dt in DTYPES.items():
    # the first product also makes cuBLAS's workspace, kept for the process:
    # outside the owners below, so no owner holds it
    step("%s a @ a" % tag, lambda: matmul(dt))
    step("%s nn.Linear" % tag, lambda: linear(dt))
    step("%s cuDNN attention" % tag, lambda: cudnn_attention(dt))

for tag, dt in DTYPES.items():
    for name in fakegpu_models.SHAPES:
        label = "%s autocast %s" % (tag, name)
        if not under_ebb:
            step(label, lambda: autocast_forward(name, dt))
            continue
        with ebb.owner("%s-%s" % (tag, name)) as o:
            step(label, lambda: autocast_forward(name, dt))
        torch.cuda.synchronize()
        before = used_mib()
        got = o.release()
        after = used_mib()
        print("%s: o.release() = %d MiB; fakegpu-smi %d -> %d MiB (-%d)"
              % (label, got.mib, before, after, before - after), flush=True)
        c.near(before - after, got / MiB, 1, "%s: o.release() vs fakegpu-smi" % label)
        c.check(got.leaks is None, "%s leaked: %s" % (label, got.leaks))
sys.exit(c.end("torch_half_check" + (" (ebb.torch)" if under_ebb else "")))
