/* A small test header: every check prints file:line and both values, and a
 * test keeps going after a failed check so one run shows every failure.
 * Usage: write `static void test_x(void) { CHECK(...); }` functions and call
 * them from main with RUN(test_x); end main with `return TEST_END();`. */
#ifndef EBB_TEST_H
#define EBB_TEST_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures_;
static int test_checks_;
static const char *test_current_ = "";

#define TEST_FAIL_(...)                                                 \
  do {                                                                  \
    test_failures_++;                                                   \
    fprintf(stderr, "%s:%d: [%s] ", __FILE__, __LINE__, test_current_); \
    fprintf(stderr, __VA_ARGS__);                                       \
    fputc('\n', stderr);                                                \
  } while (0)

#define CHECK(cond)                          \
  do {                                       \
    test_checks_++;                          \
    if (!(cond))                             \
      TEST_FAIL_("check failed: %s", #cond); \
  } while (0)

#define CHECK_MSG(cond, ...)   \
  do {                         \
    test_checks_++;            \
    if (!(cond))               \
      TEST_FAIL_(__VA_ARGS__); \
  } while (0)

#define CHECK_EQ_INT(a, b)                                  \
  do {                                                      \
    long long a_ = (long long)(a), b_ = (long long)(b);     \
    test_checks_++;                                         \
    if (a_ != b_)                                           \
      TEST_FAIL_("%s == %s: %lld != %lld", #a, #b, a_, b_); \
  } while (0)

#define CHECK_EQ_U64(a, b)                                             \
  do {                                                                 \
    uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                   \
    test_checks_++;                                                    \
    if (a_ != b_)                                                      \
      TEST_FAIL_("%s == %s: %" PRIu64 " != %" PRIu64, #a, #b, a_, b_); \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                            \
  do {                                                                   \
    double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol);       \
    test_checks_++;                                                      \
    if (!(a_ - b_ <= t_ && b_ - a_ <= t_))                               \
      TEST_FAIL_("%s ~= %s (tol %g): %.9g vs %.9g", #a, #b, t_, a_, b_); \
  } while (0)

#define CHECK_EQ_STR(a, b)                                                                      \
  do {                                                                                          \
    const char *a_ = (a), *b_ = (b);                                                            \
    test_checks_++;                                                                             \
    if (!a_ || !b_ || strcmp(a_, b_) != 0)                                                      \
      TEST_FAIL_("%s == %s: \"%s\" != \"%s\"", #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
  } while (0)

/* Fatal: a check whose failure makes the rest of the test meaningless. */
#define REQUIRE(cond)                                 \
  do {                                                \
    test_checks_++;                                   \
    if (!(cond)) {                                    \
      TEST_FAIL_("required check failed: %s", #cond); \
      exit(1);                                        \
    }                                                 \
  } while (0)

#define RUN(fn)                                                                   \
  do {                                                                            \
    int before_ = test_failures_;                                                 \
    test_current_ = #fn;                                                          \
    fn();                                                                         \
    fprintf(stderr, "%s %s\n", test_failures_ == before_ ? "ok  " : "FAIL", #fn); \
  } while (0)

#define TEST_END() \
  (fprintf(stderr, "%d checks, %d failed\n", test_checks_, test_failures_), test_failures_ ? 1 : 0)

#endif
