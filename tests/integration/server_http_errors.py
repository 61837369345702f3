#!/usr/bin/env python3
"""server_http_errors: every malformed request gets the answer docs/api.md
("Errors") documents (see server_http_errors.sh). Raw sockets: these are
requests no HTTP client sends.

  server_http_errors.py PORT

Two kinds of answer:
 - ebb's own (check): the status, `Content-Type: application/json`,
   `{"error": {"code", "message"}}` with the expected code and a message
   that names the problem;
 - libmicrohttpd's (check_mhd), for what it refuses before ebb sees the
   request: the status and `Connection: close` (its body is its own HTML).
Every one of them closes the connection: a request sent behind it on the
same connection is not answered. Prints one FAIL line per broken check and
exits 1 if there was any."""
import json
import socket
import sys

PORT = int(sys.argv[1])
fails = []


def exchange(raw, first=None, closed=None):
    """Sends first (a good request, answered and read) then raw on one
    connection; returns the bytes of raw's answer (bounded reads). closed
    (a list) gets whether the server closed the connection within 5 s."""
    s = socket.create_connection(("127.0.0.1", PORT), timeout=5)
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
        data, eof = b"", False
        for _ in range(10000):
            try:
                b = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                eof = True
                break
            if not b:
                eof = True
                break
            data += b
        if closed is not None:
            closed.append(eof)
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


# A request sent behind a malformed one on the same connection: never answered.
BEHIND = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


def answered_and_closed(name, raw, status, first):
    """Sends raw + BEHIND; checks the status, one answer, Connection: close
    and the end of the connection. Returns (status, headers, body) or None."""
    closed = []
    data = exchange(raw + BEHIND, first, closed)
    if not data:
        fails.append("%s: no answer (connection closed)" % name)
        return None
    st, hdrs, body = parse(data)
    what = "%s: answer %r" % (name, data[:300])
    if st != str(status):
        fails.append("%s: HTTP %s, expected %d (%s)" % (name, st, status, what))
    if hdrs.get("connection", "").lower() != "close":
        fails.append("%s: no 'Connection: close' on an answer that ends the connection" % name)
    if not closed or not closed[0]:
        fails.append("%s: the server kept the connection open" % name)
    if b'{"status":"ok"}' in data:
        fails.append("%s: the request sent behind it was answered too (%s)" % (name, what))
    return st, hdrs, body


def check_mhd(name, raw, status, first=None):
    """libmicrohttpd's own answer (docs/api.md): the status, closed."""
    got = answered_and_closed(name, raw, status, first)
    if got:
        print("ok %-28s %s (libmicrohttpd's answer)" % (name, got[0]))


def check(name, raw, status, code, words, first=None):
    got = answered_and_closed(name, raw, status, first)
    if not got:
        return
    st, hdrs, body = got
    what = "%s: answer %r" % (name, body[:300])
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
    print("ok %-28s %s %s" % (name, st, body.decode("latin-1").strip()[:110]))


H = b"Host: 127.0.0.1\r\n"
JT = b"Content-Type: application/json\r\n"
GOOD = b"GET /healthz HTTP/1.1\r\n" + H + b"\r\n"

# the head: request line, version, Host, header lines, sizes (libmicrohttpd)
check_mhd("uri too long (414)", b"GET /" + b"a" * 40000 + b" HTTP/1.1\r\n" + H + b"\r\n", 414)
check_mhd("header too large (431)",
          b"GET /healthz HTTP/1.1\r\n" + H + b"X-Big: " + b"b" * 40000 + b"\r\n\r\n", 431)
check_mhd("many headers (431)",
          b"GET /healthz HTTP/1.1\r\n" + H + b"".join(b"X-H%d: v\r\n" % i for i in range(4000)) +
          b"\r\n", 431)
check("no Host on HTTP/1.1 (400)", b"GET /healthz HTTP/1.1\r\n\r\n",
      400, "bad_request", ["Host"])
check_mhd("bad header line (400)", b"GET /healthz HTTP/1.1\r\n" + H + b"NoColonHere\r\n\r\n", 400)
check_mhd("bad version token (400)", b"GET /healthz HTTX/1.1\r\n" + H + b"\r\n", 400)
check_mhd("no version (400)", b"GET /healthz\r\n" + H + b"\r\n", 400)
check_mhd("HTTP/2.0 (505)", b"GET /healthz HTTP/2.0\r\n" + H + b"\r\n", 505)
check_mhd("HTTP/0.9 (505)", b"GET /healthz HTTP/0.9\r\n" + H + b"\r\n", 505)
# the body's framing (RFC 9112): ebb's own checks, then libmicrohttpd's
check("Content-Length with Transfer-Encoding (400)",
      b"POST /v1/jobs HTTP/1.1\r\n" + H + JT + b"Content-Length: 5\r\n"
      b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "bad_request",
      ["Content-Length", "Transfer-Encoding"])
check("Transfer-Encoding then Content-Length (400)",
      b"POST /v1/jobs HTTP/1.1\r\n" + H + JT + b"Transfer-Encoding: chunked\r\n"
      b"Content-Length: 5\r\n\r\n0\r\n\r\n", 400, "bad_request", ["Transfer-Encoding"])
check("space before a header colon (400)",
      b"POST /v1/jobs HTTP/1.1\r\n" + H + JT + b"Content-Length : 2\r\n\r\n{}",
      400, "bad_request", ["Content-Length", "colon"])
check("tab before a header colon (400)",
      b"GET /healthz HTTP/1.1\r\n" + H + b"X-Thing\t: 1\r\n\r\n", 400, "bad_request", ["colon"])
check_mhd("Content-Length overflow (413)",
          b"POST /v1/jobs HTTP/1.1\r\n" + H + JT + b"Content-Length: 99999999999999999999999\r\n\r\n",
          413)
check_mhd("Content-Length not a number (400)",
          b"POST /v1/jobs HTTP/1.1\r\n" + H + JT + b"Content-Length: 12abc\r\n\r\n", 400)
check_mhd("chunked malformed (400)",
          b"POST /v1/jobs HTTP/1.1\r\n" + H + JT + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
          400)
check_mhd("chunk size too large (413)",
          b"POST /v1/jobs HTTP/1.1\r\n" + H + JT + b"Transfer-Encoding: chunked\r\n\r\n" +
          b"F" * 40 + b"\r\n{}\r\n", 413)
# a second request on a kept-alive connection is checked the same way
check_mhd("keep-alive, then HTTP/3.0 (505)", b"GET /healthz HTTP/3.0\r\n" + H + b"\r\n", 505,
          first=GOOD)
check("keep-alive, then no Host (400)", b"GET /healthz HTTP/1.1\r\n\r\n",
      400, "bad_request", ["Host"], first=GOOD)
check("keep-alive, then CL with TE (400)",
      b"POST /v1/jobs HTTP/1.1\r\n" + H + JT + b"Content-Length: 5\r\n"
      b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "bad_request",
      ["Transfer-Encoding"], first=GOOD)
# HEAD: the same status, no body
d = exchange(b"HEAD /healthz HTTP/2.0\r\n" + H + b"\r\n")
st, hdrs, body = parse(d)
if st != "505":
    fails.append("HEAD with HTTP/2.0: %r" % d[:300])
# a line with no space at all is no request: libmicrohttpd closes without an
# answer (docs/api.md)
closed = []
d = exchange(b"GARBAGE\r\n\r\n", None, closed)
if d or not closed[0]:
    fails.append("a request line with no space: %r, closed %s (expected no answer, closed)"
                  % (d[:300], closed))
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
