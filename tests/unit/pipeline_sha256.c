/* SHA-256 of the result cache against FIPS 180-4 test vectors, including
 * updates split at every offset of a 2-block message. */
#include <string.h>

#include "pipeline/sha256.h"
#include "test.h"

static void hex_of(const void *data, size_t n, char out[65]) {
  pl_sha256 s;
  uint8_t d[32];
  pl_sha256_init(&s);
  pl_sha256_update(&s, data, n);
  pl_sha256_final(&s, d);
  pl_sha256_hex(d, out);
}

static void test_vectors(void) {
  char h[65];
  hex_of("", 0, h);
  CHECK_EQ_STR(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  hex_of("abc", 3, h);
  CHECK_EQ_STR(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  hex_of(m, strlen(m), h);
  CHECK_EQ_STR(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_million_a(void) {
  pl_sha256 s;
  uint8_t d[32];
  char h[65], buf[1000];
  memset(buf, 'a', sizeof buf);
  pl_sha256_init(&s);
  for (int i = 0; i < 1000; i++)
    pl_sha256_update(&s, buf, sizeof buf);
  pl_sha256_final(&s, d);
  pl_sha256_hex(d, h);
  CHECK_EQ_STR(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void test_split_updates(void) {
  char msg[130], whole[65], split[65];
  for (int i = 0; i < 130; i++)
    msg[i] = (char)(i * 7 + 1);
  hex_of(msg, sizeof msg, whole);
  for (size_t cut = 0; cut <= sizeof msg; cut++) {
    pl_sha256 s;
    uint8_t d[32];
    pl_sha256_init(&s);
    pl_sha256_update(&s, msg, cut);
    pl_sha256_update(&s, msg + cut, sizeof msg - cut);
    pl_sha256_final(&s, d);
    pl_sha256_hex(d, split);
    CHECK_MSG(!strcmp(whole, split), "split at %zu differs", cut);
  }
}

int main(void) {
  RUN(test_vectors);
  RUN(test_million_a);
  RUN(test_split_updates);
  return TEST_END();
}
