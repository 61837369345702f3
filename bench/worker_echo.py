#!/usr/bin/env python3
"""The worker bench/worker_roundtrip runs: stage "echo" on the worker SDK.
For every item it answers one JSON item: a JSON item's text length, or a
tensor's shape with its first and last element (read through the mapping:
the payload is never copied or read whole)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from ebb.worker import Stage, serve  # noqa: E402


class Echo(Stage):
    name = "echo"

    def run(self, items, ctx):
        out = {}
        for it in items:
            if it.kind == "tensor":
                d = it.data
                out[it.name] = [list(it.shape), float(d[0]), float(d[-1])]
            elif it.kind == "json":
                out[it.name] = len(it.text)
        return [ctx.json("echo", out)]


if __name__ == "__main__":
    sys.exit(serve(Echo))
