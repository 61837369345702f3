#!/usr/bin/env python3
"""GET /v1/events against a running server (server_events.sh starts it with
EBB_EVENTS_INTERVAL_MS=10, EBB_EVENTS_CLIENT_BUFFER=8192,
EBB_EVENTS_MAX_CLIENTS=4):

- the stream starts with `hello` (devices, pipelines, jobs, sessions, leaks);
- a job's events: `job` queued/running/succeeded, `memory` samples whose
  owners reach the stage's weights, one `release` per stage with the bytes
  and stage GET /v1/jobs/ID reports, the stage marks, the leak with its site;
- a reader that stops reading is dropped: when it reads again it finds one
  `dropped` event and the end of its stream, while a reading client goes on;
- a fifth client gets 503 too_many_clients; a slot frees when a client goes.

Usage: server_events.py URL INPUT. Every wait is bounded."""
import json
import os
import socket
import sys
import time
from urllib.parse import urlparse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from apitest import client, fail, fails  # noqa: E402

URL, INPUT = sys.argv[1], sys.argv[2]
HOST, PORT = urlparse(URL).hostname, urlparse(URL).port
api = client(URL)


class Stream:
    """A raw HTTP/1.1 GET /v1/events; rcvbuf shrinks the socket's buffer."""

    def __init__(self, rcvbuf=None):
        self.s = socket.socket()
        if rcvbuf:
            self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.s.settimeout(10)
        self.s.connect((HOST, PORT))
        self.s.sendall(b"GET /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
        self.raw = b""
        self.closed = False

    def read_some(self, timeout=1.0):
        self.s.settimeout(timeout)
        try:
            b = self.s.recv(65536)
            if not b:
                self.closed = True
            self.raw += b
        except socket.timeout:
            pass
        except ConnectionError:
            self.closed = True

    def status(self):
        line = self.raw.split(b"\r\n", 1)[0].decode(errors="replace")
        return int(line.split()[1]) if line.startswith("HTTP/") else None

    def events(self):
        """(name, data) of every complete event so far (chunk framing is
        stripped by keeping only SSE lines)."""
        body = self.raw.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in self.raw else b""
        out, name = [], None
        for line in body.decode(errors="replace").splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name:
                try:
                    out.append((name, json.loads(line[6:])))
                except ValueError:
                    pass  # a line split by chunk framing; complete events parse
                name = None
        return out

    def close(self):
        self.s.close()


# --- hello -------------------------------------------------------------------
a = Stream()
for _ in range(50):
    a.read_some(0.2)
    if a.events():
        break
if a.status() != 200:
    fail("GET /v1/events: status %s: %r" % (a.status(), a.raw[:300]))
if b"content-type: text/event-stream" not in a.raw.lower():
    fail("GET /v1/events: no text/event-stream content type: %r" % a.raw[:300])
ev = a.events()
if not ev or ev[0][0] != "hello":
    fail("the first event is not hello: %r" % ev[:1])
else:
    h = ev[0][1]
    for k in ("version", "interval_ms", "devices", "pipelines", "jobs", "sessions", "leaks"):
        if k not in h:
            fail("hello lacks %s: %s" % (k, h))
    if h.get("devices") and h["devices"][0].get("device") != "cuda:0":
        fail("hello devices: %s" % h["devices"])

# --- a slow reader: never reads, tiny receive buffer ------------------------
slow = Stream(rcvbuf=2048)

# --- a job ---------------------------------------------------------------------
code, body = api("POST", "/v1/jobs", {"pipeline": "demo", "input": INPUT})
if code != 202:
    fail("POST /v1/jobs: %d %s" % (code, body))
    sys.exit(1)
jid = body["id"]
done = None
for _ in range(300):
    a.read_some(0.1)
    done = [d for n, d in a.events() if n == "job" and d["id"] == jid and d["state"] == "succeeded"]
    if done:
        break
if not done:
    fail("no job event saying job %s succeeded; job events: %s" % (
        jid, [d for n, d in a.events() if n == "job"]))
    sys.exit(1)
_, job = api("GET", "/v1/jobs/%s" % jid)
evs = a.events()
states = [d["state"] for n, d in evs if n == "job" and d["id"] == jid]
if states[:1] not in (["queued"], ["running"]) or states[-1] != "succeeded":
    fail("job %s states in events: %s" % (jid, states))
rel = [(d["stage"], d["bytes"]) for n, d in evs if n == "release"]
for st in job["stages"]:
    if st["released_bytes"] and (st["name"], st["released_bytes"]) not in rel:
        fail("no release event of %d bytes for stage %s; releases: %s" % (
            st["released_bytes"], st["name"], rel))
jstages = {s["name"]: s for s in done[0]["stages"]}
for name, mib in (("a", 96), ("b", 192)):
    pk = (jstages.get(name) or {}).get("peak_bytes") or 0
    if pk < mib << 20:
        fail("job event: stage %s peak %s < %d MiB: %s" % (name, pk, mib, done[0]))
peaks = {}
for n, d in evs:
    if n == "memory":
        for o in d["owners"]:
            peaks[o["owner"]] = max(peaks.get(o["owner"], 0), o["peak"])
            if o["pipeline"] != "demo" and not o["owner"].startswith("job "):
                fail("owner %s has pipeline %s, expected demo" % (o["owner"], o["pipeline"]))
if peaks.get("a", 0) < 96 << 20 or peaks.get("b", 0) < 192 << 20:
    fail("memory events' owner peaks %s below the stages' weights + activations" % peaks)
marks = [d["label"] for n, d in evs if n == "mark"]
for m in ("a load", "a run", "a release", "b load"):
    if m not in marks:
        fail("no mark %r in %s" % (m, marks))
leak = []
for _ in range(50):
    leak = [d for n, d in a.events() if n == "leak" and d["owner"] == "b"]
    if leak:
        break
    a.read_some(0.1)
if not leak:
    fail("no leak event for stage b")
elif leak[0]["bytes"] != 4 << 20 or "synthetic.c" not in json.dumps(leak[0]["sites"]):
    fail("leak event: %s" % leak[0])

# --- the client cap: a, slow + 2 more = 4; the fifth is refused ------------------
extra = [Stream(), Stream()]
for s in extra:
    for _ in range(50):
        s.read_some(0.1)
        if s.events():
            break
fifth = Stream()
for _ in range(50):
    fifth.read_some(0.1)
    if b"\r\n\r\n" in fifth.raw and fifth.status() is not None and fifth.status() != 200:
        break
if fifth.status() != 503 or b"too_many_clients" not in fifth.raw:
    fail("a fifth client: expected 503 too_many_clients, got %r" % fifth.raw[:300])
fifth.close()
extra[0].close()
again = None
for _ in range(40):  # the closed client's slot frees when its thread notices
    time.sleep(0.5)
    s = Stream()
    s.read_some(0.5)
    if s.status() == 200:
        again = s
        break
    s.close()
if not again:
    fail("no slot freed after a client closed")
else:
    again.close()

# --- the slow reader was dropped ---------------------------------------------------
time.sleep(2)
for _ in range(300):
    slow.read_some(0.1)
    if slow.closed:
        break
names = [n for n, _ in slow.events()]
if "dropped" not in names:
    fail("the slow reader got no dropped event (got %d events, %d bytes)" % (
        len(names), len(slow.raw)))
elif names[-1] != "dropped":
    fail("events after dropped: %s" % names[names.index("dropped"):][:5])
if not slow.closed:
    fail("the slow reader's stream did not end after dropped")
# the reading client is still served
n0 = len(a.events())
for _ in range(20):
    a.read_some(0.1)
if len(a.events()) <= n0:
    fail("the reading client stopped getting events")
a.close()
extra[1].close()
slow.close()
if fails:
    sys.exit(1)
print("ok: hello, job events, release/mark/leak events, slow reader dropped, client cap")
