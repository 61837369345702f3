/* Items: typed, copied on add, unique names across the job and a stage's
 * output, moved into the job on success; device tensors are copied into the
 * job owner's blocks so the stage's owner can go. Runs on the CPU device. */
#include <string.h>

#include "pipeline/items.h"
#include "test.h"

static dev_device *dev;
static mem_allocator *alloc;

static void test_kinds_and_copies(void) {
  ebb_items *it;
  REQUIRE(pl_items_create(NULL, NULL, &it) == 0);
  float pcm[6] = {1, 2, 3, 4, 5, 6};
  float t[4] = {9, 8, 7, 6};
  uint64_t shape[2] = {2, 2};
  char path[] = "/tmp/x.wav";
  CHECK(pl_items_add_audio(it, "mix", pcm, 3, 2, 44100) == 0);
  CHECK(pl_items_add_tensor(it, "t", t, 2, shape) == 0);
  CHECK(pl_items_add_json(it, "j", "{\"a\": 1}") == 0);
  CHECK(pl_items_add_file(it, "f", path) == 0);
  pcm[0] = -1; /* copies: the caller's buffers are its own */
  t[0] = -1;
  path[1] = 'X';
  CHECK_EQ_INT(pl_items_count(it), 4);
  ebb_item_info in;
  REQUIRE(pl_items_find(it, "mix", &in) == 0);
  CHECK_EQ_INT(in.kind, EBB_ITEM_AUDIO);
  CHECK_EQ_INT(in.frames, 3);
  CHECK_EQ_INT(in.channels, 2);
  CHECK_EQ_INT(in.rate, 44100);
  CHECK_NEAR(in.samples[0], 1, 0);
  CHECK_NEAR(in.samples[5], 6, 0);
  CHECK_EQ_INT(in.size, sizeof in);
  REQUIRE(pl_items_get(it, 1, &in) == 0);
  CHECK_EQ_STR(in.name, "t");
  CHECK_EQ_INT(in.ndim, 2);
  CHECK_NEAR(in.data[0], 9, 0);
  CHECK_EQ_U64(in.dptr, 0);
  REQUIRE(pl_items_find(it, "f", &in) == 0);
  CHECK_EQ_STR(in.text, "/tmp/x.wav");
  CHECK_EQ_INT(pl_items_find(it, "nope", &in), EBB_ENOTFOUND);
  CHECK_EQ_INT(pl_items_get(it, 9, &in), EBB_ENOTFOUND);
  pl_items_destroy(it);
}

static void test_bad_adds(void) {
  ebb_items *it;
  REQUIRE(pl_items_create(NULL, NULL, &it) == 0);
  float x = 0;
  uint64_t shape9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  CHECK_EQ_INT(pl_items_add_json(it, "", "{}"), EBB_EINVAL);
  CHECK_EQ_INT(pl_items_add_json(it, NULL, "{}"), EBB_EINVAL);
  CHECK_EQ_INT(pl_items_add_json(it, "j", NULL), EBB_EINVAL);
  CHECK_EQ_INT(pl_items_add_audio(it, "a", &x, 1, 0, 44100), EBB_EINVAL);
  CHECK_EQ_INT(pl_items_add_tensor(it, "t", &x, 9, shape9), EBB_EINVAL);
  CHECK_EQ_INT(pl_items_count(it), 0); /* failed adds leave nothing */
  CHECK(pl_items_add_json(it, "j", "1") == 0);
  CHECK_EQ_INT(pl_items_add_file(it, "j", "/p"), EBB_EINVAL);
  CHECK(strstr(ebb_errmsg(), "'j'") != NULL);
  pl_items_destroy(it);
}

static void test_stage_output_joins_job(void) {
  ebb_items *job, *out;
  REQUIRE(pl_items_create(NULL, NULL, &job) == 0);
  REQUIRE(pl_items_add_file(job, "input", "/in") == 0);
  REQUIRE(pl_items_create(NULL, job, &out) == 0);
  /* a stage cannot reuse a name the job has */
  CHECK_EQ_INT(pl_items_add_json(out, "input", "{}"), EBB_EINVAL);
  ebb_item_info in;
  CHECK(pl_items_find(out, "input", &in) == 0); /* sees the job's items through parent */
  CHECK(pl_items_add_json(out, "result", "[1]") == 0);
  CHECK(pl_items_take(job, out) == 0);
  CHECK_EQ_INT(pl_items_count(job), 2);
  CHECK_EQ_INT(pl_items_count(out), 0);
  pl_items_destroy(out); /* the job owns the item now */
  REQUIRE(pl_items_find(job, "result", &in) == 0);
  CHECK_EQ_STR(in.text, "[1]");
  /* take refuses a clash without moving anything */
  ebb_items *other;
  REQUIRE(pl_items_create(NULL, NULL, &other) == 0);
  REQUIRE(pl_items_add_json(other, "fresh", "1") == 0);
  REQUIRE(pl_items_add_json(other, "result", "2") == 0);
  CHECK_EQ_INT(pl_items_take(job, other), EBB_EINVAL);
  CHECK_EQ_INT(pl_items_count(job), 2);
  CHECK_EQ_INT(pl_items_count(other), 2);
  pl_items_destroy(other);
  pl_items_destroy(job);
}

static void test_device_tensor_owned_by_job(void) {
  ebb_owner *job_owner, *stage_owner;
  REQUIRE(mem_owner_create(alloc, "job", NULL, &job_owner) == 0);
  REQUIRE(mem_owner_create(alloc, "stage", NULL, &stage_owner) == 0);
  uint64_t src;
  float host[6] = {1, 2, 3, 4, 5, 6}, back[6] = {0};
  REQUIRE(mem_alloc(stage_owner, sizeof host, "test", &src) == 0);
  REQUIRE(dev_copy_htod(dev, src, host, sizeof host) == 0);
  ebb_items *it;
  REQUIRE(pl_items_create(job_owner, NULL, &it) == 0);
  uint64_t shape[2] = {2, 3};
  REQUIRE(pl_items_add_device_tensor(it, dev, "dt", src, 2, shape) == 0);
  /* the stage goes away with its memory: the item must not care */
  mem_leak_report *rep = NULL;
  mem_free(alloc, src);
  mem_owner_destroy(stage_owner, &rep);
  CHECK(rep == NULL);
  ebb_item_info in;
  REQUIRE(pl_items_find(it, "dt", &in) == 0);
  CHECK(in.dptr != 0 && in.dptr != src);
  CHECK(in.data == NULL);
  ebb_owner *o = NULL;
  size_t sz = 0;
  REQUIRE(mem_lookup(alloc, in.dptr, &o, &sz) == 0);
  CHECK(o == job_owner);
  CHECK_EQ_INT(sz, sizeof host);
  REQUIRE(dev_copy_dtoh(dev, back, in.dptr, sizeof back) == 0);
  CHECK(memcmp(host, back, sizeof back) == 0);
  pl_items_destroy(it); /* frees the job's block */
  mem_owner_stats st = {.size = sizeof st};
  mem_owner_get_stats(job_owner, &st);
  CHECK_EQ_U64(st.bytes.current, 0);
  mem_owner_destroy(job_owner, &rep);
  CHECK(rep == NULL); /* nothing leaked */
}

int main(void) {
  REQUIRE(dev_open("cpu", &dev) == 0);
  REQUIRE(mem_allocator_create(dev, NULL, &alloc) == 0);
  RUN(test_kinds_and_copies);
  RUN(test_bad_adds);
  RUN(test_stage_output_joins_job);
  RUN(test_device_tensor_owned_by_job);
  mem_allocator_destroy(alloc);
  dev_close(dev);
  return TEST_END();
}
