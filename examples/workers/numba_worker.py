#!/usr/bin/python3
"""A Python stage that allocates on the GPU through Numba, run by ebb as an
isolated worker on the worker SDK, with Numba's memory coming from ebb
(NUMBA_CUDA_MEMORY_MANAGER=ebb.numba): the stage's arrays are counted in
ebb's done line, leak-checked when the worker exits, and given back with the
context. (#!/usr/bin/python3: Debian's python3-numba.)

Stage "numba_gain": loads "weights_mib" of device memory (a stand-in for a
model), then for each run copies the audio item to the device, keeps
"activations_mib" of scratch during the run, and returns the audio scaled by
"gain" (computed on the host from the device copy: the fake GPU has no
kernel compiler). Options: gain (default 0.5), weights_mib (default 256),
activations_mib (default 64), item (default "audio")."""
import os
import sys

os.environ.setdefault("NUMBA_CUDA_MEMORY_MANAGER", "ebb.numba")
try:
    from ebb.worker import Stage, StageError, serve
except ImportError:  # running from the checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    from ebb.worker import Stage, StageError, serve

MiB = 1 << 20
KNOWN = {"gain", "weights_mib", "activations_mib", "item"}


class NumbaGain(Stage):
    name = "numba_gain"
    uses_gpu = True

    def load(self, options, ctx):
        unknown = set(options) - KNOWN
        if unknown:
            raise StageError("EBB_ECONFIG", "numba_gain: unknown option(s) %s (known: %s)"
                             % (", ".join(sorted(unknown)), ", ".join(sorted(KNOWN))))
        self.gain = float(options.get("gain", 0.5))
        self.item = str(options.get("item", "audio"))
        self.act_mib = int(options.get("activations_mib", 64))
        import numpy as np
        from numba import cuda
        self.np, self.cuda = np, cuda
        self.weights = cuda.device_array(int(options.get("weights_mib", 256)) * MiB, dtype=np.uint8)

    def run(self, items, ctx):
        src = items.get(self.item, kind="audio")
        if src is None:
            raise StageError("EBB_EINPUT", "numba_gain: no audio item named '%s'" % self.item)
        scratch = self.cuda.device_array(self.act_mib * MiB, dtype=self.np.uint8)
        dev = self.cuda.to_device(self.np.ascontiguousarray(src.data))
        out = ctx.new_audio(self.item + "_gain", src.frames, src.channels, src.rate)
        out.data[...] = dev.copy_to_host() * self.gain
        del scratch, dev
        ctx.log("scaled %d frames by %g on %s" % (src.frames, self.gain, ctx.device))
        return [out]

    def unload(self, ctx):
        del self.weights


if __name__ == "__main__":
    sys.exit(serve(NumbaGain))
