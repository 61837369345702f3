#!/usr/bin/env python3
"""A stage in Python, run by ebb as an isolated worker, on the worker SDK
(python/ebb/worker.py; the protocol is docs/worker-protocol.md).

Stage "gain": multiplies an audio item by a gain and reports the RMS level
before and after. Options (JSON): "gain" (number, default 0.5), "item" (the
audio item to read, default "audio"). Outputs: audio "<item>_gain" and JSON
"gain" {"gain", "rms_in", "rms_out", "frames", "channels", "rate"}.

The input is mapped from shared memory and the output written in place in
shared memory: nothing is copied through the socket. NumPy is used when it
is installed, plain Python otherwise. Used from examples/workers/gain.json:
  {"stage": "gain", "worker": "./gain_worker.py", "options": {"gain": 0.25}}
"""
import math
import os
import sys

try:
    from ebb.worker import Stage, StageError, serve
except ImportError:  # running from the checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    from ebb.worker import Stage, StageError, serve


def rms(a):
    n = len(a)
    if hasattr(a, "dtype"):  # NumPy
        return float(math.sqrt(float((a.astype("f8") ** 2).sum()) / a.size)) if a.size else 0.0
    return math.sqrt(sum(x * x for x in a) / n) if n else 0.0


class Gain(Stage):
    name = "gain"

    def load(self, options, ctx):
        unknown = set(options) - {"gain", "item"}
        if unknown:
            raise StageError("EBB_ECONFIG", "gain: unknown option(s) %s (known: gain, item)"
                             % ", ".join(sorted(unknown)))
        self.gain = float(options.get("gain", 0.5))
        self.item = str(options.get("item", "audio"))
        if not (0 <= self.gain <= 100):
            raise StageError("EBB_ECONFIG", "gain: option 'gain' must be in 0..100, got %g"
                             % self.gain)

    def run(self, items, ctx):
        src = items.get(self.item, kind="audio")
        if src is None:
            raise StageError("EBB_EINPUT", "gain: no audio item named '%s' (items: %s)"
                             % (self.item, ", ".join(it.name for it in items)))
        out = ctx.new_audio(self.item + "_gain", src.frames, src.channels, src.rate)
        if hasattr(src.data, "dtype"):
            out.data[...] = src.data * self.gain
        else:
            for i, x in enumerate(src.data):
                out.data[i] = x * self.gain
        report = {"gain": self.gain, "rms_in": rms(src.data), "rms_out": rms(out.data),
                  "frames": src.frames, "channels": src.channels, "rate": src.rate}
        return [out, ctx.json("gain", report)]


if __name__ == "__main__":
    sys.exit(serve(Gain))
