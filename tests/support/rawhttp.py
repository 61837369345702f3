#!/usr/bin/env python3
"""Raw HTTP for the server tests: what curl will not send.

  rawhttp.py PORT send HEX_OR_TEXT        one request as given (\\r\\n escapes
                                          allowed); prints the status line and
                                          the body
  rawhttp.py PORT stall PATH CTYPE BYTES SECONDS
                                          sends headers announcing 100 MiB and
                                          BYTES of body, then holds the
                                          connection SECONDS
  rawhttp.py PORT loris SECONDS           sends a request line and one header
                                          byte a second; prints how many seconds
                                          until the server closed it
Every socket has a timeout; nothing waits unbounded."""
import socket
import sys
import time


def conn(port, src="127.0.0.1", timeout=10):
    """A connection to the server on port from loopback address src."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", port))
    return s


def closed(s, wait=0.05):
    """Whether the server has closed s (end of stream or an error within wait
    seconds); an open, silent connection is not closed."""
    s.settimeout(wait)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def read_all(s):
    data = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    except (socket.timeout, ConnectionResetError):
        pass
    return data


def main():
    port, mode = int(sys.argv[1]), sys.argv[2]
    if mode == "send":
        req = sys.argv[3].encode().decode("unicode_escape").encode("latin-1")
        s = conn(port)
        s.sendall(req)
        data = read_all(s)
        head, _, body = data.partition(b"\r\n\r\n")
        print(head.split(b"\r\n")[0].decode("latin-1"))
        for line in head.split(b"\r\n")[1:]:
            print(line.decode("latin-1"))
        print()
        print(body.decode("latin-1"))
    elif mode == "stall":
        path, ctype, nbytes, secs = sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6])
        s = conn(port)
        s.sendall(("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\n"
                   "Content-Length: %d\r\n\r\n" % (path, ctype, 100 << 20)).encode())
        try:
            s.sendall(b"x" * nbytes)
        except OSError:
            pass
        print("sent", flush=True)
        time.sleep(secs)
        s.close()
    elif mode == "loris":
        secs = float(sys.argv[3])
        s = conn(port)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        t0 = time.time()
        while time.time() - t0 < secs:
            try:
                s.sendall(b"a")
                s.settimeout(1)
                b = s.recv(1)
                if not b:
                    print("closed %.1f" % (time.time() - t0))
                    return
            except socket.timeout:
                continue
            except OSError:
                print("closed %.1f" % (time.time() - t0))
                return
        print("open %.1f" % (time.time() - t0))


main()
