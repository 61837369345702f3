/* pl_policy_parse: any text either parses to a valid policy whose text form
 * parses back to the same policy, or fails with EBB_EINVAL and a message. */
#include <math.h>

#include "fuzz_util.h"
#include "pipeline/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = fuzz_cstr(data, size);
  pl_policy p = {.kind = (pl_policy_kind)99, .idle_s = -1};
  int rc = pl_policy_parse(s, &p);
  if (rc) {
    FUZZ_CHECK(rc == EBB_EINVAL, "rc %d (%s) for a bad policy, expected EBB_EINVAL", rc,
               ebb_errname(rc));
    FUZZ_CHECK(ebb_errmsg() && *ebb_errmsg(), "failure without a message");
  } else {
    FUZZ_CHECK(p.kind >= EBB_POLICY_AFTER_STAGE && p.kind <= EBB_POLICY_SLEEP, "kind %d",
               (int)p.kind);
    int timed = p.kind == EBB_POLICY_IDLE || p.kind == EBB_POLICY_SLEEP;
    if (timed)
      FUZZ_CHECK(isfinite(p.idle_s) && p.idle_s >= 0, "%g s accepted", p.idle_s);
    char text[64];
    pl_policy_format(&p, text, sizeof text);
    pl_policy q;
    int rc2 = pl_policy_parse(text, &q);
    FUZZ_CHECK(rc2 == 0, "the text form \"%s\" of an accepted policy does not parse: %s", text,
               ebb_errmsg());
    FUZZ_CHECK(q.kind == p.kind, "\"%s\" parses to kind %d, was %d", text, (int)q.kind,
               (int)p.kind);
    if (timed)
      FUZZ_CHECK(fabs(q.idle_s - p.idle_s) <= 1e-5 * fabs(p.idle_s),
                 "\"%s\" parses to %.17g s, was %.17g", text, q.idle_s, p.idle_s);
  }
  free(s);
  return 0;
}
