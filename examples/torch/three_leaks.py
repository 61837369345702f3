#!/usr/bin/env python3
"""The three ways a PyTorch audio service keeps GPU memory after a stage is
done, and how ebb gives it back. Copy the pattern that fits your code.

  separate    caches its model in a module-level dict keyed by device
              (the Demucs pattern: _MODELS[device])
  transcribe  caches its model as an attribute of a function (infer.model)
  pitch       frees its big temporaries, but PyTorch's caching allocator
              keeps the blocks from the driver

    python3 three_leaks.py hooks    # PyTorch's own allocator; each cache gets an
                                    # ebb.on_release hook, ebb.release() after a stage
    python3 three_leaks.py owners   # ebb.torch.use(): each stage in an ebb owner,
                                    # o.release() after it

After every stage it prints what nvidia-smi (another process; $FAKEGPU_SMI
when set, the fake GPU's twin) shows this process holding, then ebb's
release line and the drop nvidia-smi saw:

    [separate] held 1324 MiB after the stage (nvidia-smi)
    [separate] released 1024 MiB of GPU memory
    [separate] nvidia-smi: 1324 -> 300 MiB (-1024)

In `owners` mode a cache that still holds tensors when its owner is released
is reported as a leak naming the line that made them and the cache holding
them (ebb's default leak policy moves them to host memory and frees their
GPU blocks; the hooks then drop the cache). Sizes: --mib N scales
the models (default 256 MiB each). Exit 0 when every release figure equals
nvidia-smi's drop within 2 MiB."""
import argparse
import os
import subprocess
import sys
import warnings

import torch

import ebb
import ebb.torch

MiB = 1 << 20


# --- the three stages, written the way services write them ---------------------
class Layer(torch.nn.Module):
    """A stand-in for your model's layers: 16 MiB of float32 weights each; its
    forward passes a copy of its input on (any nn.Module is cached and freed
    the same way, and a copy runs on the fake GPU too, which keeps memory and
    bytes but does no arithmetic)."""

    def __init__(self, n=4 << 20):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((n,), 0.5))

    def forward(self, x):
        return x.clone()


def build_model(mib, device):
    """A model holding about `mib` MiB of weights, on `device`."""
    model = torch.nn.Sequential(*[Layer() for _ in range(max(1, mib // 16))])
    return model.to(device)  # the weights reach the GPU here: the line a leak report names


_MODELS = {}  # leak 1: one model per device, kept for the life of the process


def separate(x, mib):
    model = _MODELS.get(x.device)
    if model is None:
        model = _MODELS[x.device] = build_model(mib, x.device)
    with torch.no_grad():
        return model(x)


def transcribe(x, mib):
    # leak 2: the model lives as an attribute of the function
    if not hasattr(transcribe, "model"):
        transcribe.model = build_model(mib, x.device)
    with torch.no_grad():
        return transcribe.model(x)


def pitch(x, mib):
    # leak 3: big temporaries, freed when the function returns; PyTorch's
    # caching allocator keeps their blocks
    with torch.no_grad():
        tmp = [torch.empty(mib * MiB // 16, device=x.device).fill_(1.0)  # 4 x mib/4 MiB
               for _ in range(4)]
        return tmp[-1][:64].clone()  # a small result


STAGES = (("separate", separate), ("transcribe", transcribe), ("pitch", pitch))


# --- what ebb needs to know: how to drop each cache -------------------------------
def register_hooks(native_allocator):
    ebb.on_release(_MODELS.clear, "separate: models by device")
    ebb.on_release(lambda: vars(transcribe).pop("model", None), "transcribe.model")
    if native_allocator:
        # after the models are gone, PyTorch's cache holds their blocks too
        ebb.on_release(torch.cuda.empty_cache, "PyTorch's caching allocator")


# --- measuring --------------------------------------------------------------------
def _smi(query):
    smi = os.environ.get("FAKEGPU_SMI", "nvidia-smi")
    return subprocess.run([smi, query, "--format=csv,noheader,nounits"],
                          check=True, capture_output=True, text=True).stdout


def smi_used_mib():
    """What nvidia-smi (or $FAKEGPU_SMI) shows this process holding, in MiB;
    in a container that hides processes from nvidia-smi, the GPU's
    memory.used (the GPU should then be otherwise idle)."""
    out = _smi("--query-compute-apps=pid,used_memory")
    for line in out.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip() == str(os.getpid()):
            return int(mib)
    if out.strip():  # processes listed, this one not: it holds nothing
        return 0
    return int(_smi("--query-gpu=memory.used").split()[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=("hooks", "owners"))
    ap.add_argument("--mib", type=int, default=256, help="MiB per model (default 256)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("three_leaks: torch.cuda.is_available() is False (torch %s, CUDA %s)"
                 % (torch.__version__, torch.version.cuda))
    if args.mode == "owners":
        ebb.torch.use()  # before the first CUDA tensor
    ebb.device("cuda:0")  # ebb's figures need the device open (no allocation)
    register_hooks(args.mode == "hooks")
    x = torch.ones(64, 2048, device="cuda")
    # With a real model, run one small matmul here first: cuBLAS keeps a
    # workspace per stream for the life of the process, taken at the first
    # matmul, and in owners mode the first stage would release it as its leak.
    torch.cuda.synchronize()
    bad = 0
    for name, stage in STAGES:
        owner = ebb.owner(name) if args.mode == "owners" else None
        if owner is not None:
            with owner:
                y = stage(x, args.mib)
        else:
            y = stage(x, args.mib)
        torch.cuda.synchronize()
        del y
        held = smi_used_mib()
        print("[%s] held %d MiB after the stage (nvidia-smi)" % (name, held))
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            r = owner.release() if owner is not None else ebb.release()
        after = smi_used_mib()
        if r.leaks:
            for line in r.leaks.lines():
                print(line)
        print("[%s] released %d MiB of GPU memory" % (name, r.mib))
        print("[%s] nvidia-smi: %d -> %d MiB (-%d)" % (name, held, after, held - after))
        if abs(r / MiB - (held - after)) > 2:
            print("[%s] MISMATCH: ebb says %d MiB, nvidia-smi saw %d MiB go"
                  % (name, r.mib, held - after))
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
