/* Option trust levels: what a job may set (trust.h): a pipeline's
 * "allow_options" and a job's options against its stages' schemas, whose
 * levels trust_schema.c reads. */
#include "pipeline/trust.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "ebb/error.h"

static const pl_stage_def *stage_def(const pl_def *p, const char *name, size_t n) {
  for (size_t i = 0; i < p->nstages; i++)
    if (strlen(p->stages[i].name) == n && !strncmp(p->stages[i].name, name, n))
      return &p->stages[i];
  return NULL;
}

int pl_check_trust(const pl_registry *reg, const pl_def *p) {
  for (size_t i = 0; i < p->nallow_options; i++) {
    const char *e = p->allow_options[i], *dot = strchr(e, '.');
    const pl_stage_def *d = dot ? stage_def(p, e, (size_t)(dot - e)) : NULL;
    const ebb_stage *st = d && !d->worker ? pl_registry_find(reg, d->stage, NULL) : NULL;
    if (!st) /* no stage (config.c said so) or a worker's: its own options */
      continue;
    json_t *schema = st->options_schema ? json_loads(st->options_schema, 0, NULL) : NULL;
    int known = json_object_get(schema, dot + 1) != NULL;
    json_decref(schema);
    if (!known)
      return ebb_seterr(EBB_ECONFIG,
                        "%s: pipeline '%s': \"allow_options\": stage '%s' (%s) has "
                        "no option '%s' (see `ebb stages`)",
                        p->origin, p->name, d->name, d->stage, dot + 1);
  }
  return 0;
}

static int allowed(const pl_def *p, const char *stage, const char *option) {
  size_t n = strlen(stage);
  for (size_t i = 0; i < p->nallow_options; i++)
    if (!strncmp(p->allow_options[i], stage, n) && p->allow_options[i][n] == '.' &&
        !strcmp(p->allow_options[i] + n + 1, option))
      return 1;
  return 0;
}

/* "http(s)://[userinfo@]HOST[:PORT][/...]": the authority lower-cased into
 * host ("host" and "host:port" are compared with the list). A URL with
 * userinfo is refused (the '@' trick hides the real host from a reader). */
static int url_authority(const char *url, char *host, size_t cap, int *has_port) {
  const char *a = !strncmp(url, "http://", 7)    ? url + 7
                  : !strncmp(url, "https://", 8) ? url + 8
                                                 : NULL;
  if (!a)
    return -1;
  size_t n = strcspn(a, "/?#");
  if (n == 0 || n >= cap || memchr(a, '@', n) || memchr(a, '\\', n))
    return -1;
  for (size_t i = 0; i < n; i++)
    host[i] = (char)tolower((unsigned char)a[i]);
  host[n] = '\0';
  const char *colon = strrchr(host, ':'), *bracket = strrchr(host, ']');
  *has_port = colon && (!bracket || colon > bracket);
  return 0;
}

static int url_ok(const pl_def *p, const char *stage, const char *option, const char *url) {
  char host[300];
  int has_port = 0;
  if (url_authority(url, host, sizeof host, &has_port) != 0)
    return ebb_seterr(EBB_ECONFIG,
                      "option %s.%s: not an http:// or https:// URL with a plain "
                      "host (no user@)",
                      stage, option);
  size_t hn = has_port ? (size_t)(strrchr(host, ':') - host) : strlen(host);
  for (size_t i = 0; i < p->nallow_url_hosts; i++) {
    const char *h = p->allow_url_hosts[i];
    const char *hc = strrchr(h, ':'), *hb = strrchr(h, ']');
    int entry_port = hc && (!hb || hc > hb);
    if (entry_port ? !strcmp(h, host) : (strlen(h) == hn && !strncmp(h, host, hn)))
      return 0;
  }
  return ebb_seterr(EBB_ECONFIG,
                    "option %s.%s: host %s is not one this server sends to: the "
                    "operator lists them in pipeline '%s' \"allow_url_hosts\"",
                    stage, option, host, p->name);
}

static int refuse_operator(const pl_def *p, const pl_stage_def *d, const char *key,
                           pl_opt_format fmt) {
  static const char *const what[] = {"", " (it names a server path)", " (it names a URL)",
                                     " (it is a credential)"};
  int lyrics = !strcmp(d->stage, "align") && !strcmp(key, "lyrics");
  return ebb_seterr(EBB_ECONFIG,
                    "option %s.%s is operator-only%s; set it in the config file, or "
                    "the operator allows jobs to set it with \"allow_options\": [\"%s.%s\"] in "
                    "pipeline '%s'%s",
                    d->name, key, what[fmt], d->name, key, p->name,
                    lyrics ? "; to send lyrics with a job use \"lyrics\" (JSON) or a multipart "
                             "part \"lyrics\""
                           : "");
}

/* One option a job set. */
static int check_one(const pl_def *p, const pl_stage_def *d, const json_t *schema, const char *key,
                     json_t *v, json_t *opts, pl_trust_path_fn on_path, void *arg) {
  json_t *spec = json_object_get(schema, key);
  pl_opt_trust t = EBB_TRUST_OPERATOR;
  pl_opt_format f = EBB_OPT_FMT_NONE;
  if (schema && !spec)
    return 0; /* unknown: the schema check names it */
  int rc = schema ? pl_option_trust(d->stage, key, spec, &t, &f) : 0;
  if (rc)
    return rc;
  const char *s = json_string_value(v);
  if (t == EBB_TRUST_OPERATOR && !allowed(p, d->name, key))
    return refuse_operator(p, d, key, f);
  if (f != EBB_OPT_FMT_NONE && s && pl_has_control_char(s))
    return ebb_seterr(EBB_ECONFIG, "option %s.%s: the value holds a control character", d->name,
                      key);
  if (t == EBB_TRUST_JOB)
    return 0;
  if (f == EBB_OPT_FMT_URL && s && *s)
    return url_ok(p, d->name, key, s);
  if (f == EBB_OPT_FMT_PATH && s && *s) {
    if (!on_path)
      return ebb_seterr(EBB_ECONFIG,
                        "option %s.%s: a path a job names is read only by a server "
                        "with --input-dir",
                        d->name, key);
    return on_path(arg, d->name, key, s, opts);
  }
  return 0;
}

int pl_job_options_trust(const pl_registry *reg, const pl_def *p, json_t *options,
                         pl_trust_path_fn on_path, void *arg) {
  const char *name;
  json_t *opts;
  json_object_foreach(options, name, opts) {
    const pl_stage_def *d = stage_def(p, name, strlen(name));
    if (!d || !json_is_object(opts))
      continue; /* the merge names it */
    const ebb_stage *st = d->worker ? NULL : pl_registry_find(reg, d->stage, NULL);
    if (!d->worker && !st)
      continue;
    /* a "worker" entry's options are the worker's: none is known to be safe */
    json_t *schema =
        st ? (st->options_schema ? json_loads(st->options_schema, 0, NULL) : json_object()) : NULL;
    const char *key;
    json_t *v;
    int rc = 0;
    void *tmp;
    json_object_foreach_safe(opts, tmp, key, v) {
      if ((rc = check_one(p, d, schema, key, v, opts, on_path, arg)) != 0)
        break;
    }
    json_decref(schema);
    if (rc)
      return rc;
  }
  return 0;
}
