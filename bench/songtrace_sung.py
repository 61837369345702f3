#!/opt/ebb-tools/sing/bin/python
"""songtrace on sung melodies, scored with mir_eval beside the instrument set.

The instrument set (bench/songtrace_real.py) renders GM soundfont timbres;
songs are sung. This set is made here, at bench time, from speech: several
Debian synthesisers speak each note's word (or a vowel), WORLD (pyworld)
analyses it, and the speech is re-sung on a written melody with its
spectral envelope (formants) and aperiodicity kept:

  voices      espeak-ng male (en-us+m3) and female (en-us+f3), flite rms
              (male) and slt (female), festival kal (male)
  styles      words   one word per note, some words held over two or three
                      notes (melismas), consonants between vowels
              vowels  one vowel per legato group of notes (notes joined
                      without a gap, a glide at each change)
  the melody  the instrument set's melody writer (repeats, leaps, short
              notes, rests), in the voice's range; about a third of the
              notes joined legato to the next; vibrato 5-6.5 Hz, 0-45 cents
              from 150 ms into notes over 0.3 s; a 40-70 ms glide at each
              legato change; a scoop of -40 cents into some attacks
  backgrounds the instrument set's (none; piano chords at 0 and -6 dB; piano
              and drums at 0 and -6 dB), rendered by fluidsynth

Truth: the written notes and an f0 track on a 10 ms grid that is the sung
contour (vibrato, glides) over each note's span and, inside a legato run
sung on one word or vowel, over the gaps between its notes (the voice holds
the note before until the next starts), unvoiced elsewhere. As in
songgen's worded demo, a word sounds from its note's onset (its first
consonant) to its offset (its last), so consonants count as the note's
voiced frames. The speech is time-warped with its consonants at their own
length (the leading one at most 120 ms, the trailing one 100 ms, together at
most half the note) and its voiced frames stretched to fill the rest.

Each mix goes through `ebb run --pipeline songtrace --device cpu` pinned to
one core (as songtrace_real.py does). Scores (mir_eval 0.8): note F1
(onset 50 ms, pitch 50 cents, no offsets), raw pitch accuracy, voicing
recall and voicing false alarm (mir_eval.melody on the 10 ms truth grid),
note count against the truth, and CPU time per second of audio.

Nothing here is downloaded or committed: the speech comes from the
synthesisers installed by scripts/install-deps.sh, pyworld from the venv
/opt/ebb-tools/sing (which sees Debian's numpy/scipy and mir_eval).

usage: songtrace_sung.py --ebb BUILD/ebb [--quick] [--only SUBSTR]
       [--seeds BASE] [--keep DIR] [--instruments]
       (--instruments: also run songtrace_real.py's instrument set in the
        same run and print its lines, so the two sources sit side by side)
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import numpy as np
    import mir_eval
    import pyworld as pw
    from scipy.io import wavfile
    from scipy.signal import resample_poly
    import songtrace_real as sr
except ImportError as e:  # pragma: no cover
    sys.exit(f"songtrace_sung: {e}: run with /opt/ebb-tools/sing/bin/python (pyworld over "
             f"Debian's numpy/scipy and mir_eval; scripts/install-deps.sh makes it)")

RATE = sr.RATE
FP = 5.0  # WORLD frame period, ms
# (name, command-line maker, melody base MIDI note)
VOICES = [
    ("espeak-m", lambda t, o: ["espeak-ng", "-v", "en-us+m3", "-s", "140", "-w", o, t], 48),
    ("espeak-f", lambda t, o: ["espeak-ng", "-v", "en-us+f3", "-s", "140", "-w", o, t], 58),
    ("flite-rms", lambda t, o: ["flite", "-voice", "rms", "-t", t, "-o", o], 47),
    ("flite-slt", lambda t, o: ["flite", "-voice", "slt", "-t", t, "-o", o], 57),
    ("festival-kal", None, 49),  # text2wave reads its text from a file
]
STYLES = ["words", "vowels"]
WORDS = ["love", "shine", "morning", "river", "golden", "sky", "dream", "follow", "silver",
         "light", "heart", "away", "tonight", "ocean", "sweet", "little", "summer", "song",
         "falling", "home", "wonder", "blue", "fire", "slowly"]
VOWELS = ["ah", "oh", "ooh", "eh", "ay"]
QUICK = ["espeak-f words solo", "flite-rms vowels piano 0dB", "festival-kal words band -6dB",
         "espeak-m words piano -6dB"]


def conditions(seeds):
    return [(f"{v[0]} {st} {bname}", vi, st, bg, lev, seeds + 100 * vi + 10 * si + bi)
            for vi, v in enumerate(VOICES) for si, st in enumerate(STYLES)
            for bi, (bname, bg, lev) in enumerate(sr.BACKGROUNDS)]


# --- speech -------------------------------------------------------------------
_SPEECH = {}


def speak(voice, text, work):
    """The voice speaking text: (WORLD f0, sp, ap) of the trimmed speech."""
    key = (voice[0], text)
    if key in _SPEECH:
        return _SPEECH[key]
    out = os.path.join(work, "speech.wav")
    if voice[1] is None:
        txt = os.path.join(work, "speech.txt")
        with open(txt, "w") as f:
            f.write(text + "\n")
        cmd = ["text2wave", "-o", out, txt]
    else:
        cmd = voice[1](text, out)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r, x = wavfile.read(out)
    x = x.astype(np.float64) / 32768.0
    if x.ndim == 2:
        x = x.mean(axis=1)
    if r != RATE:
        g = np.gcd(int(r), RATE)
        x = resample_poly(x, RATE // g, int(r) // g)
    e = np.convolve(x ** 2, np.ones(160) / 160, mode="same")
    on = np.nonzero(e > 1e-4 * e.max())[0]
    x = np.ascontiguousarray(x[max(on[0] - 80, 0):on[-1] + 80] if len(on) else x)
    f0, t = pw.dio(x, RATE, frame_period=FP, f0_floor=60.0, f0_ceil=500.0)
    f0 = pw.stonemask(x, f0, t, RATE)
    sp = pw.cheaptrick(x, f0, t, RATE)
    ap = pw.d4c(x, f0, t, RATE)
    sp = sp / max(np.sqrt(np.mean(np.sum(sp[f0 > 0], axis=1))) if (f0 > 0).any() else 1.0, 1e-9) ** 2
    _SPEECH[key] = (clean_voicing(f0), sp, ap)
    return _SPEECH[key]


def runs(mask):
    """[start, end) of each run of True in mask."""
    d = np.diff(np.concatenate([[0], mask.astype(int), [0]]))
    return list(zip(np.nonzero(d == 1)[0], np.nonzero(d == -1)[0]))


def clean_voicing(f0, short=int(40 / FP)):
    """DIO's voicing without its dropouts: unvoiced gaps under 40 ms inside
    voiced speech take the pitch around them, voiced islands under 40 ms
    (breath) go."""
    f0 = f0.copy()
    for a, b in runs(f0 <= 0):
        if a > 0 and b < len(f0) and b - a < short:
            f0[a:b] = np.interp(np.arange(a, b), [a - 1, b], [f0[a - 1], f0[b]])
    for a, b in runs(f0 > 0):
        if b - a < short:
            f0[a:b] = 0.0
    return f0


def warp(f0, lead, tail, mid):
    """Source frame positions for lead + mid + tail output frames: the lead
    consonant (lead frames before the first voiced one) and the tail (after
    the last) at their own speed; between, voiced frames stretched and
    unvoiced ones (consonants between vowels) at their own length, at most
    half the note. Also whether each output frame's source is voiced."""
    v = f0 > 0
    if not v.any():
        v = np.ones(len(f0), bool)
    first, last = int(np.argmax(v)), len(v) - 1 - int(np.argmax(v[::-1]))
    body = v[first:last + 1]
    nu = float((~body).sum())
    u = min(1.0, 0.5 * mid / nu) if nu else 1.0
    k = (mid - u * nu) / max(float(body.sum()), 1.0)
    w = np.concatenate([np.ones(lead), np.where(body, k, u), np.ones(tail)])
    src = np.arange(first - lead, last + 1 + tail + 1, dtype=float)
    edges = np.concatenate([[0.0], np.cumsum(w)])
    pos = np.interp(np.arange(lead + mid + tail) + 0.5, edges, src)
    pos = np.clip(pos, 0, len(f0) - 1)
    return pos, v[np.clip(np.round(pos).astype(int), 0, len(v) - 1)]


def lerp_rows(a, pos):
    i = np.clip(np.floor(pos).astype(int), 0, len(a) - 1)
    j = np.clip(i + 1, 0, len(a) - 1)
    fr = (pos - i)[:, None]
    return (1 - fr) * a[i] + fr * a[j]


def level_like_singing(sp, voiced):
    """A sung vowel holds its level where speech fades (stretched, a spoken
    vowel's decay would last hundreds of ms): voiced frames are compressed
    towards their median energy (ratio 5:1), then released over the last
    40 ms; consonants keep their level."""
    e = sp.sum(axis=1)
    if not voiced.any():
        return sp
    med = np.median(e[voiced])
    g = np.where(voiced, np.clip((med / np.maximum(e, 1e-20)) ** 0.8, 0.1, 30.0), 1.0)
    last = len(voiced) - 1 - int(np.argmax(voiced[::-1]))
    rel = int(40 / FP)
    for k in range(rel):
        if last - k >= 0 and voiced[last - k]:
            g[last - k] *= ((k + 1) / (rel + 1)) ** 2
    return sp * g[:, None]


# --- the melody -----------------------------------------------------------------
def contour(notes, legato, rng, n_frames):
    """The sung f0 (Hz) per WORLD frame over the whole clip: each note's
    pitch with scoop, vibrato and glides into legato successors."""
    hz = np.zeros(n_frames)
    depth = rng.choice([0.0, 20.0, 35.0, 45.0])
    rate = rng.uniform(5.0, 6.5)
    for i, (on, off, k) in enumerate(notes):
        a, b = int(round(on * 1000 / FP)), min(int(round(off * 1000 / FP)), n_frames)
        if a >= b:
            continue
        t = (np.arange(a, b) * FP / 1000) - on
        cents = np.zeros(len(t))
        if off - on > 0.3:
            ramp = np.clip((t - 0.15) / 0.15, 0, 1)
            cents += depth * ramp * np.sin(2 * np.pi * rate * t + rng.uniform(0, 6.28))
        prev_legato = i > 0 and legato[i - 1]
        if prev_legato:
            g = rng.uniform(0.04, 0.07)
            d = 100.0 * (notes[i - 1][2] - k)
            cents += d * np.clip(1 - t / g, 0, 1)
        elif rng.random() < 0.4:
            cents += -40.0 * np.clip(1 - t / 0.06, 0, 1)
        hz[a:b] = sr.midi_hz(k) * 2 ** (cents / 1200)
        if legato[i] and i + 1 < len(notes):
            hz[b:min(int(round(notes[i + 1][0] * 1000 / FP)), n_frames)] = sr.midi_hz(k)
    return hz


def groups(notes, legato, style, rng):
    """Notes -> sung groups (first note, last note, text): a vowel over each
    legato run, or a word per note with some words held over the next one
    or two notes (a melisma)."""
    out, i = [], 0
    while i < len(notes):
        j = i
        if style == "vowels":
            while j + 1 < len(notes) and legato[j]:
                j += 1
            out.append((i, j, rng.choice(VOWELS)))
        else:
            if legato[i] and rng.random() < 0.5:
                while j + 1 < len(notes) and legato[j] and j - i < 2:
                    j += 1
            out.append((i, j, rng.choice(WORDS)))
        i = j + 1
    return out


def sing(voice, notes, style, rng, seconds, work):
    """The sung melody (RATE samples) and its truth f0 on a 10 ms grid."""
    legato = [i + 1 < len(notes) and notes[i + 1][0] - notes[i][1] < 0.1 and rng.random() < 0.35
              for i in range(len(notes))]
    nf = int(seconds * 1000 / FP) + 1
    hz = contour(notes, legato, rng, nf)
    f0 = np.zeros(nf)
    sp = np.full((nf, 513), 1e-12)
    ap = np.ones((nf, 513))
    spans = []
    for gi, gj, text in groups(notes, legato, style, rng):
        sf0, ssp, sap = speak(voice, text, work)
        a = int(round(notes[gi][0] * 1000 / FP))
        b = min(int(round(notes[gj][1] * 1000 / FP)), nf)
        if b - a < 4:
            continue
        spans.append((notes[gi][0], notes[gj][1]))
        v = sf0 > 0
        lead = min(int(np.argmax(v)) if v.any() else 0, int(120 / FP))
        tail = min(int(np.argmax(v[::-1])) if v.any() else 0, int(100 / FP))
        span = b - a
        if lead + tail > span // 2:  # a short note: the consonants take at most half
            lead, tail = lead * (span // 2) // (lead + tail), tail * (span // 2) // (lead + tail)
        pos, vo = warp(sf0, lead, tail, span - lead - tail)
        if style == "vowels":  # a vowel is voiced from its first voiced frame to its last
            vo = np.arange(span) >= lead
            vo &= np.arange(span) < span - tail
        # the whole word sounds inside the note's span (its truth voiced
        # throughout, as songgen's); f0 only where the speech was voiced
        f0[a:b] = np.where(vo, hz[a:b], 0.0)
        sp[a:b] = level_like_singing(lerp_rows(ssp, pos), vo)
        ap[a:b] = lerp_rows(sap, pos)
    y = pw.synthesize(f0, np.ascontiguousarray(sp), np.ascontiguousarray(ap), RATE, FP)
    n = int(seconds * RATE)
    y = np.pad(y, (0, max(0, n - len(y))))[:n]
    grid = np.arange(0.0, seconds, 0.01)
    truth = np.zeros(len(grid))
    # voiced over each sung group: its notes and, inside a legato run sung
    # on one word or vowel, the gaps between them, where the voice holds
    # the note before until the next starts (contour's hz there)
    for on, off in spans + [(on, off) for on, off, _ in notes]:
        m = (grid >= on) & (grid < off)
        truth[m] = hz[np.clip(np.round(grid[m] * 1000 / FP).astype(int), 0, nf - 1)]
    return y, grid, truth


def load_clip(work, name):
    """A clip --keep left in work (its mix, notes and f0 truth), else None."""
    p = [os.path.join(work, name + x) for x in (".wav", ".truth.csv", ".f0.csv")]
    if not all(os.path.exists(x) for x in p):
        return None
    r, x = wavfile.read(p[0])
    t = np.loadtxt(p[1], delimiter=",", skiprows=1, ndmin=2)
    f = np.loadtxt(p[2], delimiter=",", skiprows=1, ndmin=2)
    return p[0], [(a, b, int(k)) for a, b, k in t], f[:, 0], f[:, 1], len(x) / r


def make_clip(work, sf2, name, voice, style, bg, level_db, seed, seconds, reuse=False):
    if reuse:
        got = load_clip(work, name)
        if got:
            return got
    rng = random.Random(seed)
    bpm = rng.choice([90, 100, 110])
    notes, tonic = sr.make_melody(rng, voice[2], seconds, bpm)
    mel, grid, truth = sing(voice, notes, style, rng, seconds, work)
    mix = mel
    if bg:
        band_mid = os.path.join(work, name + ".band.mid")
        sr.write_midi(band_mid, bpm, sr.make_band(rng, tonic, seconds, bpm, bg == "band"))
        band = sr.render(sf2, band_mid, os.path.join(work, name + ".band.wav"))
        n = max(len(mel), len(band))
        mel, band = np.pad(mel, (0, n - len(mel))), np.pad(band, (0, n - len(band)))
        g = 10 ** (level_db / 20) * np.sqrt(np.mean(band ** 2) / max(np.mean(mel ** 2), 1e-20))
        mix = g * mel + band
    mix = 0.9 * mix / max(np.max(np.abs(mix)), 1e-9)
    path = os.path.join(work, name + ".wav")
    wavfile.write(path, RATE, (mix * 32767).astype(np.int16))
    with open(os.path.join(work, name + ".truth.csv"), "w") as f:
        f.write("onset,offset,midi\n" + "".join(f"{a:.6f},{b:.6f},{k}\n" for a, b, k in notes))
    np.savetxt(os.path.join(work, name + ".f0.csv"), np.c_[grid, truth], delimiter=",",
               fmt="%.4f", header="time,hz", comments="")
    return path, notes, grid, truth, len(mix) / RATE


# --- scoring -------------------------------------------------------------------
def score(notes, grid, truth, est, et, ef):
    ref_i = np.array([[a, b] for a, b, _ in notes])
    ref_p = np.array([sr.midi_hz(k) for _, _, k in notes])
    if est:
        est_i = np.array([[a, max(b, a + 1e-3)] for a, b, _ in est])
        est_p = np.array([h for _, _, h in est])
    else:
        est_i, est_p = np.zeros((0, 2)), np.zeros(0)
    _, _, f1, _ = mir_eval.transcription.precision_recall_f1_overlap(
        ref_i, ref_p, est_i, est_p, onset_tolerance=0.05, pitch_tolerance=50.0, offset_ratio=None)
    rv, rc, ev, ec = mir_eval.melody.to_cent_voicing(grid, truth, np.asarray(et, float),
                                                     np.asarray(ef, float))
    rpa = mir_eval.melody.raw_pitch_accuracy(rv, rc, ev, ec)
    vr, vfa = mir_eval.melody.voicing_measures(rv, ev)
    out = dict(f1=f1, rpa=rpa, vr=vr, vfa=vfa, n=len(notes), est=len(est))
    out.update(frame_causes(notes, grid, rv, rc, ev, ec))
    out.update(note_causes(notes, est, ref_i, ref_p, est_i, est_p))
    return out


def frame_causes(notes, grid, rv, rc, ev, ec):
    """Where the frames go. Of the truth-voiced frames: the right pitch
    (within 50 cents, as RPA), an octave or more off (a whole number of
    octaves within 50 cents), another pitch, unvoiced; of the truth-unvoiced
    frames, voiced within 200 ms after a note's end (its release or the
    gap before the next note) or elsewhere (rests)."""
    tv, eh = rv > 0, ev > 0
    both = tv & eh
    dc = np.abs(rc - ec)
    ok = both & (dc <= 50)
    k = np.round(dc / 1200)
    octave = both & ~ok & (k >= 1) & (np.abs(dc - 1200 * k) <= 50)
    t = np.asarray(grid, float)[:len(rv)]
    tail = np.zeros(len(rv), bool)
    for _, off, _ in notes:
        tail |= (t >= off) & (t < off + 0.2)
    nv, nu = max(int(tv.sum()), 1), max(int((~tv).sum()), 1)
    return dict(fr_ok=ok.sum() / nv, fr_oct=octave.sum() / nv,
                fr_other=(both & ~ok & ~octave).sum() / nv, fr_unv=(tv & ~eh).sum() / nv,
                fa_tail=(~tv & eh & tail).sum() / nu, fa_rest=(~tv & eh & ~tail).sum() / nu)


def note_causes(notes, est, ref_i, ref_p, est_i, est_p):
    """Each missed truth note's cause (songtrace_real.miss_cause's rules,
    first that holds: other pitch, onset 50-150 ms off, merged, no note,
    other), and each extra estimated note's: a split (it starts inside a
    truth note, at its pitch, more than 50 ms after its onset) or not."""
    m = mir_eval.transcription.match_notes(ref_i, ref_p, est_i, est_p, onset_tolerance=0.05,
                                           pitch_tolerance=50.0, offset_ratio=None)
    hit_r, hit_e = {r for r, _ in m}, {e for _, e in m}
    causes = {c: 0 for c in sr.MISS_CAUSES}
    for i in range(len(notes)):
        if i not in hit_r:
            causes[sr.miss_cause(notes, est, i)] += 1
    split = 0
    for j, (a, _, hz) in enumerate(est):
        if j not in hit_e and any(on + 0.05 < a < off and
                                  abs(69 + 12 * np.log2(hz / 440.0) - k) <= 0.5
                                  for on, off, k in notes):
            split += 1
    return dict(miss=causes, extra=len(est) - len(hit_e), split=split)


def causes_line(label, rows):
    """The frame and note causes of rows (frame shares: means over the clips)."""
    m = lambda k: float(np.mean([r[k] for r in rows]))
    miss = {c: sum(r["miss"][c] for r in rows) for c in sr.MISS_CAUSES}
    print(f"{label:34s} voiced frames: pitch {m('fr_ok'):.3f} octave {m('fr_oct'):.3f} other "
          f"{m('fr_other'):.3f} unvoiced {m('fr_unv'):.3f} | unvoiced frames voiced: after a "
          f"note's end {m('fa_tail'):.3f} elsewhere {m('fa_rest'):.3f} | missed notes " +
          ", ".join(f"{c} {n}" for c, n in miss.items()) +
          f" | extra notes {sum(r['extra'] for r in rows)} (splits "
          f"{sum(r['split'] for r in rows)})", flush=True)


def line(label, rows, audio_s, cpu_s):
    m = lambda k: float(np.mean([r[k] for r in rows])) if rows else float("nan")
    n, e = sum(r["n"] for r in rows), sum(r["est"] for r in rows)
    speed = audio_s / cpu_s if cpu_s > 0 else float("nan")
    print(f"{label:34s} {len(rows):3d} clips | F1 {m('f1'):.3f} RPA {m('rpa'):.3f} "
          f"VR {m('vr'):.3f} VFA {m('vfa'):.3f} | notes {e}/{n} | {speed:5.1f}x real time",
          flush=True)


def main():
    warnings.filterwarnings("ignore", module="mir_eval")
    ap = argparse.ArgumentParser()
    ap.add_argument("--ebb", required=True, help="the ebb binary to run (build/ebb)")
    ap.add_argument("--quick", action="store_true", help="4 short clips")
    ap.add_argument("--only", default="", help="only the conditions whose name holds this text")
    ap.add_argument("--seeds", type=int, default=44000, help="first clip seed (44000: the "
                    "development set; 45000: held out)")
    ap.add_argument("--keep", default="", help="leave the clips and outputs in this directory")
    ap.add_argument("--reuse", action="store_true", help="with --keep: score the clips a "
                    "previous --keep run left there again instead of rendering them")
    ap.add_argument("--seconds", type=float, default=0.0, help="clip length (default 12; --quick 8)")
    ap.add_argument("--instruments", action="store_true",
                    help="also run the instrument set (songtrace_real.py) in this run")
    ap.add_argument("--config", default="", help="experiments: ebb run --config FILE --pipeline P")
    ap.add_argument("--pipeline", default="songtrace", help="the pipeline of --config to run")
    a = ap.parse_args()
    if a.config:
        sr.EBB_EXTRA.extend(["--config", a.config, "--pipeline", a.pipeline])
    conds = conditions(a.seeds)
    if a.quick:
        conds = [c for c in conds if c[0] in QUICK]
    if a.only:
        conds = [c for c in conds if a.only in c[0]]
    if not conds:
        sys.exit(f"songtrace_sung: --only {a.only!r} names no condition")
    need = {"espeak-ng", "flite", "text2wave", "fluidsynth"}
    for tool in sorted(need):
        if not shutil.which(tool):
            sys.exit(f"songtrace_sung: {tool} is not installed (scripts/install-deps.sh installs it)")
    sf2 = next((p for p in sr.SF2_CANDIDATES if os.path.exists(p)), None)
    if not sf2:
        sys.exit("songtrace_sung: no General MIDI soundfont (Debian fluid-soundfont-gm)")
    work = a.keep or tempfile.mkdtemp(prefix="songtrace-sung.")
    os.makedirs(work, exist_ok=True)
    seconds = a.seconds or (8.0 if a.quick else 12.0)
    print(f"songtrace on sung melodies (pyworld re-sung speech of {len(VOICES)} voices, "
          f"{len(conds)} clips x {seconds:.0f} s, 16 kHz, seeds from {a.seeds}); mir_eval: "
          f"note F1 onset 50 ms + pitch 50 cents, RPA, voicing recall (VR), false alarm (VFA)")
    rows, cpu = [], {}
    for cname, vi, style, bg, lev, seed in conds:
        slug = cname.replace(" ", "_")
        wav, notes, grid, truth, dur = make_clip(work, sf2, slug, VOICES[vi], style, bg, lev,
                                                 seed, seconds, a.reuse and a.keep)
        est, et, ef, c = sr.run_ebb(a.ebb, wav, os.path.join(work, slug + ".out"))
        s = score(notes, grid, truth, est, et, ef)
        s.update(voice=VOICES[vi][0], style=style, bg=cname.split(" ", 2)[2], dur=dur, cpu=c)
        rows.append(s)
        print(f"  {cname:32s} notes {s['est']:3d}/{s['n']:3d} | F1 {s['f1']:.2f} RPA {s['rpa']:.2f} "
              f"VR {s['vr']:.2f} VFA {s['vfa']:.2f} | {dur / c:5.1f}x", flush=True)
    tot = lambda rs: (sum(r["dur"] for r in rs), sum(r["cpu"] for r in rs))
    print("by voice:")
    for v in VOICES:
        rs = [r for r in rows if r["voice"] == v[0]]
        if rs:
            line(f"  {v[0]}", rs, *tot(rs))
    print("by style and background:")
    for st in STYLES:
        rs = [r for r in rows if r["style"] == st]
        if rs:
            line(f"  {st}", rs, *tot(rs))
    for bname, _, _ in sr.BACKGROUNDS:
        rs = [r for r in rows if r["bg"] == bname]
        if rs:
            line(f"  {bname}", rs, *tot(rs))
    line("sung set (all)", rows, *tot(rows))
    print("where the sung set loses (frames on the 10 ms truth grid; notes as note F1 counts "
          "them):")
    for v in VOICES:
        rs = [r for r in rows if r["voice"] == v[0]]
        if rs:
            causes_line(f"  {v[0]}", rs)
    for st in STYLES:
        rs = [r for r in rows if r["style"] == st]
        if rs:
            causes_line(f"  {st}", rs)
    for bname, _, _ in sr.BACKGROUNDS:
        rs = [r for r in rows if r["bg"] == bname]
        if rs:
            causes_line(f"  {bname}", rs)
    causes_line("  sung set (all)", rows)
    worst = min(rows, key=lambda r: r["rpa"])
    print(f"lowest RPA: {worst['voice']} {worst['style']} {worst['bg']} {worst['rpa']:.3f}")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    if a.instruments:
        print("instrument set (songtrace_real.py, same run):", flush=True)
        args = [sys.executable, os.path.join(HERE, "songtrace_real.py"), "--ebb", a.ebb]
        return subprocess.run(args + (["--quick"] if a.quick else [])).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
