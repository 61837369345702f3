#!/usr/bin/env python3
"""GET /v1/events against a server driving two fake devices (server_events.sh
starts it with --devices cuda:0,cuda:1 on FAKEGPU_MEMORY_MIB=4096,3072;
'other' pinned to cuda:1, 'demo' to cuda:0):

- hello lists both devices with their totals;
- every per-device event names its device: `memory` samples of both devices,
  o only on cuda:1 and a, b only on cuda:0; each device's last sample
  (owners, driver total and used) matches that device in GET /v1/memory;
  marks of loads on the device that loaded;
- unloading demo: `release` events on cuda:0 naming a and b, adding up to
  the bytes the unload answers; the leak of b on cuda:0;
- sleeping other (on cuda:1, not the first device): o's bytes are
  `asleep_bytes` (reserved 0, as /v1/memory says), a `release` with "asleep": true of o's bytes, the 'pipeline other
  asleep' mark on cuda:1, the pipeline asleep on cuda:1; waking: the 'woke'
  mark, nothing asleep.

Usage: server_events_devices.py URL INPUT. Every wait is bounded."""
import json
import os
import sys
import threading
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import apitest  # noqa: E402
from apitest import client, fail, fails  # noqa: E402

URL, INPUT = sys.argv[1], sys.argv[2]
MiB = 1 << 20
api = client(URL)


class Reader(threading.Thread):
    """Reads the stream on a thread of its own (never slow enough to be
    dropped while the test waits on the API)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.events, self.lock, self.stop = [], threading.Lock(), False
        self.r = urllib.request.urlopen(URL + "/v1/events", timeout=30)

    def run(self):
        name = None
        while not self.stop:
            line = self.r.readline()
            if not line:
                break
            line = line.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name:
                with self.lock:
                    self.events.append((name, json.loads(line[6:])))
                name = None

    def all(self, name=None, device=None):
        with self.lock:
            return [d for n, d in self.events if (name is None or n == name)
                    and (device is None or d.get("device") == device)]


def until(what, fn, tries=200, pause=0.05):
    return apitest.until(what, fn, tries, pause)


def mem_devices():
    _, m = api("GET", "/v1/memory")
    return {d["label"]: d for d in m["devices"]}


rd = Reader()
rd.start()
hello = until("hello", lambda: rd.all("hello"))
if hello:
    got = [(d["device"], d["total_bytes"]) for d in hello[0]["devices"]]
    if got != [("cuda:0", 4096 * MiB), ("cuda:1", 3072 * MiB)]:
        fail("hello devices %s, expected cuda:0 of 4096 MiB and cuda:1 of 3072 MiB" % got)

code, body = api("POST", "/v1/pipelines/other/load")
if code != 200 or body.get("device") != "cuda:1":
    fail("loading other: HTTP %d %s" % (code, body))
code, body = api("POST", "/v1/jobs", {"pipeline": "demo", "input": INPUT})
if code != 202:
    fail("POST /v1/jobs: %d %s" % (code, body))
    sys.exit(1)
jid = body["id"]
if not until("job %s to succeed" % jid, lambda: [d for d in rd.all("job")
                                                 if d["id"] == jid and d["state"] == "succeeded"],
             tries=400):
    sys.exit(1)

# owners by device
where = {}
for d in rd.all("memory"):
    for o in d["owners"]:
        if not o["owner"].startswith("job "):
            where.setdefault(o["owner"], set()).add(d["device"])
if where.get("o") != {"cuda:1"} or where.get("a") != {"cuda:0"} or where.get("b") != {"cuda:0"}:
    fail("owners by device in the memory events: %s (expected o on cuda:1, a and b on cuda:0)"
         % where)
marks = {(d["device"], d["label"]) for d in rd.all("mark")}
for m in (("cuda:1", "o load"), ("cuda:0", "a load"), ("cuda:0", "b load"),
          ("cuda:1", "pipeline other loaded"), ("cuda:0", "pipeline demo loaded")):
    if m not in marks:
        fail("no mark %r on %s; marks: %s" % (m[1], m[0], sorted(marks)))

# each device's last sample == /v1/memory (retried until both tell one moment)
last = {}


def samples_match():
    devs = mem_devices()
    ok = True
    for label, d in devs.items():
        s = rd.all("memory", label)
        if not s:
            return False
        s = s[-1]
        want = {o["name"]: o["bytes"] for o in d["owners"] if not o["name"].startswith("job ")}
        got = {o["owner"]: o["bytes"] for o in s["owners"]
               if o["bytes"] and not o["owner"].startswith("job ")}
        dv = d["device"]
        used = dv["driver_total_bytes"] - dv["driver_free_bytes"]
        last[label] = dict(memory=(want, used, dv["driver_total_bytes"]),
                           event=(got, s["driver_used_bytes"], s["driver_total_bytes"]))
        ok &= (want == got and used == s["driver_used_bytes"]
               and dv["driver_total_bytes"] == s["driver_total_bytes"])
    return ok


if not until("each device's memory event to match /v1/memory", samples_match):
    fail("per device (/v1/memory vs the last memory event): %s" % last)

# unload demo: cuda:0's releases add up to the unload's answer
n_before = len(rd.all("release", "cuda:0"))
code, unl = api("POST", "/v1/pipelines/demo/unload")
if code != 200:
    fail("unloading demo: HTTP %d %s" % (code, unl))
else:
    def unload_releases():
        new = rd.all("release", "cuda:0")[n_before:]
        last["unload"] = new
        return (sum(r["bytes"] for r in new) == unl["released_bytes"]
                and {"a", "b"} <= {r["stage"] for r in new})
    if not until("release events on cuda:0 naming a and b adding up to the unload's %d bytes"
                 % unl["released_bytes"], unload_releases):
        fail("releases on cuda:0 after the unload: %s" % last.get("unload"))
    if [r for r in rd.all("release", "cuda:1")[:] if r.get("stage") in ("a", "b")]:
        fail("a release of a demo stage on cuda:1: %s" % rd.all("release", "cuda:1"))
leak = until("the leak of b", lambda: [d for d in rd.all("leak") if d["owner"] == "b"])
if leak and leak[0]["device"] != "cuda:0":
    fail("the leak of b names device %s, not cuda:0: %s" % (leak[0]["device"], leak[0]))

# sleep other: asleep, not on the device
code, slp = api("POST", "/v1/pipelines/other/sleep")
if code != 200 or slp.get("device") != "cuda:1":
    fail("sleeping other (on cuda:1): HTTP %d %s" % (code, slp))


def asleep_seen():
    s = [d for d in rd.all("memory", "cuda:1")
         if [o for o in d["owners"] if o["owner"] == "o" and o["asleep_bytes"] == o["bytes"] > 0]]
    rel = [r for r in rd.all("release", "cuda:1") if r.get("asleep") and r.get("stage") == "o"]
    mk = ("cuda:1", "pipeline other asleep") in {(d["device"], d["label"]) for d in rd.all("mark")}
    pl = [p for d in rd.all("pipelines") for p in d["pipelines"]
          if p["name"] == "other" and p["asleep"] and p["asleep_devices"] == ["cuda:1"]]
    last["asleep"] = dict(sample=s[-1:] or rd.all("memory", "cuda:1")[-1:], release=rel, mark=mk,
                          pipelines=bool(pl))
    return s and rel and mk and pl and (s, rel)


got = until("o asleep on cuda:1 (asleep_bytes, an asleep release, the mark, the pipeline)",
            asleep_seen)
if not got:
    fail("asleep: %s" % last.get("asleep"))
else:
    s, rel = got
    o = [o for o in s[-1]["owners"] if o["owner"] == "o"][0]
    if rel[0]["bytes"] != o["bytes"]:
        fail("the asleep release has %d bytes, o holds %d" % (rel[0]["bytes"], o["bytes"]))
    if s[-1]["asleep_bytes"] != o["bytes"]:
        fail("the sample's asleep_bytes %d != o's %d" % (s[-1]["asleep_bytes"], o["bytes"]))

    def memory_agrees():
        d = mem_devices()["cuda:1"]
        ev = rd.all("memory", "cuda:1")[-1]
        mo = {x["name"]: x["bytes"] for x in d["owners"]}
        eo = [x for x in ev["owners"] if x["owner"] == "o"]
        last["asleep_memory"] = dict(memory=(mo, d["allocator"]["reserved_bytes"]),
                                     event=(eo, ev["reserved_bytes"]))
        return (eo and mo.get("o") == eo[0]["bytes"] == eo[0]["asleep_bytes"]
                and d["allocator"]["reserved_bytes"] == ev["reserved_bytes"] == 0)
    if not until("/v1/memory and the events to agree on asleep o (its bytes, reserved 0)",
                 memory_agrees):
        fail("asleep o: %s" % last.get("asleep_memory"))

code, wk = api("POST", "/v1/pipelines/other/wake")
if code != 200:
    fail("waking other: HTTP %d %s" % (code, wk))
if not until("the woke mark and o on cuda:1 again", lambda: (
        ("cuda:1", "pipeline other woke") in {(d["device"], d["label"]) for d in rd.all("mark")}
        and [o for o in rd.all("memory", "cuda:1")[-1]["owners"]
             if o["owner"] == "o" and o["bytes"] and not o["asleep_bytes"]])):
    fail("after the wake: last cuda:1 sample %s" % rd.all("memory", "cuda:1")[-1:])
rd.stop = True
if fails:
    sys.exit(1)
print("ok: two devices: hello, owners and figures per device as /v1/memory, releases, "
      "leak, asleep and woke")
