/* Reading a stage-cache entry from disk (pl_cache_load). Input: byte 0 is a
 * flag (bit 0 set: the rest is the whole file as is; clear: the rest is the
 * entry body and the harness appends its correct SHA-256, so the parser
 * behind the checksum is what gets fuzzed). Contract (cache.h): an entry is
 * a hit or it is corrupt (deleted, nothing added to the job's items), the
 * call itself succeeds. A hit stores back (pl_cache_store) and loads again
 * to the same items. */
#include "fuzz_util.h"
#include "pipeline/cache.h"
#include "pipeline/sha256.h"

static const uint8_t key[32] = {0x11, 0x22, 0x33, 0x44};

static int file_exists(const char *p) {
  struct stat st;
  return stat(p, &st) == 0;
}

static void same_items(const ebb_items *a, const ebb_items *b) {
  FUZZ_CHECK(pl_items_count(a) == pl_items_count(b), "%d items, after a round trip %d",
             pl_items_count(a), pl_items_count(b));
  for (int i = 0; i < pl_items_count(a); i++) {
    const pl_item_rec *x = pl_items_rec(a, i), *y = pl_items_rec(b, i);
    FUZZ_CHECK(x->kind == y->kind && !strcmp(x->name, y->name), "item %d: '%s' vs '%s'", i, x->name,
               y->name);
    switch (x->kind) {
    case EBB_ITEM_AUDIO:
      FUZZ_CHECK(x->frames == y->frames && x->channels == y->channels && x->rate == y->rate &&
                     !memcmp(x->samples, y->samples, (size_t)(x->frames * x->channels) * 4),
                 "audio item '%s' differs after a round trip", x->name);
      break;
    case EBB_ITEM_TENSOR: {
      uint64_t el = pl_tensor_elems(x->ndim, x->shape);
      FUZZ_CHECK(x->ndim == y->ndim && !memcmp(x->shape, y->shape, sizeof x->shape) &&
                     !memcmp(x->data, y->data, (size_t)el * 4),
                 "tensor item '%s' differs after a round trip", x->name);
      break;
    }
    case EBB_ITEM_JSON:
      FUZZ_CHECK(!strcmp(x->text, y->text), "json item '%s' differs after a round trip", x->name);
      break;
    case EBB_ITEM_FILE: {
      const char *bx = strrchr(x->text, '/'), *by = strrchr(y->text, '/');
      FUZZ_CHECK(bx && by && !strcmp(bx, by), "file item '%s': %s vs %s", x->name, x->text,
                 y->text);
      break;
    }
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  char dir[700], outdir[700], dir2[700], path[800], hex[65];
  snprintf(dir, sizeof dir, "%s", fuzz_scratch("cache"));
  snprintf(outdir, sizeof outdir, "%s", fuzz_scratch("out"));
  snprintf(dir2, sizeof dir2, "%s", fuzz_scratch("cache2"));
  pl_sha256_hex(key, hex);
  snprintf(path, sizeof path, "%s/%s.ebbc", dir, hex);

  size_t n = size - 1;
  uint8_t *file = malloc(n + 32);
  if (!file)
    abort();
  if (n)
    memcpy(file, data + 1, n);
  if (!(data[0] & 1)) {
    pl_sha256 s;
    pl_sha256_init(&s);
    pl_sha256_update(&s, file, n);
    pl_sha256_final(&s, file + n);
    n += 32;
  }
  fuzz_write_file(path, file, n);
  free(file);

  ebb_items *out = NULL, *back = NULL;
  FUZZ_CHECK(pl_items_create(NULL, NULL, &out) == 0, "items_create");
  /* a job item the entry may collide with */
  FUZZ_CHECK(pl_items_add_json(out, "input", "{}") == 0, "add_json");
  int hit = -1, corrupt = -1;
  int rc = pl_cache_load(dir, key, out, outdir, &hit, &corrupt);
  FUZZ_CHECK(rc == 0, "ebb_cache_load failed instead of calling the entry corrupt: rc %d (%s): %s",
             rc, ebb_errname(rc), ebb_errmsg());
  FUZZ_CHECK(hit + corrupt == 1, "hit %d corrupt %d for an entry that exists", hit, corrupt);
  if (corrupt) {
    FUZZ_CHECK(!file_exists(path), "a corrupt entry was not deleted");
    FUZZ_CHECK(pl_items_count(out) == 1, "a corrupt entry added %d items", pl_items_count(out) - 1);
  } else {
    FUZZ_CHECK(file_exists(path), "a hit deleted its entry");
    FUZZ_CHECK(n >= 48, "a %zu-byte file was a hit", n);
    for (int i = 1; i < pl_items_count(out); i++) {
      const pl_item_rec *r = pl_items_rec(out, i);
      if (r->kind == EBB_ITEM_FILE)
        FUZZ_CHECK(!strncmp(r->text, outdir, strlen(outdir)) && r->text[strlen(outdir)] == '/' &&
                       !strchr(r->text + strlen(outdir) + 1, '/') && file_exists(r->text),
                   "file item '%s' restored to %s, outside %s", r->name, r->text, outdir);
    }
    /* store the hit's items (not the job's "input") and read them back */
    ebb_items *mine = NULL;
    FUZZ_CHECK(pl_items_create(NULL, NULL, &mine) == 0, "items_create");
    for (int i = 1; i < pl_items_count(out); i++) {
      const pl_item_rec *r = pl_items_rec(out, i);
      int rc2 = 0;
      switch (r->kind) {
      case EBB_ITEM_AUDIO:
        rc2 = pl_items_add_audio(mine, r->name, r->samples, r->frames, r->channels, r->rate);
        break;
      case EBB_ITEM_TENSOR:
        rc2 = pl_items_add_tensor(mine, r->name, r->data, r->ndim, r->shape);
        break;
      case EBB_ITEM_JSON: rc2 = pl_items_add_json(mine, r->name, r->text); break;
      case EBB_ITEM_FILE: rc2 = pl_items_add_file(mine, r->name, r->text); break;
      }
      FUZZ_CHECK(rc2 == 0, "copying item '%s': %s", r->name, ebb_errmsg());
    }
    rc = pl_cache_store(dir2, key, mine, NULL);
    FUZZ_CHECK(rc == 0, "storing a hit's items again: %s", ebb_errmsg());
    FUZZ_CHECK(pl_items_create(NULL, NULL, &back) == 0, "items_create");
    char outdir2[700];
    snprintf(outdir2, sizeof outdir2, "%s", fuzz_scratch("out2"));
    rc = pl_cache_load(dir2, key, back, outdir2, &hit, &corrupt);
    FUZZ_CHECK(rc == 0 && hit == 1 && corrupt == 0,
               "an entry ebb_cache_store wrote does not load: rc %d hit %d corrupt %d: %s", rc, hit,
               corrupt, ebb_errmsg());
    same_items(mine, back);
    pl_items_destroy(mine);
    pl_items_destroy(back);
    fuzz_empty_dir(dir2);
    fuzz_empty_dir(outdir2);
  }
  pl_items_destroy(out);
  fuzz_empty_dir(dir);
  fuzz_empty_dir(outdir);
  return 0;
}
