"""The worker SDK (ebb.worker) against a host written here: hello, load,
run with an audio and a tensor item in /dev/shm (mapped, not copied: the
arrays' memory is the mapping), outputs made in place, errors as answers
(StageError codes, an exception with its line, an unknown message), release
and exit. Runs under both Pythons (NumPy arrays or memoryviews) from
tests/integration/python_worker_sdk.sh."""
import json
import mmap
import os
import socket
import struct
import sys
import threading

from ebb import worker
from ebb.worker import Stage, StageError, serve
from smi import Checks

c = Checks()
np = worker._np
print("python %s, NumPy %s" % (sys.version.split()[0], np.__version__ if np else "absent"))
seen = {}


class Probe(Stage):
    name = "probe"

    def load(self, options, ctx):
        if "bad" in options:
            raise StageError("EBB_ECONFIG", "probe: unknown option(s) bad")
        self.k = float(options.get("k", 2))

    def run(self, items, ctx):
        a, t = items["audio"], items["t"]
        seen["audio"], seen["t"] = a, t
        if "boom" in [i.name for i in items]:
            raise ZeroDivisionError("boom")
        ctx.log("got %d frames" % a.frames)
        out = ctx.new_tensor("t2", t.shape)
        if np is not None:
            out.data[...] = t.data * self.k
        else:
            for i, x in enumerate(t.data):
                out.data[i] = x * self.k
        return [out, ctx.json("sum", {"frames": a.frames, "first": float(a.data[0] if np is None
                                                                         else a.data[0, 0])})]


# The SDK's reader: frames that arrive in one chunk come back one by one,
# a frame larger than its 64 KiB buffer between them, whitespace around a
# body still parses, and EOF between frames is None.
a_, b_ = socket.socketpair()
conn = worker._Conn(os.dup(b_.fileno()))
frames = [{"type": "a", "n": 1}, {"type": "big", "s": "z" * 100000}, {"type": "c", "n": 3}]
blob = b"".join(struct.pack("<I", len(x)) + x for x in
                [json.dumps(f).encode() for f in frames] + [b' {"type": "d"} '])
threading.Thread(target=lambda: (a_.sendall(blob), a_.close())).start()
got = [conn.recv() for _ in range(4)]
c.check(got[:3] == frames and got[3] == {"type": "d"},
        "frames read back: %r" % [(g or {}).get("type") for g in got])
c.check(conn.recv() is None, "EOF between frames is not None")
conn.sock.close()
b_.close()

host, wsock = socket.socketpair()
th = threading.Thread(target=lambda: seen.update(status=serve(Probe, fd=wsock.fileno())))
th.start()


def send(msg):
    body = json.dumps(msg).encode()
    host.sendall(struct.pack("<I", len(body)) + body)


def recv():
    def rd(n):
        b = b""
        while len(b) < n:
            chunk = host.recv(n - len(b))
            assert chunk, "worker closed the socket"
            b += chunk
        return b
    (n,) = struct.unpack("<I", rd(4))
    return json.loads(rd(n))


def call(msg):
    send(msg)
    while True:
        r = recv()
        if r["type"] != "log":
            return r
        seen.setdefault("logs", []).append(r)


pid = os.getpid()
prefix = "ebb-sdktest-%d-" % pid
shm = []


def put(name, floats):
    path = "/dev/shm/" + prefix + name
    with open(path, "wb") as f:
        f.write(struct.pack("<%df" % len(floats), *floats))
    shm.append(path)
    return prefix + name


try:
    r = call({"type": "hello", "protocol": 1, "stage": "probe", "name": "p",
              "shm_prefix": prefix, "host_pid": pid})
    c.check(r["type"] == "hello" and r["protocol"] == 1 and r["pid"] == pid, "hello: %r" % r)
    r = call({"type": "load", "stage": "other", "options": {}})
    c.check(r["type"] == "error" and r["code"] == "EBB_ENOTFOUND", "wrong stage: %r" % r)
    r = call({"type": "load", "stage": "probe", "options": {"bad": 1}})
    c.check(r == {"type": "error", "code": "EBB_ECONFIG",
                  "message": "probe: unknown option(s) bad"}, "bad option: %r" % r)
    r = call({"type": "load", "stage": "probe", "options": {"k": 3}, "device": "cpu"})
    c.check(r["type"] == "loaded", "load: %r" % r)

    audio = put("a", [0.5, -0.5, 0.25, -0.25])  # 2 frames x 2 channels
    tens = put("t", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    items = [{"kind": "file", "name": "input", "path": "/x"},
             {"kind": "audio", "name": "audio", "frames": 2, "channels": 2, "rate": 8000,
              "shm": audio, "bytes": 16},
             {"kind": "tensor", "name": "t", "shape": [2, 3], "shm": tens, "bytes": 24}]
    r = call({"type": "run", "items": items})
    c.check(r["type"] == "result", "run: %r" % r)
    outs = {o["name"]: o for o in r.get("items", [])}
    c.check(set(outs) == {"t2", "sum"}, "outputs %r" % list(outs))
    if "t2" in outs:
        o = outs["t2"]
        c.check(o["shm"].startswith(prefix) and o["bytes"] == 24 and o["shape"] == [2, 3],
                "tensor output %r" % o)
        shm.append("/dev/shm/" + o["shm"])
        with open("/dev/shm/" + o["shm"], "rb") as f:
            vals = struct.unpack("<6f", f.read())
        c.check(vals == (3.0, 6.0, 9.0, 12.0, 15.0, 18.0), "tensor output values %r" % (vals,))
    if "sum" in outs:
        c.check(json.loads(outs["sum"]["text"]) == {"frames": 2, "first": 0.5}, "json %r" % outs["sum"])
    c.check([m["message"] for m in seen.get("logs", [])] == ["got 2 frames"], "logs %r" % seen.get("logs"))
    a, t = seen["audio"], seen["t"]
    if np is not None:  # mapped, not copied: the array's memory is the mmap
        c.check(a.data.shape == (2, 2) and t.data.shape == (2, 3), "shapes")
        b = t.data
        for _ in range(8):  # down the views to the buffer the array was made on
            if not isinstance(b, np.ndarray):
                break
            b = b.base
        b = b.obj if isinstance(b, memoryview) else b
        c.check(b is t._mm and isinstance(b, mmap.mmap), "tensor not mapped: base %r" % b)
        c.check(not t.data.flags.writeable, "input arrays must be read-only")
    else:
        c.check(isinstance(t.data, memoryview) and t.data.obj is t._mm, "tensor not mapped")
        c.check(t.data.readonly, "input views must be read-only")

    items.append({"kind": "json", "name": "boom", "text": "1"})
    r = call({"type": "run", "items": items})
    c.check(r["type"] == "error" and r["code"] == "EBB_ESTAGE" and "ZeroDivisionError: boom" in r["message"]
            and "worker_sdk_check.py:" in r["message"], "exception answer: %r" % r)
    r = call({"type": "dance"})
    c.check(r["type"] == "error" and r["code"] == "EBB_EPROTO", "unknown type: %r" % r)
    r = call({"type": "release"})
    c.check(r["type"] == "released" and r["released_bytes"] == 0, "release: %r" % r)
    r = call({"type": "exit"})
    c.check(r["type"] == "bye", "exit: %r" % r)
    th.join(10)
    c.check(not th.is_alive() and seen.get("status") == 0, "serve did not return 0 after exit")
finally:
    for p in shm:
        try:
            os.unlink(p)
        except OSError:
            pass
sys.exit(c.end("worker_sdk_check"))
