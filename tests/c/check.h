/* A tiny test harness for the C tests: each CHECK names the file, line and what failed. */
#ifndef MINDLITE_TEST_CHECK_H
#define MINDLITE_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mindlite.h"

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);   \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* A call on `db` must succeed; on failure prints the status and mindlite_errmsg(db). */
#define CHECK_OK(db, call)                                                       \
  do {                                                                           \
    mindlite_status s_ = (call);                                                 \
    if (s_ != MINDLITE_OK) {                                                     \
      fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__, #call,  \
              (int)s_, mindlite_errmsg(db));                                     \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* A call must return `expected`. */
#define CHECK_STATUS(expected, call)                                             \
  do {                                                                           \
    mindlite_status s_ = (call);                                                 \
    if (s_ != (expected)) {                                                      \
      fprintf(stderr, "%s:%d: %s returned %d, expected %d (%s)\n", __FILE__,      \
              __LINE__, #call, (int)s_, (int)(expected), #expected);             \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* Two strings must be equal. */
#define CHECK_STR(actual, expected)                                              \
  do {                                                                           \
    const char *a_ = (actual);                                                   \
    const char *e_ = (expected);                                                 \
    if (a_ == NULL || strcmp(a_, e_) != 0) {                                     \
      fprintf(stderr, "%s:%d: %s is \"%s\", expected \"%s\"\n", __FILE__,         \
              __LINE__, #actual, a_ ? a_ : "(null)", e_);                         \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* `haystack` must contain `needle`. */
#define CHECK_CONTAINS(haystack, needle)                                         \
  do {                                                                           \
    const char *h_ = (haystack);                                                 \
    if (h_ == NULL || strstr(h_, (needle)) == NULL) {                            \
      fprintf(stderr, "%s:%d: %s is \"%s\", expected it to contain \"%s\"\n",     \
              __FILE__, __LINE__, #haystack, h_ ? h_ : "(null)", (needle));       \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

/* Runs a statement and frees its result. */
static inline void exec(mindlite_database *db, const char *sql) {
  mindlite_result *result = NULL;
  mindlite_status status = mindlite_query(db, sql, &result);
  if (status != MINDLITE_OK) {
    fprintf(stderr, "exec(\"%s\") returned %d: %s\n", sql, (int)status, mindlite_errmsg(db));
    exit(1);
  }
  mindlite_result_free(result);
}

/* `dir` + "/" + `name`, in a static buffer. */
static inline const char *path_in(const char *dir, const char *name) {
  static char buffer[4096];
  int n = snprintf(buffer, sizeof buffer, "%s/%s", dir, name);
  CHECK(n > 0 && (size_t)n < sizeof buffer);
  return buffer;
}

#endif
