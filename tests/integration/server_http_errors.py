#!/usr/bin/env python3
"""server_http_errors: every malformed request gets a JSON error (see
server_http_errors.sh). Raw sockets: these are requests no HTTP client sends.

  server_http_errors.py PORT

Each case sends one request and checks the status, `Content-Type:
application/json`, `{"error": {"code", "message"}}` with the expected code
and a message that names the problem. Prints one FAIL line per broken check
and exits 1 if there was any."""
import json
import socket
import sys

PORT = int(sys.argv[1])
fails = []


def exchange(raw, first=None):
    """Sends first (a good request, answered and read) then raw on one
    connection; returns the bytes of raw's answer (bounded reads)."""
    s = socket.create_connection(("127.0.0.1", PORT), timeout=10)
    try:
        if first:
            s.sendall(first)
            got = b""
            for _ in range(100):
                if b"\r\n\r\n" in got:
                    head, _, body = got.partition(b"\r\n\r\n")
                    n = [int(l.split(b":")[1]) for l in head.split(b"\r\n")
                         if l.lower().startswith(b"content-length:")]
                    if n and len(body) >= n[0]:
                        break
                b = s.recv(65536)
                if not b:
                    break
                got += b
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered (and closed) before all of it went
        data = b""
        for _ in range(10000):
            try:
                b = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not b:
                break
            data += b
        return data
    finally:
        s.close()


def parse(data):
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else ""
    hdrs = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs, body


def check(name, raw, status, code, words, first=None):
    data = exchange(raw, first)
    if not data:
        fails.append("%s: no answer (connection closed)" % name)
        return
    st, hdrs, body = parse(data)
    what = "%s: answer %r" % (name, data[:300])
    if st != str(status):
        fails.append("%s: HTTP %s, expected %d (%s)" % (name, st, status, what))
    if not hdrs.get("content-type", "").startswith("application/json"):
        fails.append("%s: Content-Type %r, expected application/json (%s)"
                     % (name, hdrs.get("content-type"), what))
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        fails.append("%s: the body is not {\"error\": ...} JSON (%s)" % (name, what))
        return
    if err.get("code") != code:
        fails.append("%s: error code %r, expected %r" % (name, err.get("code"), code))
    msg = str(err.get("message", "")).lower()
    for w in words:
        if w.lower() not in msg:
            fails.append("%s: the message %r does not name %r" % (name, msg, w))
    if hdrs.get("connection", "").lower() != "close":
        fails.append("%s: no 'Connection: close' on an answer that ends the connection" % name)
    print("ok %-28s %s %s" % (name, st, body.decode("latin-1").strip()[:110]))


H = b"Host: 127.0.0.1\r\n"
JT = b"Content-Type: application/json\r\n"
GOOD = b"GET /healthz HTTP/1.1\r\n" + H + b"\r\n"

# the head: request line, version, Host, header lines, sizes
check("uri too long (414)", b"GET /" + b"a" * 40000 + b" HTTP/1.1\r\n" + H + b"\r\n",
      414, "uri_too_long", ["request line"])
check("header too large (431)",
      b"GET /healthz HTTP/1.1\r\n" + H + b"X-Big: " + b"b" * 40000 + b"\r\n\r\n",
      431, "headers_too_large", ["headers"])
check("many headers (431)",
      b"GET /healthz HTTP/1.1\r\n" + H + b"".join(b"X-H%d: v\r\n" % i for i in range(4000)) +
      b"\r\n", 431, "headers_too_large", ["headers"])
check("no Host on HTTP/1.1 (400)", b"GET /healthz HTTP/1.1\r\n\r\n",
      400, "bad_request", ["Host"])
check("bad header line (400)", b"GET /healthz HTTP/1.1\r\n" + H + b"NoColonHere\r\n\r\n",
      400, "bad_request", ["malformed"])
check("bad version token (400)", b"GET /healthz HTTX/1.1\r\n" + H + b"\r\n",
      400, "bad_request", ["malformed"])
check("no version (400)", b"GET /healthz\r\n" + H + b"\r\n",
      400, "bad_request", ["malformed"])
check("HTTP/2.0 (505)", b"GET /healthz HTTP/2.0\r\n" + H + b"\r\n",
      505, "http_version_not_supported", ["HTTP/1.1"])
check("HTTP/0.9 (505)", b"GET /healthz HTTP/0.9\r\n" + H + b"\r\n",
      505, "http_version_not_supported", ["HTTP/1.1"])
# the body's framing
check("Content-Length overflow (413)",
      b"POST /v1/jobs HTTP/1.1\r\n" + H + JT + b"Content-Length: 99999999999999999999999\r\n\r\n",
      413, "body_too_large", ["Content-Length"])
check("Content-Length not a number (400)",
      b"POST /v1/jobs HTTP/1.1\r\n" + H + JT + b"Content-Length: 12abc\r\n\r\n",
      400, "bad_request", ["Content-Length"])
check("chunked malformed (400)",
      b"POST /v1/jobs HTTP/1.1\r\n" + H + JT + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
      400, "bad_request", ["chunked"])
check("chunk size too large (413)",
      b"POST /v1/jobs HTTP/1.1\r\n" + H + JT + b"Transfer-Encoding: chunked\r\n\r\n" +
      b"F" * 40 + b"\r\n{}\r\n", 413, "body_too_large", ["chunk"])
# a second request on a kept-alive connection is checked the same way
check("keep-alive, then HTTP/3.0 (505)", b"GET /healthz HTTP/3.0\r\n" + H + b"\r\n",
      505, "http_version_not_supported", ["HTTP/1.1"], first=GOOD)
check("keep-alive, then no Host (400)", b"GET /healthz HTTP/1.1\r\n\r\n",
      400, "bad_request", ["Host"], first=GOOD)
# HEAD: the same status and headers, no body
d = exchange(b"HEAD /healthz HTTP/2.0\r\n" + H + b"\r\n")
st, hdrs, body = parse(d)
if st != "505" or not hdrs.get("content-type", "").startswith("application/json"):
    fails.append("HEAD with HTTP/2.0: %r" % d[:300])
# a line with no space at all is no request: libmicrohttpd closes without an
# answer; whatever comes back must not be HTML
d = exchange(b"GARBAGE\r\n\r\n")
if b"<html" in d.lower():
    fails.append("a request line with no space got HTML: %r" % d[:300])
# the server is still there and well
st, hdrs, body = parse(exchange(b"GET /healthz HTTP/1.1\r\n" + H + b"Connection: close\r\n\r\n"))
if st != "200" or b'"ok"' not in body:
    fails.append("/healthz after the malformed requests: HTTP %s %r" % (st, body))
# HTTP/1.0 without Host is a good request
st, hdrs, body = parse(exchange(b"GET /healthz HTTP/1.0\r\n\r\n"))
if st != "200":
    fails.append("HTTP/1.0 without Host: HTTP %s %r (expected 200)" % (st, body))

for f in fails:
    print("FAIL: " + f)
sys.exit(1 if fails else 0)
