#!/opt/ebb-tools/sing/bin/python
"""Trains the pitch stage's voice model and writes it as a C header.

Where the accompaniment is louder than the voice, its chord tones hold the
larger share of the melody salience (docs/songtrace.md, "songtrace on sung
melodies"). The option salience_model weighs each salience peak by the
probability that it is the sung voice, given by a small neural network (one
hidden layer of tanh units, a logistic output) on the EBB_PITCH_VOICE_NFEAT
features src/stages/audio/pitch_voice.c computes for the peak (its pitch,
its height and share in the blended, vocals and melody rows, its contour's
movement and length, the level trend along it, d' at its period). This
script:

 1. renders bench/songtrace_sung.py's sung clips (5 voices x 2 styles x 5
    backgrounds a seed set) and bench/songtrace_real.py's instrument clips
    (20 a seed set, 16 s, as bench/train_reattack.py renders them) for the
    TRAINING seed sets only;
 2. runs every clip through `ebb run` (the songtrace stages, pitch option
    salience_model 0) with EBB_PITCH_SALIENCE_FEATURES set, so the stage
    writes every peak's features;
 3. labels a peak 1 when it lies within 50 cents of the truth pitch on the
    10 ms grid (the sung contour; the instruments' written notes), keeping
    the frames where the truth is voiced (which peak is the voice);
 4. trains (full-batch Adam, the classes weighted to balance, L2 1e-3,
    STEPS steps on a fixed subsample, a fixed seed: the same data give the
    same weights) and writes src/stages/audio/pitch_voice_model.h.

The benchmarks' own sets (sung 44000, instruments 1000) and the sets
docs/songtrace.md reports as held out (sung 45000 and 46000, instruments
7000) are never trained on. --check-sung / --check-real SETS report, per set
(not trained on), the area under the ROC curve of the model's log-odds and
of the peak's height alone, and how often the frame's most probable peak is
the voice against its strongest.

usage: train_salience.py --ebb build/ebb [--out FILE] [--work DIR]
         [--sung 47000,48000] [--real 20000,21000]
         [--check-sung 49000] [--check-real 22000] [--no-write]
Runs with /opt/ebb-tools/sing/bin/python (pyworld, numpy, mir_eval, scipy;
scripts/install-deps.sh) and needs the synthesisers and fluidsynth.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import mlp_model as M  # noqa: E402
import songtrace_real as R  # noqa: E402
import songtrace_sung as S  # noqa: E402

SUNG, REAL = [47000], [20000]  # what pitch_voice_model.h was trained on
FORBIDDEN = {44000, 45000, 46000, 1000, 7000}  # the benchmarks' and the held-out sets
NFEAT = 21
HIDDEN, L2, STEPS, ROWS = 16, 1e-3, 1000, 150000
ENV = "EBB_PITCH_SALIENCE_FEATURES"
HOP = 0.01


def sung_clips(work, sf2, seed):
    d = os.path.join(work, f"sung{seed}")
    os.makedirs(d, exist_ok=True)
    out = []
    for cname, vi, style, bg, lev, cs in S.conditions(seed):
        slug = cname.replace(" ", "_")
        wav, _notes, grid, truth, _dur = S.make_clip(d, sf2, slug, S.VOICES[vi], style, bg, lev,
                                                     cs, 12.0, True)
        out.append(("sung", seed, cname, wav, np.asarray(grid, float), np.asarray(truth, float)))
    return out


def real_clips(work, sf2, seed):
    d = os.path.join(work, f"real{seed}")
    os.makedirs(d, exist_ok=True)
    out = []
    for (name, _t, prog, base, bg, lev, cs) in R.conditions(seed):
        slug = name.replace(" ", "_")
        wav = os.path.join(d, slug + ".wav")
        rng = random.Random(cs)
        bpm = rng.choice([100, 110, 120])
        notes, _ = R.make_melody(rng, base, 16.0, bpm)
        if not os.path.exists(wav):
            R.make_clip(d, sf2, slug, prog, base, bg, lev, cs, 16.0)
        grid = np.arange(0.0, 16.5, HOP)
        f0 = np.zeros_like(grid)
        for a, b, k in notes:
            f0[(grid >= a) & (grid < b)] = R.midi_hz(k)
        out.append(("real", seed, name, wav, grid, f0))
    return out


def features(ebb, work, clip, reuse=False):
    """(features, labels, frame ids) of a clip's peaks in truth-voiced frames.
    reuse: read the feature file an earlier run with --work left."""
    kind, seed, name, wav, grid, f0 = clip
    out = os.path.join(work, "runs", f"{kind}{seed}", name.replace(" ", "_"))
    feat = out + ".features"
    if not (reuse and os.path.exists(feat)):
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        if os.path.exists(feat):
            os.unlink(feat)
        subprocess.run([ebb, "run", "--config", os.path.join(work, "config.json"), "--pipeline",
                        "st", "--device", "cpu", "--no-cache", "-o", out, wav], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env=dict(os.environ, EBB_WHISPER_URL="", **{ENV: feat}))
    with open(feat) as fp:
        lines = fp.read().split("\n")
    if any(len(x.split()) != 2 + NFEAT for x in lines if x):
        sys.exit(f"train_salience: {feat}: a line without {2 + NFEAT} fields")
    v = np.array(" ".join(lines).split(), float).reshape(-1, 2 + NFEAT)
    fr = v[:, 0].astype(int)
    gi = np.clip(np.rint(fr * HOP / (grid[1] - grid[0])).astype(int), 0, len(grid) - 1)
    ref = f0[gi]
    keep = ref > 0
    cents = 1200 * np.abs(np.log2(np.maximum(v[keep, 1], 1e-3) / ref[keep]))
    return v[keep, 2:], (cents <= 50).astype(float), fr[keep]


def train(X, Y, seed=0):
    return M.train(X, Y, HIDDEN, L2, STEPS, rows=ROWS, seed=seed)


logit = M.logit


def auc(score, y):
    """Area under the ROC curve (ties counted half)."""
    order = np.argsort(score, kind="mergesort")
    s, yy = score[order], y[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2 + 1
        i = j + 1
    npos = yy.sum()
    nneg = len(yy) - npos
    return (ranks[yy == 1].sum() - npos * (npos + 1) / 2) / max(npos * nneg, 1)


def top1(score, y, frames):
    """Of the frames with a voice peak: how often the best-scored peak is one."""
    order = np.lexsort((-score, frames))
    k, y2 = frames[order], y[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    anyv = np.maximum.reduceat(y2, starts)
    return float((y2[starts] * anyv).sum() / max(anyv.sum(), 1))


def write_header(path, model, sung, real, n, npos, check_x):
    with open(path, "w") as f:
        f.write("/* The pitch stage's voice model (pitch_voice.c). Generated by\n"
                " * bench/train_salience.py: do not edit, run it again. Trained on the\n"
                " * salience peaks of bench/songtrace_sung.py's clips, seed sets\n"
                f" * {', '.join(map(str, sung))}, and bench/songtrace_real.py's, seed sets\n"
                f" * {', '.join(map(str, real))} ({n} peaks in truth-voiced frames, {npos} of\n"
                " * them within 50 cents of the truth; a subsample of at most\n"
                f" * {ROWS} trained on); features in the order of pitch_voice.c,\n"
                f" * standardised by mu and sd; {HIDDEN} tanh units, w1 row-major\n"
                " * [feature][unit]. */\n")
        f.write("#ifndef EBB_PITCH_VOICE_MODEL_H\n#define EBB_PITCH_VOICE_MODEL_H\n\n")
        M.write_body(f, "stg_voice", "EBB_VOICE_HIDDEN", model, check_x)


def seeds_of(s):
    try:
        return [int(x) for x in s.split(",")] if s else []
    except ValueError:
        sys.exit(f"train_salience: {s!r}: want comma-separated seed sets, such as 47000,48000")


def report(model, res, kind, s):
    rows = [r for k, ss, r in res if k == kind and ss == s]
    X = np.concatenate([r[0] for r in rows])
    Y = np.concatenate([r[1] for r in rows])
    F = np.concatenate([r[2] + 100000 * i for i, r in enumerate(rows)])
    P = logit(model, X)
    print(f"  check {kind} {s}: {len(Y)} peaks ({int(Y.sum())} voice); AUC model "
          f"{auc(P, Y):.3f}, height {auc(X[:, 1], Y):.3f}, share {auc(X[:, 2], Y):.3f}; the "
          f"frame's best peak is the voice: model {top1(P, Y, F):.3f}, strongest "
          f"{top1(X[:, 1] + 1e-6 * X[:, 2], Y, F):.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ebb", required=True, help="the ebb binary (build/ebb)")
    ap.add_argument("--out", default=os.path.normpath(os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "src", "stages", "audio",
        "pitch_voice_model.h")))
    ap.add_argument("--work", default="", help="keep the renders and runs here (default: a temp dir)")
    ap.add_argument("--sung", default=",".join(map(str, SUNG)), help="sung training seed sets")
    ap.add_argument("--real", default=",".join(map(str, REAL)), help="instrument training seed sets")
    ap.add_argument("--check-sung", default="", help="sung seed sets to report on (not trained on)")
    ap.add_argument("--check-real", default="", help="instrument seed sets to report on")
    ap.add_argument("--no-write", action="store_true", help="report only; leave the header")
    ap.add_argument("--reuse", action="store_true", help="with --work: read the features an "
                    "earlier run left there instead of running ebb again (the same ebb)")
    a = ap.parse_args()
    sung, real = seeds_of(a.sung), seeds_of(a.real)
    csung, creal = seeds_of(a.check_sung), seeds_of(a.check_real)
    if set(sung) & set(csung) or set(real) & set(creal) or FORBIDDEN & set(sung + real):
        sys.exit("train_salience: a set is both trained on and checked, or is one of the "
                 f"benchmarks' or held-out sets ({sorted(FORBIDDEN)})")
    if not os.access(a.ebb, os.X_OK):
        sys.exit(f"train_salience: --ebb {a.ebb}: no such executable (build it: make)")
    sf2 = next((p for p in R.SF2_CANDIDATES if os.path.exists(p)), None)
    if not sf2 or not shutil.which("fluidsynth"):
        sys.exit("train_salience: needs fluidsynth and fluid-soundfont-gm (scripts/install-deps.sh)")
    work = a.work or tempfile.mkdtemp(prefix="train-salience.")
    os.makedirs(work, exist_ok=True)
    cfg = {"pipelines": {"st": {"release": "after-stage", "stages": [
        {"stage": "decode"}, {"stage": "separate"}, {"stage": "transcribe"}, {"stage": "align"},
        {"stage": "pitch", "options": {"salience_model": 0}}, {"stage": "export"}]}}}
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(cfg, f)
    cl = [c for s in sung + csung for c in sung_clips(work, sf2, s)]
    cl += [c for s in real + creal for c in real_clips(work, sf2, s)]
    print(f"train_salience: {len(cl)} clips rendered in {work}; running ebb on each", flush=True)
    with ThreadPoolExecutor(os.cpu_count() or 1) as ex:
        res = list(ex.map(lambda c: (c[0], c[1], features(a.ebb, work, c, a.reuse)), cl))
    tr = [r for k, s, r in res if (k == "sung" and s in sung) or (k == "real" and s in real)]
    X = np.concatenate([r[0] for r in tr])
    Y = np.concatenate([r[1] for r in tr])
    t0 = time.time()
    model = train(X, Y)
    print(f"train_salience: trained in {time.time() - t0:.0f} s", flush=True)
    pos = np.flatnonzero(Y == 1)
    print(f"train_salience: {len(Y)} peaks ({int(Y.sum())} the voice) from {len(sung)} sung and "
          f"{len(real)} instrument sets", flush=True)
    if not a.no_write:
        write_header(a.out, model, sung, real, len(Y), int(Y.sum()),
                     (X[pos[0]] if len(pos) else X[0]).astype(np.float32).astype(float))
        # laid out as scripts/format-check.sh wants it (clang-format 14, the
        # repository's .clang-format wherever --out is)
        cf = shutil.which("clang-format-14") or shutil.which("clang-format")
        style = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".clang-format")
        if cf:
            subprocess.run([cf, "--style=file:" + os.path.normpath(style), "-i", a.out], check=True)
        print(f"train_salience: wrote {a.out}")
    for s in csung:
        report(model, res, "sung", s)
    for s in creal:
        report(model, res, "real", s)
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
