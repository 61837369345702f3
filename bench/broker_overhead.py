#!/usr/bin/env python3
"""The broker's overhead over the release itself (issue 35): an idle `ebb
serve` holds 4 GiB (one pipeline), and the time from a request to the
driver showing the 4 GiB free is measured two ways, side by side, N runs
each, for the two ways a peer gives:

  unload path: "u" (release after-stage: a broker request unloads it)
    own:    POST /v1/pipelines/u/unload on the peer itself
    broker: the protocol of docs/broker.md from another process
            (info, then reclaim 4 GiB), as any asker does
  sleep path:  "s" (release sleep: a broker request puts it to sleep)
    own:    POST /v1/pipelines/s/sleep
    broker: the same protocol

Both clocks stop when the driver (NVML, polled every 0.2 ms) shows the
bytes free. Prints the medians and the overhead (broker minus own); the
issue's target is a median overhead of at most 20 ms.

Usage: broker_overhead.py --ebb BUILD/ebb [--runs N]
(EBB_LIBCUDA / EBB_LIBNVML point at the fake, as scripts/bench.sh sets them;
on a real GPU (EBB_BENCH_REAL_GPU=1) it needs 5 GiB free.)"""
import argparse
import ctypes
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

MIB = 1 << 20
HELD_MIB = 4096


class Nvml:
    """cuda:0's free memory by NVML (the fake's or the real one)."""

    class Mem(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                    ("used", ctypes.c_ulonglong)]

    def __init__(self):
        self.lib = ctypes.CDLL(os.environ.get("EBB_LIBNVML", "libnvidia-ml.so.1"))
        init = getattr(self.lib, "nvmlInit_v2", None) or self.lib.nvmlInit
        if init() != 0:
            sys.exit("broker_overhead: nvmlInit failed")
        self.dev = ctypes.c_void_p()
        get = getattr(self.lib, "nvmlDeviceGetHandleByIndex_v2", None) or \
            self.lib.nvmlDeviceGetHandleByIndex
        if get(0, ctypes.byref(self.dev)) != 0:
            sys.exit("broker_overhead: no device 0")
        self.mem = Nvml.Mem()

    def free(self):
        self.lib.nvmlDeviceGetMemoryInfo(self.dev, ctypes.byref(self.mem))
        return self.mem.free


def http(url, path):
    r = urllib.request.Request(url + path, b"", method="POST")
    with urllib.request.urlopen(r, timeout=120) as a:
        return a.status


def ask(path, msg):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(30)
        s.connect(path)
        s.sendall((json.dumps(msg) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return json.loads(buf)


def until_free(nvml, target, t0, limit=30.0):
    while nvml.free() < target:
        if time.perf_counter() - t0 > limit:
            sys.exit("broker_overhead: the driver never showed the bytes free")
        time.sleep(0.0002)
    return time.perf_counter() - t0


def own(url, nvml, name, verb):
    target = nvml.free() + (HELD_MIB - 64) * MIB
    t0 = time.perf_counter()
    if http(url, "/v1/pipelines/%s/%s" % (name, verb)) != 200:
        sys.exit("broker_overhead: %s %s failed" % (verb, name))
    return until_free(nvml, target, t0)


def broker(sock, nvml):
    target = nvml.free() + (HELD_MIB - 64) * MIB
    t0 = time.perf_counter()
    info = ask(sock, {"v": 1, "op": "info"})
    uuid = info["devices"][0]["uuid"]
    ans = ask(sock, {"v": 1, "op": "reclaim", "device": uuid, "bytes": HELD_MIB * MIB,
                     "asker": os.getpid()})
    if ans.get("given_bytes", 0) < (HELD_MIB - 64) * MIB:
        sys.exit("broker_overhead: the peer gave %s" % ans)
    return until_free(nvml, target, t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ebb", required=True)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ebb-broker-bench.")
    env = dict(os.environ, XDG_RUNTIME_DIR=tmp)
    env.setdefault("FAKEGPU_STATE", os.path.join(tmp, "state"))
    env.setdefault("FAKEGPU_MEMORY_MIB", "16384")
    os.environ.update(env)
    cfg = os.path.join(tmp, "cfg.json")

    def pipe(name, release):
        return {"release": release, "stages": [{"stage": "synthetic", "name": name,
                "cache": False, "options": {"weights_mib": HELD_MIB, "touch": "sample"}}]}
    with open(cfg, "w") as f:
        json.dump({"pipelines": {"u": pipe("u", "after-stage"), "s": pipe("s", "sleep")}}, f)
    bd = os.path.join(tmp, "broker")
    log = open(os.path.join(tmp, "log"), "w+")
    srv = subprocess.Popen([a.ebb, "serve", "--listen", "127.0.0.1:0", "--config", cfg,
                            "--data-dir", os.path.join(tmp, "data"), "--no-cache",
                            "--broker-dir", bd], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        url = None
        for _ in range(300):
            log.seek(0)
            first = log.readline()
            if first.startswith("ebb: listening on "):
                url = first.split()[-1]
                break
            time.sleep(0.05)
        sock = os.path.join(bd, "%d.sock" % srv.pid)
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        if not url or not os.path.exists(sock):
            sys.exit("broker_overhead: the server did not start")
        nvml = Nvml()
        res = {}
        for path, name in (("unload", "u"), ("sleep", "s")):
            t_own, t_brk = [], []
            for _ in range(a.runs):
                http(url, "/v1/pipelines/%s/load" % name)
                time.sleep(0.05)  # idle
                t_own.append(own(url, nvml, name, "unload" if path == "unload" else "sleep"))
                if path == "sleep":
                    http(url, "/v1/pipelines/s/unload")
                http(url, "/v1/pipelines/%s/load" % name)
                time.sleep(0.05)
                t_brk.append(broker(sock, nvml))
                if path == "sleep":
                    http(url, "/v1/pipelines/s/unload")
            res[path] = (statistics.median(t_own) * 1e3, statistics.median(t_brk) * 1e3)
        print("broker overhead: %d MiB held by an idle peer, %d runs each, medians; time "
              "from request to driver-confirmed free" % (HELD_MIB, a.runs))
        worst = max(b - o for o, b in res.values())
        for path, (o, b) in res.items():
            print("  %-6s path: peer's own %s %8.1f ms   broker request %8.1f ms   "
                  "overhead %+6.1f ms" % (path, "unload" if path == "unload" else "sleep ",
                                          o, b, b - o))
        print("  target: median overhead <= 20 ms: %s (worst %+.1f ms)" %
              ("met" if worst <= 20 else "NOT met", worst))
    finally:
        srv.terminate()
        srv.wait(30)


if __name__ == "__main__":
    main()
