"""The three model shapes an audio server runs, as small PyTorch modules with
the layers and sizes of the real ones (no weights are loaded; the fake GPU
does no arithmetic, so only shapes, dtypes and memory matter):

  demucs   a Demucs-like source separator: strided Conv1d encoder with GLU,
           a bidirectional LSTM at the bottleneck, ConvTranspose1d decoder
           with skip connections, stereo in, four stems out
  whisper  a Whisper-base-sized encoder: two Conv1d over 80 mel bins, six
           transformer layers of width 512 with 8 heads (3,000 frames in)
  crepe    a CREPE-like pitch tracker: six Conv2d layers over 1,024-sample
           frames, batch norm, max pooling, a 360-bin dense layer

make(name, device) builds one; example_input(name, device) makes its input.
"""
import torch
from torch import nn


class Demucs(nn.Module):
    def __init__(self, chin=2, sources=4, hidden=48, depth=4):
        super().__init__()
        self.sources, self.chin = sources, chin
        self.enc, self.dec = nn.ModuleList(), nn.ModuleList()
        ch = chin
        for i in range(depth):
            out = hidden * 2**i
            self.enc.append(nn.Sequential(nn.Conv1d(ch, out, 8, 4), nn.ReLU(),
                                          nn.Conv1d(out, 2 * out, 1), nn.GLU(dim=1)))
            dec_out = sources * chin if i == 0 else ch
            self.dec.insert(0, nn.Sequential(nn.Conv1d(out, 2 * out, 3, padding=1), nn.GLU(dim=1),
                                             nn.ConvTranspose1d(out, dec_out, 8, 4)))
            ch = out
        self.lstm = nn.LSTM(ch, ch, num_layers=2, bidirectional=True, batch_first=True)
        self.lstm_out = nn.Linear(2 * ch, ch)

    def forward(self, x):
        skips = []
        for enc in self.enc:
            x = enc(x)
            skips.append(x)
        y, _ = self.lstm(x.transpose(1, 2))
        x = self.lstm_out(y).transpose(1, 2)
        for i, dec in enumerate(self.dec):
            skip = skips.pop()
            x = dec(x + skip[..., :x.shape[-1]])
            if i < len(self.dec) - 1:
                x = torch.relu(x)
        return x.view(x.shape[0], self.sources, self.chin, -1)


class WhisperEncoder(nn.Module):
    def __init__(self, mels=80, width=512, heads=8, layers=6, frames=3000):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, width, 3, padding=1)
        self.conv2 = nn.Conv1d(width, width, 3, stride=2, padding=1)
        self.pos = nn.Parameter(torch.zeros(frames // 2, width))
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, batch_first=True,
                                           norm_first=True, activation="gelu")
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(width)

    def forward(self, mel):
        x = nn.functional.gelu(self.conv1(mel))
        x = nn.functional.gelu(self.conv2(x)).transpose(1, 2)
        return self.ln(self.blocks(x + self.pos[:x.shape[1]]))


class Crepe(nn.Module):
    def __init__(self, capacity=8):
        super().__init__()
        filters = [n * capacity for n in (32, 4, 4, 4, 8, 16)]
        widths, strides = (512, 64, 64, 64, 64, 64), (4, 1, 1, 1, 1, 1)
        layers, ch = [], 1
        for f, w, s in zip(filters, widths, strides):
            layers += [nn.Conv2d(ch, f, (w, 1), (s, 1), padding=(w // 2 - 1 if s > 1 else w // 2, 0)),
                       nn.ReLU(), nn.BatchNorm2d(f), nn.MaxPool2d((2, 1))]
            ch = f
        self.convs = nn.Sequential(*layers)
        self.classifier = nn.LazyLinear(360)

    def forward(self, frames):
        x = self.convs(frames.view(frames.shape[0], 1, -1, 1))
        return torch.sigmoid(self.classifier(x.flatten(1)))


SHAPES = ("demucs", "whisper", "crepe")


def make(name, device="cuda"):
    model = {"demucs": Demucs, "whisper": WhisperEncoder, "crepe": Crepe}[name]()
    model = model.to(device).eval()
    if name == "crepe":  # size the lazy layer
        with torch.no_grad():
            model(example_input(name, device))
    return model


def example_input(name, device="cuda"):
    if name == "demucs":
        return torch.zeros(1, 2, 4 * 44100, device=device)
    if name == "whisper":
        return torch.zeros(1, 80, 3000, device=device)
    return torch.zeros(64, 1024, device=device)
