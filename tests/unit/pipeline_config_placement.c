/* The placement keys of a pipeline's config: "expected_mib" (bytes before a
 * first measured run) and "devices" (pins), with errors that name the key. */
#include <string.h>

#include "ebb/error.h"
#include "pipeline/config.h"
#include "test.h"

static const char *stages = "\"stages\": [{\"stage\": \"synthetic\"}]";

static int load(const char *keys, pl_config **c) {
  char text[1024];
  snprintf(text, sizeof text, "{\"pipelines\": {\"p\": {%s, %s}}}", stages, keys);
  return pl_config_load_string(text, "test.json", c);
}

static void good(void) {
  pl_config *c = NULL;
  REQUIRE(load("\"expected_mib\": 4915, \"devices\": [\"cuda:1\", \"cuda:3\", \"cpu\"]", &c) == 0);
  const pl_def *p = pl_config_pipeline(c, "p");
  REQUIRE(p);
  CHECK_EQ_U64(p->expected_bytes, 4915ull << 20);
  CHECK_EQ_INT((int)p->pin_cuda, (1 << 1) | (1 << 3));
  CHECK_EQ_INT(p->pin_cpu, 1);
  pl_config_free(c);
  REQUIRE(load("\"description\": \"none\"", &c) == 0);
  p = pl_config_pipeline(c, "p");
  CHECK_EQ_U64(p->expected_bytes, 0);
  CHECK_EQ_INT((int)p->pin_cuda, 0);
  CHECK_EQ_INT(p->pin_cpu, 0);
  pl_config_free(c);
}

static void bad(void) {
  static const char *cases[][2] = {
      {"\"expected_mib\": -1", "expected_mib"},
      {"\"expected_mib\": \"4 GiB\"", "expected_mib"},
      {"\"devices\": []", "devices"},
      {"\"devices\": \"cuda:1\"", "devices"},
      {"\"devices\": [\"gpu1\"]", "\"devices\" #1"},
      {"\"devices\": [\"cuda:0\", \"cuda:x\"]", "\"devices\" #2"},
      {"\"devices\": [\"cuda:32\"]", "\"devices\" #1"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pl_config *c = NULL;
    int rc = load(cases[i][0], &c);
    CHECK_MSG(rc == EBB_ECONFIG, "%s: rc %d", cases[i][0], rc);
    CHECK_MSG(strstr(ebb_errmsg(), cases[i][1]) != NULL, "%s: message '%s' does not name %s",
              cases[i][0], ebb_errmsg(), cases[i][1]);
    pl_config_free(c);
  }
}

int main(void) {
  RUN(good);
  RUN(bad);
  return TEST_END();
}
