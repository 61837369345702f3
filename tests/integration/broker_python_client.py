"""A broker client written from docs/broker.md alone: finds the peers in the
broker directory, asks each for its devices, then for memory on them, and
checks the answers' shape. Prints "GIVEN PID BYTES" per answer. Also sends a
request of another version and expects an error answer naming it."""
import glob
import json
import os
import socket
import sys


def ask(path, msg, timeout=60.0):  # generous: a sanitizer build unloads slowly
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall((json.dumps(msg) + "\n").encode())
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    assert buf.endswith(b"\n"), f"answer not one whole line: {buf!r}"
    return json.loads(buf)


def main():
    broker, want = sys.argv[1], int(sys.argv[2])
    socks = glob.glob(os.path.join(broker, "*.sock"))
    assert socks, f"no peer in {broker}"
    for path in socks:
        info = ask(path, {"v": 1, "op": "info"})
        assert info["v"] == 1 and info["pid"] == int(os.path.basename(path)[:-5]), info
        assert info["devices"], f"a peer with no device: {info}"
        for dev in info["devices"]:
            assert dev["uuid"].startswith("GPU-"), dev
            assert dev["held_bytes"] > 0 and dev["idle_s"] >= 0, dev
            ans = ask(path, {"v": 1, "op": "reclaim", "device": dev["uuid"],
                             "bytes": want, "asker": os.getpid()})
            assert "error" not in ans, ans
            assert ans["device"] == dev["uuid"] and ans["label"] == dev["label"], ans
            assert isinstance(ans["kept"], list) and ans["reason"], ans
            print("GIVEN", ans["pid"], ans["given_bytes"], ans["reason"])
        bad = ask(path, {"v": 2, "op": "info"})
        assert bad["error"]["code"] == "bad_request", bad
        assert "version 2" in bad["error"]["message"], bad
        other = ask(path, {"v": 1, "op": "reclaim", "device": "GPU-nope", "bytes": 1})
        assert other["given_bytes"] == 0 and other["reason"] == "not on this device", other


if __name__ == "__main__":
    main()
