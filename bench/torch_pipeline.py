"""The Python songtrace pipeline (examples/torch/songtrace/) under `ebb serve`:
a job that wakes its three PyTorch workers from host memory (release
policy sleep) against a job that loads them again (the pipeline unloaded
before it: new workers import PyTorch and load their models), in one run,
alternating; prints the job times and the ratio wake / reload.

usage: torch_pipeline.py --ebb BUILD/ebb [--rounds R]
(the environment says which device: bench.sh's fake GPU)"""
import argparse
import json
import math
import os
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import wave

HERE = os.path.dirname(os.path.abspath(__file__))
EX = os.path.join(HERE, "..", "examples", "torch", "songtrace")


def call(url, method="GET", body=None):
    data = json.dumps(body).encode() if body is not None else None
    if data is None and method == "POST":
        data = b""  # no body, no type
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if body else {})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read() or b"{}")


def job(url, wav):
    t0 = time.perf_counter()
    jid = call(url + "/v1/jobs", "POST", {"pipeline": "songtrace_torch", "input": wav})["id"]
    for _ in range(36000):
        st = call(url + "/v1/jobs/" + jid)
        if st["state"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.1)
    if st["state"] != "succeeded":
        raise SystemExit("torch_pipeline: job %s %s: %s" % (jid, st["state"], st))
    return time.perf_counter() - t0


def wait_asleep(log, n):
    for _ in range(6000):
        with open(log) as f:
            if len(re.findall(r"\] asleep: isolated, its worker", f.read())) >= n:
                return
        time.sleep(0.1)
    raise SystemExit("torch_pipeline: the pipeline did not go to sleep (log %s)" % log)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ebb", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    py = os.environ.get("EBB_TORCH_PYTHON", "/opt/ebb-tools/torch/bin/python")
    if not os.access(py, os.X_OK):
        print("torch_pipeline: skipped: no PyTorch at %s (scripts/install-deps.sh)" % py)
        return 0
    tmp = tempfile.mkdtemp(prefix="ebb-torch-pipeline.")
    wav = os.path.join(tmp, "tone.wav")
    with wave.open(wav, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        w.writeframes(b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 220 * i
                                                                        / 16000)))
                               for i in range(16000)))
    cfg = open(os.path.join(EX, "songtrace_torch.json")).read()
    cfg = cfg.replace('"./run_stage"', json.dumps(os.path.join(EX, "run_stage")))
    with open(os.path.join(tmp, "cfg.json"), "w") as f:
        f.write(cfg)
    log = os.path.join(tmp, "serve.log")
    srv = subprocess.Popen([args.ebb, "serve", "--listen", "127.0.0.1:0", "--config",
                            os.path.join(tmp, "cfg.json"), "--data-dir", os.path.join(tmp, "d"),
                            "--input-dir", tmp], stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        url = None
        for _ in range(100):
            m = re.search(r"listening on (http://\S+)", open(log).read())
            if m:
                url = m.group(1)
                break
            time.sleep(0.1)
        if not url:
            raise SystemExit("torch_pipeline: ebb serve did not start (log %s)" % log)
        first = job(url, wav)  # loads the workers (imports, models, first passes)
        sleeps = 3
        wait_asleep(log, sleeps)
        wakes, reloads = [], []
        for _ in range(args.rounds):
            wakes.append(job(url, wav))
            sleeps += 3
            wait_asleep(log, sleeps)
            call(url + "/v1/pipelines/songtrace_torch/unload", "POST")
            reloads.append(job(url, wav))
            sleeps += 3
            wait_asleep(log, sleeps)
        w, r = statistics.median(wakes), statistics.median(reloads)
        print("torch_pipeline: 1 s of audio through decode -> separate -> transcribe -> pitch "
              "(3 PyTorch workers); first job %.1f s" % first)
        print("job after sleep (wakes from host memory) %8.2f s   (%s)"
              % (w, " ".join("%.2f" % x for x in wakes)))
        print("job after unload (loads again)           %8.2f s   (%s)"
              % (r, " ".join("%.2f" % x for x in reloads)))
        print("ratio wake / reload %.3f" % (w / r))
    finally:
        srv.terminate()
        srv.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
