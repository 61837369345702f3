#!/usr/bin/env python3
"""Lyrics alignment benchmark (issue 36): word-onset error of align's methods
against truth, printed by `make bench` (build/bench/lyrics_align).

Material, all generated here with known word times:
  - lyric lines spoken by espeak-ng and sung on a melody (build/lyricgen),
    mixed over songgen's accompaniment at 0 dB and -6 dB relative to the
    voice (the accompaniment's RMS against the voice's), and the voice alone;
  - the demo song (build/samples/demo.*: each note's word sung).
Each goes through ebb's songtrace stages (decode -> separate -> align ->
export, CPU) with the lyrics file. Scored by word-onset error, the
lyrics-to-audio alignment measure (MIREX): mean and median absolute error
and the share of words within 0.3 s. Beside the acoustic method:
  - text: today's text method; without a Whisper server it has no
    transcript, so it places no word at all (reported as such);
  - spread: the Whisper-less baseline, the lyric words spread evenly (by
    letters) over the voice-activity phrases align reports.
Then the development set of many voices (bench/lyrics_devset.py: espeak-ng,
flite and festival, male and female, re-sung by PSOLA over strings, bass
and drums; cached in BUILD/lyrics-devset, generated once, nothing
downloaded): per source and level, the acoustic method beside the voice
alone and the evenly-spread baseline. festival is the held-out source: no
threshold or constant of align was tuned while looking at it.
Then align's speed: align alone on a 5-minute worded song, pinned to one
core, as a share of the song's duration (target <= 10 %).
"""
import argparse, json, os, re, statistics, subprocess, sys, tempfile, time

LINES = [
    "the night is long and the road is cold",
    "i walk alone beneath the silver moon",
    "your voice is calling from the other side",
    "we never knew how far the river goes",
    "hold on to me until the morning light",
    "the city sleeps but i am wide awake",
    "there is a fire burning in my heart",
    "so sing it loud and let the music play",
]


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def pipeline(ebb, wav, lyrics, out, method="acoustic", taskset=None, scope="phrases"):
    cfg = {"pipelines": {"lyr": {"stages": [
        {"stage": "decode"}, {"stage": "separate"},
        {"stage": "align", "options": {"lyrics": lyrics, "method": method, "scope": scope}},
        {"stage": "export", "options": {"formats": "json,lrc"}}]}}}
    cfg_path = out + ".cfg.json"
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    cmd = [ebb, "run", "--config", cfg_path, "--pipeline", "lyr", "--device", "cpu",
           "--no-cache", wav, "-o", out]
    if taskset:
        cmd = ["taskset", "-c", taskset] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"ebb run failed on {wav}: {r.stdout}{r.stderr}")
    m = re.search(r"^\[align\] done in ([0-9.]+) s", r.stdout + r.stderr, re.M)
    doc = json.load(open(os.path.join(out, "songtrace.json")))
    return doc.get("lyrics") or {}, float(m.group(1)) if m else float("nan"), r.stdout + r.stderr


def spread(lyrics_text, phrases):
    """The baseline: words spread evenly by letters over the phrases."""
    words = lyrics_text.split()
    total = sum(p["end"] - p["start"] for p in phrases)
    if not words or total <= 0:
        return []
    weights = [len(w) + 1 for w in words]
    wsum = sum(weights)
    out, acc = [], 0.0
    for w in weights:
        pos = acc / wsum * total
        for p in phrases:
            d = p["end"] - p["start"]
            if pos <= d:
                out.append(p["start"] + pos)
                break
            pos -= d
        else:
            out.append(phrases[-1]["end"])
        acc += w
    return out


def score(truth, est):
    if not est or len(est) != len(truth):
        return None
    e = [abs(a - b) for a, b in zip(truth, est) if a is not None]
    return (statistics.mean(e), statistics.median(e), sum(x <= 0.3 for x in e) / len(e), len(e))


def fmt(s):
    if s is None:
        return "no words placed".ljust(34)
    return f"mean {s[0]:5.3f} s  median {s[1]:5.3f} s  {100 * s[2]:5.1f} %"


def devset_row(ebb, cache, tmp, names, src, tag):
    """One source and level: onsets of both scopes and the baseline, the right
    lyrics' matched words, and another song's lyrics (a song of another
    source) judged: its words marked matched false, its runs logging that the
    lyrics do not fit."""
    truth, est, base = [], {"phrases": [], "song": []}, []
    right = {s: [0, 0] for s in est}          # matched, words
    wrong = {s: [0, 0, 0, 0] for s in est}    # unmatched, words, runs not fitting, runs
    for nm in (n for n in names if n.startswith(src + "-")):
        t = [w["start"] for w in json.load(open(os.path.join(cache, nm + ".truth.json")))["words"]]
        lyr = os.path.join(cache, nm + ".lyrics.txt")
        other = names[(names.index(nm) + len(names) // 3) % len(names)]
        for scope in est:
            wav = os.path.join(cache, f"{nm}.{tag}.wav")
            ly, _, log = pipeline(ebb, wav, lyr, os.path.join(tmp, f"dev.{nm}.{tag}.{scope}"), scope=scope)
            ws = ly.get("words", [])
            e = [w["start"] for w in ws]
            est[scope] += e if len(e) == len(t) else [1e9] * len(t)
            right[scope][0] += sum(bool(w.get("matched")) for w in ws)
            right[scope][1] += len(ws)
            if scope == "phrases":
                base += spread(open(lyr).read(), ly.get("phrases", [])) or [1e9] * len(t)
            ly, _, log = pipeline(ebb, wav, os.path.join(cache, other + ".lyrics.txt"),
                                  os.path.join(tmp, f"dev.{nm}.{tag}.{scope}.wrong"), scope=scope)
            ws = ly.get("words", [])
            wrong[scope][0] += sum(not w.get("matched") for w in ws)
            wrong[scope][1] += len(ws)
            wrong[scope][2] += "do not fit the voice" in log
            wrong[scope][3] += 1
        truth += t
    return truth, est, base, right, wrong


def pct(a, b):
    return f"{100 * a / b:5.1f} %" if b else "  -  "


def devset(ebb, build, tmp):
    """The development set: each source's figure at 0 dB, -6 dB and voice alone."""
    here = os.path.dirname(os.path.abspath(__file__))
    cache = os.path.join(build, "lyrics-devset")
    r = subprocess.run(["/usr/bin/python3", os.path.join(here, "lyrics_devset.py"), cache, "--songs",
                        os.environ.get("EBB_LYRICS_DEVSET_SONGS", "2")], capture_output=True, text=True)
    if r.returncode:
        print(f"lyrics dev set: not generated ({r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode});"
              " it needs espeak-ng, flite, festival and its voices (scripts/install-deps.sh)")
        return False
    names = r.stdout.split()
    print("dev set of many voices (held out while tuning: festival; the fit check's order contrast was "
          "chosen on espeak-ng alone): word onsets against truth")
    print(f"{'source, level':22s} {'words':>5s}  {'acoustic, scope phrases (default)':34s}  "
          f"{'acoustic, scope song':34s}  {'spread (baseline)':34s}")
    ok, judged = True, []
    for src in ("espeak", "flite", "festival"):
        for tag, label in (("mix0", "0 dB"), ("mix6", "-6 dB"), ("voice", "voice alone")):
            truth, est, base, right, wrong = devset_row(ebb, cache, tmp, names, src, tag)
            ac, so, bs = score(truth, est["phrases"]), score(truth, est["song"]), score(truth, base)
            print(f"{src + ', ' + label:22s} {len(truth):5d}  {fmt(ac)}  {fmt(so)}  {fmt(bs)}")
            judged.append((src + ", " + label, right, wrong))
            if tag != "voice" and (ac is None or not ac[1] <= 0.15 or ac[2] < 0.85):
                ok = False
    print("fit check: right lyrics marked matched (target >= 90 %); another song's lyrics marked "
          "matched false (target >= 90 %), runs logging 'the lyrics do not fit the voice'")
    print(f"{'source, level':22s}  {'right matched, phrases / song':30s}  "
          f"{'wrong unmatched, phrases / song':32s}  not fitting, phrases / song")
    for name, right, wrong in judged:
        p, s = right["phrases"], right["song"]
        wp, ws = wrong["phrases"], wrong["song"]
        print(f"{name:22s}  {pct(p[0], p[1])} / {pct(s[0], s[1])}{'':12s}  "
              f"{pct(wp[0], wp[1])} / {pct(ws[0], ws[1])}{'':14s}  {wp[2]} of {wp[3]} / {ws[2]} of {ws[3]}")
    if not ok:
        print("lyrics_align: on the dev set some source or level misses the target (median <= 0.15 s, "
              ">= 85 % within 0.3 s)")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--minutes", type=float, default=5.0)
    a = ap.parse_args()
    ebb, lyricgen = os.path.join(a.build, "ebb"), os.path.join(a.build, "lyricgen")
    songgen = os.path.join(a.build, "songgen")
    tmp = tempfile.mkdtemp(prefix="ebb-lyrics-bench.")
    sets = []
    for name, args in (("sung, 0 dB", ["--accomp-db", "0"]), ("sung, -6 dB", ["--accomp-db", "-6"]),
                       ("sung, voice alone", [])):
        base = "s" + str(len(sets))
        run([lyricgen, "--seed", str(11 + len(sets))] + args + [tmp, base] + LINES)
        t = json.load(open(os.path.join(tmp, base + ".truth.json")))["words"]
        # a word espeak ran into its neighbour has no true start: not scored
        sets.append((name, os.path.join(tmp, base + ".wav"), os.path.join(tmp, base + ".lyrics.txt"),
                     [None if w["estimated"] else w["start"] for w in t]))
    demo = os.path.join(a.build, "samples", "demo")
    if os.path.exists(demo + ".truth.json"):
        t = json.load(open(demo + ".truth.json")).get("words")
        if t:
            sets.append(("demo song", demo + ".wav", demo + ".lyrics.txt", [w["start"] for w in t]))
    print("lyrics alignment: word-onset error against truth (mean, median |error|, share within 0.3 s)")
    print(f"{'material':20s} {'words':>5s}  {'acoustic':34s}  {'spread (baseline)':34s}  text")
    ok = True
    for name, wav, lyr, truth in sets:
        out = os.path.join(tmp, re.sub(r"\W+", "_", name))
        ly, _, _ = pipeline(ebb, wav, lyr, out + ".a")
        ac = score(truth, [w["start"] for w in ly.get("words", [])])
        base = score(truth, spread(open(lyr).read(), ly.get("phrases", [])))
        lt, _, _ = pipeline(ebb, wav, lyr, out + ".t", method="text")
        tx = score(truth, [w["start"] for w in lt.get("words", [])])
        print(f"{name:20s} {sum(t is not None for t in truth):5d}  {fmt(ac)}  {fmt(base)}  {fmt(tx) if tx else 'no words without a transcript'}")
        if name.endswith("dB") and (ac is None or ac[1] > 0.15 or ac[2] < 0.85):
            ok = False
    ok = devset(ebb, a.build, tmp) and ok
    # speed: align alone on a long worded song, one core
    secs = a.minutes * 60
    run([songgen, "--seed", "5", "--seconds", str(secs), tmp, "long"])
    _, t_align, log = pipeline(ebb, os.path.join(tmp, "long.wav"), os.path.join(tmp, "long.lyrics.txt"),
                               os.path.join(tmp, "long.a"), taskset="0")
    m = re.search(r"^\[align\] \d+ of (\d+) words aligned acoustically in (\d+) of (\d+)", log, re.M)
    print(f"speed: align alone on a {secs / 60:.0f}-minute song ({m.group(1) if m else '?'} words, "
          f"{m.group(2) + ' of ' + m.group(3) if m else '?'} line groups aligned), one core: "
          f"{t_align:.2f} s = {100 * t_align / secs:.1f} % of its duration (target <= 10 %)")
    if not ok:
        print("lyrics_align: the 0 / -6 dB targets (median <= 0.15 s, >= 85 % within 0.3 s) are not met")
    subprocess.run(["rm", "-rf", tmp])
    return 0


if __name__ == "__main__":
    sys.exit(main())
