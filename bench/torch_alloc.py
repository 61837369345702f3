"""ebb as PyTorch's allocator against PyTorch's own, interleaved in one run.

Two child processes on the same device: one with PyTorch's caching
allocator, one with ebb.torch.use() (sites read from C unless --sites says
otherwise). The parent asks them in turn, round after round (who goes first
alternates), to time the same work, so both see the same machine load:

  op SIZE xT      torch.empty(SIZE bytes, uint8) and its free, T threads
                  (each in an ebb owner of its own in the ebb child), N ops
                  per thread; the figure is wall time / ops
  fwd MODEL       one forward pass of a model of examples/torch/models.py
                  (random weights, torch.no_grad, synchronised), the model
                  loaded once in the child (in an ebb owner of its own)

and prints the medians, the median over rounds of the ratio ebb / PyTorch
of the two figures a round took one after the other (the figure judged
against the targets: 1.2 for an op, 1.05 for a forward), and, for
information, the ratio of the two best figures. At the end the ebb child drops each model
and prints its owner's release against fakegpu-smi's drop.

usage: torch_alloc.py [--rounds R] [--ops N] [--sites auto|c|python|off]
       [--only op|fwd] (the environment says which device: bench.sh's fake)"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = ((4 << 10, "4 KiB"), (1 << 20, "1 MiB"), (64 << 20, "64 MiB"))
THREADS = (1, 4)
OP_TARGET, FWD_TARGET = 1.2, 1.05


# --- the child: one allocator, answering the parent's requests ---------------------
def child(kind, sites):
    sys.path.insert(0, os.path.join(HERE, "..", "examples", "torch"))
    import torch
    ebb = None
    if kind == "ebb":
        import ebb
        import ebb.torch
        ebb.torch.use(sites=sites)
        ebb.device("cuda:0")
    import models
    owners, loaded = {}, {}

    def owned(name):
        if ebb is None:
            return _Null()
        if name not in owners:
            owners[name] = ebb.owner(name)
        return owners[name]

    def ops(size, n):
        empty, u8 = torch.empty, torch.uint8
        for _ in range(n):
            t = empty(size, dtype=u8, device="cuda")
            del t

    def run_ops(size, nthreads, n):
        start = threading.Barrier(nthreads)
        spans = [None] * nthreads

        def body(i):
            with owned("ops%d" % i):
                ops(size, 20)  # warm: this size's segments, outside the figure
                start.wait()
                t0 = time.perf_counter()  # taken by the threads themselves
                ops(size, n)
                spans[i] = (t0, time.perf_counter())

        ths = [threading.Thread(target=body, args=(i,)) for i in range(nthreads)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        wall = max(e for _, e in spans) - min(b for b, _ in spans)
        return wall / (n * nthreads)

    def run_fwd(name, n):
        if name not in loaded:
            with owned(name):
                loaded[name] = models.MODELS[name]("cuda")
        model, args = loaded[name]
        with owned(name), torch.no_grad():
            model(*args)  # warm: the first pass makes the workspaces
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                model(*args)
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) / n

    def releases():
        from smi import used_mib
        out = []
        for name in list(loaded):
            del loaded[name]
            before = used_mib()
            r = owners[name].release()
            after = used_mib()
            out.append([name, r.mib, before - after, str(r.leaks) if r.leaks else ""])
        return out

    ops(4096, 100)  # the allocator's first segments, outside the figures
    print(json.dumps({"ready": kind, "sites": getattr(ebb.torch, "sites", None) if ebb else None}),
          flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        if req["do"] == "op":
            ans = run_ops(req["size"], req["threads"], req["n"])
        elif req["do"] == "fwd":
            ans = run_fwd(req["model"], req["n"])
        else:
            ans = releases()
        print(json.dumps(ans), flush=True)


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# --- the parent ---------------------------------------------------------------------
class Child:
    def __init__(self, kind, sites):
        self.kind = kind
        self.p = subprocess.Popen([sys.executable, __file__, "--child", kind, "--sites", sites],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hello = self.p.stdout.readline()
        if not hello:
            raise SystemExit("torch_alloc: the %s child did not start" % kind)
        self.hello = json.loads(hello)

    def ask(self, **req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit("torch_alloc: the %s child died on %s" % (self.kind, req))
        return json.loads(line)

    def close(self):
        self.p.stdin.close()
        self.p.wait(60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", choices=("native", "ebb"))
    ap.add_argument("--sites", default="auto", choices=("auto", "c", "python", "off"))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--ops", type=int, default=1000, help="ops per thread per round")
    ap.add_argument("--fwd", type=int, default=3, help="forward passes per round")
    ap.add_argument("--only", choices=("op", "fwd"))
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.sites)
    kids = [Child("native", args.sites), Child("ebb", args.sites)]
    print("torch_alloc: ebb.torch.use(sites=%r) -> sites %s; %d rounds, interleaved; load %s"
          % (args.sites, kids[1].hello["sites"], args.rounds,
             " ".join("%.2f" % x for x in os.getloadavg())))
    cases = []
    if args.only != "fwd":
        for size, label in SIZES:
            for t in THREADS:
                n = max(50, args.ops // (16 if size >= 64 << 20 else 1))
                cases.append(("op %s x%d" % (label, t), OP_TARGET,
                              dict(do="op", size=size, threads=t, n=n)))
    if args.only != "op":
        for name in ("demucs_like", "whisper_like", "crepe_like"):
            cases.append(("fwd %s" % name, FWD_TARGET, dict(do="fwd", model=name, n=args.fwd)))
    times = {c[0]: {"native": [], "ebb": []} for c in cases}
    for r in range(args.rounds):
        order = kids if r % 2 == 0 else kids[::-1]
        for label, _, req in cases:
            for k in order:
                times[label][k.kind].append(k.ask(**req))
    missed = 0
    print("%-22s %12s %12s %8s %8s %s" % ("", "PyTorch", "ebb", "ratio", "(best)", "target"))
    for label, target, _ in cases:
        nat, mine = times[label]["native"], times[label]["ebb"]
        # each round asked the two one after the other: the ratio of a pair
        # saw the same load; the median of those ratios is the figure
        ratio = statistics.median(m / n for m, n in zip(mine, nat))
        best = min(mine) / min(nat)
        unit, scale = ("us", 1e6) if label.startswith("op") else ("ms", 1e3)
        ok = ratio <= target
        missed += not ok
        print("%-22s %9.2f %s %9.2f %s %8.2f %8.2f <= %.2f %s"
              % (label, statistics.median(nat) * scale, unit, statistics.median(mine) * scale,
                 unit, ratio, best, target, "" if ok else "MISSED"))
    if args.only != "op":
        for name, mib, drop, leaks in kids[1].ask(do="release"):
            print("release %-13s o.release() %5d MiB, fakegpu-smi drop %5d MiB%s%s"
                  % (name, mib, drop, "" if abs(mib - drop) <= 1 else "  MISMATCH",
                     ("  leaks: " + leaks.replace("\n", " | ")) if leaks else ""))
    for k in kids:
        k.close()
    print("torch_alloc: %d of %d ratios over target (a figure, not a test)" % (missed, len(cases)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
