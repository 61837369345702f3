#!/usr/bin/env python3
"""A GPU stage on the worker SDK for server_sleep_worker.sh: load takes
512 MiB from ebb for the stage's owner and writes a pattern into its first
4 KiB (the fake GPU's device memory is addressable from the host); run
answers the block's address and the pattern it reads back, so a job after
a sleep and wake shows whether the weights came back at the same address
with the same bytes."""
import ctypes
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from ebb.worker import Stage, serve  # noqa: E402

MiB = 1 << 20


class Sleepy(Stage):
    name = "sleepy"
    uses_gpu = True

    def load(self, options, ctx):
        self.addr = ctx.owner.alloc(512 * MiB)
        pattern = bytes((i * 7 + 3) & 0xFF for i in range(4096))
        ctypes.memmove(self.addr, pattern, len(pattern))

    def run(self, items, ctx):
        data = ctypes.string_at(self.addr, 4096)
        return [ctx.json("weights", {"addr": self.addr, "sum": sum(data),
                                     "pid": os.getpid()})]


if __name__ == "__main__":
    sys.exit(serve(Sleepy))
