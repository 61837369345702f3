#!/usr/bin/env python3
"""A worker that misbehaves on purpose, for tests/integration/worker_failures.sh.

usage: worker_bad.py MODE [PIDFILE]
MODE: crash-load | crash-run (SIGSEGV itself) | abort-run (SIGABRT) |
      hang-run (never answers run) | garbage-hello (answers hello with bytes
      that are not a frame of JSON) | oversized (announces a 1 GiB frame) |
      truncated (half a frame, then exits) | exit-early (exits 3 before
      hello) | bad-protocol (hello for protocol 99) | bad-result (a result
      item whose shared memory does not exist) | error-run (a clean
      EBB_EOOM error answer).
PIDFILE: the worker writes its pid there first (tests check it is gone).
"""
import json
import os
import signal
import socket
import struct
import sys
import time

mode = sys.argv[1]
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as f:
        f.write("%d\n" % os.getpid())
sock = socket.socket(fileno=int(os.environ["EBB_WORKER_FD"]))


def recv():
    hdr = b""
    while len(hdr) < 4:
        c = sock.recv(4 - len(hdr))
        if not c:
            sys.exit(0)
        hdr += c
    (n,) = struct.unpack("<I", hdr)
    body = b""
    while len(body) < n:
        body += sock.recv(n - len(body))
    return json.loads(body)


def send(msg):
    b = json.dumps(msg).encode()
    sock.sendall(struct.pack("<I", len(b)) + b)


if mode == "exit-early":
    sys.exit(3)
while True:
    m = recv()
    t = m["type"]
    if t == "hello":
        if mode == "garbage-hello":
            sock.sendall(struct.pack("<I", 11) + b"not json!!!")
            time.sleep(30)
        if mode == "oversized":
            sock.sendall(struct.pack("<I", 1 << 30) + b"{")
            time.sleep(30)
        if mode == "truncated":
            sock.sendall(struct.pack("<I", 100) + b'{"type": "hel')
            sys.exit(0)
        send({"type": "hello", "protocol": 99 if mode == "bad-protocol" else 1,
              "pid": os.getpid()})
    elif t == "load":
        if mode == "crash-load":
            os.kill(os.getpid(), signal.SIGSEGV)
        send({"type": "loaded"})
    elif t == "run":
        if mode == "crash-run":
            os.kill(os.getpid(), signal.SIGSEGV)
        if mode == "abort-run":
            os.abort()
        if mode == "hang-run":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                time.sleep(1)
        if mode == "error-run":
            send({"type": "error", "code": "EBB_EOOM", "message": "bad: no memory for this"})
            continue
        if mode == "bad-result":
            send({"type": "result", "items": [{"kind": "audio", "name": "x", "frames": 4,
                                               "channels": 1, "rate": 8000, "bytes": 16,
                                               "shm": m.get("shm_prefix", "nope") + "missing"}]})
            continue
        send({"type": "result", "items": []})
    elif t == "release":
        send({"type": "released"})
    elif t == "exit":
        send({"type": "bye"})
        sys.exit(0)
