/* A minimal test harness for the C unit tests: each test file is one ctest test; CHECK failures
 * print file:line and the expression and make the executable exit non-zero at the end. */
#ifndef LUAPROV_SPEC_CHECK_H
#define LUAPROV_SPEC_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                                                          \
  do {                                                                                                       \
    check_count++;                                                                                           \
    if (!(cond)) {                                                                                           \
      check_failures++;                                                                                      \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                               \
    }                                                                                                        \
  } while (0)

#define CHECK_INT(a, b)                                                                                      \
  do {                                                                                                       \
    long long check_a_ = (long long)(a), check_b_ = (long long)(b);                                          \
    check_count++;                                                                                           \
    if (check_a_ != check_b_) {                                                                              \
      check_failures++;                                                                                      \
      fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, check_a_,        \
              check_b_);                                                                                     \
    }                                                                                                        \
  } while (0)

#define CHECK_STR(a, b)                                                                                      \
  do {                                                                                                       \
    const char *check_a_ = (a), *check_b_ = (b);                                                             \
    check_count++;                                                                                           \
    if (!check_a_ || !check_b_ || strcmp(check_a_, check_b_) != 0) {                                         \
      check_failures++;                                                                                      \
      fprintf(stderr, "%s:%d: %s == %s failed:\n  got:      %s\n  expected: %s\n", __FILE__, __LINE__, #a,   \
              #b, check_a_ ? check_a_ : "(null)", check_b_ ? check_b_ : "(null)");                           \
    }                                                                                                        \
  } while (0)

#define CHECK_CONTAINS(hay, needle)                                                                          \
  do {                                                                                                       \
    const char *check_h_ = (hay), *check_n_ = (needle);                                                      \
    check_count++;                                                                                           \
    if (!check_h_ || !strstr(check_h_, check_n_)) {                                                          \
      check_failures++;                                                                                      \
      fprintf(stderr, "%s:%d: expected %s to contain \"%s\", got:\n%s\n", __FILE__, __LINE__, #hay,          \
              check_n_, check_h_ ? check_h_ : "(null)");                                                     \
    }                                                                                                        \
  } while (0)

#define RUN(test_fn)                                                                                         \
  do {                                                                                                       \
    int check_before_ = check_failures;                                                                      \
    test_fn();                                                                                               \
    fprintf(stderr, "%s %s\n", check_failures == check_before_ ? "ok  " : "FAIL", #test_fn);                 \
  } while (0)

static inline int check_summary(void) {
  fprintf(stderr, "%d checks, %d failed\n", check_count, check_failures);
  return check_failures ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
