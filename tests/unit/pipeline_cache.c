/* The stage result cache: keys change with the stage, its version, its
 * options and the inputs' content (not a FILE item's path); entries round-trip
 * every item kind; a corrupt or truncated entry is detected, removed and
 * reported as a miss. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/cache.h"
#include "pipeline/sha256.h"
#include "test.h"

static char tmp[1024], cdir[1100], odir[1100];

static ebb_stage stage = {.abi_version = EBB_STAGE_ABI_VERSION,
                          .size = sizeof(ebb_stage),
                          .name = "s",
                          .version = 1};

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  REQUIRE(f);
  fputs(text, f);
  fclose(f);
}

static void key_of(const char *opts, const ebb_items *in, uint8_t k[32]) {
  json_t *o = json_loads(opts, 0, NULL);
  REQUIRE(o);
  REQUIRE(pl_cache_key(&stage, o, in, k) == 0);
  json_decref(o);
}

static void test_keys(void) {
  char p1[1200], p2[1200];
  snprintf(p1, sizeof p1, "%s/in1.txt", tmp);
  snprintf(p2, sizeof p2, "%s/in2.txt", tmp);
  write_file(p1, "same content");
  write_file(p2, "same content");
  ebb_items *a, *b;
  REQUIRE(pl_items_create(NULL, NULL, &a) == 0 && pl_items_create(NULL, NULL, &b) == 0);
  REQUIRE(pl_items_add_file(a, "input", p1) == 0 && pl_items_add_file(b, "input", p2) == 0);
  uint8_t k1[32], k2[32], k3[32];
  key_of("{\"x\": 1, \"y\": 2}", a, k1);
  key_of("{\"y\": 2, \"x\": 1}", b, k2);
  CHECK_MSG(!memcmp(k1, k2, 32), "same content and options in another order: same key");
  key_of("{\"x\": 1, \"y\": 3}", a, k3);
  CHECK_MSG(memcmp(k1, k3, 32), "other options: other key");
  stage.version = 2;
  key_of("{\"x\": 1, \"y\": 2}", a, k3);
  CHECK_MSG(memcmp(k1, k3, 32), "other version: other key");
  stage.version = 1;
  stage.name = "t";
  key_of("{\"x\": 1, \"y\": 2}", a, k3);
  CHECK_MSG(memcmp(k1, k3, 32), "other stage: other key");
  stage.name = "s";
  write_file(p2, "other content");
  key_of("{\"x\": 1, \"y\": 2}", b, k3);
  CHECK_MSG(memcmp(k1, k3, 32), "other input content: other key");
  REQUIRE(pl_items_add_json(a, "more", "{}") == 0);
  key_of("{\"x\": 1, \"y\": 2}", a, k3);
  CHECK_MSG(memcmp(k1, k3, 32), "another input item: other key");
  pl_items_destroy(a);
  pl_items_destroy(b);
}

static int count_entries(void) {
  DIR *d = opendir(cdir);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)))
    n += strstr(e->d_name, ".ebbc") != NULL;
  if (d)
    closedir(d);
  return n;
}

static void entry_path(const uint8_t k[32], char *out, size_t n) {
  char hex[65];
  pl_sha256_hex(k, hex);
  snprintf(out, n, "%s/%s.ebbc", cdir, hex);
}

static void fill(ebb_items *it) {
  char fp[1200];
  snprintf(fp, sizeof fp, "%s/made.txt", tmp);
  write_file(fp, "file made by the stage\n");
  float pcm[4] = {0.5f, -0.5f, 0.25f, -0.25f};
  float t[6] = {1, 2, 3, 4, 5, 6};
  uint64_t shape[2] = {3, 2};
  REQUIRE(pl_items_add_audio(it, "vocals", pcm, 2, 2, 16000) == 0);
  REQUIRE(pl_items_add_tensor(it, "emb", t, 2, shape) == 0);
  REQUIRE(pl_items_add_json(it, "words", "{\"w\": [\"la\"]}") == 0);
  REQUIRE(pl_items_add_file(it, "made", fp) == 0);
}

static void test_round_trip(void) {
  uint8_t k[32];
  memset(k, 0x11, sizeof k);
  ebb_items *it, *back;
  REQUIRE(pl_items_create(NULL, NULL, &it) == 0 && pl_items_create(NULL, NULL, &back) == 0);
  fill(it);
  REQUIRE(pl_cache_store(cdir, k, it, NULL) == 0);
  CHECK_EQ_INT(count_entries(), 1);
  int hit = -1, corrupt = -1;
  REQUIRE(pl_cache_load(cdir, k, back, odir, &hit, &corrupt) == 0);
  CHECK_EQ_INT(hit, 1);
  CHECK_EQ_INT(corrupt, 0);
  CHECK_EQ_INT(pl_items_count(back), 4);
  ebb_item_info in;
  REQUIRE(pl_items_find(back, "vocals", &in) == 0);
  CHECK(in.kind == EBB_ITEM_AUDIO && in.frames == 2 && in.channels == 2 && in.rate == 16000);
  CHECK_NEAR(in.samples[3], -0.25, 0);
  REQUIRE(pl_items_find(back, "emb", &in) == 0);
  CHECK(in.kind == EBB_ITEM_TENSOR && in.ndim == 2 && in.shape[0] == 3 && in.shape[1] == 2);
  CHECK_NEAR(in.data[5], 6, 0);
  REQUIRE(pl_items_find(back, "words", &in) == 0);
  CHECK_EQ_STR(in.text, "{\"w\": [\"la\"]}");
  REQUIRE(pl_items_find(back, "made", &in) == 0);
  char want[1200];
  snprintf(want, sizeof want, "%s/made.txt", odir);
  CHECK_EQ_STR(in.text, want); /* restored into the job's output directory */
  FILE *f = fopen(want, "r");
  char line[64] = "";
  CHECK(f && fgets(line, sizeof line, f));
  if (f)
    fclose(f);
  CHECK_EQ_STR(line, "file made by the stage\n");
  pl_items_destroy(back);

  /* a miss */
  uint8_t other[32];
  memset(other, 0x22, sizeof other);
  REQUIRE(pl_items_create(NULL, NULL, &back) == 0);
  CHECK(pl_cache_load(cdir, other, back, odir, &hit, &corrupt) == 0);
  CHECK(hit == 0 && corrupt == 0 && pl_items_count(back) == 0);
  pl_items_destroy(back);
  pl_items_destroy(it);
}

static void corrupt_and_check(const char *how) {
  uint8_t k[32];
  memset(k, 0x33, sizeof k);
  ebb_items *it, *back;
  REQUIRE(pl_items_create(NULL, NULL, &it) == 0 && pl_items_create(NULL, NULL, &back) == 0);
  fill(it);
  REQUIRE(pl_cache_store(cdir, k, it, NULL) == 0);
  char path[1300];
  entry_path(k, path, sizeof path);
  struct stat st;
  REQUIRE(stat(path, &st) == 0);
  if (!strcmp(how, "flip")) {
    FILE *f = fopen(path, "r+b");
    REQUIRE(f);
    fseek(f, st.st_size / 2, SEEK_SET);
    int c = fgetc(f);
    fseek(f, st.st_size / 2, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
  } else {
    REQUIRE(truncate(path, st.st_size - 7) == 0);
  }
  int hit = -1, corrupt = -1;
  CHECK(pl_cache_load(cdir, k, back, odir, &hit, &corrupt) == 0);
  CHECK_MSG(hit == 0 && corrupt == 1, "%s: hit %d corrupt %d", how, hit, corrupt);
  CHECK_MSG(strstr(ebb_errmsg(), "checksum mismatch") || strstr(ebb_errmsg(), "truncated"),
            "%s: message %s", how, ebb_errmsg());
  CHECK_MSG(pl_items_count(back) == 0, "%s: a corrupt entry adds nothing", how);
  CHECK_MSG(stat(path, &st) != 0, "%s: the corrupt entry is removed", how);
  pl_items_destroy(back);
  pl_items_destroy(it);
}

static void test_corrupt_flip(void) { corrupt_and_check("flip"); }
static void test_corrupt_truncated(void) { corrupt_and_check("truncate"); }

static void test_default_dir(void) {
  char buf[512];
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  CHECK_EQ_STR(pl_cache_default_dir(buf, sizeof buf), "/x/cache/ebb");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/u", 1);
  CHECK_EQ_STR(pl_cache_default_dir(buf, sizeof buf), "/home/u/.cache/ebb");
}

int main(void) {
  const char *t = getenv("EBB_TEST_TMP");
  REQUIRE(t);
  snprintf(tmp, sizeof tmp, "%s", t);
  mkdir(tmp, 0755);
  snprintf(cdir, sizeof cdir, "%s/cache/deeper", tmp); /* created by store */
  char cmd[1200];
  snprintf(cmd, sizeof cmd, "rm -rf '%s/cache'", tmp);
  REQUIRE(system(cmd) == 0);
  snprintf(odir, sizeof odir, "%s/out", tmp);
  mkdir(odir, 0755);
  RUN(test_keys);
  RUN(test_round_trip);
  RUN(test_corrupt_flip);
  RUN(test_corrupt_truncated);
  RUN(test_default_dir);
  return TEST_END();
}
