#!/usr/bin/python3
"""The live page (GET /) in a real headless Debian chromium, driven through
chromedriver and Selenium, while a synthetic pipeline runs on the fake GPU:

- the page's owner series (legend and chart) match GET /v1/memory's owners
  while the job runs;
- its release labels carry the bytes each stage released (GET /v1/jobs/ID);
- its job row matches the job: state, released bytes, per-stage released
  bytes, per-stage peaks at least the weights + activations the stages
  report in their results;
- the leak the pipeline makes is shown in red with its owner and site;
- the load button loads a pipeline; sleep shows the server's answer;
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

URL, TMP, ARTIFACT = sys.argv[1], sys.argv[2], sys.argv[3]
URL2, TOKEN, SUBMIT_TOKEN = sys.argv[4], sys.argv[5], sys.argv[6]
MiB = 1 << 20
fails = []


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    fails.append(msg)


def api(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def until(what, fn, tries=100, pause=0.1):
    """fn() until it returns a true value; fails naming what after tries."""
    last = None
    for _ in range(tries):
        last = fn()
        if last:
            return last
        time.sleep(pause)
    fail("timed out waiting for " + what)
    return None


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
          "--window-size=1280,1500", "--no-first-run", "--disable-extensions",
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

    # a job whose stages run long enough to be seen
    code, body = api("POST", "/v1/jobs", {"pipeline": "demo", "input": TMP + "/input.txt"})
    if code != 202:
        fail("POST /v1/jobs: HTTP %d %s" % (code, body))
        raise SystemExit(1)
    jid = body["id"]

    # owners on the page == owners in /v1/memory (the page shows a sample of
    # what the allocator held: retried until both show the same state)
    matched = set()
    last = {}

    def owners_match():
        _, mem = api("GET", "/v1/memory")
        want = {o["name"]: o["bytes"] for o in mem["owners"] if not o["name"].startswith("job ")}
        p = snap()
        got = {k: v for k, v in p["legend"] if v and not k.startswith("job ")}
        last.update(want=want, got=got, series=p["series"])
        if want and want == got and set(want) <= set(p["series"]):
            matched.update(want)
        return {"a", "b"} <= matched

    if not until("the page's owners to match /v1/memory for both stages", owners_match,
                 tries=300, pause=0.1):
        fail("owners matched only for %s; last /v1/memory %s, page legend %s, series %s" % (
            sorted(matched), last.get("want"), last.get("got"), last.get("series")))

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

    # release labels: every stage's release is labelled with its bytes
    for st in job["stages"]:
        if st["released_bytes"] and not until(
                "a release label of %d bytes for stage %s" % (st["released_bytes"], st["name"]),
                lambda: any(b == st["released_bytes"] and st["name"] in t
                            for b, t in snap()["labels"])):
            fail("release labels on the page: %s" % snap()["labels"])

    # the leak (stage b leaks 8 MiB): red, with owner and allocation site
    leak = until("the leak row for stage b",
                 lambda: [l for l in snap()["leaks"] if l["owner"] == "b"])
    if leak:
        if "synthetic.c" not in leak[0]["text"] or "demo ▸ b" not in leak[0]["text"]:
            fail("leak row lacks owner or site: %r" % leak[0]["text"])
        if leak[0]["colour"] not in ("rgba(198, 40, 40, 1)", "rgb(198, 40, 40)"):
            fail("leak row is not red: %s" % leak[0]["colour"])

    # buttons: load works; sleep shows the server's answer (since issue 12:
    # "other: sleep done, N released")
    click('tr[data-pipeline="other"] button[data-action="load"]')
    until("pipeline 'other' loaded on the page",
          lambda: snap()["pipelines"].get("other") == "loaded", tries=150)
    _, pl = api("GET", "/v1/pipelines")
    if not [p for p in pl["pipelines"] if p["name"] == "other" and p["loaded"]]:
        fail("the load button did not load 'other': %s" % pl)
    click('tr[data-pipeline="other"] button[data-action="sleep"]')
    msg = until("an answer to sleep",
                lambda: (lambda t: t if ("sleep other" in t or "other: sleep done" in t)
                                  and "…" not in t else None)(snap()["msg"]))
    if msg and "failed" in msg and "HTTP" not in msg:
        fail("sleep error does not show the HTTP status: %r" % msg)
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
    # the sleep button's 404 is the server's answer, shown on the page; the
    # browser logs every non-2xx fetch as a console error: allow exactly that
    severe = [e for e in severe if "/sleep" not in e.get("message", "")]
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
