#!/usr/bin/env python3
"""A stage in Python, run by ebb as an isolated worker (docs/worker-protocol.md).

Stage "gain": multiplies an audio item by a gain and reports the RMS level
before and after. Options (JSON): "gain" (number, default 0.5), "item" (the
audio item to read, default "audio"). Outputs: audio "<item>_gain" and JSON
"gain" {"gain", "rms_in", "rms_out", "frames", "channels", "rate"}.

Standard library only. Used from a config like examples/workers/gain.json:
  {"stage": "gain", "worker": "./gain_worker.py", "options": {"gain": 0.25}}
"""
import array
import ctypes
import json
import math
import os
import signal
import socket
import struct
import sys

PROTOCOL = 1
MAX_FRAME = 16 << 20


def die_with_parent():
    """Exit when ebb does, even if it is SIGKILLed (Linux PR_SET_PDEATHSIG)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass
    parent = os.environ.get("EBB_WORKER_PARENT")
    if parent and int(parent) != os.getppid():  # ebb died before prctl
        sys.exit(1)


class Conn:
    """Frames: 4-byte little-endian length + UTF-8 JSON object."""

    def __init__(self, fd):
        self.sock = socket.socket(fileno=fd)

    def _read(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                if not buf:
                    return None
                raise EOFError("ebb closed the connection in the middle of a frame")
            buf += chunk
        return buf

    def recv(self):
        hdr = self._read(4)
        if hdr is None:
            return None  # ebb closed the connection: exit
        (n,) = struct.unpack("<I", hdr)
        if n == 0 or n > MAX_FRAME:
            raise ValueError("bad frame length %d" % n)
        return json.loads(self._read(n).decode("utf-8"))

    def send(self, msg):
        body = json.dumps(msg).encode("utf-8")
        self.sock.sendall(struct.pack("<I", len(body)) + body)


def shm_read_floats(name, nbytes):
    """A payload by reference: /dev/shm/NAME holds float32 samples."""
    with open("/dev/shm/" + name, "rb") as f:
        data = f.read(nbytes)
    a = array.array("f")
    a.frombytes(data)
    return a


def shm_write_floats(name, a):
    fd = os.open("/dev/shm/" + name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        os.write(fd, a.tobytes())
    finally:
        os.close(fd)
    return len(a) * 4


def rms(a):
    return math.sqrt(sum(x * x for x in a) / len(a)) if len(a) else 0.0


class GainStage:
    def __init__(self, options):
        self.gain = float(options.get("gain", 0.5))
        self.item = str(options.get("item", "audio"))
        unknown = set(options) - {"gain", "item"}
        if unknown:
            raise StageError("EBB_ECONFIG", "gain: unknown option(s) %s (known: gain, item)"
                             % ", ".join(sorted(unknown)))
        if not (0 <= self.gain <= 100):
            raise StageError("EBB_ECONFIG", "gain: option 'gain' must be in 0..100, got %g"
                             % self.gain)

    def run(self, items, new_shm_name):
        src = next((it for it in items if it["name"] == self.item and it["kind"] == "audio"),
                   None)
        if src is None:
            raise StageError("EBB_EINPUT", "gain: no audio item named '%s' (items: %s)"
                             % (self.item, ", ".join(it["name"] for it in items)))
        a = shm_read_floats(src["shm"], src["bytes"]) if src["bytes"] else array.array("f")
        out = array.array("f", (x * self.gain for x in a))
        name = new_shm_name()
        nbytes = shm_write_floats(name, out)
        report = {"gain": self.gain, "rms_in": rms(a), "rms_out": rms(out),
                  "frames": src["frames"], "channels": src["channels"], "rate": src["rate"]}
        return [
            {"kind": "audio", "name": self.item + "_gain", "frames": src["frames"],
             "channels": src["channels"], "rate": src["rate"], "shm": name, "bytes": nbytes},
            {"kind": "json", "name": "gain", "text": json.dumps(report)},
        ]


class StageError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def main():
    fd = os.environ.get("EBB_WORKER_FD")
    if fd is None:
        print("gain_worker.py: EBB_WORKER_FD is not set: ebb starts this program itself",
              file=sys.stderr)
        return 2
    die_with_parent()
    conn = Conn(int(fd))
    stage, prefix, seq = None, "ebb-gain-", [0]

    def new_shm_name():
        seq[0] += 1
        return "%so%d" % (prefix, seq[0])

    while True:
        msg = conn.recv()
        if msg is None:
            return 0
        t = msg.get("type")
        try:
            if t == "hello":
                prefix = msg.get("shm_prefix", prefix)
                conn.send({"type": "hello", "protocol": PROTOCOL, "worker": "gain_worker.py",
                           "version": "1", "pid": os.getpid(),
                           "capabilities": {"items": ["audio", "json", "file"],
                                            "devices": ["cpu"]}})
            elif t == "load":
                if msg.get("stage") != "gain":
                    raise StageError("EBB_ENOTFOUND", "gain_worker.py runs stage 'gain', not '%s'"
                                     % msg.get("stage"))
                stage = GainStage(msg.get("options") or {})
                conn.send({"type": "loaded", "memory": {"peak_bytes": 0}})
            elif t == "run":
                outs = stage.run(msg.get("items", []), new_shm_name)
                conn.send({"type": "result", "items": outs, "memory": {"peak_bytes": 0}})
            elif t == "release":
                conn.send({"type": "released", "released_bytes": 0})
            elif t == "exit":
                conn.send({"type": "bye", "released_bytes": 0})
                return 0
            else:
                raise StageError("EBB_EPROTO", "unknown message type %r" % t)
        except StageError as e:
            conn.send({"type": "error", "code": e.code, "message": e.message})


if __name__ == "__main__":
    sys.exit(main())
