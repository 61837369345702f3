#!/usr/bin/python3
"""The live page (GET /) in a real headless Debian chromium, driven through
chromedriver and Selenium, while a synthetic pipeline runs on the fake GPU:

- the server drives two fake devices ('other' pinned to cuda:0, 'demo' to
  cuda:1): the page has a panel for each, and each panel's owner series
  (legend and chart) and figures (driver used, total) match that device in
  GET /v1/memory while the job runs;
- its release labels carry the bytes each stage released (GET /v1/jobs/ID);
- its job row matches the job: state, released bytes, per-stage released
  bytes, per-stage peaks at least the weights + activations the stages
  report in their results;
- the leak the pipeline makes is shown in red with its owner and site;
- the load button loads a pipeline; sleep shows the server's answer, and the
  asleep pipeline's parked bytes show as asleep (legend says asleep with the
  owner's bytes from /v1/memory, no area on the chart, the driver figure at
  what /v1/memory says), with 'pipeline other asleep' / 'woke' marks on its
  device's chart;
- nothing is written to the browser console at level SEVERE;
- a screenshot is saved (ARTIFACT, and docs/img/page.png when
  EBB_UPDATE_DOCS_IMG=1).

Then, against a second server started with --token-file: the page asks for
a token, says when one is refused or may not read the events (a submit
token), goes live with an admin token and sends it with its buttons.

Usage: server_page.py URL TMPDIR ARTIFACT URL2 ADMIN_TOKEN SUBMIT_TOKEN.
Every wait is bounded."""
import json
import os
import shutil
import sys
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from apitest import client, fail, fails, until  # noqa: E402

URL, TMP, ARTIFACT = sys.argv[1], sys.argv[2], sys.argv[3]
URL2, TOKEN, SUBMIT_TOKEN = sys.argv[4], sys.argv[5], sys.argv[6]
MiB = 1 << 20
api = client(URL)


# The page re-renders on every event: read it in one script so that no
# element goes stale between two reads.
SNAP_JS = """
const q = (s, r) => [...(r || document).querySelectorAll(s)];
const a = (e, n) => e.getAttribute(n);
return {
  status: document.getElementById('status').textContent,
  token_shown: !document.getElementById('token-form').hidden,
  legend: q('.legend [data-owner]').map(e => [a(e, 'data-owner'), Number(a(e, 'data-bytes'))]),
  series: q('svg path.series').map(e => a(e, 'data-owner')),
  labels: q('svg text.release-label').map(e => [Number(a(e, 'data-bytes')), e.textContent]),
  jobs: q('tr.job').map(r => ({id: a(r, 'data-id'), state: a(r, 'data-state'),
    released: Number(a(r, 'data-released')),
    stages: q('[data-stage]', r).map(s => ({name: a(s, 'data-stage'),
      peak: a(s, 'data-peak'), released: a(s, 'data-released')}))})),
  leaks: q('#leaks tr.leak').map(r => ({owner: a(r, 'data-owner'), text: r.textContent,
    colour: getComputedStyle(r.querySelector('td')).color})),
  pipelines: Object.fromEntries(q('tr[data-pipeline]').map(r => [a(r, 'data-pipeline'), a(r, 'data-state')])),
  devices: Object.fromEntries(q('.device').map(c => [a(c, 'data-device'), {
    title: c.querySelector('h3').textContent,
    legend: q('.legend [data-owner]', c).map(e => ({owner: a(e, 'data-owner'),
      bytes: Number(a(e, 'data-bytes')), asleep: Number(a(e, 'data-asleep')), text: e.textContent})),
    series: Object.fromEntries(q('svg path.series', c).map(e => [a(e, 'data-owner'), Number(a(e, 'data-bytes'))])),
    figures: Object.fromEntries(q('[data-figure]', c).map(e => [a(e, 'data-figure'), a(e, 'data-bytes')])),
    marks: q('svg g.mark', c).map(e => a(e, 'data-label')),
    labels: q('svg text.release-label', c).map(e => [Number(a(e, 'data-bytes')), e.textContent])}])),
  msg: document.getElementById('action-msg').textContent,
};
"""


def snap():
    return drv.execute_script(SNAP_JS)


def click(css):
    """Clicks css, finding it again if the page redrew it meanwhile."""
    from selenium.common.exceptions import StaleElementReferenceException
    for _ in range(20):
        try:
            drv.find_element(By.CSS_SELECTOR, css).click()
            return
        except StaleElementReferenceException:
            time.sleep(0.05)
    fail("could not click " + css)


opts = Options()
opts.binary_location = "/usr/bin/chromium"
for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
          "--window-size=1280,1900", "--no-first-run", "--disable-extensions",
          "--user-data-dir=" + os.path.join(TMP, "chromium-profile")):
    opts.add_argument(a)
opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
drv = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
drv.set_page_load_timeout(30)
try:
    drv.get(URL + "/")
    until("the page to say 'live'", lambda: snap()["status"] == "live", tries=150)
    if snap()["token_shown"]:
        fail("the token form is shown on a server without tokens")

    # a panel per device of the server, named as /v1/memory names them
    _, mem = api("GET", "/v1/memory")
    labels = [d["label"] for d in mem["devices"]]
    if labels != ["cuda:0", "cuda:1"]:
        fail("/v1/memory devices %s, expected cuda:0 and cuda:1" % labels)
    if not until("a panel for each device", lambda: set(labels) <= set(snap()["devices"])):
        fail("device panels on the page: %s" % sorted(snap()["devices"]))

    # the load button, before the job: 'other' (pinned to cuda:0) holds
    # memory there while the job runs on cuda:1
    click('tr[data-pipeline="other"] button[data-action="load"]')
    until("pipeline 'other' loaded on the page",
          lambda: snap()["pipelines"].get("other") == "loaded", tries=150)
    _, pl = api("GET", "/v1/pipelines")
    if not [p for p in pl["pipelines"] if p["name"] == "other" and p["loaded"]]:
        fail("the load button did not load 'other': %s" % pl)

    # a job whose stages run long enough to be seen
    code, body = api("POST", "/v1/jobs", {"pipeline": "demo", "input": TMP + "/input.txt"})
    if code != 202:
        fail("POST /v1/jobs: HTTP %d %s" % (code, body))
        raise SystemExit(1)
    jid = body["id"]

    def mem_devices():
        _, m = api("GET", "/v1/memory")
        return {d["label"]: d for d in m["devices"]}

    # each panel's owners == that device's owners in /v1/memory (the page
    # shows a sample of what the allocator held: retried until both show the
    # same state)
    matched = {"cuda:0": set(), "cuda:1": set()}
    last = {}

    def owners_match():
        devs, p = mem_devices(), snap()
        for label in matched:
            want = {o["name"]: o["bytes"] for o in devs[label]["owners"]
                    if not o["name"].startswith("job ")}
            panel = p["devices"].get(label, {"legend": [], "series": {}})
            got = {o["owner"]: o["bytes"] for o in panel["legend"]
                   if o["bytes"] and not o["owner"].startswith("job ")}
            last[label] = (want, got, panel["series"])
            if want and want == got and set(want) <= set(panel["series"]):
                matched[label].update(want)
        return {"o"} <= matched["cuda:0"] and {"a", "b"} <= matched["cuda:1"]

    if not until("each panel's owners to match /v1/memory (o on cuda:0; a and b on cuda:1)",
                 owners_match, tries=300, pause=0.1):
        fail("owners matched: %s; last (/v1/memory, panel legend, series): %s" % (matched, last))

    def job_done():
        _, j = api("GET", "/v1/jobs/%s" % jid)
        return j if j["state"] in ("succeeded", "failed", "cancelled") else None

    job = until("job %s to end" % jid, job_done, tries=300)
    if not job or job["state"] != "succeeded":
        fail("job %s: %s" % (jid, job))
        raise SystemExit(1)
    _, res = api("GET", "/v1/jobs/%s/result" % jid)
    results = {i["name"]: i["value"] for i in res["result"]["items"] if i["kind"] == "json"}

    # the job row
    def row_final():
        rows = [r for r in snap()["jobs"] if r["id"] == jid and r["state"] == "succeeded"]
        return rows[0] if rows else None

    row = until("job row %s to say succeeded" % jid, row_final, tries=100)
    if row:
        if row["released"] != job["released_bytes"]:
            fail("job row released %s, the job says %d" % (row["released"], job["released_bytes"]))
        spans = {st["name"]: st for st in row["stages"]}
        for st in job["stages"]:
            s = spans.get(st["name"])
            if not s:
                fail("job row has no stage %s (has %s)" % (st["name"], sorted(spans)))
                continue
            if int(s["released"] or -1) != st["released_bytes"]:
                fail("stage %s: page released %s, job says %d" % (
                    st["name"], s["released"], st["released_bytes"]))
            r = results[st["name"]]
            need = (r["weights_mib"] + r["activations_mib"]) * MiB
            if int(s["peak"] or 0) < need:
                fail("stage %s: page peak %s < weights + activations %d" % (st["name"], s["peak"], need))
        if sorted(spans) != sorted(st["name"] for st in job["stages"]):
            fail("job row stages %s, job stages %s" % (sorted(spans), job["stages"]))

    # with --devices a pipeline stays loaded where it ran; unloading demo
    # releases its stages (and the context) on cuda:1: the new release labels
    # there carry the bytes the unload answers, each stage's named
    before = list(snap()["devices"]["cuda:1"]["labels"])
    code, unl = api("POST", "/v1/pipelines/demo/unload")
    if code != 200 or not unl.get("released_bytes"):
        fail("POST /v1/pipelines/demo/unload: HTTP %d %s" % (code, unl))
    else:
        def new_labels():
            rest = list(before)
            out = []
            for lb in snap()["devices"]["cuda:1"]["labels"]:
                if lb in rest:
                    rest.remove(lb)
                else:
                    out.append(lb)
            last["unload"] = out
            return (sum(b for b, _ in out) == unl["released_bytes"]
                    and all(any(" %s" % st in t for _, t in out) for st in ("a", "b")))
        if not until("release labels on cuda:1 adding up to the unload's %d bytes, naming a and b"
                     % unl["released_bytes"], new_labels):
            fail("new release labels on cuda:1 after the unload: %s" % last.get("unload"))

    # release labels: every stage's release is labelled with its bytes, on
    # the panel of the device it ran on
    for st in job["stages"]:
        if st["released_bytes"] and not until(
                "a release label of %d bytes for stage %s on cuda:1" % (st["released_bytes"], st["name"]),
                lambda: any(b == st["released_bytes"] and st["name"] in t
                            for b, t in snap()["devices"]["cuda:1"]["labels"])):
            fail("release labels on the cuda:1 panel: %s" % snap()["devices"]["cuda:1"]["labels"])

    # each panel's figures: the driver's used and total memory of its device
    def figures(label, want_used=None):
        d = mem_devices()[label]["device"]
        fig = snap()["devices"][label]["figures"]
        used = d["driver_total_bytes"] - d["driver_free_bytes"]
        last[label] = ("/v1/memory used %d of %d" % (used, d["driver_total_bytes"]), fig)
        return (fig.get("driver used") == str(used) and fig.get("of") == str(d["driver_total_bytes"])
                and (want_used is None or want_used(used)))

    # (cuda:0 holds 'other' and its context: used > 0 there)
    for label, mib in (("cuda:0", 4096), ("cuda:1", 3072)):
        if not until("the %s panel's driver figures to match /v1/memory" % label,
                     lambda: figures(label, (lambda u: u > 0) if label == "cuda:0" else None),
                     tries=100):
            fail("%s: %s" % (label, last.get(label)))
        if snap()["devices"][label]["figures"].get("of") != str(mib << 20):
            fail("%s panel: total %s, the fake device has %d MiB" % (
                label, snap()["devices"][label]["figures"].get("of"), mib))

    # the leak (stage b leaks 8 MiB): red, with owner and allocation site
    leak = until("the leak row for stage b",
                 lambda: [l for l in snap()["leaks"] if l["owner"] == "b"])
    if leak:
        if "synthetic.c" not in leak[0]["text"] or "demo ▸ b" not in leak[0]["text"]:
            fail("leak row lacks owner or site: %r" % leak[0]["text"])
        if leak[0]["colour"] not in ("rgba(198, 40, 40, 1)", "rgb(198, 40, 40)"):
            fail("leak row is not red: %s" % leak[0]["colour"])

    # the sleep button: the server's answer is shown ("other: sleep done, N
    # released"); then o's parked bytes are asleep, not on cuda:0
    click('tr[data-pipeline="other"] button[data-action="sleep"]')
    msg = until("an answer to sleep",
                lambda: (lambda t: t if ("sleep other" in t or "other: sleep done" in t)
                                  and "…" not in t else None)(snap()["msg"]))
    if msg and "failed" in msg:
        fail("the sleep button failed: %r" % msg)

    def asleep_shown():
        devs, p = mem_devices(), snap()
        mo = [o for o in devs["cuda:0"]["owners"] if o["name"] == "o"]
        panel = p["devices"]["cuda:0"]
        lo = [o for o in panel["legend"] if o["owner"] == "o"]
        d = devs["cuda:0"]["device"]
        used = d["driver_total_bytes"] - d["driver_free_bytes"]
        last["asleep"] = dict(memory_owner=mo, legend=lo, series=panel["series"].get("o"),
                              figures=panel["figures"], memory_used=used, marks=panel["marks"],
                              labels=panel["labels"],
                              state=p["pipelines"].get("other"))
        return (mo and lo and lo[0]["bytes"] == mo[0]["bytes"] and lo[0]["asleep"] == mo[0]["bytes"]
                and "asleep" in lo[0]["text"] and not panel["series"].get("o")
                and panel["figures"].get("driver used") == str(used)
                and any(b == mo[0]["bytes"] and t.endswith(" o asleep") for b, t in panel["labels"])
                and "pipeline other asleep" in panel["marks"] and p["pipelines"].get("other") == "asleep")

    if not until("o shown asleep on cuda:0 (legend asleep with /v1/memory's bytes, no area, "
                 "driver figure as /v1/memory, a '-N o asleep' release label of those bytes, "
                 "the 'pipeline other asleep' mark)", asleep_shown,
                 tries=100):
        fail("asleep: %s" % last.get("asleep"))
    else:
        asleep_png = os.path.join(os.path.dirname(ARTIFACT), "page-asleep.png")
        os.makedirs(os.path.dirname(ARTIFACT), exist_ok=True)
        drv.save_screenshot(asleep_png)
        print("screenshot: " + asleep_png)

    # wake it (the API): on the device again, the 'woke' mark
    code, body = api("POST", "/v1/pipelines/other/wake")
    if code != 200:
        fail("POST /v1/pipelines/other/wake: HTTP %d %s" % (code, body))

    def awake_shown():
        panel = snap()["devices"]["cuda:0"]
        lo = [o for o in panel["legend"] if o["owner"] == "o"]
        last["awake"] = dict(legend=lo, series=panel["series"].get("o"), marks=panel["marks"])
        return (lo and not lo[0]["asleep"] and panel["series"].get("o") == lo[0]["bytes"]
                and "pipeline other woke" in panel["marks"])

    if not until("o back on cuda:0 with the 'pipeline other woke' mark", awake_shown, tries=100):
        fail("awake: %s" % last.get("awake"))
    time.sleep(1.2)  # one more sample so the chart shows the load
    drv.execute_script("window.scrollTo(0, 0)")
    os.makedirs(os.path.dirname(ARTIFACT), exist_ok=True)
    drv.save_screenshot(ARTIFACT)
    print("screenshot: " + ARTIFACT)
    if os.environ.get("EBB_UPDATE_DOCS_IMG") == "1":
        dst = os.path.join(os.environ["EBB_SOURCE_DIR"], "docs", "img", "page.png")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(ARTIFACT, dst)
        print("copied to " + dst)

    severe = [e for e in drv.get_log("browser") if e.get("level") == "SEVERE"]
    for e in severe:
        fail("browser console: %s" % e.get("message"))

    # tokens: the second server wants `Authorization: Bearer TOKEN`; the page
    # asks for one, says when it is refused or may not read the events, and
    # with an admin token goes live and sends it with its buttons
    def enter(tok):
        box = drv.find_element(By.ID, "token")
        box.clear()
        box.send_keys(tok)
        drv.find_element(By.CSS_SELECTOR, "#token-form button").click()

    def token_error():
        return drv.find_element(By.ID, "token-error").text

    drv.get(URL2 + "/")
    until("the token form on a server with tokens", lambda: snap()["token_shown"], tries=100)
    enter("not-a-token-of-this-server")
    until("the page to say the token was refused",
          lambda: snap()["token_shown"] and "refused" in token_error(), tries=100)
    enter(SUBMIT_TOKEN)
    until("the page to say a submit token may not read the events",
          lambda: snap()["token_shown"] and "may not" in token_error(), tries=100)
    enter(TOKEN)
    until("the page to go live with the admin token", lambda: snap()["status"] == "live" and
          not snap()["token_shown"] and snap()["pipelines"], tries=150)
    click('tr[data-pipeline="other"] button[data-action="load"]')
    until("a load through the token server", lambda: snap()["pipelines"].get("other") == "loaded",
          tries=150)
    req = urllib.request.Request(URL2 + "/v1/pipelines",
                                 headers={"Authorization": "Bearer " + TOKEN})
    with urllib.request.urlopen(req, timeout=30) as r:
        pl = json.loads(r.read())
    if not [p for p in pl["pipelines"] if p["name"] == "other" and p["loaded"]]:
        fail("the load button (with the token) did not load 'other' on the token server")
    for e in drv.get_log("browser"):
        msg = e.get("message", "")
        if e.get("level") == "SEVERE" and " 401 " not in msg and " 403 " not in msg:
            fail("browser console (token part): %s" % msg)
finally:
    drv.quit()

if fails:
    print("%d failure(s)" % len(fails), file=sys.stderr)
    sys.exit(1)
print("ok: page matches /v1/memory and job %s" % jid)
