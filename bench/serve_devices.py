#!/usr/bin/env python3
"""ebb serve on 1, 2 and 4 fake devices of 8 GiB, side by side in one run:
two pipelines that need ~60 % of a device each (4600 MiB of weights + the
300 MiB context: never two on one device),
JOBS jobs alternating between them with run_ms RUN_MS (default 40 x 500 ms,
the workload of issue 11). Prints per device count the makespan, the
throughput, the ratio to 1 device (goal >= 0.9 x N), the makespan against
the ideal (JOBS x RUN_MS / N; goal <= 1.15), the pipeline loads (with
one device jobs run as before, loading their stages each time: no
pipeline loads are counted there) and the server's CPU seconds (on the
fake GPU device memory is host memory: the synthetic stage's checks are
CPU work, and a machine with fewer cores than devices stretches them).

Usage: serve_devices.py --ebb BUILD/ebb [--jobs N] [--run-ms MS]
(EBB_LIBCUDA / EBB_LIBNVML point at the fake, as scripts/bench.sh sets them.)"""
import argparse
import json
import os
import resource
import re
import subprocess
import sys
import tempfile
import time
import urllib.request


def config(run_ms):
    def pipe(name):
        return {"expected_mib": 4915, "stages": [{
            "stage": "synthetic", "name": name, "cache": False,
            "options": {"weights_mib": 4600, "run_ms": run_ms, "touch": "sample"}}]}
    return {"pipelines": {"A": pipe("a"), "B": pipe("b")}}


def post(url, body):
    r = urllib.request.Request(url + "/v1/jobs", json.dumps(body).encode(),
                               {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(r, timeout=30))["id"]


def finished(url):
    """(jobs finished, jobs not succeeded) from /metrics: one request a poll,
    so the poller does not compete with the server for the CPU."""
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    n = dict(re.findall(r'^ebb_jobs\{state="(\w+)"\} (\d+)$', text, re.M))
    bad = int(n.get("failed", 0)) + int(n.get("cancelled", 0))
    return int(n.get("succeeded", 0)) + bad, bad


def run(ebb, ndev, jobs, run_ms, tmp):
    d = os.path.join(tmp, "d%d" % ndev)
    os.makedirs(d)
    cfg = os.path.join(d, "cfg.json")
    with open(cfg, "w") as f:
        json.dump(config(run_ms), f)
    inp = os.path.join(d, "input.txt")
    with open(inp, "w") as f:
        f.write("any input\n")
    env = dict(os.environ, FAKEGPU_STATE=os.path.join(d, "state"),
               FAKEGPU_MEMORY_MIB="8192,8192,8192,8192", FAKEGPU_CONTEXT_MIB="300")
    devs = ",".join("cuda:%d" % i for i in range(ndev))
    log = open(os.path.join(d, "log"), "w+")
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.Popen([ebb, "serve", "--config", cfg, "--listen", "127.0.0.1:0",
                          "--data-dir", os.path.join(d, "data"), "--input-dir", d,
                          "--devices", devs], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        url = None
        for _ in range(600):  # 30 s: a loaded 2-core machine once took more than 10
            log.seek(0)
            m = re.match(r"ebb: listening on (\S+)", log.readline())
            if m:
                url = m.group(1)
                break
            if p.poll() is not None:
                break
            time.sleep(0.05)
        if not url:
            log.seek(0)
            why = ("exited with status %d before it listened" % p.returncode
                   if p.poll() is not None else "did not listen within 30 s")
            raise RuntimeError("the server on %s %s; its log:\n%s" % (devs, why, log.read()))
        t0 = time.monotonic()
        for i in range(jobs):
            post(url, {"pipeline": "AB"[i % 2], "input": inp})
        deadline = t0 + 10 * jobs * run_ms / 1000.0 + 60
        done, failed = finished(url)
        while done < jobs and time.monotonic() < deadline:
            time.sleep(0.05)
            done, failed = finished(url)
        span = time.monotonic() - t0
        if done < jobs:
            raise RuntimeError("%d jobs unfinished on %s" % (jobs - done, devs))
    finally:
        p.terminate()
        p.wait()
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
    log.seek(0)
    text = log.read()
    loads = text.count("GPU memory free after load")
    oom = len(re.findall(r"out of memory|EBB_EOOM", text))
    return span, loads, failed, oom, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ebb", required=True)
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("EBB_BENCH_JOBS", 40)))
    ap.add_argument("--run-ms", type=int, default=int(os.environ.get("EBB_BENCH_RUN_MS", 500)))
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ebb-serve-devices.") as tmp:
        for n in (1, 2, 4):
            rows.append((n,) + run(a.ebb, n, a.jobs, a.run_ms, tmp))
    base = a.jobs / rows[0][1]
    print("serve_devices: %d jobs alternating two pipelines (~60 %% of an 8 GiB device "
          "each), run_ms %d, on the fake GPU" % (a.jobs, a.run_ms))
    print("devices  makespan_s  jobs/s  ratio_to_1  goal    makespan/ideal  loads  failed  oom"
          "  server_cpu_s")
    ok = True
    for n, span, loads, failed, oom, cpu in rows:
        tput = a.jobs / span
        ideal = a.jobs * a.run_ms / 1000.0 / n
        print("%7d  %10.2f  %6.2f  %9.2fx  %5.1fx  %14.2f  %5d  %6d  %3d  %12.2f" %
              (n, span, tput, tput / base, 0.9 * n, span / ideal, loads, failed, oom, cpu))
        ok = ok and failed == 0 and oom == 0
    n, span, loads = rows[-1][0], rows[-1][1], rows[-1][2]
    print("serve_devices: %d devices: makespan %.2fx of the ideal %d x %.1f s / %d (goal <= 1.15), "
          "%d loads (goal <= 6); server_cpu_s is the server's CPU time (user + system), "
          "which a busy machine's other load stretches" %
          (n, span / (a.jobs * a.run_ms / 1000.0 / n), a.jobs, a.run_ms / 1000.0, n, loads))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
