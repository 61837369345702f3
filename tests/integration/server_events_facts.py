#!/usr/bin/env python3
"""GET /v1/events fed by ebb's event bus (src/base/events.c), not by its log.
Driven by server_events_logs.sh, server_events_resume.sh and
server_events_keepjobs.sh; every wait is bounded.

  figures URL INPUT     one job of pipeline `demo` (stages a, b; b leaks);
                        prints, as JSON, what the live page shows of it: the
                        `release` events (stage, bytes), the `leak` events
                        (owner, bytes, kind, sites), the job's states and
                        per-stage bytes, and the /metrics figures that come
                        from facts. Nothing time- or address-dependent.
  resume URL INPUT      Last-Event-ID: a client reads, goes away, a job runs,
                        the client comes back with the last id it saw and
                        gets every event it missed, ids in sequence, no hello.
  expired URL           a Last-Event-ID older than the buffer (or unreadable,
                        or from the future) gets a fresh hello.
  hello URL IDS...      the hello's jobs are exactly IDS (the store's), in order.
  submit URL INPUT N    N jobs of pipeline `tiny`; waits for the last; prints
                        their ids, oldest first.
  order URL INPUT       one stream, in the order facts were made: the first
                        job of `demo` (the server's first device allocation
                        fails) shows `a load`, then the `out of device memory`
                        mark, then its failure; the second shows each stage's
                        marks and release in the order the runner made them
                        (`a release` mark, a's release, `b load`, `b run`,
                        `b release` mark, b's release), however the publisher's
                        ticks fall; `demo` loaded and put to sleep (three
                        times, woken between) shows stage a's `sleep` mark
                        before its asleep release, and the `pipeline demo
                        asleep` mark after them, each time.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from urllib.parse import urlparse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from apitest import client, fail, fails  # noqa: E402

URL = sys.argv[2]
HOST, PORT = urlparse(URL).hostname, urlparse(URL).port
api = client(URL)


class Stream:
    """A raw GET /v1/events; last_id: sent as Last-Event-ID."""

    def __init__(self, last_id=None):
        self.s = socket.create_connection((HOST, PORT), timeout=10)
        hdr = "Last-Event-ID: %s\r\n" % last_id if last_id is not None else ""
        self.s.sendall(("GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        "Accept: text/event-stream\r\n%s\r\n" % hdr).encode())
        self.raw = b""

    def read_for(self, seconds):
        end = time.time() + seconds
        while time.time() < end:
            self.s.settimeout(max(0.01, min(0.2, end - time.time())))
            try:
                b = self.s.recv(65536)
                if not b:
                    return
                self.raw += b
            except socket.timeout:
                pass

    def events(self):
        """[(id or None, name, data)] of every complete event; chunk framing
        (hex sizes between CRLFs) removed first."""
        body = self.raw.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in self.raw else b""
        text, out = b"", []
        while body:
            m = re.match(rb"([0-9a-fA-F]+)\r\n", body)
            if not m:
                break
            n = int(m.group(1), 16)
            start = m.end()
            if len(body) < start + n + 2:
                break
            text += body[start:start + n]
            body = body[start + n + 2:]
        for block in text.decode(errors="replace").split("\n\n")[:-1]:
            eid, name, data = None, None, None
            for line in block.split("\n"):
                if line.startswith("id: "):
                    eid = int(line[4:])
                elif line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
            if name:
                out.append((eid, name, data))
        return out

    def close(self):
        self.s.close()


def post_job(pipeline="demo"):
    code, body = api("POST", "/v1/jobs", {"pipeline": pipeline, "input": INPUT})
    if code != 202:
        fail("POST /v1/jobs: %d %s" % (code, body))
        sys.exit(1)
    return body["id"]


def wait_job(jid):
    for _ in range(300):
        code, job = api("GET", "/v1/jobs/%s" % jid)
        if code == 200 and job["state"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(0.1)
    fail("job %s did not end in 30 s" % jid)
    sys.exit(1)


def metric(text, name):
    m = re.search(r"^%s (\d+)$" % re.escape(name), text, re.M)
    return int(m.group(1)) if m else None


def figures():
    st = Stream()
    st.read_for(0.3)
    jid = post_job()
    job = wait_job(jid)
    # the job's last event and the leak come within a few intervals
    for _ in range(50):
        st.read_for(0.1)
        evs = st.events()
        done = [d for _, n, d in evs if n == "job" and d["id"] == jid and d["state"] == job["state"]]
        leaks = [d for _, n, d in evs if n == "leak" and d["owner"] == "b"]
        if done and leaks:
            break
    st.close()
    evs = st.events()
    if not evs or evs[0][1] != "hello":
        fail("the stream does not start with hello: %r" % evs[:1])
    with urllib.request.urlopen(URL + "/metrics", timeout=30) as r:
        text = r.read().decode()
    if shutil.which("promtool"):  # the fact counters' families are well formed
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        bad = [ln for ln in (p.stdout + p.stderr).splitlines()
               if re.search(r"ebb_(events|stage_released|leaked)", ln)]
        if bad:
            fail("promtool on the fact counters: %s" % bad)
    states = [d["state"] for _, n, d in evs if n == "job" and d["id"] == jid]
    out = {
        "job_state": job["state"],
        # a running job's events repeat its state as its peaks grow (timing)
        "job_states": [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s],
        "job_stages": [(s["name"], s["released_bytes"]) for s in job["stages"]],
        "event_stages": [(s["name"], s["released_bytes"]) for _, n, d in evs
                         if n == "job" and d["id"] == jid and d["state"] == "succeeded"
                         for s in d["stages"]],
        "releases": sorted((d["stage"] or "", d["bytes"]) for _, n, d in evs if n == "release"
                           and not d.get("asleep")),
        "leaks": [(d["owner"], d["bytes"], d["kind"], [s["site"].split(":")[0] for s in d["sites"]])
                  for _, n, d in evs if n == "leak"],
        "metrics": {k: metric(text, k) for k in (
            "ebb_stage_released_bytes_total", 'ebb_leaked_bytes_total{kind="leak"}',
            'ebb_events_total{kind="released"}', 'ebb_events_total{kind="leak"}',
            'ebb_events_total{kind="job"}', "ebb_released_bytes_total")},
    }
    # the figures must be there to be compared at all
    if out["job_state"] != "succeeded" or not out["releases"] or not out["leaks"]:
        fail("the job's figures are missing: %s" % json.dumps(out))
    for name, b in out["job_stages"]:
        if b and (name, b) not in out["releases"]:
            fail("GET /v1/jobs says stage %s released %d bytes; no release event says so: %s"
                 % (name, b, out["releases"]))
    if out["event_stages"] != out["job_stages"]:
        fail("the job event's stages %s differ from GET /v1/jobs' %s"
             % (out["event_stages"], out["job_stages"]))
    if not out["metrics"]["ebb_stage_released_bytes_total"]:
        fail("/metrics: no ebb_stage_released_bytes_total: %s" % out["metrics"])
    print(json.dumps(out, sort_keys=True))


def resume():
    a = Stream()
    a.read_for(0.5)
    evs = a.events()
    if not evs or evs[0][1] != "hello" or evs[0][0] is None:
        fail("a new client's first event is not a hello with an id: %r" % evs[:1])
        sys.exit(1)
    last = max(e[0] for e in evs if e[0] is not None)
    a.close()
    jid = post_job()  # while nobody listens
    wait_job(jid)
    time.sleep(0.5)  # its last events are out
    b = Stream(last_id=last)
    b.read_for(1.0)
    evs = b.events()
    b.close()
    if not evs:
        fail("nothing after reconnecting with Last-Event-ID: %d" % last)
        sys.exit(1)
    if any(n == "hello" for _, n, _ in evs):
        fail("a client resuming from id %d (still buffered) got a hello" % last)
    ids = [e[0] for e in evs]
    if ids != list(range(last + 1, last + 1 + len(ids))):
        fail("the resumed ids do not follow %d one by one: %s" % (last, ids[:20]))
    states = [d["state"] for _, n, d in evs if n == "job" and d["id"] == jid]
    if states[:1] != ["queued"] or states[-1:] != ["succeeded"]:
        fail("the missed job events of %s: %s (expected queued ... succeeded)" % (jid, states))
    if not [1 for _, n, d in evs if n == "release" and d["stage"] in ("a", "b")]:
        fail("no missed release event of stage a or b")
    if not [1 for _, n, d in evs if n == "leak" and d["owner"] == "b"]:
        fail("the missed leak of stage b is not there")
    print("ok: resumed after id %d: %d events, ids in sequence, job %s queued..succeeded"
          % (last, len(evs), jid))


def expired():
    a = Stream()
    a.read_for(0.3)
    first = a.events()
    a.close()
    if not first or first[0][1] != "hello":
        fail("no hello for a new client")
        sys.exit(1)
    old = first[0][0]
    time.sleep(1.5)  # the server's small buffer (EBB_EVENTS_BUFFER=16) forgets `old`
    for last, why in ((old, "older than the buffer"), ("garbage", "unreadable"),
                      (old + 10 ** 9, "from the future")):
        b = Stream(last_id=last)
        b.read_for(0.3)
        evs = b.events()
        b.close()
        if not evs or evs[0][1] != "hello":
            fail("Last-Event-ID %s (%s): expected a fresh hello, got %r" % (last, why, evs[:1]))
    print("ok: an expired, unreadable or unknown Last-Event-ID gets a fresh hello")


def hello(want):
    a = Stream()
    a.read_for(0.5)
    evs = a.events()
    a.close()
    if not evs or evs[0][1] != "hello":
        fail("no hello: %r" % evs[:1])
        sys.exit(1)
    got = [j["id"] for j in evs[0][2]["jobs"]]
    if got != want:
        fail("hello lists jobs %s; the store holds %s" % (got, want))
    print("ok: hello lists the %d jobs the store holds" % len(got))


def submit(n):
    ids = [post_job("tiny") for _ in range(n)]
    wait_job(ids[-1])
    print(" ".join(ids))


def position(evs, what, pred):
    """The stream position of the first event pred accepts; fails naming what."""
    for i, (_, n, d) in enumerate(evs):
        if pred(n, d):
            return i
    fail("no %s in the stream: %s" % (what, [(n, d.get("label") or d.get("stage") or d.get("state"))
                                               for _, n, d in evs if n != "memory"]))
    sys.exit(1)


def in_order(evs, jid, steps):
    """steps: [(what, pred)] expected in this order among the job's events
    (those after its `running` event)."""
    start = position(evs, "job %s running" % jid,
                     lambda n, d: n == "job" and d["id"] == jid and d["state"] == "running")
    tail = evs[start:]
    at = [(what, position(tail, what, pred)) for what, pred in steps]
    if [p for _, p in at] != sorted(p for _, p in at):
        fail("job %s: the stream's order is %s; expected %s" % (
            jid, [w for w, _ in sorted(at, key=lambda x: x[1])], [w for w, _ in at]))


def mark(label):
    return ("mark '%s'" % label, lambda n, d: n == "mark" and d["label"] == label)


def release(stage):
    return ("release of %s" % stage,
            lambda n, d: n == "release" and d["stage"] == stage and not d.get("asleep"))


SLEEPS = 3  # order(): times demo is put to sleep


def order():
    st = Stream()
    st.read_for(0.3)
    first = post_job()
    job = wait_job(first)
    if job["state"] != "failed" or "out of device memory" not in json.dumps(job):
        fail("job %s (the first allocation fails): %s" % (first, job))
    second = post_job()
    job = wait_job(second)
    if job["state"] != "succeeded":
        fail("job %s: %s" % (second, job))
    naps = ["/v1/pipelines/demo/load", "/v1/pipelines/demo/sleep"]
    naps += ["/v1/pipelines/demo/wake", "/v1/pipelines/demo/sleep"] * (SLEEPS - 1)
    for path in naps:
        code, body = api("POST", path)
        if code != 200:
            fail("POST %s: HTTP %d %s" % (path, code, body))
    for _ in range(40):  # the last facts come within a few ticks
        st.read_for(0.25)
        if len([1 for _, n, d in st.events()
                if n == "mark" and d["label"] == "pipeline demo asleep"]) >= SLEEPS:
            break
    st.close()
    evs = st.events()
    in_order(evs, first, [mark("a load"), mark("out of device memory"),
                          ("job %s failed" % first,
                           lambda n, d: n == "job" and d["id"] == first and d["state"] == "failed")])
    in_order(evs, second, [mark("a release"), release("a"), mark("b load"), mark("b run"),
                           mark("b release"), release("b")])
    # each sleep: stage a's `sleep` mark, its asleep release, then the
    # pipeline's; SLEEPS of them so that no lucky tick passes the old order
    steps = [mark("a sleep"), ("asleep release of a", lambda n, d: n == "release" and d.get(
        "asleep") and d["stage"] == "a"), mark("pipeline demo asleep")]
    seen = [w for _, n, d in evs for w, pred in steps if pred(n, d)]
    if seen != [w for w, _ in steps] * SLEEPS:
        fail("sleeping demo %d times: the stream's order is %s; expected %s each time" % (
            SLEEPS, seen, [w for w, _ in steps]))
    ids = [e[0] for e in evs[1:]]  # the hello's id is its snapshot's: replays follow it
    if ids != sorted(ids):
        fail("the event ids are not in order: %s" % ids)
    print("ok: the out-of-memory mark, the stages' marks and releases, asleep too, in the order made")


mode = sys.argv[1]
INPUT = sys.argv[3] if len(sys.argv) > 3 else None
if mode == "figures":
    figures()
elif mode == "resume":
    resume()
elif mode == "expired":
    expired()
elif mode == "submit":
    submit(int(sys.argv[4]))
elif mode == "hello":
    hello(sys.argv[3:])
elif mode == "order":
    order()
else:
    fail("unknown mode %s" % mode)
sys.exit(1 if fails else 0)
