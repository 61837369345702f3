#!/usr/bin/python3
"""align alone on the dev set's stored separated vocals (issue 43): how the
figures in docs/songtrace.md's "The voice's voicing as evidence" were
measured. Faster than `make bench` when only align changes: the dev set
(bench/lyrics_devset.py) is separated once and each run is decode -> align
-> export on the stored vocals, each song with its own lyrics and with the
lyrics of the song len/3 places on (a song of another source, as
lyrics_align.py pairs them).
  lyrics_devset_stored.py BUILD gen [SONGS]   -- the dev set (SONGS a voice, default 4)
  lyrics_devset_stored.py BUILD sep           -- decode -> separate -> stems, once a file
  lyrics_devset_stored.py BUILD run TAG [--set align.OPTION=VALUE ...]
      -> per source and level: words within 0.3 s, median onset error, own
         lyrics matched, another song's lyrics matched false (runs logging
         "do not fit"); BUILD/lyrics-devset-stored/out/TAG.json, and each
         run's outputs and ebb's log in out/TAG/NAME.LEVEL[.wrong]/log.txt
SRC=espeak (a comma list) runs only those sources. Runs under nice -n 10.
"""
import json, os, re, statistics, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

BUILD = os.path.abspath(sys.argv[1]) if len(sys.argv) > 2 else "build"
EBB = os.path.join(BUILD, "ebb")
SET = os.path.join(BUILD, "lyrics-devset-stored", "set")
SEP = os.path.join(BUILD, "lyrics-devset-stored", "sep")
OUT = os.path.join(BUILD, "lyrics-devset-stored", "out")
LEVELS = ("mix0", "mix6", "voice")


def names():
    ns = sorted({f.split(".")[0] for f in os.listdir(SET) if f.endswith(".truth.json")})
    # lyrics_align.py's order: as lyrics_devset prints them (source order espeak, flite, festival)
    order = {"espeak": 0, "flite": 1, "festival": 2}
    return sorted(ns, key=lambda n: (order[n.split("-")[0]], n.split("-")[1] != "m", int(n.split("-")[2]), n.split("-")[1]))


def ebb(cfg, wav, out, sets=()):
    os.makedirs(out, exist_ok=True)
    cp = out + "/cfg.json"
    json.dump(cfg, open(cp, "w"))
    cmd = ["nice", "-n", "10", EBB, "run", "--config", cp, "--pipeline", "p", "--device", "cpu", "--no-cache", wav, "-o", out]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stdout + r.stderr)
    return r.stdout + r.stderr


def sep():
    jobs = []
    for n in names():
        for lv in LEVELS:
            wav = f"{SET}/{n}.{lv}.wav"
            o = f"{SEP}/{n}.{lv}"
            if not os.path.exists(o + "/vocals.wav"):
                jobs.append((wav, o))
    cfg = {"pipelines": {"p": {"stages": [{"stage": "decode"}, {"stage": "separate"},
                                          {"stage": "export", "options": {"formats": "json", "stems": "wav"}}]}}}
    for wav, o in jobs:
        ebb(cfg, wav, o)
    print("separated", len(jobs))


def one(args):
    n, lv, lyr, out, sets = args
    cfg = {"pipelines": {"p": {"stages": [{"stage": "decode"},
                                          {"stage": "align", "options": {"lyrics": lyr}},
                                          {"stage": "export", "options": {"formats": "json", "stems": "none"}}]}}}
    log = ebb(cfg, f"{SEP}/{n}.{lv}/vocals.wav", out, sets)
    open(out + "/log.txt", "w").write(log)
    doc = json.load(open(out + "/songtrace.json"))
    m = re.search(r"^\[align\] done in ([0-9.]+) s", log, re.M)
    return doc.get("lyrics", {}).get("words", []), "do not fit the voice" in log, float(m.group(1)) if m else 0.0


def run(tag, sets):
    ns = names()
    jobs = []
    only = os.environ.get("SRC", "espeak,flite,festival").split(",")
    for i, n in enumerate(ns):
        if n.split("-")[0] not in only:
            continue
        other = ns[(i + len(ns) // 3) % len(ns)]
        for lv in LEVELS:
            jobs.append((n, lv, f"{SET}/{n}.lyrics.txt", f"{OUT}/{tag}/{n}.{lv}", sets))
            jobs.append((n, lv, f"{SET}/{other}.lyrics.txt", f"{OUT}/{tag}/{n}.{lv}.wrong", sets))
    with ThreadPoolExecutor(1) as ex:
        res = list(ex.map(one, jobs))
    rows = {}
    per = []
    secs = 0.0
    for (n, lv, lyr, out, _), (ws, nofit, t) in zip(jobs, res):
        secs += t
        src = n.split("-")[0]
        r = rows.setdefault((src, lv), {"err": [], "right": [0, 0], "wrong": [0, 0, 0, 0]})
        if out.endswith(".wrong"):
            r["wrong"][0] += sum(not w.get("matched") for w in ws)
            r["wrong"][1] += len(ws)
            r["wrong"][2] += nofit
            r["wrong"][3] += 1
            continue
        truth = [w["start"] for w in json.load(open(f"{SET}/{n}.truth.json"))["words"]]
        est = [w["start"] for w in ws]
        e = [abs(a - b) for a, b in zip(truth, est)] if len(est) == len(truth) else [1e9] * len(truth)
        r["err"] += e
        r["right"][0] += sum(bool(w.get("matched")) for w in ws)
        r["right"][1] += len(ws)
        per.append((n, lv, sum(x <= 0.3 for x in e), len(e)))
    res_doc = {}
    print(f"== {tag} {' '.join(sets)}  (align time sum {secs:.1f} s)")
    for src in only:
        for lv in LEVELS:
            r = rows[(src, lv)]
            e = r["err"]
            w3 = 100 * sum(x <= 0.3 for x in e) / len(e)
            med = statistics.median(e)
            rm = 100 * r["right"][0] / max(1, r["right"][1])
            wf = 100 * r["wrong"][0] / max(1, r["wrong"][1])
            print(f"{src:9s} {lv:5s} n={len(e):3d}  within0.3 {w3:5.1f} %  median {med:6.3f} s  own matched {rm:5.1f} %  wrong unmatched {wf:5.1f} % ({r['wrong'][2]}/{r['wrong'][3]} no-fit)")
            res_doc[f"{src} {lv}"] = [w3, med, rm, wf]
    json.dump({"rows": res_doc, "per": per}, open(f"{OUT}/{tag}.json", "w"))


def gen(songs):
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run(["nice", "-n", "10", "/usr/bin/python3", os.path.join(here, "lyrics_devset.py"), SET,
                    "--songs", str(songs)], check=True, stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[2] not in ("gen", "sep", "run") or (sys.argv[2] == "run" and len(sys.argv) < 4):
        sys.exit(__doc__)
    if sys.argv[2] == "gen":
        gen(int(sys.argv[3]) if len(sys.argv) > 3 else 4)
    elif sys.argv[2] == "sep":
        sep()
    else:
        sets = [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == "--set"]
        run(sys.argv[3], sets)
