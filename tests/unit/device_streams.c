/* Streams on the CPU device and on cuda:0: asynchronous copies in both
 * directions land once the stream is synchronised (in chunks alternating
 * between two streams, as a wake does); a live stream keeps the context
 * (EBB_EBUSY naming the streams) and its destroy lets it go; a missing
 * stream is a clear EBB_EINVAL. */
#include <string.h>

#include "device/device.h"
#include "support/devtest.h"
#include "test.h"

#define N (3u << 20)
#define CHUNK (1u << 20)

static void round_trip(const char *spec) {
  dev_device *d = NULL;
  REQUIRE(dev_open(spec, &d) == 0);
  dev_dseg seg;
  REQUIRE(dev_seg_alloc(d, N, EBB_SEG_PLAIN, &seg) == 0);
  dev_stream *s[2] = {NULL, NULL};
  CHECK_EQ_INT(dev_stream_create(d, &s[0]), 0);
  CHECK_EQ_INT(dev_stream_create(d, &s[1]), 0);
  REQUIRE(s[0] && s[1]);
  void *stage = NULL;
  REQUIRE(dev_host_alloc(d, N, &stage) == 0);
  unsigned char *src = stage, *back = malloc(N);
  REQUIRE(back);
  for (size_t i = 0; i < N; i++)
    src[i] = (unsigned char)(i * 13 + (i >> 16));
  for (size_t off = 0, k = 0; off < N; off += CHUNK, k++)
    CHECK_EQ_INT(dev_copy_htod_async(d, seg.addr + off, src + off, CHUNK, s[k & 1]), 0);
  CHECK_EQ_INT(dev_stream_sync(d, s[0]), 0);
  CHECK_EQ_INT(dev_stream_sync(d, s[1]), 0);
  memset(src, 0, N);
  for (size_t off = 0, k = 0; off < N; off += CHUNK, k++)
    CHECK_EQ_INT(dev_copy_dtoh_async(d, src + off, seg.addr + off, CHUNK, s[k & 1]), 0);
  CHECK_EQ_INT(dev_stream_sync(d, s[0]), 0);
  CHECK_EQ_INT(dev_stream_sync(d, s[1]), 0);
  for (size_t i = 0; i < N; i++)
    back[i] = (unsigned char)(i * 13 + (i >> 16));
  CHECK_MSG(memcmp(src, back, N) == 0, "%s: the bytes changed on the way through two streams",
            spec);
  CHECK_EQ_INT(dev_copy_htod_async(d, seg.addr, src, 0, s[0]), 0); /* nothing to do */
  CHECK_EQ_INT(dev_copy_htod_async(d, seg.addr, src, 8, NULL), EBB_EINVAL);
  CHECK_MSG(strstr(ebb_errmsg(), "without a stream") != NULL, "message: %s", ebb_errmsg());
  CHECK_EQ_INT(dev_stream_sync(d, NULL), EBB_EINVAL);
  dev_host_free(d, stage);
  dev_seg_free(d, &seg);
  if (dev_kind_of(d) == EBB_DEVICE_CUDA) {
    /* Nothing else is held: the streams alone keep the context. */
    CHECK_EQ_INT(dev_ctx_release(d), EBB_EBUSY);
    CHECK_MSG(strstr(ebb_errmsg(), "2 streams") != NULL, "message: %s", ebb_errmsg());
    CHECK(dev_ctx_active(d));
  }
  dev_stream_destroy(d, s[0]);
  dev_stream_destroy(d, s[1]);
  dev_stream_destroy(d, NULL); /* no-op */
  CHECK_EQ_INT(dev_ctx_release(d), 0);
  CHECK(!dev_ctx_active(d));
  free(back);
  dev_close(d);
}

static void test_cpu(void) { round_trip("cpu"); }
static void test_cuda(void) { round_trip("cuda:0"); }

int main(void) {
  dt_real_gpu();
  RUN(test_cpu);
  RUN(test_cuda);
  return TEST_END();
}
