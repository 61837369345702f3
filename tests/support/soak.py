#!/usr/bin/env python3
"""The bounded soak of ebb serve (tests/integration/server_soak.sh).

  soak.py PORT SERVER_PID JOBS INPUT_FILE

Holds 1100 idle sockets (from 20 loopback addresses) and 300 slow-loris
sockets (one header byte a second, from 5 more), sends 6 concurrent
multipart requests with a 64 MiB "options" field, queues JOBS jobs (uploads),
then measures /healthz (worst of 20) and the server's RSS while all of that
is held, and waits (bounded) for every job to succeed. Prints key=value
lines; the shell test judges them."""
import json
import resource
import socket
import sys
import threading
import time

port, pid, njobs, infile = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1600:
    print("error=RLIMIT_NOFILE too low for 1400 sockets: %s" % (resource.getrlimit(resource.RLIMIT_NOFILE),))
    sys.exit(0)


def conn(src="127.0.0.1", timeout=10):
    s = socket.socket()
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def request(raw, src="127.0.0.1"):
    s = conn(src)
    s.sendall(raw)
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), body


def healthz_ms():
    t0 = time.time()
    st, _ = request(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    return (time.time() - t0) * 1000, st.startswith("HTTP/1.1 200")


def rss_mib():
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return -1


# 1100 idle + 300 slow loris
idle = [conn("127.0.1.%d" % (10 + i % 20)) for i in range(1100)]
loris = [conn("127.0.2.%d" % (10 + i % 5)) for i in range(300)]
for s in loris:
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
stop = threading.Event()


def drip():
    while not stop.is_set():
        for s in loris:
            try:
                s.sendall(b"a")
            except OSError:
                pass
        stop.wait(1.0)


threading.Thread(target=drip, daemon=True).start()

# 6 concurrent 64 MiB option fields
big_status = []


def big_field():
    boundary = "soakboundary"
    head = ("--%s\r\nContent-Disposition: form-data; name=\"options\"\r\n\r\n" % boundary).encode()
    total = len(head) + (64 << 20) + 64
    s = conn(timeout=30)
    s.sendall(("POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; "
               "boundary=%s\r\nContent-Length: %d\r\n\r\n" % (boundary, total)).encode() + head)
    chunk = b"{" + b" " * (1 << 20)
    sent = 0
    try:
        while sent < (64 << 20):
            s.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    try:
        data = s.recv(65536)
    except OSError:
        data = b""
    big_status.append(data.split(b"\r\n")[0].decode() or "closed")
    s.close()


bigs = [threading.Thread(target=big_field) for _ in range(6)]
for t in bigs:
    t.start()

# JOBS queued jobs (raw uploads)
payload = open(infile, "rb").read()
ids = []
for i in range(njobs):
    st, body = request(("POST /v1/jobs?pipeline=tiny HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        "Content-Type: application/octet-stream\r\nContent-Length: %d\r\n"
                        "Connection: close\r\n\r\n" % len(payload)).encode() + payload)
    if st.startswith("HTTP/1.1 202"):
        ids.append(json.loads(body)["id"])
print("jobs_accepted=%d" % len(ids))

for t in bigs:
    t.join(60)
print("big_fields=%s" % ";".join(sorted(big_status)))
open_idle = 0
for s in idle:
    s.settimeout(0.001)
    try:
        open_idle += s.recv(1) != b""
    except socket.timeout:
        open_idle += 1
    except OSError:
        pass
print("idle_still_open=%d" % open_idle)
worst, bad = 0.0, 0
for _ in range(20):
    ms, ok = healthz_ms()
    worst = max(worst, ms)
    bad += not ok
    time.sleep(0.05)
print("healthz_worst_ms=%.1f" % worst)
print("healthz_failed=%d" % bad)
print("rss_mib_loaded=%d" % rss_mib())

deadline = time.time() + 240
left = list(ids)
while left and time.time() < deadline:
    st, body = request(("GET /v1/jobs/%s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                        % left[0]).encode())
    state = json.loads(body).get("state") if body else None
    if state == "succeeded":
        left.pop(0)
    elif state in ("failed", "cancelled"):
        print("job_failed=%s %s" % (left[0], body.decode()[:300]))
        left.pop(0)
    else:
        time.sleep(0.2)
print("jobs_left=%d" % len(left))
stop.set()
for s in idle + loris:
    s.close()
print("rss_mib_end=%d" % rss_mib())
