/* The worker protocol's one item codec (src/worker/item_wire.h), used by
 * both ends: every kind round-trips through encode/decode; every item out
 * of range (channels, rate, frames, shape, bytes, shm name and prefix, kind,
 * name, text/path) is refused with EBB_EPROTO and a message naming the item
 * and what was wrong; a payload maps only when the file holds it. And
 * ebb-worker itself refuses an out-of-range input item through the same
 * codec (it used to skip the range checks), naming the item. */
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pipeline/items.h"
#include "test.h"
#include "worker/item_wire.h"
#include "worker/proc.h"
#include "worker/wire.h"

static int has(const char *s, const char *sub) { return s && strstr(s, sub) != NULL; }

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char prefix[64];

/* Decodes the item written as JSON text with the test's shm prefix. */
static int decode_text(const char *text, wrk_wire_item *it, json_t **keep) {
  json_error_t je;
  json_t *o = json_loads(text, 0, &je);
  REQUIRE(o);
  int rc = wrk_wire_item_decode(o, 2, prefix, it);
  *keep = o; /* the item borrows its strings */
  return rc;
}

static void test_round_trip(void) {
  wrk_wire_item in[4] = {
      {.kind = EBB_ITEM_AUDIO, .name = "mix", .frames = 44100, .channels = 2, .rate = 44100},
      {.kind = EBB_ITEM_TENSOR, .name = "t", .ndim = 3, .shape = {2, 3, 4}},
      {.kind = EBB_ITEM_JSON, .name = "j", .text = "{\"a\": [1, 2]}"},
      {.kind = EBB_ITEM_FILE, .name = "f", .text = "/tmp/some file.wav"},
  };
  size_t bytes[4] = {44100 * 2 * 4, 24 * 4, 0, 0};
  for (int k = 0; k < 4; k++) {
    json_t *o = wrk_wire_item_encode(&in[k]);
    REQUIRE(o);
    char shm[96];
    snprintf(shm, sizeof shm, "%si%d", prefix, k);
    if (bytes[k])
      REQUIRE(wrk_wire_item_set_payload(o, shm, bytes[k]) == 0);
    wrk_wire_item out;
    int rc = wrk_wire_item_decode(o, 0, prefix, &out);
    CHECK_MSG(rc == 0, "kind %d: %s", (int)in[k].kind, ebb_errmsg());
    CHECK_EQ_INT(out.kind, in[k].kind);
    CHECK_EQ_STR(out.name, in[k].name);
    CHECK_EQ_U64(out.bytes, bytes[k]);
    CHECK_EQ_U64(out.frames, in[k].frames);
    CHECK_EQ_U64(out.channels, in[k].channels);
    CHECK_EQ_U64(out.rate, in[k].rate);
    CHECK_EQ_U64(out.ndim, in[k].ndim);
    for (uint32_t d = 0; d < in[k].ndim; d++)
      CHECK_EQ_U64(out.shape[d], in[k].shape[d]);
    if (in[k].text)
      CHECK_EQ_STR(out.text, in[k].text);
    CHECK(bytes[k] ? out.shm && !strcmp(out.shm, shm) : out.shm == NULL);
    json_decref(o);
  }
  /* an empty tensor needs no payload; a 0-d tensor is one element */
  wrk_wire_item it;
  json_t *o;
  CHECK_EQ_INT(decode_text("{\"kind\":\"tensor\",\"name\":\"e\",\"shape\":[0,5]}", &it, &o), 0);
  CHECK(it.bytes == 0 && it.shm == NULL);
  json_decref(o);
  CHECK_EQ_INT(decode_text("{\"kind\":\"tensor\",\"name\":\"s\",\"shape\":[]}", &it, &o),
               EBB_EPROTO);
  CHECK_MSG(has(ebb_errmsg(), "needs \"shm\""), "got '%s'", ebb_errmsg());
  json_decref(o);
}

typedef struct bad_case {
  const char *json, *want;
} bad_case;

static void test_refused(void) {
  char wrong_prefix[160], audio_ok[200];
  snprintf(wrong_prefix, sizeof wrong_prefix,
           "{\"kind\":\"audio\",\"name\":\"a\",\"frames\":4,\"channels\":1,\"rate\":8000,"
           "\"shm\":\"ebb-someone-else-o1\",\"bytes\":16}");
  snprintf(audio_ok, sizeof audio_ok,
           "{\"kind\":\"audio\",\"name\":\"a\",\"frames\":4,\"channels\":1,\"rate\":8000,"
           "\"shm\":\"%so1\",\"bytes\":16}",
           prefix);
  const bad_case cases[] = {
      {"[1]", "needs a string \"kind\""},
      {"{\"kind\":\"audio\"}", "non-empty \"name\""},
      {"{\"kind\":\"audio\",\"name\":\"\"}", "non-empty \"name\""},
      {"{\"kind\":7,\"name\":\"a\"}", "needs a string \"kind\""},
      {"{\"kind\":\"video\",\"name\":\"a\"}", "unknown kind"},
      {"{\"kind\":\"json\",\"name\":\"a\"}", "(json) has no string \"text\""},
      {"{\"kind\":\"file\",\"name\":\"a\",\"path\":3}", "(file) has no string \"path\""},
      {"{\"kind\":\"audio\",\"name\":\"a\",\"frames\":4,\"channels\":0,\"rate\":8000}",
       "channels 1..64"},
      {"{\"kind\":\"audio\",\"name\":\"a\",\"frames\":4,\"channels\":65,\"rate\":8000}",
       "channels 1..64"},
      {"{\"kind\":\"audio\",\"name\":\"a\",\"frames\":4,\"channels\":1,\"rate\":0}",
       "rate 1..10000000"},
      {"{\"kind\":\"audio\",\"name\":\"a\",\"frames\":4,\"channels\":1,\"rate\":10000001}",
       "rate 1..10000000"},
      {"{\"kind\":\"audio\",\"name\":\"a\",\"frames\":-4,\"channels\":1,\"rate\":8000}",
       "frames >= 0"},
      {"{\"kind\":\"audio\",\"name\":\"a\",\"frames\":\"4\",\"channels\":1,\"rate\":8000}",
       "frames >= 0"},
      {"{\"kind\":\"audio\",\"name\":\"a\",\"frames\":549755813889,\"channels\":2,\"rate\":8000}",
       "at most 2^40 samples"},
      {"{\"kind\":\"tensor\",\"name\":\"t\",\"shape\":[1,1,1,1,1,1,1,1,1]}", "at most 8 sizes"},
      {"{\"kind\":\"tensor\",\"name\":\"t\",\"shape\":3}", "at most 8 sizes"},
      {"{\"kind\":\"tensor\",\"name\":\"t\",\"shape\":[2,-1]}", "not a size"},
      {"{\"kind\":\"tensor\",\"name\":\"t\",\"shape\":[2,1.5]}", "not a size"},
      {"{\"kind\":\"tensor\",\"name\":\"t\",\"shape\":[4294967296,4294967296]}", "shape too large"},
      {"{\"kind\":\"tensor\",\"name\":\"t\",\"shape\":[1099511627777]}", "shape too large"},
      {"{\"kind\":\"audio\",\"name\":\"a\",\"frames\":4,\"channels\":1,\"rate\":8000,"
       "\"bytes\":16}",
       "needs \"shm\""},
      {"{\"kind\":\"audio\",\"name\":\"a\",\"frames\":4,\"channels\":1,\"rate\":8000,"
       "\"shm\":\"../../etc/passwd\",\"bytes\":16}",
       "needs \"shm\""},
      {wrong_prefix, "shm_prefix"},
      {"{\"kind\":\"audio\",\"name\":\"a\",\"frames\":4,\"channels\":1,\"rate\":8000,"
       "\"shm\":\"x\",\"bytes\":15}",
       "\"bytes\" that do not match"},
      {"{\"kind\":\"audio\",\"name\":\"a\",\"frames\":4,\"channels\":1,\"rate\":8000,"
       "\"shm\":\"x\",\"bytes\":-16}",
       "\"bytes\" that do not match"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    wrk_wire_item it;
    json_t *o;
    int rc = decode_text(cases[k].json, &it, &o);
    CHECK_MSG(rc == EBB_EPROTO, "%s: rc %d, expected EBB_EPROTO", cases[k].json, rc);
    CHECK_MSG(has(ebb_errmsg(), "item #3") && has(ebb_errmsg(), cases[k].want),
              "%s: message '%s' lacks 'item #3' or '%s'", cases[k].json, ebb_errmsg(),
              cases[k].want);
    json_decref(o);
  }
  /* the same item with the right prefix passes; without a prefix any valid name does */
  wrk_wire_item it;
  json_t *o;
  CHECK_MSG(decode_text(audio_ok, &it, &o) == 0, "%s", ebb_errmsg());
  json_decref(o);
  o = json_loads(wrong_prefix, 0, NULL);
  CHECK_MSG(wrk_wire_item_decode(o, 0, NULL, &it) == 0, "%s", ebb_errmsg());
  json_decref(o);
}

static void test_map(void) {
  char name[96], text[256];
  snprintf(name, sizeof name, "%sm", prefix);
  float data[6] = {1, 2, 3, 4, 5, 6};
  REQUIRE(wrk_shm_put(name, data, sizeof data) == 0);
  snprintf(text, sizeof text,
           "{\"kind\":\"tensor\",\"name\":\"t\",\"shape\":[2,3],\"shm\":\"%s\",\"bytes\":24}",
           name);
  wrk_wire_item it;
  json_t *o;
  REQUIRE(decode_text(text, &it, &o) == 0);
  REQUIRE(wrk_wire_item_map(&it) == 0 && it.data);
  CHECK(memcmp(it.data, data, sizeof data) == 0);
  wrk_wire_item_unmap(&it);
  CHECK(it.data == NULL);
  json_decref(o);
  /* the file holds less than the shape says */
  snprintf(text, sizeof text,
           "{\"kind\":\"tensor\",\"name\":\"t\",\"shape\":[2,4],\"shm\":\"%s\",\"bytes\":32}",
           name);
  REQUIRE(decode_text(text, &it, &o) == 0);
  CHECK_EQ_INT(wrk_wire_item_map(&it), EBB_EPROTO);
  CHECK_MSG(has(ebb_errmsg(), "item #3 ('t')") && has(ebb_errmsg(), "holds 24 bytes"), "got '%s'",
            ebb_errmsg());
  wrk_wire_item_unmap(&it); /* safe on an unmapped item */
  json_decref(o);
  /* into a collection, as the host takes a result: the payload is the file
   * itself, taken over under ebb's own name (the worker's name is gone) */
  ebb_items *items = NULL;
  REQUIRE(pl_items_create(NULL, NULL, &items) == 0);
  snprintf(text, sizeof text,
           "{\"kind\":\"tensor\",\"name\":\"t\",\"shape\":[6],\"shm\":\"%s\",\"bytes\":24}", name);
  o = json_loads(text, 0, NULL);
  CHECK_MSG(pl_item_from_wire(items, o, 0, prefix, 1) == 0, "%s", ebb_errmsg());
  json_decref(o);
  REQUIRE(pl_items_count(items) == 1);
  const pl_item_rec *r = pl_items_rec(items, 0);
  CHECK(r->kind == EBB_ITEM_TENSOR && r->ndim == 1 && r->shape[0] == 6 &&
        !memcmp(r->data, data, sizeof data));
  const void *p;
  CHECK_MSG(wrk_shm_map(name, 4, &p) == EBB_EPROTO, "%s was not unlinked", name);
  pl_items_destroy(items);
  wrk_shm_unlink_prefix(prefix);
}

/* A put that records what it was asked: the file it was handed (no copy)
 * or the mapping it made for the codec to fill. */
typedef struct rec_put {
  char name[96];
  const char *shm;
  int made;
} rec_put;

static int test_put(void *arg, const char *shm, size_t n, json_t *obj, void **dst) {
  rec_put *rp = arg;
  rp->shm = shm;
  int rc = pl_item_put_shm(rp->name, shm, n, obj, dst);
  rp->made = *dst != NULL;
  return rc;
}

static ino_t inode_of(const char *shm) {
  char path[160];
  struct stat sb;
  snprintf(path, sizeof path, "/dev/shm/%s", shm);
  return stat(path, &sb) == 0 ? sb.st_ino : 0;
}

/* No copies between workers: a worker's output becomes an item whose
 * payload is that very file (a write into the file shows in the item), it
 * goes on to the next worker as a second name for the same file, and the
 * next worker maps it without taking it; an item on the heap is written
 * once, straight into a new file. */
static void test_no_copy(void) {
  char out[96], text[256];
  snprintf(out, sizeof out, "%so1", prefix);
  float *wp = NULL;
  REQUIRE(wrk_shm_create(out, 6 * sizeof(float), (void **)&wp) == 0);
  for (int i = 0; i < 6; i++)
    wp[i] = (float)i;
  ebb_items *items = NULL;
  REQUIRE(pl_items_create(NULL, NULL, &items) == 0);
  snprintf(text, sizeof text,
           "{\"kind\":\"tensor\",\"name\":\"t\",\"shape\":[6],\"shm\":\"%s\",\"bytes\":24}", out);
  json_t *o = json_loads(text, 0, NULL);
  CHECK_MSG(pl_item_from_wire(items, o, 0, prefix, 1) == 0, "%s", ebb_errmsg());
  json_decref(o);
  const pl_item_rec *r = pl_items_rec(items, 0);
  REQUIRE(r && r->shm && r->map_bytes == 24);
  char mine[64];
  snprintf(mine, sizeof mine, "ebb-h%ld-", (long)getpid());
  CHECK_MSG(!strncmp(r->shm, mine, strlen(mine)), "taken as '%s'", r->shm);
  CHECK(inode_of(out) == 0); /* renamed: the worker can no longer name it */
  wp[5] = 42;                /* the worker's old mapping: same bytes as the item's */
  CHECK(r->data[5] == 42 && r->data[1] == 1);
  /* on to the next worker: the same file under its prefix, nothing copied */
  rec_put rp = {.made = -1};
  snprintf(rp.name, sizeof rp.name, "%snext-i0", prefix);
  json_t *arr = json_array();
  CHECK_MSG(pl_item_to_wire(r, NULL, test_put, &rp, arr) == 0, "%s", ebb_errmsg());
  CHECK(rp.shm && !strcmp(rp.shm, r->shm) && rp.made == 0);
  CHECK(inode_of(rp.name) != 0 && inode_of(rp.name) == inode_of(r->shm));
  CHECK(!strcmp(json_string_value(json_object_get(json_array_get(arr, 0), "shm")), rp.name));
  /* the next worker maps it (take 0): the sender keeps the file */
  ebb_items *in = NULL;
  REQUIRE(pl_items_create(NULL, NULL, &in) == 0);
  CHECK_MSG(pl_item_from_wire(in, json_array_get(arr, 0), 0, prefix, 0) == 0, "%s", ebb_errmsg());
  const pl_item_rec *r2 = pl_items_rec(in, 0);
  CHECK(r2 && !r2->shm && r2->map_bytes == 24 && r2->data[5] == 42);
  pl_items_destroy(in);
  CHECK(inode_of(rp.name) != 0);
  wrk_shm_unlink(rp.name);
  json_decref(arr);
  /* a heap item: one copy, into the file the put made */
  float h[3] = {7, 8, 9};
  uint64_t shape[1] = {3};
  REQUIRE(pl_items_add_tensor(items, "h", h, 1, shape) == 0);
  rec_put hp = {.made = -1};
  snprintf(hp.name, sizeof hp.name, "%snext-i1", prefix);
  arr = json_array();
  CHECK_MSG(pl_item_to_wire(pl_items_rec(items, 1), NULL, test_put, &hp, arr) == 0, "%s",
            ebb_errmsg());
  CHECK(hp.shm == NULL && hp.made == 1);
  const void *p = NULL;
  CHECK(wrk_shm_map(hp.name, sizeof h, &p) == 0 && p && !memcmp(p, h, sizeof h));
  wrk_shm_unmap(p, sizeof h);
  wrk_shm_unlink(hp.name);
  json_decref(arr);
  char taken[64];
  snprintf(taken, sizeof taken, "%s", r->shm);
  pl_items_destroy(items); /* the taken file goes with its item */
  CHECK(inode_of(taken) == 0);
  wrk_shm_unmap(wp, 6 * sizeof(float));
}

/* Seeded mutations of encoded items: decode answers a valid item or
 * EBB_EPROTO with a message, and whatever it accepts is in range. */
static void test_mutations(void) {
  char seeds[3][256];
  snprintf(seeds[0], sizeof seeds[0],
           "{\"kind\":\"audio\",\"name\":\"a\",\"frames\":4,\"channels\":2,\"rate\":8000,"
           "\"shm\":\"%s1\",\"bytes\":32}",
           prefix);
  snprintf(seeds[1], sizeof seeds[1],
           "{\"kind\":\"tensor\",\"name\":\"t\",\"shape\":[2,3,9],\"shm\":\"%s2\",\"bytes\":216}",
           prefix);
  snprintf(seeds[2], sizeof seeds[2], "{\"kind\":\"json\",\"name\":\"j\",\"text\":\"[1]\"}");
  const char digits[] = "0123456789-\"[],:";
  unsigned seed = 4242;
  int ok = 0, refused = 0;
  for (int iter = 0; iter < 20000; iter++) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", seeds[iter % 3]);
    size_t n = strlen(buf);
    int edits = 1 + (int)((seed = seed * 1103515245u + 12345u) >> 16) % 3;
    for (int e = 0; e < edits; e++) {
      seed = seed * 1103515245u + 12345u;
      buf[(seed >> 8) % n] = digits[(seed >> 20) % (sizeof digits - 1)];
    }
    json_t *o = json_loads(buf, 0, NULL);
    if (!o)
      continue; /* not JSON: the frame decoder's business */
    wrk_wire_item it;
    int rc = wrk_wire_item_decode(o, 0, prefix, &it);
    if (rc == 0) {
      ok++;
      uint64_t elems = it.kind == EBB_ITEM_AUDIO    ? it.frames * it.channels
                       : it.kind == EBB_ITEM_TENSOR ? wrk_wire_tensor_elems(it.ndim, it.shape)
                                                    : 0;
      CHECK_MSG(it.name && *it.name, "iteration %d: accepted an item without a name", iter);
      if (it.kind == EBB_ITEM_AUDIO)
        CHECK_MSG(it.channels >= 1 && it.channels <= 64 && it.rate >= 1 && it.rate <= 10000000,
                  "iteration %d: accepted %s", iter, buf);
      CHECK_MSG(elems <= EBB_WIRE_ITEM_MAX_ELEMS && it.bytes == elems * 4,
                "iteration %d: accepted %s (bytes %zu)", iter, buf, it.bytes);
      CHECK_MSG(!it.bytes || (it.shm && !strncmp(it.shm, prefix, strlen(prefix))),
                "iteration %d: accepted a payload outside the prefix: %s", iter, buf);
    } else {
      refused++;
      CHECK_MSG(rc == EBB_EPROTO && has(ebb_errmsg(), "item #1"), "iteration %d: rc %d '%s'", iter,
                rc, ebb_errmsg());
    }
    json_decref(o);
  }
  fprintf(stderr, "item mutations: %d accepted, %d refused\n", ok, refused);
  CHECK(ok > 0 && refused > 0);
}

/* ebb-worker, driven directly: an input item with 0 channels is refused
 * through the shared codec before the stage sees it. */
static void test_worker_refuses_bad_input(void) {
  const char *dir = getenv("EBB_BUILD_DIR");
  REQUIRE(dir);
  char exe[1024];
  snprintf(exe, sizeof exe, "%s/ebb-worker", dir);
  wrk_wproc *w = NULL;
  REQUIRE(wrk_wproc_spawn(exe, NULL, 0, "ebb-worker", &w) == 0);
  json_t *m = json_pack("{s:s, s:i, s:s, s:s, s:s}", "type", "hello", "protocol", 1, "stage",
                        "synthetic", "name", "s", "shm_prefix", wrk_wproc_shm_prefix(w));
  json_t *r = NULL;
  REQUIRE(wrk_wproc_call(w, m, now() + 20, NULL, &r) == 0);
  json_decref(m);
  json_decref(r);
  m = json_pack("{s:s, s:s, s:{}, s:s}", "type", "load", "stage", "synthetic", "options", "device",
                "cpu");
  r = NULL;
  int rc = wrk_wproc_call(w, m, now() + 20, NULL, &r);
  CHECK_MSG(rc == 0, "load: %s", ebb_errmsg());
  json_decref(m);
  json_decref(r);
  m = json_pack("{s:s, s:[{s:s, s:s, s:i, s:i, s:i}]}", "type", "run", "items", "kind", "audio",
                "name", "mix", "frames", 0, "channels", 0, "rate", 8000);
  r = NULL;
  rc = wrk_wproc_call(w, m, now() + 20, NULL, &r);
  CHECK_EQ_INT(rc, EBB_EPROTO);
  CHECK_MSG(has(ebb_errmsg(), "input item #1 ('mix')") && has(ebb_errmsg(), "channels 1..64"),
            "got '%s'", ebb_errmsg());
  CHECK(r != NULL); /* an answer, not a broken connection */
  json_decref(m);
  json_decref(r);
  CHECK_MSG(wrk_wproc_alive(w), "ebb-worker died on a bad item");
  wrk_wproc_stop(w, 5, NULL);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  snprintf(prefix, sizeof prefix, "ebb-witest-%ld-", (long)getpid());
  RUN(test_round_trip);
  RUN(test_refused);
  RUN(test_map);
  RUN(test_no_copy);
  RUN(test_mutations);
  RUN(test_worker_refuses_bad_input);
  wrk_shm_unlink_prefix(prefix);
  return TEST_END();
}
