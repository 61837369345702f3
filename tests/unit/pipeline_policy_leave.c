/* When something idle leaves its device (pl_policy_leave, pipeline/config.h):
 * the one rule that the runner's idle stages and residency's pipelines
 * follow. It stays for its keep time: the policy's seconds under idle:S and
 * sleep:S (plain sleep: none), the caller's default under the others; then
 * asleep under sleep[:S], released otherwise; never: it stays. */
#include "pipeline/config.h"
#include "test.h"

static pl_leave_how leave(const char *policy, double idle_s, double keep_default_s) {
  pl_policy p;
  REQUIRE(pl_policy_parse(policy, &p) == 0);
  return pl_policy_leave(&p, idle_s, keep_default_s);
}

static void seconds_of_the_policy(void) {
  CHECK_EQ_INT(leave("idle:5", 4.9, 300), EBB_LEAVE_STAY);
  CHECK_EQ_INT(leave("idle:5", 5, 300), EBB_LEAVE_RELEASE);
  CHECK_EQ_INT(leave("idle:5", 5, 1), EBB_LEAVE_RELEASE); /* the default does not shorten it */
  CHECK_EQ_INT(leave("idle:5", 4, 1), EBB_LEAVE_STAY);
  CHECK_EQ_INT(leave("sleep:2", 1.9, 300), EBB_LEAVE_STAY);
  CHECK_EQ_INT(leave("sleep:2", 2, 300), EBB_LEAVE_SLEEP);
  CHECK_EQ_INT(leave("sleep", 0, 300), EBB_LEAVE_SLEEP); /* plain sleep: at once */
  CHECK_EQ_INT(leave("idle:0", 0, 300), EBB_LEAVE_RELEASE);
}

static void the_default_for_the_others(void) {
  CHECK_EQ_INT(leave("after-stage", 299, 300), EBB_LEAVE_STAY);
  CHECK_EQ_INT(leave("after-stage", 300, 300), EBB_LEAVE_RELEASE);
  CHECK_EQ_INT(leave("after-job", 1e-9, 1e-9), EBB_LEAVE_RELEASE); /* --keep-resident 0 */
  CHECK_EQ_INT(leave("after-job", 0, 300), EBB_LEAVE_STAY);
}

static void never_stays(void) {
  CHECK_EQ_INT(leave("never", 1e9, 0), EBB_LEAVE_STAY);
  CHECK_EQ_INT(leave("never", 1e9, 300), EBB_LEAVE_STAY);
}

int main(void) {
  RUN(seconds_of_the_policy);
  RUN(the_default_for_the_others);
  RUN(never_stays);
  return TEST_END();
}
