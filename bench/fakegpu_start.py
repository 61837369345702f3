#!/usr/bin/env python3
"""(issue 41) PyTorch's start on the fake GPU, each figure from a fresh
process (median of --runs):

  import     `import torch`
  zeros      torch.zeros(1, device='cuda') after the import (target <= 3 s)
  demucs     the Demucs-like model's first forward, built on the device
             (tests/python/fakegpu_models.py; target <= 5 s)
  whisper, crepe   the same for the other two model shapes

Each line prints the time and the target. Uses the PyTorch venv
(EBB_TORCH_PYTHON, default /opt/ebb-tools/torch/bin/python; skipped without
it) and EBB_LIBCUDA's directory as the libcuda.so.1 the CUDA runtime opens,
as scripts/bench.sh sets it.

Usage: fakegpu_start.py [--runs N]"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "tests", "python")
CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
t2 = time.perf_counter()
out = {"import": t1 - t0, "zeros": t2 - t1}
if len(sys.argv) > 2:
    import fakegpu_models
    name = sys.argv[2]
    t3 = time.perf_counter()
    model = fakegpu_models.make(name)
    with torch.no_grad():
        model(fakegpu_models.example_input(name))
    torch.cuda.synchronize()
    out[name] = time.perf_counter() - t3
print(json.dumps(out))
"""
TARGETS = {"zeros": 3.0, "demucs": 5.0}


def run(py, env, model):
    args = [py, "-c", CHILD, MODELS] + ([model] if model else [])
    p = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"fakegpu_start: {' '.join(args[:1] + args[3:])} failed ({p.returncode}): "
                 f"{p.stderr.strip()[-800:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    if a.runs < 1:
        sys.exit("fakegpu_start: --runs must be at least 1")
    py = os.environ.get("EBB_TORCH_PYTHON", "/opt/ebb-tools/torch/bin/python")
    lib = os.environ.get("EBB_LIBCUDA", "")
    if not os.access(py, os.X_OK) or not lib or os.environ.get("EBB_BENCH_REAL_GPU") == "1":
        print("  (skipped: needs the PyTorch venv and the fake GPU's EBB_LIBCUDA)")
        return
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env["LD_LIBRARY_PATH"] = os.path.dirname(lib) + ":" + env.get("LD_LIBRARY_PATH", "")
    times = {}
    for model in (None, "demucs", "whisper", "crepe"):
        for _ in range(a.runs):
            for k, v in run(py, env, model).items():
                times.setdefault(k, []).append(v)
    print(f"  PyTorch on the fake GPU, fresh process each, median of {a.runs}")
    for k in ("import", "zeros", "demucs", "whisper", "crepe"):
        med = statistics.median(times[k])
        target = f"  (target <= {TARGETS[k]:.0f} s)" if k in TARGETS else ""
        label = k if k in ("import", "zeros") else k + " first forward"
        print(f"  {label:<24} {med:6.2f} s{target}")


if __name__ == "__main__":
    main()
