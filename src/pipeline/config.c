/* Pipeline definitions (config.h): the built-in pipelines and the JSON
 * config file, checked key by key with the file and key named in errors. */
#include <ctype.h>
#include "pipeline/config.h"

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebb/error.h"

/* The built-in pipelines. `synthetic` is the "does release work on my GPU?"
 * check; its sizes are modest so the same pipeline is quick on the CPU device
 * (use a config with larger weights_mib for a real GPU, see
 * examples/configs/synthetic-gpu.json). Its stages bypass the result cache:
 * a diagnostic must run every time. */
static const char builtin_json[] =
    "{\"pipelines\": {\n"
    "  \"synthetic\": {\n"
    "    \"description\": \"three synthetic stages (a, b, c): allocate, touch and release "
    "device memory\",\n"
    "    \"release\": \"after-stage\",\n"
    "    \"stages\": [\n"
    "      {\"stage\": \"synthetic\", \"name\": \"a\", \"cache\": false, \"options\": "
    "{\"weights_mib\": 256, \"activations_mib\": 128, \"cache_mib\": 128}},\n"
    "      {\"stage\": \"synthetic\", \"name\": \"b\", \"cache\": false, \"options\": "
    "{\"weights_mib\": 512, \"activations_mib\": 128, \"cache_mib\": 128}},\n"
    "      {\"stage\": \"synthetic\", \"name\": \"c\", \"cache\": false, \"options\": "
    "{\"weights_mib\": 384, \"activations_mib\": 128, \"cache_mib\": 128}}\n"
    "    ]\n"
    "  },\n"
    "  \"songtrace\": {\n"
    "    \"description\": \"audio: decode, separate vocals, transcribe, align words, track "
    "pitch, export\",\n"
    "    \"release\": \"after-stage\",\n"
    "    \"stages\": [\n"
    "      {\"stage\": \"decode\"}, {\"stage\": \"separate\"}, {\"stage\": \"transcribe\"},\n"
    "      {\"stage\": \"align\"}, {\"stage\": \"pitch\"}, {\"stage\": \"export\"}\n"
    "    ]\n"
    "  }\n"
    "}}\n";

int pl_policy_parse(const char *s, pl_policy *out) {
  if (!s)
    return ebb_seterr(EBB_EINVAL, "release policy: none given");
  if (!strcmp(s, "after-stage")) {
    *out = (pl_policy){EBB_POLICY_AFTER_STAGE, 0};
    return 0;
  }
  if (!strcmp(s, "after-job")) {
    *out = (pl_policy){EBB_POLICY_AFTER_JOB, 0};
    return 0;
  }
  if (!strcmp(s, "never")) {
    *out = (pl_policy){EBB_POLICY_NEVER, 0};
    return 0;
  }
  if (!strcmp(s, "sleep")) {
    *out = (pl_policy){EBB_POLICY_SLEEP, 0};
    return 0;
  }
  int sleep = !strncmp(s, "sleep:", 6);
  if (!strncmp(s, "idle:", 5) || sleep) {
    const char *num = s + (sleep ? 6 : 5);
    char *end;
    errno = 0;
    double v = strtod(num, &end);
    if (*num && !*end && !errno && isfinite(v) && v >= 0) {
      *out = (pl_policy){sleep ? EBB_POLICY_SLEEP : EBB_POLICY_IDLE, v};
      return 0;
    }
  }
  return ebb_seterr(EBB_EINVAL,
                    "release policy '%s': expected after-stage, after-job, idle:SECONDS, "
                    "never, sleep or sleep:SECONDS (SECONDS >= 0)",
                    s);
}

const char *pl_policy_format(const pl_policy *p, char *buf, size_t n) {
  switch (p->kind) {
  case EBB_POLICY_AFTER_STAGE: snprintf(buf, n, "after-stage"); break;
  case EBB_POLICY_AFTER_JOB: snprintf(buf, n, "after-job"); break;
  case EBB_POLICY_IDLE: snprintf(buf, n, "idle:%g", p->idle_s); break;
  case EBB_POLICY_NEVER: snprintf(buf, n, "never"); break;
  case EBB_POLICY_SLEEP:
    if (p->idle_s > 0)
      snprintf(buf, n, "sleep:%g", p->idle_s);
    else
      snprintf(buf, n, "sleep");
    break;
  }
  return buf;
}

pl_leave_how pl_policy_leave(const pl_policy *p, double idle_s, double keep_default_s) {
  if (p->kind == EBB_POLICY_NEVER)
    return EBB_LEAVE_STAY;
  int seconds = p->kind == EBB_POLICY_IDLE || p->kind == EBB_POLICY_SLEEP;
  if (idle_s < (seconds ? p->idle_s : keep_default_s))
    return EBB_LEAVE_STAY;
  return p->kind == EBB_POLICY_SLEEP ? EBB_LEAVE_SLEEP : EBB_LEAVE_RELEASE;
}

static void stage_def_free(pl_stage_def *s) {
  free(s->stage);
  free(s->name);
  json_decref(s->options);
  free(s->worker);
  json_decref(s->worker_args);
}

static void strv_free(char **v, size_t n) {
  for (size_t i = 0; i < n; i++)
    free(v[i]);
  free(v);
}

static void pipeline_def_free(pl_def *p) {
  for (size_t i = 0; i < p->nstages; i++)
    stage_def_free(&p->stages[i]);
  strv_free(p->allow_options, p->nallow_options);
  strv_free(p->allow_url_hosts, p->nallow_url_hosts);
  free(p->stages);
  free(p->name);
  free(p->description);
  free(p->origin);
}

void pl_config_free(pl_config *c) {
  if (!c)
    return;
  for (size_t i = 0; i < c->npipelines; i++)
    pipeline_def_free(&c->pipelines[i]);
  free(c->pipelines);
  for (size_t i = 0; i < c->nplugin_dirs; i++)
    free(c->plugin_dirs[i]);
  free(c->plugin_dirs);
  free(c->path);
  free(c);
}

const pl_def *pl_config_pipeline(const pl_config *c, const char *name) {
  for (size_t i = 0; c && name && i < c->npipelines; i++)
    if (!strcmp(c->pipelines[i].name, name))
      return &c->pipelines[i];
  return NULL;
}

static int only_keys(json_t *obj, const char *const *allowed, const char *where) {
  const char *k;
  json_t *v;
  json_object_foreach(obj, k, v) {
    int ok = 0;
    for (const char *const *a = allowed; *a; a++)
      ok |= !strcmp(*a, k);
    if (!ok) {
      char list[256] = "";
      for (const char *const *a = allowed; *a; a++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", a == allowed ? "" : ", ",
                 *a);
      return ebb_seterr(EBB_ECONFIG, "%s: unknown key \"%s\" (allowed: %s)", where, k, list);
    }
  }
  return 0;
}

/* "worker": a path with a '/' is relative to the config's directory; a bare
 * name is looked up in PATH when the worker starts. */
static int parse_worker(json_t *js, const char *where, const char *base_dir, pl_stage_def *out) {
  json_t *wk = json_object_get(js, "worker"), *wa = json_object_get(js, "worker_args");
  if (wk && (!json_is_string(wk) || !*json_string_value(wk)))
    return ebb_seterr(EBB_ECONFIG, "%s: \"worker\" must be the path of an executable", where);
  if (wa && !wk)
    return ebb_seterr(EBB_ECONFIG, "%s: \"worker_args\" needs \"worker\"", where);
  if (wa && !json_is_array(wa))
    return ebb_seterr(EBB_ECONFIG, "%s: \"worker_args\" must be an array of strings", where);
  for (size_t i = 0; wa && i < json_array_size(wa); i++)
    if (!json_is_string(json_array_get(wa, i)))
      return ebb_seterr(EBB_ECONFIG, "%s: worker_args[%zu] must be a string", where, i);
  if (!wk)
    return 0;
  const char *s = json_string_value(wk);
  if (s[0] != '/' && strchr(s, '/') && base_dir) {
    while (s[0] == '.' && s[1] == '/')
      s += 2;
    if ((out->worker = malloc(strlen(base_dir) + strlen(s) + 2)))
      sprintf(out->worker, "%s/%s", base_dir, s);
  } else {
    out->worker = strdup(s);
  }
  out->worker_args = wa ? json_incref(wa) : json_array();
  out->isolate = 1;
  if (!out->worker || !out->worker_args)
    return ebb_seterr(EBB_ENOMEM, "%s: out of host memory", where);
  return 0;
}

/* Pipeline and stage instance names go into log lines ("[name] released
 * ...") and URLs (/v1/pipelines/NAME/load): letters, digits, '_', '-', '.',
 * starting with a letter or digit, at most 64 characters. */
static int check_name(const char *s, const char *what, const char *where) {
  size_t n = strlen(s);
  int ok = n > 0 && n <= 64 && isalnum((unsigned char)s[0]);
  for (size_t i = 0; ok && i < n; i++)
    ok = isalnum((unsigned char)s[i]) || s[i] == '_' || s[i] == '-' || s[i] == '.';
  if (ok)
    return 0;
  char shown[80];
  size_t k = 0;
  for (size_t i = 0; s[i] && k + 1 < sizeof shown; i++)
    shown[k++] = (unsigned char)s[i] >= 0x20 && s[i] != 0x7f ? s[i] : '?';
  shown[k] = '\0';
  return ebb_seterr(EBB_ECONFIG,
                    "%s: %s name '%s' is not allowed: use 1 to 64 letters, digits, '_', '-' or "
                    "'.', starting with a letter or digit",
                    where, what, shown);
}

static int parse_stage(json_t *js, const char *where, const char *base_dir, pl_stage_def *out) {
  static const char *const keys[] = {"stage", "name",   "options",     "isolate", "timeout_s",
                                     "cache", "worker", "worker_args", NULL};
  if (!json_is_object(js))
    return ebb_seterr(EBB_ECONFIG, "%s: a stage entry must be an object", where);
  int rc = only_keys(js, keys, where);
  if (rc)
    return rc;
  json_t *st = json_object_get(js, "stage"), *nm = json_object_get(js, "name");
  json_t *op = json_object_get(js, "options"), *iso = json_object_get(js, "isolate");
  json_t *to = json_object_get(js, "timeout_s"), *ca = json_object_get(js, "cache");
  if (!json_is_string(st) || !*json_string_value(st))
    return ebb_seterr(EBB_ECONFIG, "%s: \"stage\" (the stage's registry name) is required", where);
  if (nm && (!json_is_string(nm) || !*json_string_value(nm)))
    return ebb_seterr(EBB_ECONFIG, "%s: \"name\" must be a non-empty string", where);
  if (nm && (rc = check_name(json_string_value(nm), "stage", where)))
    return rc;
  if (op && !json_is_object(op))
    return ebb_seterr(EBB_ECONFIG, "%s: \"options\" must be an object", where);
  if (iso && !json_is_boolean(iso))
    return ebb_seterr(EBB_ECONFIG, "%s: \"isolate\" must be true or false", where);
  if (ca && !json_is_boolean(ca))
    return ebb_seterr(EBB_ECONFIG, "%s: \"cache\" must be true or false", where);
  if (to && (!json_is_number(to) || !(json_number_value(to) > 0)))
    return ebb_seterr(EBB_ECONFIG, "%s: \"timeout_s\" must be a number of seconds > 0", where);
  out->stage = strdup(json_string_value(st));
  out->name = strdup(nm ? json_string_value(nm) : json_string_value(st));
  out->options = op ? json_incref(op) : json_object();
  out->isolate = iso ? json_is_true(iso) : 0;
  out->timeout_s = to ? json_number_value(to) : 0;
  out->cache = ca ? json_is_true(ca) : -1;
  if (!out->stage || !out->name || !out->options)
    return ebb_seterr(EBB_ENOMEM, "%s: out of host memory", where);
  if (iso && !json_is_true(iso) && json_object_get(js, "worker"))
    return ebb_seterr(EBB_ECONFIG,
                      "%s: a \"worker\" stage always runs isolated (\"isolate\": "
                      "false contradicts it)",
                      where);
  return parse_worker(js, where, base_dir, out);
}

/* "expected_mib" (a number of MiB in (0, 16777216]) and "devices" (["cuda:N" | "cpu", ...],
 * non-empty, N < 32). */
static int parse_placement(json_t *jp, const char *where, pl_def *p) {
  json_t *ex = json_object_get(jp, "expected_mib"), *devs = json_object_get(jp, "devices");
  if (ex &&
      (!json_is_number(ex) || json_number_value(ex) <= 0 || json_number_value(ex) > 16777216.0))
    return ebb_seterr(EBB_ECONFIG,
                      "%s: \"expected_mib\" must be a number of MiB in "
                      "(0, 16777216]",
                      where);
  p->expected_bytes = ex ? (uint64_t)(json_number_value(ex) * 1048576.0) : 0;
  if (!devs)
    return 0;
  if (!json_is_array(devs) || json_array_size(devs) == 0)
    return ebb_seterr(EBB_ECONFIG,
                      "%s: \"devices\" must be a non-empty array of \"cuda:N\" "
                      "or \"cpu\"",
                      where);
  size_t i;
  json_t *d;
  json_array_foreach(devs, i, d) {
    const char *v = json_string_value(d);
    char *end = NULL;
    long n = v && !strncmp(v, "cuda:", 5) && v[5] >= '0' && v[5] <= '9' ? strtol(v + 5, &end, 10)
                                                                        : -1;
    if (v && !strcmp(v, "cpu"))
      p->pin_cpu = 1;
    else if (n >= 0 && n < 32 && end && !*end)
      p->pin_cuda |= 1u << n;
    else
      return ebb_seterr(EBB_ECONFIG,
                        "%s: \"devices\" #%zu: expected \"cuda:N\" (N < 32) or "
                        "\"cpu\"",
                        where, i + 1);
  }
  return 0;
}

/* An array of strings under key, each checked by ok (which names what is
 * wrong in the message), copied into *v (lower-cased when lower). */
static int parse_strv(json_t *jp, const char *key, const char *where, int lower,
                      int (*ok)(const char *s, const char *where, size_t i), char ***v, size_t *n) {
  json_t *a = json_object_get(jp, key);
  if (!a)
    return 0;
  if (!json_is_array(a))
    return ebb_seterr(EBB_ECONFIG, "%s: \"%s\" must be an array of strings", where, key);
  if (!(*v = calloc(json_array_size(a) + 1, sizeof **v)))
    return ebb_seterr(EBB_ENOMEM, "%s: out of host memory", where);
  for (size_t i = 0; i < json_array_size(a); i++) {
    const char *s = json_string_value(json_array_get(a, i));
    if (!s)
      return ebb_seterr(EBB_ECONFIG, "%s: \"%s\" #%zu must be a string", where, key, i + 1);
    int rc = ok(s, where, i);
    if (rc)
      return rc;
    if (!((*v)[(*n)++] = strdup(s)))
      return ebb_seterr(EBB_ENOMEM, "%s: out of host memory", where);
    for (char *q = (*v)[*n - 1]; lower && *q; q++)
      *q = (char)tolower((unsigned char)*q);
  }
  return 0;
}

/* "STAGE.OPTION": a stage entry's name, a dot, an option name (the stage's
 * schema is checked against it with the registry, pipeline/trust.h). */
static int allow_option_ok(const char *s, const char *where, size_t i) {
  const char *dot = strchr(s, '.');
  int ok = dot && dot > s && dot[1];
  for (const char *q = s; ok && *q; q++)
    ok = isalnum((unsigned char)*q) || *q == '_' || *q == '-' || *q == '.';
  if (ok)
    return 0;
  return ebb_seterr(EBB_ECONFIG,
                    "%s: \"allow_options\" #%zu: expected \"STAGE.OPTION\" (a stage "
                    "entry's name and one of its options, e.g. \"align.lyrics\")",
                    where, i + 1);
}

/* "HOST" or "HOST:PORT" (a DNS name or an IPv4 address; [v6] in brackets). */
static int url_host_ok(const char *s, const char *where, size_t i) {
  size_t n = strlen(s);
  int ok = n > 0 && n < 256;
  for (size_t k = 0; ok && k < n; k++)
    ok = isalnum((unsigned char)s[k]) || strchr(".-_:[]", s[k]);
  if (ok)
    return 0;
  return ebb_seterr(EBB_ECONFIG,
                    "%s: \"allow_url_hosts\" #%zu: expected \"HOST\" or "
                    "\"HOST:PORT\" (no scheme, no path), got '%.80s'",
                    where, i + 1, s);
}

static int parse_trust(json_t *jp, const char *where, pl_def *p) {
  int rc = parse_strv(jp, "allow_options", where, 0, allow_option_ok, &p->allow_options,
                      &p->nallow_options);
  if (!rc)
    rc = parse_strv(jp, "allow_url_hosts", where, 1, url_host_ok, &p->allow_url_hosts,
                    &p->nallow_url_hosts);
  for (size_t i = 0; !rc && i < p->nallow_options; i++) {
    const char *dot = strchr(p->allow_options[i], '.');
    size_t k = 0;
    while (k < p->nstages &&
           (strncmp(p->stages[k].name, p->allow_options[i], (size_t)(dot - p->allow_options[i])) ||
            p->stages[k].name[dot - p->allow_options[i]]))
      k++;
    if (k == p->nstages)
      rc = ebb_seterr(EBB_ECONFIG, "%s: \"allow_options\": '%s' names no stage of the pipeline",
                      where, p->allow_options[i]);
  }
  return rc;
}

static int parse_pipeline(const char *name, json_t *jp, const char *origin, const char *base_dir,
                          pl_def *p) {
  static const char *const keys[] = {"stages",       "release", "description",   "timeout_s",
                                     "expected_mib", "devices", "allow_options", "allow_url_hosts",
                                     "evictable",    NULL};
  char where[768];
  snprintf(where, sizeof where, "%s: pipeline '%s'", origin, name);
  int brc = check_name(name, "pipeline", origin);
  if (brc)
    return brc;
  p->name = strdup(name);
  p->origin = strdup(origin);
  if (!p->name || !p->origin)
    return ebb_seterr(EBB_ENOMEM, "%s: out of host memory", where);
  if (!json_is_object(jp))
    return ebb_seterr(EBB_ECONFIG, "%s: must be an object", where);
  int rc = only_keys(jp, keys, where);
  if (rc)
    return rc;
  json_t *stages = json_object_get(jp, "stages"), *rel = json_object_get(jp, "release");
  json_t *desc = json_object_get(jp, "description");
  if (!json_is_array(stages) || json_array_size(stages) == 0)
    return ebb_seterr(EBB_ECONFIG, "%s: \"stages\" must be a non-empty array", where);
  if (desc && !json_is_string(desc))
    return ebb_seterr(EBB_ECONFIG, "%s: \"description\" must be a string", where);
  if (desc && !(p->description = strdup(json_string_value(desc))))
    return ebb_seterr(EBB_ENOMEM, "%s: out of host memory", where);
  json_t *to = json_object_get(jp, "timeout_s");
  if (to &&
      (!json_is_number(to) || json_number_value(to) <= 0 || json_number_value(to) > 31536000.0))
    return ebb_seterr(EBB_ECONFIG,
                      "%s: \"timeout_s\" must be a number of seconds in "
                      "(0, 31536000]",
                      where);
  p->timeout_s = to ? json_number_value(to) : 0;
  if ((rc = parse_placement(jp, where, p)))
    return rc;
  json_t *ev = json_object_get(jp, "evictable"); /* issue 35: a peer may take it */
  if (ev && !json_is_boolean(ev))
    return ebb_seterr(EBB_ECONFIG, "%s: \"evictable\" must be true or false", where);
  p->evictable = ev ? json_is_true(ev) : 1;
  if (rel) {
    if (!json_is_string(rel))
      return ebb_seterr(EBB_ECONFIG, "%s: \"release\" must be a string", where);
    if ((rc = pl_policy_parse(json_string_value(rel), &p->policy)))
      return ebb_errctx(EBB_ECONFIG, "%s: ", where);
    p->has_policy = 1;
  }
  p->stages = calloc(json_array_size(stages), sizeof *p->stages);
  if (!p->stages)
    return ebb_seterr(EBB_ENOMEM, "%s: out of host memory", where);
  for (size_t i = 0; i < json_array_size(stages); i++) {
    char sw[900];
    snprintf(sw, sizeof sw, "%s stage #%zu", where, i + 1);
    p->nstages++;
    if ((rc = parse_stage(json_array_get(stages, i), sw, base_dir, &p->stages[i])))
      return rc;
    for (size_t j = 0; j < i; j++)
      if (!strcmp(p->stages[j].name, p->stages[i].name))
        return ebb_seterr(EBB_ECONFIG,
                          "%s: two stages are named '%s' (give one a different \"name\")", where,
                          p->stages[i].name);
  }
  return parse_trust(jp, where, p);
}

/* Adds (or replaces) the pipelines of root. */
static int merge(pl_config *c, json_t *root, const char *origin, const char *base_dir) {
  if (!json_is_object(root))
    return ebb_seterr(EBB_ECONFIG, "%s: the top level must be a JSON object", origin);
  /* a typo ("pipelins") would otherwise surface as "unknown pipeline" */
  static const char *const top_keys[] = {"pipelines", "plugin_dirs", "server", NULL};
  int krc = only_keys(root, top_keys, origin);
  if (krc)
    return krc;
  json_t *pipes = json_object_get(root, "pipelines");
  json_t *dirs = json_object_get(root, "plugin_dirs");
  if (pipes && !json_is_object(pipes))
    return ebb_seterr(EBB_ECONFIG, "%s: \"pipelines\" must be an object of NAME: {...}", origin);
  if (dirs && !json_is_array(dirs))
    return ebb_seterr(EBB_ECONFIG, "%s: \"plugin_dirs\" must be an array of directories", origin);
  const char *name;
  json_t *jp;
  json_object_foreach(pipes, name, jp) {
    pl_def def = {0};
    int rc = parse_pipeline(name, jp, origin, base_dir, &def);
    if (rc) {
      pipeline_def_free(&def);
      return rc;
    }
    pl_def *old = (pl_def *)pl_config_pipeline(c, name);
    if (old) {
      pipeline_def_free(old);
      *old = def;
      continue;
    }
    pl_def *v = realloc(c->pipelines, (c->npipelines + 1) * sizeof *v);
    if (!v) {
      pipeline_def_free(&def);
      return ebb_seterr(EBB_ENOMEM, "%s: out of host memory", origin);
    }
    c->pipelines = v;
    c->pipelines[c->npipelines++] = def;
  }
  for (size_t i = 0; dirs && i < json_array_size(dirs); i++) {
    json_t *d = json_array_get(dirs, i);
    if (!json_is_string(d) || !*json_string_value(d))
      return ebb_seterr(EBB_ECONFIG, "%s: plugin_dirs[%zu] must be a non-empty string", origin, i);
    const char *s = json_string_value(d);
    char *full;
    if (s[0] == '/' || !base_dir)
      full = strdup(s);
    else if ((full = malloc(strlen(base_dir) + strlen(s) + 2)))
      sprintf(full, "%s/%s", base_dir, s);
    char **v = full ? realloc(c->plugin_dirs, (c->nplugin_dirs + 1) * sizeof *v) : NULL;
    if (!v) {
      free(full);
      return ebb_seterr(EBB_ENOMEM, "%s: out of host memory", origin);
    }
    c->plugin_dirs = v;
    c->plugin_dirs[c->nplugin_dirs++] = full;
  }
  return 0;
}

static int parse_text(pl_config *c, const char *text, const char *origin, const char *base_dir) {
  json_error_t e;
  json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &e);
  if (!root)
    return ebb_seterr(EBB_ECONFIG, "%s:%d:%d: JSON syntax error: %s", origin, e.line, e.column,
                      e.text);
  int rc = merge(c, root, origin, base_dir);
  json_decref(root);
  return rc;
}

static int config_new(pl_config **out) {
  pl_config *c = calloc(1, sizeof *c);
  if (!c)
    return ebb_seterr(EBB_ENOMEM, "config: out of host memory");
  int rc = parse_text(c, builtin_json, "built-in", NULL);
  if (rc) {
    pl_config_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

int pl_config_load_string(const char *text, const char *name, pl_config **out) {
  pl_config *c = NULL;
  int rc = config_new(&c);
  if (rc)
    return rc;
  if (text && (rc = parse_text(c, text, name ? name : "config", NULL))) {
    pl_config_free(c);
    return rc;
  }
  *out = c;
  return 0;
}

int pl_config_load(const char *path, pl_config **out) {
  pl_config *c = NULL;
  int rc = config_new(&c);
  if (rc || !path) {
    if (!rc)
      *out = c;
    return rc;
  }
  char *text = NULL, *dircopy = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) {
    rc = ebb_seterr(EBB_ECONFIG, "config %s: cannot open: %s", path, strerror(errno));
    goto done;
  }
  size_t cap = 4096, n = 0;
  text = malloc(cap);
  for (size_t got; text && (got = fread(text + n, 1, cap - n - 1, f)) > 0;) {
    n += got;
    if (n + 1 == cap) {
      char *t = realloc(text, cap *= 2);
      if (!t) {
        free(text);
        text = NULL;
      }
      text = t;
    }
  }
  int rerr = ferror(f);
  fclose(f);
  if (!text) {
    rc = ebb_seterr(EBB_ENOMEM, "config %s: out of host memory", path);
    goto done;
  }
  if (rerr) {
    rc = ebb_seterr(EBB_ECONFIG, "config %s: read error", path);
    goto done;
  }
  text[n] = '\0';
  if (!(c->path = strdup(path)) || !(dircopy = strdup(path))) {
    rc = ebb_seterr(EBB_ENOMEM, "config %s: out of host memory", path);
    goto done;
  }
  rc = parse_text(c, text, path, dirname(dircopy));
done:
  free(text);
  free(dircopy);
  if (rc) {
    pl_config_free(c);
    return rc;
  }
  *out = c;
  return 0;
}
