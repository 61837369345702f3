"""Issue 40's done-when test: the real torchcrepe (its shipped weights) called
three times under ebb.torch.use(), each call in `with ebb.owner("pitch")`,
the owner released between calls. torchcrepe keeps its model as attributes
of its own infer() function, so the first release finds the weights alive:
ebb must name the holder and the site, and never leave a tensor on freed
device memory. With the fake's argument check on (FAKEGPU_CHECK_ARGS=1, the
default) a kernel launched on freed memory faults with 700, which PyTorch
raises as "an illegal memory access": on today's ebb the second call does
exactly that, and this test fails. It passes when every call either gives
pitch of the first call's shape or raises a clear Python error that is not
a CUDA fault. Run by tests/frameworks/python_torch_crepe.sh."""
import math
import sys
import warnings

import ebb
import ebb.torch
import torch
import torchcrepe
from smi import Checks

c = Checks()
ebb.torch.use()
SR = 16000
audio = torch.tensor([[math.sin(2 * math.pi * 220 * i / SR) for i in range(SR // 2)]])


def pitch_call():
    return torchcrepe.predict(audio, SR, hop_length=160, fmin=50.0, fmax=550.0, model="full",
                              batch_size=64, device="cuda:0")


first_shape = None
for call in (1, 2, 3):
    outcome = None
    with ebb.owner("pitch") as o:
        try:
            pitch = pitch_call()
            torch.cuda.synchronize()
            outcome = "pitch of shape %s" % (tuple(pitch.shape),)
            if first_shape is None:
                first_shape = tuple(pitch.shape)
            c.check(tuple(pitch.shape) == first_shape, "call %d: pitch of shape %s, the first "
                    "call's was %s" % (call, tuple(pitch.shape), first_shape))
            del pitch
        except RuntimeError as e:
            msg = str(e).splitlines()[0]
            outcome = "RuntimeError: %s" % msg
            c.check("illegal memory access" not in msg and "CUDA error" not in msg,
                    "call %d: a kernel ran on freed device memory (the fake faulted with 700, as a "
                    "GPU would): %s" % (call, msg))
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            got = o.release()
            leaks = got.leaks
            rel = "released %d MiB" % got.mib
        except Exception as e:  # noqa: BLE001 -- a faulted context fails here too
            leaks, rel = None, "release failed: %s" % str(e).splitlines()[0]
    print("call %d: %s; %s; leaks: %s" % (call, outcome, rel,
                                        str(leaks).replace("\n", " | ") if leaks else None),
          flush=True)
    if call == 1 and leaks:
        text = str(leaks)
        c.check("torchcrepe" in text, "the first release's leak report names no torchcrepe site "
                "or holder: %s" % text)
sys.exit(c.end("torch_crepe_check"))
