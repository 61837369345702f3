#!/usr/bin/python3
"""songtrace on real instrument samples, against aubio, scored with mir_eval.

Melodies are written as MIDI files here (deterministic: a fixed seed per
clip), rendered with fluidsynth through the General MIDI soundfont of Debian's
fluid-soundfont-gm (FluidR3_GM.sf2) at 16 kHz, and mixed in Python:

  timbres      voice oohs (GM 54), synth voice (55), alto sax (66), flute (74)
  backgrounds  none; repeating piano chords (I-V-vi-IV, one per bar, voiced
               around the melody's register so chord tones double melody
               notes); piano + drums (GM kit on channel 10)
  levels       the melody's RMS 0 dB and -6 dB against the background's RMS

Every melody has repeated notes (two or three equal notes in a row, a short
gap between them), leaps (up to an octave) and short notes (an eighth or a
sixteenth at 100-120 bpm). The melody and the band are rendered separately
(so the level is exact) and summed; the mix is peak-normalised to 0.9.

Each mix goes through `ebb run --pipeline songtrace --device cpu` (the whole
pipeline, pinned to one CPU core with taskset; its CPU time, user + system,
is the speed figure) and through aubio (aubionotes for notes, aubiopitch -p yinfft for
frames). Scores, as mir_eval computes them (mir_eval 0.8):

  note F1   mir_eval.transcription.precision_recall_f1_overlap with
            onset_tolerance 0.05 s, pitch_tolerance 50 cents, offset_ratio None
  repeated  of the truth notes that repeat the previous note's pitch within
            0.3 s of its end, the share matched by the same rule
  RPA       mir_eval.melody.raw_pitch_accuracy on a 10 ms truth grid (the MIDI
            pitch inside each note, unvoiced elsewhere)
  voicing   mir_eval.melody.voicing_measures on the same grid: recall (truth
            voiced frames reported voiced) and false alarm (truth unvoiced
            frames reported voiced), means over the clips

usage: songtrace_real.py --ebb BUILD/ebb [--quick] [--only SUBSTR] [--keep DIR]
       (--keep: the renders stay in DIR, each clip as NAME.wav with its
        truth notes in NAME.truth.csv (onset,offset,midi in seconds) and
        ebb's outputs in NAME.out/, so other tools can be scored on them)
       [--seeds BASE[,BASE...]]  (clip seeds BASE + 10 * timbre + background;
                        1000 by default, on which the options were chosen;
                        7000 is the held-out set docs/songtrace.md reports
                        (from session 14 to issue 44's session 25 the
                        re-attack model was trained on it; now it is
                        refused as a training set: bench/train_reattack.py);
                        several sets: each set's lines, then the means over
                        all of them; --keep puts each set in DIR/seedsBASE)
       [--misses]       (ebb's missed repeated notes by cause and timbre)
       [--floors F1,REPEATED,RPA_AT_OR_ABOVE,RPA_MINUS6]  (exit 1 below them;
                        with several sets, on the means over all of them)
"""
import argparse
import os
import random
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import json
import warnings

try:
    import numpy as np
    import mir_eval
    from scipy.io import wavfile
except ImportError as e:  # pragma: no cover
    sys.exit(f"songtrace_real: {e}: install python3-numpy python3-scipy and mir_eval for "
             f"{sys.executable} (scripts/install-deps.sh does)")

RATE = 16000
SF2_CANDIDATES = ["/usr/share/sounds/sf2/FluidR3_GM.sf2", "/usr/share/sounds/sf2/default-GM.sf2"]
TIMBRES = [("voice", 53, 58), ("synthvoice", 54, 58), ("sax", 65, 55), ("flute", 73, 64)]
# (name, background, level dB)
BACKGROUNDS = [("solo", None, 0.0), ("piano 0dB", "piano", 0.0), ("piano -6dB", "piano", -6.0),
               ("band 0dB", "band", 0.0), ("band -6dB", "band", -6.0)]
SCALE = [0, 2, 4, 5, 7, 9, 11]
QUICK = ["voice solo", "sax piano 0dB", "flute band 0dB", "synthvoice band -6dB"]  # --quick


def conditions(seeds):
    """Every condition as (name, timbre, program, base key, background,
    level dB, clip seed), clip seeds from `seeds`."""
    return [(f"{tname} {bname}", tname, prog, base, bg, lev, seeds + 10 * ti + bi)
            for ti, (tname, prog, base) in enumerate(TIMBRES)
            for bi, (bname, bg, lev) in enumerate(BACKGROUNDS)]


# --- MIDI -------------------------------------------------------------------
TPQ = 480


def vlq(n):
    out = [n & 0x7F]
    n >>= 7
    while n:
        out.append(0x80 | (n & 0x7F))
        n >>= 7
    return bytes(reversed(out))


def write_midi(path, tempo_bpm, events):
    """events: (seconds, bytes) of channel messages; format 0, one track."""
    us = int(round(60e6 / tempo_bpm))
    tps = TPQ * 1e6 / us  # ticks per second
    body = b"\x00\xff\x51\x03" + us.to_bytes(3, "big")
    last = 0
    for t, msg in sorted(events, key=lambda e: (e[0], e[1][0] & 0xF0 != 0x80, e[1])):
        tick = int(round(t * tps))
        body += vlq(tick - last) + msg
        last = tick
    body += b"\x00\xff\x2f\x00"
    with open(path, "wb") as f:
        f.write(b"MThd" + struct.pack(">IHHH", 6, 0, 1, TPQ))
        f.write(b"MTrk" + struct.pack(">I", len(body)) + body)


def note_events(ch, notes, vel):
    ev = []
    for on, off, key in notes:
        ev.append((on, bytes([0x90 | ch, key, vel])))
        ev.append((off, bytes([0x80 | ch, key, 0])))
    return ev


# --- material ---------------------------------------------------------------
def make_melody(rng, base, seconds, bpm):
    """Notes (onset, offset, key) in one major key, base..base+18 (pYIN's fmax is 1000 Hz)."""
    beat = 60.0 / bpm
    tonic = base + rng.randrange(0, 5)
    degree = rng.randrange(2, 6)
    key_of = lambda d: tonic + 12 * (d // 7) + SCALE[d % 7]
    notes, t = [], beat
    while t < seconds - 2 * beat:
        kind = rng.random()
        if kind < 0.22:  # repeated notes
            count, dur = rng.choice([2, 3]), rng.choice([0.5, 1.0])
        elif kind < 0.42:  # short notes
            count, dur = rng.choice([2, 4]), rng.choice([0.25, 0.5])
        else:
            count, dur = 1, rng.choice([0.5, 1.0, 1.5, 2.0])
        if kind >= 0.22:
            step = rng.choice([-4, -3, 3, 4, 5, 7]) if rng.random() < 0.25 else rng.choice([-2, -1, 1, 2])
            degree = min(max(degree + step, 0), 8)
        for _ in range(count):
            if kind >= 0.22 and kind < 0.42 and _ > 0:
                degree = min(max(degree + rng.choice([-1, 1]), 0), 8)
            gap = 0.06 if dur * beat > 0.2 else 0.03
            notes.append((t, t + dur * beat - gap, key_of(degree)))
            t += dur * beat
        if rng.random() < 0.2:
            t += beat  # a rest
    return notes, tonic


def make_band(rng, tonic, seconds, bpm, drums):
    beat = 60.0 / bpm
    bar = 4 * beat
    prog = [[0, 4, 7], [7, 11, 14], [9, 12, 16], [5, 9, 12]]
    root = tonic - 12 + (0 if rng.random() < 0.5 else 7)
    ev, i, t = [], 0, 0.0
    ev.append((0.0, bytes([0xC1, 0])))  # piano on channel 2
    while t < seconds - 0.5:
        chord = [root + x for x in prog[i % 4]] + [root + 12 + prog[i % 4][0]]
        for b in range(4):  # the chord on every beat: it repeats
            on = t + b * beat
            for k in chord:
                ev.append((on, bytes([0x91, k, 70])))
                ev.append((on + beat * 0.9, bytes([0x81, k, 0])))
        if drums:
            for b in range(8):
                on = t + b * beat / 2
                hits = [42]
                if b in (0, 4):
                    hits.append(36)
                if b in (2, 6):
                    hits.append(38)
                for k in hits:
                    ev.append((on, bytes([0x99, k, 90])))
                    ev.append((on + 0.1, bytes([0x89, k, 0])))
        t += bar
        i += 1
    return ev


def render(sf2, mid, wav):
    subprocess.run(["fluidsynth", "-ni", "-q", "-g", "0.5", "-r", str(RATE), "-F", wav, sf2, mid],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r, x = wavfile.read(wav)
    if r != RATE:
        raise SystemExit(f"songtrace_real: fluidsynth wrote {r} Hz, asked {RATE}")
    x = x.astype(np.float64) / 32768.0
    return x.mean(axis=1) if x.ndim == 2 else x


def make_clip(work, sf2, name, program, base, bg, level_db, seed, seconds):
    rng = random.Random(seed)
    bpm = rng.choice([100, 110, 120])
    notes, tonic = make_melody(rng, base, seconds, bpm)
    mel_mid, band_mid = os.path.join(work, name + ".melody.mid"), os.path.join(work, name + ".band.mid")
    write_midi(mel_mid, bpm, [(0.0, bytes([0xC0, program]))] + note_events(0, notes, 100))
    mel = render(sf2, mel_mid, os.path.join(work, name + ".melody.wav"))
    mix = mel
    if bg:
        write_midi(band_mid, bpm, make_band(rng, tonic, seconds, bpm, bg == "band"))
        band = render(sf2, band_mid, os.path.join(work, name + ".band.wav"))
        n = max(len(mel), len(band))
        mel, band = np.pad(mel, (0, n - len(mel))), np.pad(band, (0, n - len(band)))
        g = 10 ** (level_db / 20) * np.sqrt(np.mean(band ** 2) / max(np.mean(mel ** 2), 1e-20))
        mix = g * mel + band
    mix = 0.9 * mix / max(np.max(np.abs(mix)), 1e-9)
    path = os.path.join(work, name + ".wav")
    wavfile.write(path, RATE, (mix * 32767).astype(np.int16))
    with open(os.path.join(work, name + ".truth.csv"), "w") as f:
        f.write("onset,offset,midi\n" + "".join(f"{a:.6f},{b:.6f},{k}\n" for a, b, k in notes))
    return path, notes, len(mix) / RATE


# --- estimators --------------------------------------------------------------
EBB_EXTRA = []  # --config FILE --pipeline NAME for experiments


def run_ebb(ebb, wav, out):
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    pipe = EBB_EXTRA or ["--pipeline", "songtrace"]
    subprocess.run(cmd + [ebb, "run"] + pipe + ["--device", "cpu", "--no-cache", "-o", out, wav], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=dict(os.environ, EBB_WHISPER_URL=""))
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    with open(os.path.join(out, "songtrace.json")) as f:
        notes = json.load(f)["notes"]
    est = [(n["onset"], n["offset"], n["hz"]) for n in notes]
    tf = np.loadtxt(os.path.join(out, "pitch.csv"), delimiter=",", skiprows=1, ndmin=2)
    return est, tf[:, 0], tf[:, 1], cpu


def run_aubio(wav):
    out = subprocess.run(["aubionotes", "-i", wav], check=True, capture_output=True, text=True).stdout
    est = []
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and float(f[2]) > float(f[1]):
            est.append((float(f[1]), float(f[2]), 440.0 * 2 ** ((float(f[0]) - 69) / 12)))
    out = subprocess.run(["aubiopitch", "-i", wav, "-p", "yinfft", "-B", "1024", "-H", "160",
                          "-s", "-70"], check=True, capture_output=True, text=True).stdout
    tf = np.array([[float(x) for x in l.split()] for l in out.splitlines() if l.strip()] or [[0, 0]])
    return est, tf[:, 0], np.maximum(tf[:, 1], 0)


# --- scoring -----------------------------------------------------------------
def midi_hz(k):
    return 440.0 * 2 ** ((k - 69) / 12)


def score(truth, est, et, ef, seconds):
    ref_i = np.array([[a, b] for a, b, _ in truth])
    ref_p = np.array([midi_hz(k) for _, _, k in truth])
    if est:
        est_i = np.array([[a, max(b, a + 1e-3)] for a, b, _ in est])
        est_p = np.array([h for _, _, h in est])
    else:
        est_i, est_p = np.zeros((0, 2)), np.zeros(0)
    _, _, f1, _ = mir_eval.transcription.precision_recall_f1_overlap(
        ref_i, ref_p, est_i, est_p, onset_tolerance=0.05, pitch_tolerance=50.0, offset_ratio=None)
    matched = {r for r, _ in mir_eval.transcription.match_notes(
        ref_i, ref_p, est_i, est_p, onset_tolerance=0.05, pitch_tolerance=50.0, offset_ratio=None)}
    rep = [i for i in range(1, len(truth))
           if truth[i][2] == truth[i - 1][2] and truth[i][0] - truth[i - 1][1] < 0.3]
    rep_hit = sum(1 for i in rep if i in matched)
    rt = np.arange(0.0, seconds, 0.01)
    rf = np.zeros_like(rt)
    for a, b, k in truth:
        rf[(rt >= a) & (rt < b)] = midi_hz(k)
    rv, rc, ev, ec = mir_eval.melody.to_cent_voicing(rt, rf, np.asarray(et, float), np.asarray(ef, float))
    rpa = mir_eval.melody.raw_pitch_accuracy(rv, rc, ev, ec)
    vr, vfa = mir_eval.melody.voicing_measures(rv, ev)
    return f1, len(rep), rep_hit, rpa, [i for i in rep if i not in matched], vr, vfa


# --- the misses --------------------------------------------------------------
MISS_CAUSES = ["merged", "other pitch", "onset 50-150 ms off", "no note", "other"]  # as miss_cause


def miss_cause(truth, est, i):
    """Why truth note i (a repeated note ebb missed) was missed, first rule
    that holds:
    other pitch: a note starts within 50 ms of it, none at its pitch (or a
      note of another pitch covers its onset, or starts within 150 ms of
      it with nothing of its pitch near): the track follows something else;
    onset 50-150 ms off: a note of its pitch starts that far from it;
    merged: a note of its pitch that began earlier covers its onset (the
      re-attack was not found);
    no note: nothing sounds within 150 ms of it (unvoiced);
    other: a note of its pitch starts within 50 ms but was matched to
      another truth note."""
    t0, k = truth[i][0], truth[i][2]
    same = lambda hz: abs(69 + 12 * np.log2(hz / 440.0) - k) <= 0.5
    near50 = [h for a, _, h in est if abs(a - t0) <= 0.05]
    if near50:
        return "other" if any(same(h) for h in near50) else "other pitch"
    if any(same(h) for a, _, h in est if abs(a - t0) <= 0.15):
        return "onset 50-150 ms off"
    cover = [h for a, b, h in est if a < t0 - 0.05 and b > t0 + 0.05]
    if cover:
        return "merged" if same(cover[0]) else "other pitch"
    return "other pitch" if any(abs(a - t0) <= 0.15 for a, _, _ in est) else "no note"


def run_set(a, sf2, work, seeds, seconds, ebb_misses):
    """One set of clips from seed base `seeds`: renders, runs and scores
    them, prints a line per clip; returns the rows, audio and CPU seconds."""
    conds = conditions(seeds)
    if a.quick:
        conds = [c for c in conds if c[0] in QUICK]
    if a.only:
        conds = [c for c in conds if a.only in c[0]]
    if not conds:
        sys.exit(f"songtrace_real: --only {a.only!r} leaves none of the --quick clips "
                 f"({', '.join(QUICK)})")
    print(f"songtrace on fluidsynth renders of {os.path.basename(sf2)} ({len(conds)} clips x "
          f"{seconds:.0f} s, 16 kHz, seeds from {seeds}); notes: mir_eval onset 50 ms + pitch 50 cents; "
          f"RPA: mir_eval raw pitch accuracy")
    print(f"{'condition':24s} {'notes':>5s} | {'ebb F1':>6s} {'rep':>5s} {'RPA':>5s} | "
          f"{'aubio F1':>8s} {'rep':>5s} {'RPA':>5s}")
    rows, audio_s, wall_s = [], 0.0, 0.0
    for cname, tname, prog, base, bg, lev, seed in conds:
        slug = cname.replace(" ", "_")
        wav, truth, dur = make_clip(work, sf2, slug, prog, base, bg, lev, seed, seconds)
        est, et, ef, wall = run_ebb(a.ebb, wav, os.path.join(work, slug + ".out"))
        audio_s += dur
        wall_s += wall
        e = score(truth, est, et, ef, dur)
        aest, at, af = run_aubio(wav)
        u = score(truth, aest, at, af, dur)
        rows.append((cname, bg, lev, e, u))
        for i in e[4]:
            ebb_misses.append((tname, miss_cause(truth, est, i)))
        rep = lambda s: f"{s[2]}/{s[1]}" if s[1] else "-"
        print(f"{cname:24s} {len(truth):5d} | {e[0]:6.2f} {rep(e):>5s} {e[3]:5.2f} | "
              f"{u[0]:8.2f} {rep(u):>5s} {u[3]:5.2f}", flush=True)
    return rows, audio_s, wall_s


def summarise(rows, label=""):
    """Prints the two tools' means over rows (and repeated notes by timbre);
    returns ebb's and aubio's figures."""
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")
    summary = {}
    for who, k in (("ebb", 3), ("aubio", 4)):
        r = [x[k] for x in rows]
        nrep, hit = sum(s[1] for s in r), sum(s[2] for s in r)
        summary[who] = dict(
            f1=mean([s[0] for s in r]), rep=hit / nrep if nrep else float("nan"), nrep=nrep, hit=hit,
            rpa_hi=mean([s[3] for x, s in zip(rows, r) if x[2] >= 0.0]),
            rpa_lo=mean([s[3] for x, s in zip(rows, r) if x[2] < 0.0]),
            rpa=mean([s[3] for s in r]), vr=mean([s[5] for s in r]), vfa=mean([s[6] for s in r]))
        s = summary[who]
        print(f"{label}{who:6s} mean note F1@50 {s['f1']:.3f}  repeated notes found {s['hit']}/{s['nrep']} "
              f"({s['rep']:.2f})  RPA melody at/above band {s['rpa_hi']:.3f}  at -6 dB "
              f"{s['rpa_lo']:.3f}  all {s['rpa']:.3f}  voicing recall {s['vr']:.3f}  "
              f"false alarm {s['vfa']:.3f}")
    by = []
    for tname, _, _ in TIMBRES:
        cell = []
        for k in (3, 4):
            r = [x[k] for x in rows if x[0].split()[0] == tname]
            if r:
                cell.append(f"{sum(s[2] for s in r)}/{sum(s[1] for s in r)}")
        if cell:
            by.append(f"{tname} {' vs '.join(cell)}")
    if by:
        print(f"{label}repeated notes found by timbre, ebb vs aubio: " + "; ".join(by))
    return summary


def main():
    warnings.filterwarnings("ignore", module="mir_eval")  # aubio's 3-decimal times
    ap = argparse.ArgumentParser()
    ap.add_argument("--ebb", required=True, help="the ebb binary to run (build/ebb)")
    ap.add_argument("--quick", action="store_true", help="4 short clips (the test's set)")
    ap.add_argument("--only", default="", help="only the conditions whose name holds this text "
                    "(such as \"sax\" or \"band -6dB\")")
    ap.add_argument("--keep", default="", help="leave the clips, their truth notes "
                    "(NAME.truth.csv) and ebb's outputs in this directory")
    ap.add_argument("--floors", default="", help="F1,REPEATED,RPA_AT_OR_ABOVE,RPA_MINUS6: "
                    "exit 1 when ebb is below any of them")
    ap.add_argument("--seeds", default="1000",
                    help="first clip seed, or several sets' comma-separated (1000: the tuning "
                         "set; docs/songtrace.md also quotes 7000, 5000, 3000, 9000, 11000, "
                         "13000 and 15000; the pitch stage's re-attack model is trained on "
                         "20000-30000, never on those (bench/train_reattack.py))")
    ap.add_argument("--misses", action="store_true",
                    help="also print ebb's missed repeated notes by cause and timbre")
    ap.add_argument("--config", default="", help="experiments: ebb run --config FILE --pipeline P")
    ap.add_argument("--pipeline", default="songtrace", help="the pipeline of --config to run")
    a = ap.parse_args()
    try:
        sets = [int(x) for x in a.seeds.split(",")]
    except ValueError:
        sys.exit(f"songtrace_real: --seeds {a.seeds!r}: want a seed or comma-separated seeds, "
                 f"such as 1000 or 1000,7000")
    if not sets or len(set(sets)) != len(sets) or any(x < 0 for x in sets):
        sys.exit(f"songtrace_real: --seeds {a.seeds!r}: want distinct seeds of 0 or more")
    names = [c[0] for c in conditions(0)]
    if a.only and not any(a.only in n for n in names):
        sys.exit(f"songtrace_real: --only {a.only!r} names no condition; they are "
                 + ", ".join(f"'{n}'" for n in names))
    fl = []
    if a.floors:
        try:
            fl = [float(x) for x in a.floors.split(",")]
        except ValueError:
            fl = []
        if len(fl) != 4:
            sys.exit(f"songtrace_real: --floors {a.floors!r}: want four numbers, "
                     f"F1,REPEATED,RPA_AT_OR_ABOVE,RPA_MINUS6")
    if a.config:
        EBB_EXTRA.extend(["--config", a.config, "--pipeline", a.pipeline])
    for tool in ("fluidsynth", "aubionotes", "aubiopitch"):
        if not shutil.which(tool):
            sys.exit(f"songtrace_real: {tool} is not installed (scripts/install-deps.sh installs it)")
    sf2 = next((p for p in SF2_CANDIDATES if os.path.exists(p)), None)
    if not sf2:
        sys.exit("songtrace_real: no General MIDI soundfont (Debian fluid-soundfont-gm)")
    work = a.keep or tempfile.mkdtemp(prefix="songtrace-real.")
    os.makedirs(work, exist_ok=True)
    seconds = 10.0 if a.quick else 16.0
    rows, audio_s, wall_s, misses = [], 0.0, 0.0, []
    for n in sets:
        # one set keeps its clips in the work directory itself; several, one folder each
        sub = work if len(sets) == 1 else os.path.join(work, f"seeds{n}")
        os.makedirs(sub, exist_ok=True)
        r, au, wa = run_set(a, sf2, sub, n, seconds, misses)
        summary = summarise(r)
        rows += r
        audio_s += au
        wall_s += wa
    if len(sets) > 1:
        summary = summarise(rows, f"over {len(sets)} sets ({a.seeds}): ")
    if a.misses:
        print(f"ebb's missed repeated notes by cause: {len(misses)} of {summary['ebb']['nrep']}")
        for c in MISS_CAUSES:
            n = [sum(1 for tt, m in misses if m == c and tt == t) for t, _, _ in TIMBRES]
            print(f"  {c:20s} {sum(n):4d} (" +
                  ", ".join(f"{t} {k}" for (t, _, _), k in zip(TIMBRES, n)) + ")")
    print(f"speed: ebb run --pipeline songtrace pinned to one core: {audio_s:.0f} s of audio in "
          f"{wall_s:.1f} s of CPU time = {audio_s / wall_s:.1f}x real time (process start "
          f"included; CPU time, not wall time, so other load on the machine does not count)")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    if a.floors:
        s = summary["ebb"]
        got = [s["f1"], s["rep"], s["rpa_hi"], s["rpa_lo"]]
        names = ["mean note F1@50", "repeated notes found", "RPA at/above", "RPA at -6 dB"]
        bad = [f"{n} {g:.3f} < floor {f:.3f}" for n, g, f in zip(names, got, fl)
               if not (g >= f)]
        if bad:
            print("songtrace_real: below the floors: " + "; ".join(bad))
            return 1
        print("songtrace_real: all floors hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
