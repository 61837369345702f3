/* A pipeline's "evictable" (issue 35, docs/broker.md): true unless the
 * config says false; anything but a boolean is an error naming the key and
 * the pipeline. */
#include <string.h>

#include "ebb/error.h"
#include "pipeline/config.h"
#include "test.h"

static int load(const char *keys, pl_config **c) {
  char text[1024];
  snprintf(text, sizeof text,
           "{\"pipelines\": {\"p\": {\"stages\": [{\"stage\": \"synthetic\"}]%s%s}}}",
           *keys ? ", " : "", keys);
  return pl_config_load_string(text, "test.json", c);
}

static void values(void) {
  static const struct {
    const char *keys;
    int evictable;
  } cases[] = {{"", 1}, {"\"evictable\": true", 1}, {"\"evictable\": false", 0}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pl_config *c = NULL;
    REQUIRE(load(cases[i].keys, &c) == 0);
    const pl_def *p = pl_config_pipeline(c, "p");
    REQUIRE(p);
    CHECK_MSG(p->evictable == cases[i].evictable, "'%s': evictable %d, expected %d", cases[i].keys,
              p->evictable, cases[i].evictable);
    pl_config_free(c);
  }
  pl_config *c = NULL; /* the built-ins may be taken */
  REQUIRE(load("", &c) == 0);
  const pl_def *s = pl_config_pipeline(c, "synthetic");
  CHECK(s && s->evictable == 1);
  pl_config_free(c);
}

static void bad(void) {
  static const char *cases[] = {"\"evictable\": \"no\"", "\"evictable\": 0", "\"evictable\": null"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pl_config *c = NULL;
    int rc = load(cases[i], &c);
    CHECK_MSG(rc == EBB_ECONFIG, "%s: rc %d", cases[i], rc);
    CHECK_MSG(strstr(ebb_errmsg(), "pipeline 'p'") && strstr(ebb_errmsg(), "\"evictable\""),
              "%s: message '%s' does not name the pipeline and the key", cases[i], ebb_errmsg());
    pl_config_free(c);
  }
}

int main(void) {
  RUN(values);
  RUN(bad);
  return TEST_END();
}
