"""A broker client written from docs/broker.md alone: finds the peers in the
broker directory, asks each for its devices, then for memory on them, and
checks the answers' shape: a reclaim is answered at once with a commit (what
the peer will give, how long it expects), then with what it gave. Prints
"GIVEN PID BYTES" per answer. Also sends a request of another version and
one without "by", and expects an error answer naming what was wrong."""
import glob
import json
import os
import socket
import sys


def ask(path, msg, timeout=60.0):  # generous: a sanitizer build unloads slowly
    """Sends msg; returns the answer lines, up to the final one (every line
    but a reclaim's commit is final)."""
    lines = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall((json.dumps(msg) + "\n").encode())
        buf = b""
        while True:
            while b"\n" not in buf:
                chunk = s.recv(65536)
                assert chunk, f"closed before a whole answer: {buf!r}"
                buf += chunk
            line, buf = buf.split(b"\n", 1)
            ans = json.loads(line)
            assert ans["v"] == 2, ans
            lines.append(ans)
            if "commit_bytes" not in ans:
                return lines


def main():
    broker, want = sys.argv[1], int(sys.argv[2])
    socks = glob.glob(os.path.join(broker, "*.sock"))
    assert socks, f"no peer in {broker}"
    for path in socks:
        [info] = ask(path, {"v": 2, "op": "info"})
        assert info["pid"] == int(os.path.basename(path)[:-5]), info
        assert info["devices"], f"a peer with no device: {info}"
        for dev in info["devices"]:
            assert dev["uuid"].startswith("GPU-"), dev
            assert dev["held_bytes"] > 0 and dev["idle_s"] >= 0, dev
            commit, ans = ask(path, {"v": 2, "op": "reclaim", "device": dev["uuid"],
                                     "bytes": want, "asker": os.getpid(), "by": "operator"})
            assert commit["commit_bytes"] > 0 and commit["eta_ms"] >= 0, commit
            assert commit["device"] == dev["uuid"], commit
            assert "error" not in ans, ans
            assert ans["device"] == dev["uuid"] and ans["label"] == dev["label"], ans
            assert isinstance(ans["kept"], list) and ans["reason"], ans
            print("GIVEN", ans["pid"], ans["given_bytes"], ans["reason"])
        [bad] = ask(path, {"v": 1, "op": "info"})
        assert bad["error"]["code"] == "bad_request", bad
        assert "version 1, this side speaks 2" in bad["error"]["message"], bad
        [noby] = ask(path, {"v": 2, "op": "reclaim", "device": "GPU-nope", "bytes": 1})
        assert '"by" must be' in noby["error"]["message"], noby
        [other] = ask(path, {"v": 2, "op": "reclaim", "device": "GPU-nope", "bytes": 1,
                             "by": "operator"})
        assert other["given_bytes"] == 0 and other["reason"] == "not on this device", other


if __name__ == "__main__":
    main()
