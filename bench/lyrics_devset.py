#!/usr/bin/python3
"""The lyrics development set of many voices (issue 43), generated offline.

Words are spoken one by one by Debian's synthesisers, each with a male and a
female voice:
  espeak-ng  en-us (male) and en-us+f3 (female)        -- package espeak-ng
  flite      rms (male) and slt (female)                -- package flite
  festival   kal_diphone (male), cmu_us_slt_arctic_hts   -- festival,
             (female)                                      festvox-kallpc16k,
                                                           festvox-us-slt-hts
then re-sung onto a written melody by TD-PSOLA (pitch-synchronous overlap-
add of two-period grains of the speech itself, so the spectral envelope --
the formants -- stays the speaker's while the pitch follows the notes; not
the project's LPC vocoder): notes of 0.2-1.2 s, male melodies around
A2-E4, female around A3-E5, vibrato (5.5 Hz, +-35 cents, after 0.15 s),
legato (notes joined by 60 ms glides, no gap) and melismas (one word over
2-3 notes). Each song has an instrumental intro (2-6 s), rests between
lines (0.4-3 s) and an outro (2-5 s), and accompaniments of another kind
than songgen's piano-like chords: a string pad (detuned saws, slow attack),
a bass line and drums (kick, snare, hi-hat). Mixes: the accompaniment's RMS
0 dB and -6 dB against the voice's (the convention of build/lyricgen), and
the voice alone.

Writes into OUT/ (a cache: a song is made only when its files are missing):
  SOURCE-G-K.{mix0,mix6,voice}.wav, .lyrics.txt, .truth.json
  {"words": [{"word", "start", "end", "line", "notes": [[start, seconds, midi]]}],
   "source", "voice"}
The truth start of a word is the start of its first note, where the
speech's first sound is placed. Nothing is downloaded; numpy and scipy come
from Debian (python3-scipy).
  lyrics_devset.py OUT [--songs N] [--sources espeak,flite,festival]
    -> prints one line per file set (--sources: only those synthesisers)
"""
import json, os, subprocess, sys, tempfile
import numpy as np
from scipy.io import wavfile
from scipy.signal import resample_poly, lfilter, butter

RATE = 16000
LYRICS = [
    "bright lanterns drift across the harbor", "my shadow follows every step i take",
    "we danced until the candles burned away", "the winter wind is singing through the trees",
    "tell me the story of the golden shore", "i hear the thunder rolling down the hills",
    "paper boats are sailing on the rain", "hold the moment before it fades again",
    "the river carries all our secrets home", "under the stars we promised not to run",
    "open the window and let the summer in", "every heartbeat echoes in the hall",
    "the clock is ticking slower than before", "carry me over the mountains and the sea",
    "a thousand voices calling out your name", "morning comes and the birds begin to sing",
    "we built a castle out of sand and dreams", "the train is leaving from the empty station",
    "silver rain is falling on the road", "don't let the fire fade into the night",
    "sweet honey dripping from the apple tree", "whisper softly so the children sleep",
    "the ocean swallows every word we say", "lost and found beneath the autumn leaves",
]
SOURCES = {
    "espeak": {"m": ("espeak-ng", "en-us"), "f": ("espeak-ng", "en-us+f3")},
    "flite": {"m": ("flite", "rms"), "f": ("flite", "slt")},
    "festival": {"m": ("festival", "voice_kal_diphone"), "f": ("festival", "voice_cmu_us_slt_arctic_hts")},
}


def read16k(path):
    r, x = wavfile.read(path)
    x = x.astype(np.float64)
    if x.ndim > 1:
        x = x.mean(axis=1)
    x /= 32768.0
    if r != RATE:
        g = np.gcd(r, RATE)
        x = resample_poly(x, RATE // g, r // g)
    return x


def trim(x):
    fr = 80
    n = len(x) // fr
    if n == 0:
        return x
    e = np.sqrt(np.mean(x[: n * fr].reshape(n, fr) ** 2, axis=1)) + 1e-9
    keep = np.nonzero(20 * np.log10(e / e.max()) > -35)[0]
    return x[keep[0] * fr:(keep[-1] + 1) * fr] if len(keep) else x


def speak_words(words, engine, voice, tmp):
    """Each word spoken on its own: {word: samples}."""
    out = {}
    todo = sorted(set(words))
    if engine == "festival":
        scm = os.path.join(tmp, "say.scm")
        with open(scm, "w") as f:
            f.write(f"({voice})\n")
            for i, w in enumerate(todo):
                f.write(f'(utt.save.wave (utt.synth (Utterance Text "{w}")) "{tmp}/w{i}.wav" \'riff)\n')
        subprocess.run(["festival", "-b", scm], check=True, capture_output=True)
    for i, w in enumerate(todo):
        p = os.path.join(tmp, f"w{i}.wav")
        if engine == "espeak-ng":
            subprocess.run(["espeak-ng", "-v", voice, "-s", "150", "-w", p, w], check=True, capture_output=True)
        elif engine == "flite":
            subprocess.run(["flite", "-voice", voice, "-t", w, "-o", p], check=True, capture_output=True)
        out[w] = trim(read16k(p))
    return out


def f0_track(x, hop=80, lo=60, hi=400):
    """Autocorrelation f0 per hop (0: unvoiced)."""
    win = 640
    f0 = np.zeros(len(x) // hop + 1)
    for k in range(len(f0)):
        s = x[max(0, k * hop - win // 2): k * hop + win // 2]
        if len(s) < win // 2 or np.sqrt(np.mean(s ** 2)) < 1e-3:
            continue
        s = s - s.mean()
        ac = np.correlate(s, s, "full")[len(s) - 1:]
        a, b = RATE // hi, min(RATE // lo, len(ac) - 1)
        if b <= a:
            continue
        lag = a + int(np.argmax(ac[a:b]))
        if ac[lag] > 0.45 * ac[0]:
            f0[k] = RATE / lag
    return f0, hop


def psola(x, out_len, f0_fn, keep_head=0.06, keep_tail=0.05):
    """x re-sung over out_len samples at f0_fn(t) Hz: TD-PSOLA with the time
    map stretching only the middle (onset and coda consonants keep their
    length)."""
    f0, hop = f0_track(x)
    n = len(x)
    h, t = int(keep_head * RATE), int(keep_tail * RATE)
    h, t = min(h, n // 3), min(t, n // 3)

    def src_time(ts):  # output sample -> input sample
        if ts < h:
            return ts
        if ts > out_len - t:
            return n - (out_len - ts)
        return h + (ts - h) * (n - h - t) / max(1, out_len - h - t)

    # analysis marks: every period where voiced, every 5 ms where not
    marks, i = [], 0
    while i < n:
        marks.append(i)
        fr = f0[min(len(f0) - 1, i // hop)]
        i += int(RATE / fr) if fr > 0 else 80
    marks = np.array(marks)
    y = np.zeros(out_len + 2000)
    ts = 0.0
    while ts < out_len:
        si = src_time(ts)
        m = marks[np.argmin(np.abs(marks - si))]
        fr = f0[min(len(f0) - 1, m // hop)]
        if fr > 0:
            p_in = int(RATE / fr)
            p_out = RATE / max(40.0, f0_fn(ts / RATE))
        else:
            p_in, p_out = 80, 80.0
        a, b = max(0, m - p_in), min(n, m + p_in)
        g = x[a:b] * np.hanning(2 * p_in + 1)[p_in - (m - a): p_in + (b - m)]
        o = int(ts) - (m - a)
        if o >= 0:
            y[o:o + len(g)] += g
        ts += p_out
    return y[:out_len]


def midi_hz(m):
    return 440.0 * 2 ** ((m - 69) / 12.0)


def melody_f0(notes, t0):
    """f0(t) over a word's notes [(start, dur, midi)], glides of 60 ms
    between notes (legato), vibrato after 0.15 s in each note."""
    def f(t):
        t += t0
        for k, (s, d, m) in enumerate(notes):
            if t < s + d or k == len(notes) - 1:
                pitch = m
                if k > 0 and t - s < 0.06:
                    pitch = notes[k - 1][2] + (m - notes[k - 1][2]) * max(0.0, t - s) / 0.06
                into = t - s
                if into > 0.15:
                    pitch += 0.35 * np.sin(2 * np.pi * 5.5 * into) * min(1.0, (into - 0.15) / 0.2)
                return midi_hz(pitch)
        return midi_hz(notes[-1][2])
    return f


def accompaniment(n, rng, bpm, key):
    t = np.arange(n) / RATE
    y = np.zeros(n)
    beat = 60.0 / bpm
    bar = 4 * beat
    prog = [0, 5, 7, 3] if rng.random() < 0.5 else [0, 9, 5, 7]
    # string pad: detuned saws, slow attack, low-passed
    pad = np.zeros(n)
    for b in range(int(n / RATE / bar) + 1):
        s, e = int(b * bar * RATE), min(n, int((b + 1) * bar * RATE))
        if s >= n:
            break
        root = key - 12 + prog[b % 4]
        tt = t[s:e] - t[s]
        env = np.minimum(1, tt / 0.4) * np.minimum(1, (bar - tt) / 0.2)
        for iv in (0, 4 if prog[b % 4] in (0, 5, 7) else 3, 7):
            for det in (-0.08, 0.08):
                fr = midi_hz(root + iv + det)
                pad[s:e] += env * (2 * ((tt * fr) % 1) - 1) * 0.15
        # bass: root on beats 1 and 3, a plucked sine with a harmonic
        for k in (0, 2):
            bs = s + int(k * beat * RATE)
            be = min(n, bs + int(beat * 1.8 * RATE))
            if bs >= n:
                continue
            tb = t[bs:be] - t[bs]
            fb = midi_hz(key - 24 + prog[b % 4])
            y[bs:be] += 0.5 * np.exp(-tb * 2.5) * (np.sin(2 * np.pi * fb * tb) + 0.3 * np.sin(4 * np.pi * fb * tb))
    bb, ab = butter(2, 2500 / (RATE / 2))
    y += lfilter(bb, ab, pad)
    # drums: kick on 1 and 3, snare on 2 and 4, hi-hat on eighths
    noise = rng.standard_normal(n)
    hb, ha = butter(2, 6000 / (RATE / 2), "high")
    hat = lfilter(hb, ha, noise)
    for k in range(int(n / RATE / (beat / 2)) + 1):
        s = int(k * beat / 2 * RATE)
        if s >= n:
            break
        e = min(n, s + int(0.25 * RATE))
        tk = t[s:e] - t[s]
        y[s:e] += 0.25 * hat[s:e] * np.exp(-tk * 40)
        if k % 4 == 0:
            y[s:e] += 0.9 * np.sin(2 * np.pi * (50 + 100 * np.exp(-tk * 30)) * tk) * np.exp(-tk * 12)
        if k % 4 == 2:
            y[s:e] += 0.5 * noise[s:e] * np.exp(-tk * 18) + 0.3 * np.sin(2 * np.pi * 190 * tk) * np.exp(-tk * 20)
    return y


def write(path, x):
    x = np.clip(x, -1, 1)
    wavfile.write(path, RATE, (x * 32767).astype(np.int16))


def song(out, source, gender, k, rng, tmp):
    engine, voice = SOURCES[source][gender]
    nlines = 4
    lines = [LYRICS[i] for i in rng.choice(len(LYRICS), nlines, replace=False)]
    words = [w for l in lines for w in l.split()]
    spoken = speak_words([w.replace("'", "") if engine == "festival" else w for w in words], engine, voice, tmp)
    base = (45 if gender == "m" else 57) + int(rng.integers(0, 5))
    scale = [0, 2, 4, 5, 7, 9, 11, 12, 14]
    t = float(rng.uniform(2, 6))  # intro
    truth, voc = [], []
    deg = 2
    for li, line in enumerate(lines):
        for w in line.split():
            nn = 1 if rng.random() < 0.75 else int(rng.integers(2, 4))  # melisma
            notes = []
            s = t
            for _ in range(nn):
                deg = int(np.clip(deg + rng.integers(-2, 3), 0, len(scale) - 1))
                d = float(rng.uniform(0.2, 1.2 if nn == 1 else 0.6))
                notes.append((s, d, base + scale[deg]))
                s += d
            legato = rng.random() < 0.6
            dur = s - t
            truth.append({"word": w, "start": round(t, 3), "end": round(t + dur, 3), "line": li,
                          "notes": [[round(a, 3), round(b, 3), m] for a, b, m in notes]})
            x = spoken[w.replace("'", "") if engine == "festival" else w]
            voc.append((t, psola(x, int(dur * RATE), melody_f0(notes, t), )))
            t = s + (0.0 if legato else float(rng.uniform(0.03, 0.15)))
        t += float(rng.uniform(0.4, 3.0))  # rest between lines
    total = t + float(rng.uniform(2, 5))  # outro
    n = int(total * RATE)
    v = np.zeros(n + RATE)
    for s, x in voc:
        i = int(s * RATE)
        v[i:i + len(x)] += x / (np.max(np.abs(x)) + 1e-9)
    v = v[:n]
    bpm = float(rng.uniform(80, 130))
    acc = accompaniment(n, rng, bpm, base)
    vr = np.sqrt(np.mean(v[v != 0] ** 2))
    ar = np.sqrt(np.mean(acc ** 2))
    name = f"{source}-{gender}-{k}"
    for tag, db in (("mix0", 0.0), ("mix6", -6.0)):
        m = v + acc * (vr / ar) * 10 ** (db / 20)
        write(os.path.join(out, f"{name}.{tag}.wav"), 0.7 * m / np.max(np.abs(m)))
    write(os.path.join(out, f"{name}.voice.wav"), 0.7 * v / np.max(np.abs(v)))
    with open(os.path.join(out, name + ".lyrics.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, name + ".truth.json"), "w") as f:
        json.dump({"words": truth, "source": source, "voice": voice, "seconds": round(total, 3)}, f)
    return name


def main():
    out = sys.argv[1]
    songs = int(sys.argv[sys.argv.index("--songs") + 1]) if "--songs" in sys.argv else 2
    only = sys.argv[sys.argv.index("--sources") + 1].split(",") if "--sources" in sys.argv else list(SOURCES)
    bad = [x for x in only if x not in SOURCES]
    if bad:
        sys.exit(f"lyrics_devset.py: unknown source {bad[0]!r} (known: {', '.join(SOURCES)})")
    os.makedirs(out, exist_ok=True)
    for si, source in enumerate(SOURCES):
        if source not in only:
            continue
        for gi, gender in enumerate("mf"):
            for k in range(songs):
                name = f"{source}-{gender}-{k}"
                if not os.path.exists(os.path.join(out, name + ".truth.json")):
                    rng = np.random.default_rng(4300 + 100 * si + 10 * gi + k)
                    with tempfile.TemporaryDirectory() as tmp:
                        song(out, source, gender, k, rng, tmp)
                print(name)


if __name__ == "__main__":
    main()
