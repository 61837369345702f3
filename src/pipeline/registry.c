/* The stage registry (registry.h): built-in stages and plugin .so files
 * loaded with dlopen and handed the host function table. */
#include "pipeline/registry.h"

#include <dirent.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/host.h"
#include "pipeline/trust.h"
#include "stages/builtin.h"

typedef struct reg_entry {
  const ebb_stage *stage;
  const char *origin; /* "built-in" or a plugin path (plugins[].path) */
} reg_entry;

typedef struct reg_plugin {
  char *path;
  void *handle;
} reg_plugin;

struct pl_registry {
  reg_entry *v;
  size_t n, cap;
  reg_plugin *plugins;
  size_t nplugins, capplugins;
};

static int add_entry(pl_registry *r, const ebb_stage *st, const char *origin) {
  const char *prev;
  if (pl_registry_find(r, st->name, &prev))
    return ebb_seterr(EBB_ECONFIG, "%s: stage '%s' is already registered by %s", origin, st->name,
                      prev);
  if (r->n == r->cap) {
    size_t cap = r->cap ? r->cap * 2 : 16;
    reg_entry *v = realloc(r->v, cap * sizeof *v);
    if (!v)
      return ebb_seterr(EBB_ENOMEM, "registry: out of host memory");
    r->v = v;
    r->cap = cap;
  }
  r->v[r->n++] = (reg_entry){st, origin};
  return 0;
}

/* A stage vtable ebb can use: right ABI, entry points present. Reads only
 * abi_version before knowing the layout matches. */
static int check_stage(const ebb_stage *st, const char *origin, size_t index) {
  if (!st)
    return ebb_seterr(EBB_EABI, "%s: stage #%zu is NULL", origin, index);
  if (st->abi_version != EBB_STAGE_ABI_VERSION)
    return ebb_seterr(EBB_EABI,
                      "%s: stage #%zu was built for stage ABI version %u; this ebb speaks "
                      "version %u (rebuild the plugin against this ebb's include/ebb/stage.h)",
                      origin, index, st->abi_version, EBB_STAGE_ABI_VERSION);
  /* a stage built against an older, shorter struct still loads: the fields
   * appended since are read through EBB_STAGE_HAS */
  if (st->size < EBB_STAGE_SIZE_V1)
    return ebb_seterr(EBB_EABI, "%s: stage #%zu has size %u, expected at least %u", origin, index,
                      st->size, EBB_STAGE_SIZE_V1);
  if (!st->name || !*st->name)
    return ebb_seterr(EBB_EABI, "%s: stage #%zu has no name", origin, index);
  const char *missing = !st->load ? "load" : !st->run ? "run" : !st->unload ? "unload" : NULL;
  if (missing)
    return ebb_seterr(EBB_EABI, "%s: stage '%s' has no %s entry point", origin, st->name, missing);
  if (st->options_schema) {
    json_error_t e;
    json_t *s = json_loads(st->options_schema, 0, &e);
    int ok = s && json_is_object(s);
    json_decref(s);
    if (!ok)
      return ebb_seterr(EBB_EABI, "%s: stage '%s': options_schema is not a JSON object (%s)",
                        origin, st->name, e.text);
  }
  return pl_schema_check_trust(st, origin);
}

int pl_registry_create(pl_registry **out) {
  pl_registry *r = calloc(1, sizeof *r);
  if (!r)
    return ebb_seterr(EBB_ENOMEM, "registry: out of host memory");
  size_t n;
  const ebb_stage *const *b = stg_builtin_stages(&n);
  for (size_t i = 0; i < n; i++) {
    int rc = check_stage(b[i], "built-in", i);
    if (!rc)
      rc = add_entry(r, b[i], "built-in");
    if (rc) {
      pl_registry_destroy(r);
      return rc;
    }
  }
  *out = r;
  return 0;
}

void pl_registry_destroy(pl_registry *r) {
  if (!r)
    return;
  for (size_t i = 0; i < r->nplugins; i++) {
    if (r->plugins[i].handle)
      dlclose(r->plugins[i].handle);
    free(r->plugins[i].path);
  }
  free(r->plugins);
  free(r->v);
  free(r);
}

int pl_registry_load_plugin(pl_registry *r, const char *path) {
  for (size_t i = 0; i < r->nplugins; i++)
    if (!strcmp(r->plugins[i].path, path))
      return 0; /* already loaded (a directory named twice) */
  if (r->nplugins == r->capplugins) {
    size_t cap = r->capplugins ? r->capplugins * 2 : 4;
    reg_plugin *p = realloc(r->plugins, cap * sizeof *p);
    if (!p)
      return ebb_seterr(EBB_ENOMEM, "registry: out of host memory");
    r->plugins = p;
    r->capplugins = cap;
  }
  reg_plugin *pl = &r->plugins[r->nplugins];
  pl->path = strdup(path);
  pl->handle = NULL;
  if (!pl->path)
    return ebb_seterr(EBB_ENOMEM, "registry: out of host memory");
  r->nplugins++; /* from here the path (origin strings) lives with r */

  dlerror();
  pl->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!pl->handle)
    return ebb_seterr(EBB_ENOLIB, "plugin %s: cannot load: %s", path, dlerror());
  ebb_plugin_init_fn init =
      (ebb_plugin_init_fn)(uintptr_t)dlsym(pl->handle, EBB_PLUGIN_INIT_SYMBOL);
  if (!init)
    return ebb_seterr(EBB_EABI,
                      "plugin %s: no %s symbol: not an ebb stage plugin (see docs/stage-abi.md)",
                      path, EBB_PLUGIN_INIT_SYMBOL);
  const ebb_stage *const *stages = NULL;
  size_t n = 0;
  ebb_clearerr();
  int rc = init(pl_host_table(), &stages, &n);
  if (rc)
    return ebb_seterr(rc == EBB_EABI ? EBB_EABI : EBB_ECONFIG, "plugin %s: %s returned %s (%s)%s",
                      path, EBB_PLUGIN_INIT_SYMBOL, ebb_errname(rc), ebb_strerror(rc),
                      rc == EBB_EABI ? ": it was built for another stage ABI version than "
                                       "this ebb's"
                                     : "");
  if (n && !stages)
    return ebb_seterr(EBB_EABI, "plugin %s: returned %zu stages but no array", path, n);
  char where[4200];
  snprintf(where, sizeof where, "plugin %s", pl->path);
  for (size_t i = 0; i < n; i++) {
    if ((rc = check_stage(stages[i], where, i)) || (rc = add_entry(r, stages[i], pl->path)))
      return rc;
  }
  return 0;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suf) {
  size_t n = strlen(s), m = strlen(suf);
  return n >= m && !strcmp(s + n - m, suf);
}

int pl_registry_load_dir(pl_registry *r, const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0)
    return ebb_seterr(EBB_ENOTFOUND, "plugin directory %s: does not exist", dir);
  if (S_ISREG(st.st_mode))
    return pl_registry_load_plugin(r, dir);
  DIR *d = opendir(dir);
  if (!d)
    return ebb_seterr(EBB_EIO, "plugin directory %s: cannot read it", dir);
  char **names = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.' || !ends_with(e->d_name, ".so"))
      continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 8;
      char **nn = realloc(names, cap * sizeof *nn);
      if (!nn) {
        rc = ebb_seterr(EBB_ENOMEM, "registry: out of host memory");
        break;
      }
      names = nn;
    }
    if (!(names[n] = malloc(strlen(dir) + strlen(e->d_name) + 2))) {
      rc = ebb_seterr(EBB_ENOMEM, "registry: out of host memory");
      break;
    }
    sprintf(names[n++], "%s/%s", dir, e->d_name);
  }
  closedir(d);
  if (!rc && n)
    qsort(names, n, sizeof *names, cmp_str);
  for (size_t i = 0; i < n; i++) {
    if (!rc)
      rc = pl_registry_load_plugin(r, names[i]);
    free(names[i]);
  }
  free(names);
  return rc;
}

int pl_registry_load_env(pl_registry *r) {
  const char *env = getenv("EBB_PLUGIN_PATH");
  if (!env || !*env)
    return 0;
  char *copy = strdup(env), *save = NULL;
  if (!copy)
    return ebb_seterr(EBB_ENOMEM, "registry: out of host memory");
  int rc = 0;
  for (char *p = strtok_r(copy, ":", &save); p && !rc; p = strtok_r(NULL, ":", &save))
    if (*p && (rc = pl_registry_load_dir(r, p)))
      ebb_errctx(rc, "EBB_PLUGIN_PATH: ");
  free(copy);
  return rc;
}

const ebb_stage *pl_registry_find(const pl_registry *r, const char *name, const char **origin) {
  for (size_t i = 0; r && name && i < r->n; i++)
    if (!strcmp(r->v[i].stage->name, name)) {
      if (origin)
        *origin = r->v[i].origin;
      return r->v[i].stage;
    }
  return NULL;
}

size_t pl_registry_count(const pl_registry *r) { return r ? r->n : 0; }

const ebb_stage *pl_registry_at(const pl_registry *r, size_t i, const char **origin) {
  if (!r || i >= r->n)
    return NULL;
  if (origin)
    *origin = r->v[i].origin;
  return r->v[i].stage;
}

static const char *json_type_name(const json_t *v) {
  switch (json_typeof(v)) {
  case JSON_OBJECT: return "an object";
  case JSON_ARRAY: return "an array";
  case JSON_STRING: return "a string";
  case JSON_INTEGER: return "an integer";
  case JSON_REAL: return "a number";
  case JSON_TRUE:
  case JSON_FALSE: return "a boolean";
  case JSON_NULL: return "null";
  }
  return "?";
}

static int type_ok(const char *type, const json_t *v) {
  if (!strcmp(type, "number"))
    return json_is_number(v);
  if (!strcmp(type, "integer"))
    return json_is_integer(v) || (json_is_real(v) && json_real_value(v) > -0x1p63 &&
                                  json_real_value(v) < 0x1p63 && /* the cast below is UB outside */
                                  json_real_value(v) == (double)(long long)json_real_value(v));
  if (!strcmp(type, "string"))
    return json_is_string(v);
  if (!strcmp(type, "boolean"))
    return json_is_boolean(v);
  if (!strcmp(type, "array"))
    return json_is_array(v);
  if (!strcmp(type, "object"))
    return json_is_object(v);
  return !strcmp(type, "any");
}

/* The schema's "minimum" / "maximum" for a number (JSON Schema keys). */
static int bounds_ok(const ebb_stage *st, const char *key, const json_t *spec, const json_t *v,
                     const char *where) {
  if (!json_is_number(v) || !json_is_object(spec))
    return 0;
  json_t *lo = json_object_get(spec, "minimum"), *hi = json_object_get(spec, "maximum");
  double x = json_number_value(v);
  if ((json_is_number(lo) && x < json_number_value(lo)) ||
      (json_is_number(hi) && x > json_number_value(hi))) {
    char range[96];
    if (json_is_number(lo) && json_is_number(hi))
      snprintf(range, sizeof range, "between %g and %g", json_number_value(lo),
               json_number_value(hi));
    else if (json_is_number(lo))
      snprintf(range, sizeof range, "at least %g", json_number_value(lo));
    else
      snprintf(range, sizeof range, "at most %g", json_number_value(hi));
    return ebb_seterr(EBB_ECONFIG, "%s: option '%s' of stage '%s' must be %s, got %g", where, key,
                      st->name, range, x);
  }
  return 0;
}

int pl_stage_validate_options(const ebb_stage *st, const json_t *options, const char *where,
                              json_t **merged) {
  const char *w = where ? where : "options";
  json_t *schema = NULL, *out = NULL;
  json_error_t e;
  int rc = 0;
  if (options && !json_is_object(options))
    return ebb_seterr(EBB_ECONFIG, "%s: \"options\" of stage '%s' must be an object, got %s", w,
                      st->name, json_type_name(options));
  schema = st->options_schema ? json_loads(st->options_schema, 0, &e) : json_object();
  out = json_object();
  if (!schema || !json_is_object(schema) || !out) {
    rc = ebb_seterr(EBB_EABI, "stage '%s': options_schema is not a JSON object", st->name);
    goto fail;
  }
  const char *key;
  json_t *spec;
  json_object_foreach(schema, key, spec) {
    json_t *def = json_is_object(spec) ? json_object_get(spec, "default") : NULL;
    if (def)
      json_object_set(out, key, def);
  }
  json_t *v;
  json_object_foreach((json_t *)options, key, v) {
    spec = json_object_get(schema, key);
    if (!spec) {
      char known[512] = "";
      size_t len = 0;
      const char *k2;
      json_t *s2;
      json_object_foreach(schema, k2, s2) {
        int m = snprintf(known + len, sizeof known - len, "%s%s", len ? ", " : "", k2);
        if (m < 0 || (size_t)m >= sizeof known - len)
          break;
        len += (size_t)m;
      }
      rc = ebb_seterr(EBB_ECONFIG, "%s: stage '%s' has no option '%s' (its options: %s)", w,
                      st->name, key, len ? known : "none");
      goto fail;
    }
    json_t *type = json_is_object(spec) ? json_object_get(spec, "type") : NULL;
    const char *t = json_is_string(type) ? json_string_value(type) : "any";
    if (!type_ok(t, v)) {
      rc = ebb_seterr(EBB_ECONFIG, "%s: option '%s' of stage '%s' must be %s %s, got %s", w, key,
                      st->name, (t[0] == 'a' || t[0] == 'i' || t[0] == 'o') ? "an" : "a", t,
                      json_type_name(v));
      goto fail;
    }
    if ((rc = bounds_ok(st, key, spec, v, w)) != 0)
      goto fail;
    json_object_set(out, key, v);
  }
  json_decref(schema);
  *merged = out;
  return 0;
fail:
  json_decref(schema);
  json_decref(out);
  return rc;
}

/* The stage's options schema's defaults as compact JSON (free it), NULL when
 * they do not validate (the caller then passes "{}"). */
static char *schema_defaults(const ebb_stage *st) {
  json_t *merged = NULL;
  char *s = NULL;
  if (pl_stage_validate_options(st, NULL, NULL, &merged) == 0)
    s = json_dumps(merged, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(merged);
  return s;
}

int pl_stage_estimate(const ebb_stage *st, const char *options, const ebb_items *in,
                      ebb_estimate *out) {
  if (!st || !out || out->size < sizeof(uint32_t))
    return ebb_seterr(EBB_EINVAL, "pl_stage_estimate: a stage and out->size are required");
  uint32_t size = out->size < sizeof(ebb_estimate) ? out->size : (uint32_t)sizeof(ebb_estimate);
  if (!EBB_STAGE_HAS(st, estimate) || !st->estimate)
    return ebb_seterr(EBB_EUNSUPPORTED, "stage '%s' declares no memory needs", st->name);
  ebb_estimate e;
  memset(&e, 0, sizeof e);
  e.size = sizeof e;
  char *defaults = options ? NULL : schema_defaults(st);
  ebb_clearerr();
  int rc = st->estimate(pl_host_table(), options ? options : defaults ? defaults : "{}", in, &e);
  free(defaults);
  if (rc)
    return ebb_errctx(rc, "stage '%s': estimate: ", st->name);
  memcpy(out, &e, size);
  out->size = size;
  return 0;
}

int pl_stage_work(const ebb_stage *st, const char *options, double input_s, uint32_t input_rate,
                  ebb_work *out) {
  if (!st || !out || out->size < sizeof(uint32_t))
    return ebb_seterr(EBB_EINVAL, "pl_stage_work: a stage and out->size are required");
  uint32_t size = out->size < sizeof(ebb_work) ? out->size : (uint32_t)sizeof(ebb_work);
  if (!EBB_STAGE_HAS(st, work) || !st->work)
    return ebb_seterr(EBB_EUNSUPPORTED, "stage '%s' gives no work estimate", st->name);
  ebb_work w;
  memset(&w, 0, sizeof w);
  w.size = sizeof w;
  w.input_rate = input_rate;
  char *defaults = options ? NULL : schema_defaults(st);
  ebb_clearerr();
  int rc = st->work(pl_host_table(),
                    options    ? options
                    : defaults ? defaults
                               : "{}",
                    input_s > 0.0 ? input_s : 0.0, &w);
  free(defaults);
  if (rc)
    return ebb_errctx(rc, "stage '%s': work: ", st->name);
  w.drivers[sizeof w.drivers - 1] = '\0';
  if (!(w.cpu_s >= 0.0)) /* NaN or negative: no estimate */
    w.cpu_s = 0.0;
  if (!(w.wait_s >= 0.0))
    w.wait_s = 0.0;
  memcpy(out, &w, size);
  out->size = size;
  return 0;
}
