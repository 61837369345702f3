"""docs/openapi.yaml for tests/integration/server_openapi.sh (run by the
schemathesis venv's python, which has PyYAML).

  server_openapi.py routes SPEC ROUTES_C
      every route of src/server/routes.c (pattern and methods) is a path and
      operation of SPEC, and SPEC has nothing the server does not serve
  server_openapi.py fields SPEC BODY_C
      every body field src/server/body.c reads (the JSON keys of a job and
      of a session item, the multipart fields) is a property of SPEC's
      request bodies for POST /v1/jobs and POST /v1/sessions/{id}/items
  server_openapi.py real SPEC OUT PIPELINES INPUT STAGE
      writes OUT: SPEC with the test server's real values (pipeline names,
      the input file, options for its one stage name), so that schema-valid
      requests are ones the server must accept (schemathesis's
      positive_data_acceptance) and fuzzing reaches jobs that run
"""
import json
import re
import sys

import yaml


def routes(spec_path, routes_c):
    spec = yaml.safe_load(open(spec_path))
    src = open(routes_c).read()
    table = src[src.index("static const srv_route routes[]"):]
    table = table[:table.index("};")]
    served = {}
    for pat, methods in re.findall(r'\{"([^"]*)",\s*([A-Z_| ]+),', table):
        segs, n = [], 0
        for seg in pat.split("/") if pat else []:
            if seg == "*":
                n += 1
                seg = "{%d}" % n
            segs.append(seg)
        path = "/" + "/".join(segs)
        served[path] = {m.strip()[2:].lower() for m in methods.split("|")}
    if len(served) < 15:
        sys.exit("routes: read only %d routes from %s; has its table changed?" % (len(served), routes_c))

    def shape(p):  # /v1/jobs/{id}/files/{name} -> /v1/jobs/{1}/files/{2}
        n = iter(range(1, 99))
        return re.sub(r"\{[^}]+\}", lambda _: "{%d}" % next(n), p)

    documented = {shape(p): {m for m in ops if m in ("get", "post", "delete", "put", "patch")}
                  for p, ops in spec["paths"].items()}
    bad = []
    for p, ms in sorted(served.items()):
        if p not in documented:
            bad.append("%s (%s) is served but not in %s" % (p, ", ".join(sorted(ms)), spec_path))
        elif documented[p] != ms:
            bad.append("%s: served for %s, documented for %s" % (p, sorted(ms), sorted(documented[p])))
    for p in sorted(set(documented) - set(served)):
        bad.append("%s is in %s but not served" % (p, spec_path))
    if bad:
        sys.exit("routes:\n  " + "\n  ".join(bad))
    print("routes: the %d routes of routes.c are the %d paths of the spec" % (len(served), len(documented)))


def fields(spec_path, body_c):
    spec = yaml.safe_load(open(spec_path))
    src = open(body_c).read()
    m = re.search(r"static const char \*const job\[\] = \{([^}]*)\}", src)
    if not m:
        sys.exit("fields: no job[] key list in %s; has check_json_keys changed?" % body_c)
    job_keys = re.findall(r'"([^"]+)"', m.group(1))
    it = src[src.index("static enum MHD_Result post_iter"):]
    it = it[:it.index("\n}\n")]
    parts = re.findall(r'!strcmp\(key, "([^"]+)"\)', it)
    if "pipeline" not in job_keys or "input" not in parts:
        sys.exit("fields: read keys %s and parts %s from %s; has body.c changed?"
                 % (job_keys, parts, body_c))
    bad = []
    # a session item's JSON takes the job's keys but "pipeline" (job + 1 in
    # check_json_keys), and a multipart item has no pipeline field either
    want = {("/v1/jobs", "application/json"): job_keys,
            ("/v1/jobs", "multipart/form-data"): parts,
            ("/v1/sessions/{id}/items", "application/json"): [k for k in job_keys if k != "pipeline"],
            ("/v1/sessions/{id}/items", "multipart/form-data"): [k for k in parts if k != "pipeline"]}
    for (path, ct), keys in sorted(want.items()):
        props = spec["paths"][path]["post"]["requestBody"]["content"][ct]["schema"]["properties"]
        for k in keys:
            if k not in props:
                bad.append("POST %s (%s): the server reads \"%s\" (%s) but %s does not list it"
                           % (path, ct, k, body_c, spec_path))
    if bad:
        sys.exit("fields:\n  " + "\n  ".join(bad))
    print("fields: the %d JSON keys and %d multipart fields body.c reads are in the spec"
          % (len(job_keys), len(parts)))


def real(spec_path, out, pipelines, inp, stage):
    spec = yaml.safe_load(open(spec_path))
    P, C = spec["paths"], spec["components"]
    pipes = pipelines.split(",")
    C["parameters"]["PipelineName"]["schema"]["enum"] = pipes
    C["schemas"]["Options"] = {"type": ["object", "null"], "additionalProperties": False,
                               "properties": {stage: {"type": "object", "additionalProperties": False}}}
    opts_text = {"type": "string", "enum": ["{}", json.dumps({stage: {}})]}

    def body(path, ct):
        return P[path]["post"]["requestBody"]["content"][ct]["schema"]

    body("/v1/jobs", "application/json")["properties"]["pipeline"]["enum"] = pipes
    body("/v1/jobs", "application/json")["properties"]["input"]["enum"] = [inp]
    body("/v1/sessions", "application/json")["properties"]["pipeline"]["enum"] = pipes
    body("/v1/sessions/{id}/items", "application/json")["properties"]["input"]["enum"] = [inp]
    for path in ("/v1/jobs", "/v1/sessions/{id}/items"):
        # A raw upload takes its pipeline from the query, a JSON or multipart
        # body does not read the query: OpenAPI cannot say that, so the raw
        # upload (server_upload tests it) is left out here. schemathesis
        # takes a multipart body with both a file and an input for valid
        # under the spec's oneOf, so the input field is left out too
        # (server_security sends both and expects the 400).
        P[path]["post"]["requestBody"]["content"].pop("application/octet-stream")
        # lyrics go to an align stage, and the test's pipelines have none
        # (a job with lyrics there is rightly 400): server_options_trust and
        # cluster_options_trust send lyrics to pipelines that take them
        body(path, "application/json")["properties"].pop("lyrics")
        body(path, "multipart/form-data")["properties"].pop("lyrics")
        P[path]["post"].pop("parameters", None)
        mp = body(path, "multipart/form-data")
        mp.pop("oneOf")
        mp["properties"].pop("input")
        mp["properties"]["options"] = opts_text
        mp["required"] = mp.get("required", []) + ["file"]
        if "pipeline" in mp["properties"]:
            mp["properties"]["pipeline"]["enum"] = pipes
    json.dump(spec, open(out, "w"), indent=1)


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"routes": routes, "fields": fields, "real": real}[cmd](*args)
