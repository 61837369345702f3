#!/usr/bin/env python3
"""The broker's soak (issue 35): 500 mixed operations from a fixed seed on
one fake 16 GiB device shared by three `ebb serve` (one broker directory)
and a foreign fakegpu-hold process that runs `ebb reclaim --for ITS_PID`
before each allocation. A second foreign filler keeps 9.5 GiB so that what the
servers could load (3 x 1.75 GiB + contexts) is more than what is left: the
servers must reclaim from each other. Total demand stays within the device
at every moment: one job in flight at a time (its server busy, giving
nothing), one other operation at a time (at most 1.3 GiB), the foreign
holder at most 1.5 GiB.

Operations (weights): job 35, load 20, sleep 12, wake 8, foreign alloc or
free 25. Prints and asserts: 0 out-of-memory (driver allocations failing:
in jobs, loads, wakes, the foreign holder, the servers' logs), 0 running
jobs interrupted, every job done once (succeeded, one result each); the
broker's refusals (a load/job/wake the peers could not make room for, a
foreign reclaim that exited 1) are counted and printed apart.

Usage: broker_soak.py (env: EBB, FAKEGPU_SMI, FAKEGPU_STATE, EBB_TEST_TMP,
EBB_LIBCUDA, EBB_LIBNVML) [--ops N] [--seed S]"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

EBB = os.environ["EBB"]
T = os.environ["EBB_TEST_TMP"]
HOLD = os.path.join(os.path.dirname(os.environ["FAKEGPU_SMI"]), "fakegpu-hold")
BD = os.path.join(T, "broker")
REFUSAL = re.compile(r"not loading it|needs about|still missing|could not all be had")
OOM = re.compile(r"out of memory|out_of_memory|OUT_OF_MEMORY|out of device memory", re.I)

PIPES = {"a": (512, "after-stage"), "b": (256, "sleep"), "c": (1024, "after-stage")}


def cfg():
    return {"pipelines": {n: {"release": pol, "stages": [{
        "stage": "synthetic", "name": n + "s", "cache": False,
        "options": {"weights_mib": mib, "run_ms": 300, "touch": "sample"}}]}
        for n, (mib, pol) in PIPES.items()}}


def req(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    r = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(r, timeout=120) as a:
            return a.status, json.loads(a.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


class Server:
    def __init__(self, i, path):
        self.i = i
        self.log = os.path.join(T, "log%d" % i)
        self.p = subprocess.Popen(
            [EBB, "serve", "--listen", "127.0.0.1:0", "--config", path, "--data-dir",
             os.path.join(T, "data%d" % i), "--no-cache", "--input-dir", T,
             "--broker-dir", BD, "--broker-timeout", "30"],
            stdout=open(self.log, "w"), stderr=subprocess.STDOUT)
        self.url = None
        for _ in range(300):
            first = open(self.log).readline()
            if first.startswith("ebb: listening on "):
                self.url = first.split()[-1]
                break
            time.sleep(0.05)
        sock = os.path.join(BD, "%d.sock" % self.p.pid)
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        if not self.url or not os.path.exists(sock):
            sys.exit("FAIL: server %d did not start: %s" % (i, open(self.log).read()))

    def pipes(self):
        _, b = req("GET", self.url + "/v1/pipelines")
        items = b.get("pipelines", b) if isinstance(b, dict) else b
        return {p["name"]: p for p in items}


class Holder:
    def __init__(self, args):
        self.p = subprocess.Popen([HOLD] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, bufsize=1)
        self.held = 0

    def say(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", type=int, default=500)
    ap.add_argument("--seed", type=int, default=35)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    os.makedirs(BD, exist_ok=True)
    os.chmod(BD, 0o700)
    path = os.path.join(T, "cfg.json")
    json.dump(cfg(), open(path, "w"))
    inp = os.path.join(T, "input.txt")
    open(inp, "w").write("any input\n")
    filler = Holder(["--alloc", "9728", "--wait"])
    if not filler.p.stdout.readline().startswith("ok"):
        sys.exit("FAIL: the filler could not take 9.5 GiB")
    servers = [Server(i, path) for i in range(3)]
    hold = Holder([])
    for c in ("init", "ctx"):
        if not hold.say(c).startswith("ok"):
            sys.exit("FAIL: fakegpu-hold %s" % c)
    n = {k: 0 for k in ("job", "load", "sleep", "wake", "falloc", "ffree")}
    refusals = {k: 0 for k in ("load", "job", "wake", "foreign")}
    ooms, interrupted, other = [], [], []
    jobs = []  # (server, id)
    inflight = None

    def finish(j, limit=120.0):
        s, jid = j
        t0 = time.time()
        while time.time() - t0 < limit:
            code, b = req("GET", "%s/v1/jobs/%s" % (s.url, jid))
            if b.get("state") in ("succeeded", "failed", "cancelled"):
                return b
            time.sleep(0.05)
        return {"state": "stuck"}

    def judge_job(j, b):
        if b.get("state") == "succeeded":
            return
        msg = json.dumps(b)
        if REFUSAL.search(msg):
            refusals["job"] += 1
        elif OOM.search(msg):
            ooms.append("job %s on server %d: %s" % (j[1], j[0].i, msg[:300]))
        else:
            interrupted.append("job %s on server %d: %s" % (j[1], j[0].i, msg[:300]))

    results = {}
    ops = ["job"] * 35 + ["load"] * 20 + ["sleep"] * 12 + ["wake"] * 8 + ["foreign"] * 25
    t_start = time.time()
    for k in range(a.ops):
        op = rng.choice(ops)
        s = rng.choice(servers)
        name = rng.choice(sorted(PIPES))
        if op == "foreign":
            if hold.held:
                r = hold.say("free")
                if not r.startswith("ok"):
                    other.append("foreign free: %s" % r)
                hold.held = 0
                n["ffree"] += 1
                continue
            mib = rng.choice((512, 1024, 1536))
            rc = subprocess.run([EBB, "reclaim", "--device", "cuda:0", "--bytes", "%dMiB" % mib,
                                 "--broker-dir", BD, "--for", str(hold.p.pid), "--hold", "10",
                                 "--broker-timeout", "30"], capture_output=True, text=True)
            n["falloc"] += 1
            if rc.returncode == 1:
                refusals["foreign"] += 1
                continue
            if rc.returncode != 0:
                other.append("ebb reclaim exited %d: %s" % (rc.returncode, rc.stderr[:300]))
                continue
            r = hold.say("alloc %d" % mib)
            if r.startswith("ok"):
                hold.held = mib
            elif r == "err 2":
                ooms.append("foreign alloc %d MiB after ebb reclaim: %s\n%s" % (mib, r, rc.stdout))
            else:
                other.append("foreign alloc: %s" % r)
            continue
        state = s.pipes().get(name, {})
        if op == "sleep" and not (state.get("loaded") and not state.get("asleep")):
            op = "load"
        if op == "wake" and not state.get("asleep"):
            op = "job"
        if op == "load" and state.get("loaded"):
            op = "job"
        n[op] += 1
        if op == "job":
            if inflight:
                b = finish(inflight)
                results[inflight] = b
                judge_job(inflight, b)
                inflight = None
            code, b = req("POST", s.url + "/v1/jobs", {"pipeline": name, "input": inp})
            if code != 202:
                other.append("job submit %d: %s" % (code, b))
                continue
            inflight = (s, b["id"])
            jobs.append(inflight)
            continue
        code, b = req("POST", "%s/v1/pipelines/%s/%s" % (s.url, name, op))
        if code == 200:
            continue
        msg = json.dumps(b)
        if code == 409:  # its state changed under us (a peer's giving): not an error
            continue
        if code == 404 and op == "sleep" and "is not loaded" in msg:
            continue  # a peer's ask unloaded it between our look and the sleep (same race)
        if REFUSAL.search(msg):
            refusals[op if op in refusals else "load"] += 1
        elif OOM.search(msg):
            ooms.append("%s %s on server %d: %d %s" % (op, name, s.i, code, msg[:300]))
        else:
            other.append("%s %s on server %d: %d %s" % (op, name, s.i, code, msg[:300]))
    if inflight:
        b = finish(inflight)
        results[inflight] = b
        judge_job(inflight, b)
    took = time.time() - t_start
    # every job done once: one final state, succeeded, its result there
    done_once = 0
    for j in jobs:
        b = results.get(j) or finish(j)
        if j not in results:
            judge_job(j, b)
        code, _ = req("GET", "%s/v1/jobs/%s/result" % (j[0].url, j[1]))
        if b.get("state") == "succeeded" and code == 200:
            done_once += 1
    ids = [j[1] for j in jobs]
    for s in servers:
        for line in open(s.log):
            if OOM.search(line) and not REFUSAL.search(line):
                ooms.append("server %d logged: %s" % (s.i, line.strip()[:300]))
    gave = sum(len(re.findall(r"^\[broker\] pid %d \(ebb serve\) gave back [1-9]" % s.p.pid,
                              open(s.log).read(), re.M)) for s in servers)
    print("broker soak: %d operations (seed %d) in %.1f s on a 16 GiB fake device: "
          "%d jobs, %d loads, %d sleeps, %d wakes, %d foreign allocations, %d foreign frees"
          % (a.ops, a.seed, took, n["job"], n["load"], n["sleep"], n["wake"], n["falloc"],
             n["ffree"]))
    print("  peers gave back memory %d times" % gave)
    print("  out-of-memory: %d" % len(ooms))
    print("  running jobs interrupted: %d" % len(interrupted))
    print("  jobs done once: %d of %d (ids unique: %s)" % (done_once, len(jobs),
                                                            len(set(ids)) == len(ids)))
    print("  broker refusals (apart): loads %d, jobs %d, wakes %d, foreign reclaims %d"
          % (refusals["load"], refusals["job"], refusals["wake"], refusals["foreign"]))
    for x in ooms + interrupted + other:
        print("  - " + x)
    for s in servers:
        s.p.terminate()
    for s in servers:
        s.p.wait(60)
    for h in (hold, filler):
        h.p.kill()
        h.p.wait()
    bad = ooms or interrupted or other or done_once + refusals["job"] != len(jobs) \
        or len(set(ids)) != len(ids) or gave == 0
    if bad:
        print("FAIL: broker soak")
        return 1
    print("broker_soak: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
