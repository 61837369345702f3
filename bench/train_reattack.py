#!/usr/bin/python3
"""Trains the pitch stage's re-attack model and writes it as a C header.

The pitch stage splits a note where an onset peak inside it is a re-attack
(two equal notes in a row; docs/songtrace.md, pitch step 7). Which peaks
are re-attacks is decided by a small neural network (one hidden layer of
tanh units, a logistic output) on 70 features of the peak that
src/stages/audio/pitch_onsets.c computes (reattack_features). This script:

 1. renders the melodies of bench/songtrace_real.py (same generator, same
    20 conditions per seed set) for the TRAINING seed sets only;
 2. runs every clip through `ebb run` (the songtrace stages, with the pitch
    option reattack_model false, so the candidate peaks do not depend on an
    earlier model) with EBB_PITCH_REATTACK_FEATURES set, so the stage writes
    each candidate peak's features and the onset a split there would give;
 3. labels a peak 1 when a truth note onset lies within 50 ms of that onset
    less onset_shift_ms (30 ms), the rule the benchmark scores notes by;
 4. trains (full-batch Adam, the classes weighted to balance, L2 1e-2,
    1500 steps, a fixed seed: the same data give the same weights) and
    writes src/stages/audio/pitch_reattack_model.h.

The benchmark's own set (seeds 1000) and the sets docs/songtrace.md reports
as held out are never trained on. --check SETS trains without them as usual
and reports, per set, the re-attacks the model keeps against the linear
score at the same number of false peaks.

usage: train_reattack.py --ebb build/ebb [--out FILE] [--work DIR]
                         [--seeds 3000,5000,...] [--check 1000,9000,...]
Needs fluidsynth, the GM soundfont and numpy (scripts/install-deps.sh).
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import songtrace_real as S  # noqa: E402
import numpy as np  # noqa: E402

TRAIN_SEEDS = [3000, 5000, 7000] + list(range(20000, 28000, 1000))
NFEAT = 70
HIDDEN, L2, STEPS, SHIFT = 16, 1e-2, 1500, 0.03
ENV = "EBB_PITCH_REATTACK_FEATURES"


def clips(work, sf2, seeds):
    """Renders every condition of every seed set once; [(seed, name, wav, truth)]."""
    out, jobs = [], []
    for s in seeds:
        d = os.path.join(work, f"src{s}")
        os.makedirs(d, exist_ok=True)
        for (name, _t, prog, base, bg, lev, cs) in S.conditions(s):
            slug = name.replace(" ", "_")
            rng = random.Random(cs)
            bpm = rng.choice([100, 110, 120])
            truth, _ = S.make_melody(rng, base, 16.0, bpm)
            wav = os.path.join(d, slug + ".wav")
            out.append((s, name, wav, truth))
            if not os.path.exists(wav):
                jobs.append((d, slug, prog, base, bg, lev, cs))
    with ThreadPoolExecutor(os.cpu_count() or 1) as ex:
        list(ex.map(lambda j: S.make_clip(j[0], sf2, j[1], j[2], j[3], j[4], j[5], j[6], 16.0), jobs))
    return out


def features(ebb, work, clip):
    s, name, wav, truth = clip
    out = os.path.join(work, "runs", str(s), name.replace(" ", "_"))
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    feat = out + ".features"
    if os.path.exists(feat):
        os.unlink(feat)
    subprocess.run([ebb, "run", "--config", os.path.join(work, "config.json"), "--pipeline", "st",
                    "--device", "cpu", "--no-cache", "-o", out, wav], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=dict(os.environ, EBB_WHISPER_URL="", **{ENV: feat}))
    rows = []
    onsets = [o for o, _, _ in truth]
    with open(feat) as f:
        for line in f:
            v = [float(x) for x in line.split()]
            if len(v) != 3 + NFEAT:
                sys.exit(f"train_reattack: {feat}: a line of {len(v)} fields, want {3 + NFEAT}")
            on = v[1] - SHIFT
            rows.append((v[3:], int(any(abs(o - on) <= 0.05 for o in onsets)), v[2]))
    return s, rows


def train(X, Y, seed=0):
    rng = np.random.default_rng(seed)
    mu, sd = X.mean(0), X.std(0) + 1e-6
    Z = (X - mu) / sd
    d = Z.shape[1]
    W = {"W1": rng.normal(0, 1 / np.sqrt(d), (d, HIDDEN)), "b1": np.zeros(HIDDEN),
         "w2": rng.normal(0, 1 / np.sqrt(HIDDEN), HIDDEN), "b2": np.zeros(())}
    m = {k: np.zeros_like(v) for k, v in W.items()}
    v2 = {k: np.zeros_like(v) for k, v in W.items()}
    wt = np.where(Y == 1, (len(Y) - Y.sum()) / max(Y.sum(), 1), 1.0)
    wt /= wt.mean()
    for i in range(STEPS):
        h = np.tanh(Z @ W["W1"] + W["b1"])
        p = 1 / (1 + np.exp(-(h @ W["w2"] + W["b2"])))
        g = (p - Y) * wt / len(Y)
        gh = np.outer(g, W["w2"]) * (1 - h * h)
        G = {"W1": Z.T @ gh + L2 * W["W1"], "b1": gh.sum(0), "w2": h.T @ g + L2 * W["w2"],
             "b2": g.sum()}
        for k in W:
            m[k] = 0.9 * m[k] + 0.1 * G[k]
            v2[k] = 0.999 * v2[k] + 0.001 * G[k] ** 2
            W[k] = W[k] - 0.01 * (m[k] / (1 - 0.9 ** (i + 1))) / (
                np.sqrt(v2[k] / (1 - 0.999 ** (i + 1))) + 1e-8)
    return W, mu, sd


def logit(model, X):
    W, mu, sd = model
    return np.tanh(((X - mu) / sd) @ W["W1"] + W["b1"]) @ W["w2"] + W["b2"]


def arr(name, values):
    body = ",\n  ".join(", ".join(repr(float(x)) for x in values[i:i + 4])
                        for i in range(0, len(values), 4))
    return f"static const double {name}[{len(values)}] = {{\n  {body}}};\n"


def write_header(path, model, seeds, n, npos, check_x):
    W, mu, sd = model
    with open(path, "w") as f:
        f.write("/* The pitch stage's re-attack model (pitch_reattack.c). Generated by\n"
                " * bench/train_reattack.py: do not edit, run it again. Trained on the onset\n"
                " * peaks of bench/songtrace_real.py's melodies, seed sets\n"
                f" * {', '.join(map(str, seeds))}\n"
                f" * ({n} peaks, {npos} of them within 50 ms of a truth onset); features in\n"
                " * the order of reattack_features (pitch_onsets.c), standardised by mu and sd;\n"
                f" * {HIDDEN} tanh units, w1 row-major [feature][unit]. */\n")
        f.write("#ifndef EBB_PITCH_REATTACK_MODEL_H\n#define EBB_PITCH_REATTACK_MODEL_H\n\n")
        f.write(f"#define EBB_REATTACK_HIDDEN {HIDDEN}\n")
        f.write(arr("stg_reattack_mu", mu) + arr("stg_reattack_sd", sd))
        f.write(arr("stg_reattack_w1", W["W1"].ravel()) + arr("stg_reattack_b1", W["b1"]))
        f.write(arr("stg_reattack_w2", W["w2"]))
        f.write(f"static const double stg_reattack_b2 = {float(W['b2'])!r};\n\n")
        f.write("/* a training peak's features and the log-odds numpy gave them (the unit\n"
                " * test checks the C evaluation against it) */\n")
        f.write(arr("stg_reattack_check_x", check_x))
        f.write(f"static const double stg_reattack_check_logit = "
                f"{float(logit(model, check_x[None, :])[0])!r};\n\n#endif\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ebb", required=True, help="the ebb binary (build/ebb)")
    ap.add_argument("--out", default=os.path.normpath(os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "src", "stages", "audio",
        "pitch_reattack_model.h")))
    ap.add_argument("--work", default="", help="keep the renders and runs here (default: a temp dir)")
    ap.add_argument("--seeds", default=",".join(map(str, TRAIN_SEEDS)), help="training seed sets")
    ap.add_argument("--check", default="", help="held-out seed sets to report on (not trained on)")
    a = ap.parse_args()
    try:
        seeds = [int(x) for x in a.seeds.split(",")]
        check = [int(x) for x in a.check.split(",")] if a.check else []
    except ValueError:
        sys.exit("train_reattack: --seeds and --check want comma-separated seed sets, such as 3000,5000")
    if set(seeds) & set(check) or 1000 in seeds:
        sys.exit("train_reattack: a set is both trained on and checked (or 1000, the benchmark's, "
                 "is in --seeds)")
    if not os.access(a.ebb, os.X_OK):
        sys.exit(f"train_reattack: --ebb {a.ebb}: no such executable (build it: make)")
    sf2 = next((p for p in S.SF2_CANDIDATES if os.path.exists(p)), None)
    if not sf2 or not shutil.which("fluidsynth"):
        sys.exit("train_reattack: needs fluidsynth and fluid-soundfont-gm (scripts/install-deps.sh)")
    work = a.work or tempfile.mkdtemp(prefix="train-reattack.")
    os.makedirs(work, exist_ok=True)
    cfg = {"pipelines": {"st": {"release": "after-stage", "stages": [
        {"stage": "decode"}, {"stage": "separate"}, {"stage": "transcribe"}, {"stage": "align"},
        {"stage": "pitch", "options": {"reattack_model": False}}, {"stage": "export"}]}}}
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump(cfg, f)
    cl = clips(work, sf2, seeds + check)
    print(f"train_reattack: {len(cl)} clips rendered in {work}; running ebb on each", flush=True)
    with ThreadPoolExecutor(os.cpu_count() or 1) as ex:
        res = list(ex.map(lambda c: features(a.ebb, work, c), cl))
    tr = [r for s, rows in res if s in seeds for r in rows]
    X = np.array([r[0] for r in tr], float)
    Y = np.array([r[1] for r in tr], float)
    model = train(X, Y)
    pos = np.flatnonzero(Y == 1)
    write_header(a.out, model, seeds, len(Y), int(Y.sum()), X[pos[0]] if len(pos) else X[0])
    print(f"train_reattack: {len(Y)} peaks ({int(Y.sum())} re-attacks) from {len(seeds)} sets; "
          f"wrote {a.out}")
    for s in check:
        rows = [r for ss, rr in res if ss == s for r in rr]
        Xc = np.array([r[0] for r in rows], float)
        Yc = np.array([r[1] for r in rows])
        lin = np.array([r[2] for r in rows])
        P = logit(model, Xc)
        nfalse = int(((lin >= 10) & (Yc == 0)).sum())
        thr = np.sort(P[Yc == 0])[::-1][nfalse - 1] if nfalse else np.inf
        print(f"  held-out set {s}: at the linear score's {nfalse} false peaks (score >= 10) it "
              f"keeps {int(((lin >= 10) & (Yc == 1)).sum())} true ones, the model "
              f"{int(((P >= thr) & (Yc == 1)).sum())} (log-odds >= {thr:.2f})")
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
