"""ebb as PyTorch's allocator against PyTorch's own, interleaved in one run.

Two child processes on the same device: one with PyTorch's caching
allocator, one with ebb.torch.use() (sites read from C unless --sites says
otherwise). The parent asks them in turn, round after round (who goes first
alternates), to time the same work, so both see the same machine load:

  op SIZE xT      torch.empty(SIZE bytes, uint8) and its free, T threads
                  (each in an ebb owner of its own in the ebb child), N ops
                  per thread; the figure is wall time / ops (the process's
                  CPU time / ops is printed beside it)
  fwd MODEL       forward passes of a model of examples/torch/models.py
                  (random weights, torch.no_grad, synchronised), the model
                  loaded once in the child (in an ebb owner of its own); as
                  many passes a round as fill --fwd-ms (a pass's time
                  measured once before the rounds, the faster child's; the
                  same count for both), so a 1 ms forward is not timed over a 3 ms window
                  that one descheduling doubles; the figure is wall time /
                  passes, and the process's CPU time / passes is printed
                  beside it (kernels are no-ops on the fake: both are the
                  allocator's and the launch path's)

and prints the medians, the median over rounds of the ratio ebb / PyTorch
of the two figures a round took one after the other (the figure judged
against the targets: 1.2 for an op, 1.05 for a forward), and, for
information, the ratio of the two best figures. At the end the ebb child drops each model
and prints its owner's release against fakegpu-smi's drop.

usage: torch_alloc.py [--rounds R] [--ops N] [--fwd N] [--fwd-ms MS]
       [--sites auto|c|python|off] [--only op|fwd] (the environment says which device: bench.sh's fake)"""
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
        c0 = time.process_time()

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
        # the CPU time includes the 20 warm ops a thread and the threads' start
        return [wall / (n * nthreads), (time.process_time() - c0) / ((n + 20) * nthreads)]

    def run_fwd(name, n):
        if name not in loaded:
            with owned(name):
                loaded[name] = models.MODELS[name]("cuda")
        model, args = loaded[name]
        with owned(name), torch.no_grad():
            model(*args)  # warm: the first pass makes the workspaces
            torch.cuda.synchronize()
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(n):
                model(*args)
            torch.cuda.synchronize()
            return [(time.perf_counter() - t0) / n, (time.process_time() - c0) / n]

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
    ap.add_argument("--fwd", type=int, default=3, help="forward passes per round, at least")
    ap.add_argument("--fwd-ms", type=float, default=60.0,
                    help="a forward figure's window a round on PyTorch's side (ms)")
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
    if args.fwd < 1 or args.fwd_ms < 0 or args.rounds < 1 or args.ops < 1:
        raise SystemExit("torch_alloc: --rounds, --ops and --fwd must be >= 1, --fwd-ms >= 0")
    if args.only != "op":
        for name in ("demucs_like", "whisper_like", "crepe_like"):
            # the count of passes from a pass's time, the faster child's over
            # --fwd passes, taken once here (each child loads and warms the
            # model too)
            one = min(k.ask(do="fwd", model=name, n=args.fwd)[0] for k in kids[::-1])
            n = max(args.fwd, int(args.fwd_ms / 1e3 / max(one, 1e-6)) + 1)
            cases.append(("fwd %s x%d" % (name, n), FWD_TARGET, dict(do="fwd", model=name, n=n)))
    times = {c[0]: {"native": [], "ebb": []} for c in cases}
    cpu = {c[0]: {"native": [], "ebb": []} for c in cases}
    for r in range(args.rounds):
        order = kids if r % 2 == 0 else kids[::-1]
        for label, _, req in cases:
            for k in order:
                ans = k.ask(**req)
                if isinstance(ans, list):
                    ans, c = ans
                    cpu[label][k.kind].append(c)
                times[label][k.kind].append(ans)
    missed = 0
    print("%-26s %12s %12s %8s %8s %s" % ("", "PyTorch", "ebb", "ratio", "(best)", "target"))
    for label, target, _ in cases:
        nat, mine = times[label]["native"], times[label]["ebb"]
        # each round asked the two one after the other: the ratio of a pair
        # saw the same load; the median of those ratios is the figure
        ratio = statistics.median(m / n for m, n in zip(mine, nat))
        best = min(mine) / min(nat)
        unit, scale = ("us", 1e6) if label.startswith("op") else ("ms", 1e3)
        ok = ratio <= target
        missed += not ok
        cpu_ratio = ""
        if cpu[label]["native"]:
            cpu_ratio = "  (CPU time %.2f)" % statistics.median(
                m / n for m, n in zip(cpu[label]["ebb"], cpu[label]["native"]))
        print("%-26s %9.2f %s %9.2f %s %8.2f %8.2f <= %.2f %s%s"
              % (label, statistics.median(nat) * scale, unit, statistics.median(mine) * scale,
                 unit, ratio, best, target, "" if ok else "MISSED", cpu_ratio))
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
