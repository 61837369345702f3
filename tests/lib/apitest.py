"""Shared by the Python drivers of the server tests (tests/integration/*.py,
each run by its .sh against a server that script started):

- fail(msg) says what went wrong and adds it to `fails`; a driver ends with
  sys.exit(1) when `fails` is not empty;
- client(url) answers api(method, path, body=None) -> (HTTP status, the JSON
  answer), a JSON body sent as application/json, 30 s at most;
- until(what, fn, tries, pause) calls fn until it answers a true value and
  returns it; after `tries` calls it fails naming `what` and returns None.

A driver imports it with tests/lib on sys.path (see server_events.py)."""
import json
import sys
import time
import urllib.error
import urllib.request

fails = []


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    fails.append(msg)


def client(url):
    def api(method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")
    return api


def until(what, fn, tries=100, pause=0.1):
    for _ in range(tries):
        v = fn()
        if v:
            return v
        time.sleep(pause)
    fail("timed out waiting for " + what)
    return None
