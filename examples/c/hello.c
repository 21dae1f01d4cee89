/* mindlite from C: open a database, load a table, read rows with typed access, and stream a
 * result as JSON Lines. Build (from the repository root, after `cargo build -p mindlite-ffi`):
 *
 *   cc -std=c11 -Iinclude examples/c/hello.c target/debug/libmindlite.a -lpthread -ldl -lm -o hello
 *   ./hello [path/to/file.redb]    # in memory without a path
 */
#include <stdio.h>

#include "mindlite.h"

/* Prints the failure and returns nonzero when `status` is not MINDLITE_OK. */
static int failed(mindlite_database *db, mindlite_status status, const char *what) {
  if (status == MINDLITE_OK) return 0;
  fprintf(stderr, "%s failed (%d): %s\n", what, (int)status, mindlite_errmsg(db));
  return 1;
}

int main(int argc, char **argv) {
  mindlite_database *db = NULL;
  char *error = NULL;
  mindlite_status status = argc > 1 ? mindlite_open(argv[1], NULL, &db, &error)
                                    : mindlite_open_in_memory(NULL, &db, &error);
  if (status != MINDLITE_OK) {
    fprintf(stderr, "cannot open: %s\n", error);
    mindlite_free(error);
    return 1;
  }

  const char *setup[] = {
      "CREATE TABLE IF NOT EXISTS cities (name VARCHAR, population BIGINT, area DOUBLE)",
      "DELETE FROM cities",
      "INSERT INTO cities VALUES ('Lisbon', 545796, 100.05), ('Porto', 231800, 41.42), "
      "('Braga', 193333, NULL)",
  };
  for (size_t i = 0; i < sizeof setup / sizeof setup[0]; i++) {
    mindlite_result *done = NULL;
    if (failed(db, mindlite_query(db, setup[i], &done), setup[i])) return 1;
    mindlite_result_free(done);
  }

  /* Typed access: one call per cell, a status for every call. */
  mindlite_result *result = NULL;
  if (failed(db, mindlite_query(db, "SELECT name, population, area FROM cities ORDER BY population DESC", &result), "query"))
    return 1;
  uint64_t rows = 0;
  mindlite_result_row_count(result, &rows);
  for (uint64_t row = 0; row < rows; row++) {
    const char *name = NULL;
    int64_t population = 0;
    double area = 0;
    mindlite_result_text(result, row, 0, &name, NULL);
    mindlite_result_int64(result, row, 1, &population);
    if (mindlite_result_double(result, row, 2, &area) == MINDLITE_NULL_VALUE) {
      printf("%-8s %8lld people, area unknown\n", name, (long long)population);
    } else {
      printf("%-8s %8lld people, %6.1f people/ha\n", name, (long long)population, population / (area * 100));
    }
  }
  mindlite_result_free(result);

  /* Streaming: MindsDB's jsonlines framing, a chunk at a time, never the whole result at once. */
  mindlite_cursor *cursor = NULL;
  if (failed(db, mindlite_cursor_open(db, "SELECT name FROM cities ORDER BY name", MINDLITE_FORMAT_JSONLINES, &cursor), "cursor"))
    return 1;
  const char *chunk = NULL;
  size_t len = 0;
  while (mindlite_cursor_next(cursor, &chunk, &len) == MINDLITE_OK) fwrite(chunk, 1, len, stdout);
  mindlite_cursor_free(cursor);

  return mindlite_close(db) == MINDLITE_OK ? 0 : 1;
}
