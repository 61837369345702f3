/* Stage registry and plugin loading: built-ins are there; a good plugin
 * (the example checksum.so, a test plugin) loads from a directory and from a
 * file path; every broken plugin fails with a message naming its file and
 * what is wrong (wrong ABI version, no init symbol, init refusing, missing
 * entry point, not a shared object, a name clash); EBB_PLUGIN_PATH; every
 * built-in stage's option is in the fuzz_options dictionary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "pipeline/registry.h"
#include "test.h"

static const char *pdir, *exdir;

static int has(const char *hay, const char *needle) { return hay && strstr(hay, needle) != NULL; }

static void plugin_path(const char *name, char *out, size_t n) {
  snprintf(out, n, "%s/%s/%s.so", pdir, name, name);
}

static void test_builtins(void) {
  pl_registry *r;
  REQUIRE(pl_registry_create(&r) == 0);
  const char *origin = NULL;
  const ebb_stage *s = pl_registry_find(r, "synthetic", &origin);
  REQUIRE(s);
  CHECK_EQ_STR(origin, "built-in");
  CHECK_EQ_INT(s->abi_version, EBB_STAGE_ABI_VERSION);
  CHECK(s->options_schema && strstr(s->options_schema, "weights_mib"));
  CHECK(pl_registry_find(r, "no-such-stage", NULL) == NULL);
  CHECK(pl_registry_count(r) >= 1);
  pl_registry_destroy(r);
}

static void test_good_plugins(void) {
  pl_registry *r;
  REQUIRE(pl_registry_create(&r) == 0);
  size_t n0 = pl_registry_count(r);
  REQUIRE(pl_registry_load_dir(r, exdir) == 0);
  const char *origin = NULL;
  const ebb_stage *s = pl_registry_find(r, "checksum", &origin);
  REQUIRE(s);
  CHECK(has(origin, "checksum.so"));
  CHECK(s->options_schema && strstr(s->options_schema, "chunk_kib"));
  char p[1024];
  plugin_path("good", p, sizeof p);
  REQUIRE(pl_registry_load_dir(r, p) == 0); /* a file path works too */
  CHECK(pl_registry_find(r, "echo", NULL) != NULL);
  CHECK_EQ_INT(pl_registry_count(r), n0 + 2);
  CHECK(pl_registry_load_plugin(r, p) == 0); /* the same file twice: once */
  CHECK_EQ_INT(pl_registry_count(r), n0 + 2);
  pl_registry_destroy(r);
}

static void expect_bad(const char *name, int code, const char *m1, const char *m2) {
  pl_registry *r;
  REQUIRE(pl_registry_create(&r) == 0);
  char p[1024], d[1024];
  plugin_path(name, p, sizeof p);
  snprintf(d, sizeof d, "%s/%s", pdir, name);
  int rc = pl_registry_load_dir(r, d);
  CHECK_MSG(rc == code, "%s: expected %s, got %s (%s)", name, ebb_errname(code), ebb_errname(rc),
            ebb_errmsg());
  CHECK_MSG(has(ebb_errmsg(), p), "%s: message does not name the file: %s", name, ebb_errmsg());
  CHECK_MSG(has(ebb_errmsg(), m1) && (!m2 || has(ebb_errmsg(), m2)),
            "%s: message lacks '%s'/'%s': %s", name, m1, m2 ? m2 : "", ebb_errmsg());
  CHECK(pl_registry_find(r, "echo", NULL) == NULL);
  pl_registry_destroy(r);
}

static void test_bad_plugins(void) {
  expect_bad("bad_abi", EBB_EABI, "ABI version 99", "version 1");
  expect_bad("no_init", EBB_EABI, "no ebb_plugin_init symbol", NULL);
  expect_bad("init_fails", EBB_EABI, "ebb_plugin_init returned EBB_EABI", "ABI");
  expect_bad("no_run", EBB_EABI, "has no run entry point", "'echo'");
}

static void test_not_a_library_and_missing(void) {
  const char *tmp = getenv("EBB_TEST_TMP");
  REQUIRE(tmp);
  mkdir(tmp, 0755);
  char dir[1024], so[1100];
  snprintf(dir, sizeof dir, "%s/junk", tmp);
  mkdir(dir, 0755);
  snprintf(so, sizeof so, "%s/junk.so", dir);
  FILE *f = fopen(so, "w");
  REQUIRE(f);
  fputs("not an ELF file\n", f);
  fclose(f);
  pl_registry *r;
  REQUIRE(pl_registry_create(&r) == 0);
  CHECK_EQ_INT(pl_registry_load_dir(r, dir), EBB_ENOLIB);
  CHECK(has(ebb_errmsg(), so) && has(ebb_errmsg(), "cannot load"));
  CHECK_EQ_INT(pl_registry_load_dir(r, "/no/such/dir"), EBB_ENOTFOUND);
  CHECK(has(ebb_errmsg(), "/no/such/dir"));
  pl_registry_destroy(r);
}

static void test_name_clash(void) {
  pl_registry *r;
  REQUIRE(pl_registry_create(&r) == 0);
  char p[1024];
  plugin_path("good", p, sizeof p);
  REQUIRE(pl_registry_load_plugin(r, p) == 0);
  /* the checksum example loads fine; loading the good plugin's stage name a
   * second time from another file must clash: copy it */
  const char *tmp = getenv("EBB_TEST_TMP");
  char cp[1100], cmd[2400];
  snprintf(cp, sizeof cp, "%s/copy-of-good.so", tmp);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", p, cp);
  REQUIRE(system(cmd) == 0);
  CHECK_EQ_INT(pl_registry_load_plugin(r, cp), EBB_ECONFIG);
  CHECK(has(ebb_errmsg(), "'echo' is already registered") && has(ebb_errmsg(), cp));
  pl_registry_destroy(r);
}

static void test_env_path(void) {
  char p[1024], env[2200];
  plugin_path("good", p, sizeof p);
  snprintf(env, sizeof env, "::%s:%s", exdir, p);
  setenv("EBB_PLUGIN_PATH", env, 1);
  pl_registry *r;
  REQUIRE(pl_registry_create(&r) == 0);
  CHECK(pl_registry_load_env(r) == 0);
  CHECK(pl_registry_find(r, "checksum", NULL) && pl_registry_find(r, "echo", NULL));
  pl_registry_destroy(r);
  setenv("EBB_PLUGIN_PATH", "/nope", 1);
  REQUIRE(pl_registry_create(&r) == 0);
  CHECK(pl_registry_load_env(r) != 0);
  CHECK(has(ebb_errmsg(), "EBB_PLUGIN_PATH") && has(ebb_errmsg(), "/nope"));
  pl_registry_destroy(r);
  unsetenv("EBB_PLUGIN_PATH");
}

/* Every option of every built-in stage is in the fuzz_options replay's
 * dictionary (tests/fuzz/dict/options.dict, one "\"name\"" line each), so
 * its mutations reach the option's checks; a new option not added there
 * fails here with its stage and name. */
static void test_fuzz_dict_names_options(void) {
  const char *src = getenv("EBB_SOURCE_DIR");
  REQUIRE(src);
  char path[4096];
  snprintf(path, sizeof path, "%s/tests/fuzz/dict/options.dict", src);
  FILE *f = fopen(path, "rb");
  CHECK_MSG(f, "cannot open %s", path);
  REQUIRE(f);
  static char dict[1 << 16];
  size_t len = fread(dict, 1, sizeof dict - 1, f);
  fclose(f);
  CHECK_MSG(len < sizeof dict - 1, "%s is larger than the test reads", path);
  REQUIRE(len < sizeof dict - 1);
  dict[len] = 0;
  pl_registry *r;
  REQUIRE(pl_registry_create(&r) == 0);
  int options = 0;
  for (size_t i = 0; i < pl_registry_count(r); i++) {
    const char *origin = NULL;
    const ebb_stage *st = pl_registry_at(r, i, &origin);
    if (!st || !st->options_schema)
      continue;
    json_error_t e;
    json_t *schema = json_loads(st->options_schema, 0, &e);
    CHECK_MSG(json_is_object(schema), "stage '%s': options schema does not parse: %s", st->name,
              e.text);
    const char *k;
    json_t *v;
    json_object_foreach(schema, k, v) {
      char line[256];
      snprintf(line, sizeof line, "\n\"\\\"%s\\\"\"\n", k);
      options++;
      CHECK_MSG(strstr(dict, line), "stage '%s' option '%s' is not in %s (add the line %.*s)",
                st->name, k, path, (int)strlen(line) - 2, line + 1);
    }
    json_decref(schema);
  }
  printf("  %d options of %zu stages checked against %s\n", options, pl_registry_count(r), path);
  CHECK(options > 50);
  pl_registry_destroy(r);
}

int main(void) {
  pdir = getenv("EBB_TEST_PLUGIN_DIR");
  exdir = getenv("EBB_EXAMPLE_PLUGIN_DIR");
  REQUIRE(pdir && exdir);
  RUN(test_builtins);
  RUN(test_good_plugins);
  RUN(test_bad_plugins);
  RUN(test_not_a_library_and_missing);
  RUN(test_name_clash);
  RUN(test_env_path);
  RUN(test_fuzz_dict_names_options);
  return TEST_END();
}
