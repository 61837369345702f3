"""Three models shaped like an audio server's, with random weights: what the
PyTorch examples, the songtrace pipeline in Python (examples/torch/) and
bench/torch_alloc.py run.

  demucs_like   a Demucs-shaped source separator: a strided Conv1d encoder
                (2 -> 48 -> 96 -> 192 -> 384 channels), a 2-layer
                bidirectional LSTM in the middle, a ConvTranspose1d decoder
                back to 4 stereo stems (~20 M parameters)
  whisper_like  a Whisper-base-shaped transcriber: the Conv1d stem over 80 mel
                bins, 6 encoder and 6 decoder layers of width 512 (8 heads,
                2048 feed-forward), a 51865-token embedding (~72 M parameters)
  crepe_like    a CREPE-shaped pitch tracker ("full" capacity): six Conv2d
                blocks over 1024-sample frames with BatchNorm and max
                pooling, then 360 pitch bins (~22 M parameters)

Each builder takes a device and returns (model, example_input): the input a
forward pass takes (one second of stereo audio, a 30 s log-mel window with
a few decoder tokens, a batch of 64 frames). Weights are random (seeded):
the shapes, not the answers, are what counts here."""
import torch
from torch import nn


class DemucsLike(nn.Module):
    def __init__(self, sources=4, channels=48, depth=4):
        super().__init__()
        self.sources = sources
        self.enc, self.dec = nn.ModuleList(), nn.ModuleList()
        c_in = 2
        for i in range(depth):
            c = channels << i
            self.enc.append(nn.Sequential(nn.Conv1d(c_in, c, 8, 4), nn.ReLU(),
                                          nn.Conv1d(c, 2 * c, 1), nn.GLU(dim=1)))
            c_out = 2 * sources if i == 0 else c_in
            self.dec.insert(0, nn.Sequential(nn.Conv1d(c, 2 * c, 3, padding=1), nn.GLU(dim=1),
                                             nn.ConvTranspose1d(c, c_out, 8, 4)))
            c_in = c
        self.lstm = nn.LSTM(c_in, c_in, num_layers=2, bidirectional=True, batch_first=True)
        self.lstm_out = nn.Linear(2 * c_in, c_in)

    def forward(self, x):
        skips = []
        for e in self.enc:
            x = e(x)
            skips.append(x)
        y, _ = self.lstm(x.transpose(1, 2))
        x = self.lstm_out(y).transpose(1, 2)
        for d in self.dec:
            s = skips.pop()
            x = d(x + s[..., :x.shape[-1]])
        return x.view(x.shape[0], self.sources, 2, -1)


class WhisperLike(nn.Module):
    def __init__(self, n_mels=80, width=512, heads=8, layers=6, vocab=51865, ctx=1500):
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, width, 3, padding=1)
        self.conv2 = nn.Conv1d(width, width, 3, stride=2, padding=1)
        self.pos = nn.Parameter(torch.randn(ctx, width) * 0.01)
        layer = dict(d_model=width, nhead=heads, dim_feedforward=4 * width, batch_first=True,
                     norm_first=True)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(**layer), layers,
                                             enable_nested_tensor=False)
        self.embed = nn.Embedding(vocab, width)
        self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**layer), layers)

    def forward(self, mel, tokens):
        x = torch.nn.functional.gelu(self.conv1(mel))
        x = torch.nn.functional.gelu(self.conv2(x)).transpose(1, 2)
        x = self.encoder(x + self.pos[:x.shape[1]])
        y = self.decoder(self.embed(tokens), x)
        return y @ self.embed.weight.t()  # logits over the vocabulary


class CrepeLike(nn.Module):
    def __init__(self, capacity=32):
        super().__init__()
        filters = [c * capacity for c in (32, 4, 4, 4, 8, 16)]
        widths = (512, 64, 64, 64, 64, 64)
        strides = (4, 1, 1, 1, 1, 1)
        blocks, c_in = [], 1
        for f, w, s in zip(filters, widths, strides):
            blocks += [nn.Conv2d(c_in, f, (w, 1), (s, 1), padding=(w // 2 - (s > 1), 0)),
                       nn.ReLU(), nn.BatchNorm2d(f), nn.MaxPool2d((2, 1), (2, 1))]
            c_in = f
        self.blocks = nn.Sequential(*blocks)
        self.classifier = nn.Linear(c_in * 4, 360)

    def forward(self, frames):
        x = self.blocks(frames[:, None, :, None])
        return torch.sigmoid(self.classifier(x.flatten(1)))


def demucs_like(device):
    torch.manual_seed(1)
    return DemucsLike().to(device).eval(), (torch.randn(1, 2, 44100, device=device),)


def whisper_like(device):
    torch.manual_seed(2)
    tokens = torch.zeros(1, 8, dtype=torch.long, device=device)
    return WhisperLike().to(device).eval(), (torch.randn(1, 80, 3000, device=device), tokens)


def crepe_like(device):
    torch.manual_seed(3)
    return CrepeLike().to(device).eval(), (torch.randn(64, 1024, device=device),)


MODELS = {"demucs_like": demucs_like, "whisper_like": whisper_like, "crepe_like": crepe_like}
