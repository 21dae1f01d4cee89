/* Error paths: bad SQL, bad config, files that are not databases, NULL arguments, invalid
 * UTF-8, use after close. Every failure is a status and a message, never a crash.
 * Usage: test_errors DIR (a fresh directory). */
#include "check.h"

static void open_errors(const char *dir) {
  mindlite_database *db = (mindlite_database *)&db; /* must be reset to NULL on failure */
  char *error = NULL;

  CHECK_STATUS(MINDLITE_INVALID, mindlite_open_in_memory("{\"storage\": ", &db, &error));
  CHECK(db == NULL);
  CHECK_CONTAINS(error, "invalid JSON config");
  mindlite_free(error);

  CHECK_STATUS(MINDLITE_INVALID, mindlite_open_in_memory("[storage]\nno_such_key = 1\n", &db, &error));
  CHECK_CONTAINS(error, "no_such_key");
  mindlite_free(error);

  /* A file that is not a redb database is refused by name, and left as it was. */
  const char *path = path_in(dir, "notes.txt");
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fputs("just some text, not a database\n", f);
  fclose(f);
  CHECK_STATUS(MINDLITE_INVALID, mindlite_open(path, NULL, &db, &error));
  CHECK(db == NULL);
  CHECK_CONTAINS(error, "notes.txt' is not a mindlite database");
  mindlite_free(error);
  f = fopen(path, "r");
  char line[64] = {0};
  CHECK(f != NULL && fgets(line, sizeof line, f) != NULL);
  fclose(f);
  CHECK_STR(line, "just some text, not a database\n");

  CHECK_STATUS(MINDLITE_MISUSE, mindlite_open(NULL, NULL, &db, &error));
  CHECK_CONTAINS(error, "path is NULL");
  mindlite_free(error);
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_open_in_memory(NULL, NULL, NULL));
  CHECK_STATUS(MINDLITE_INVALID, mindlite_open_in_memory("\xff\xfe", &db, NULL));
}

static void query_errors(mindlite_database *db) {
  mindlite_result *r = (mindlite_result *)&r;
  CHECK_STATUS(MINDLITE_INVALID, mindlite_query(db, "SELEC 1", &r));
  CHECK(r == NULL);
  CHECK(strcmp(mindlite_errmsg(db), "not an error") != 0);
  CHECK(strlen(mindlite_errmsg(db)) > 0);

  CHECK(mindlite_query(db, "SELECT * FROM nosuch_table", &r) != MINDLITE_OK);
  CHECK_CONTAINS(mindlite_errmsg(db), "nosuch_table");

  /* A success clears the last error. */
  CHECK_OK(db, mindlite_query(db, "SELECT 1", &r));
  CHECK_STR(mindlite_errmsg(db), "not an error");
  mindlite_result_free(r);

  CHECK_STATUS(MINDLITE_INVALID, mindlite_query(db, "SELECT 'caf\xc3", &r));
  CHECK_CONTAINS(mindlite_errmsg(db), "sql is not valid UTF-8");
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_query(db, NULL, &r));
  CHECK_CONTAINS(mindlite_errmsg(db), "sql is NULL");
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_query(db, "SELECT 1", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "out_result is NULL");
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_query(NULL, "SELECT 1", &r));
  CHECK_CONTAINS(mindlite_errmsg(NULL), "NULL");

  mindlite_cursor *cursor = NULL;
  CHECK_STATUS(MINDLITE_INVALID, mindlite_cursor_open(db, "SELECT 1", (mindlite_format)7, &cursor));
  CHECK_CONTAINS(mindlite_errmsg(db), "unknown format 7");
  CHECK(cursor == NULL);
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_cursor_next(NULL, NULL, NULL));
  CHECK_OK(db, mindlite_cursor_open(db, "SELECT 1", MINDLITE_FORMAT_SSE, &cursor));
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_cursor_next(cursor, NULL, NULL));
  CHECK_CONTAINS(mindlite_cursor_errmsg(cursor), "out_chunk is NULL");
  mindlite_cursor_free(cursor);

  CHECK_STATUS(MINDLITE_MISUSE, mindlite_query_arrow(db, "SELECT 1", NULL));

  /* Result handles: NULL handles and NULL out-parameters. */
  uint64_t n = 0;
  int64_t v = 0;
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_result_row_count(NULL, &n));
  CHECK_CONTAINS(mindlite_result_errmsg(NULL), "NULL");
  CHECK_OK(db, mindlite_query(db, "SELECT 1 AS one", &r));
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_result_int64(r, 0, 0, NULL));
  CHECK_CONTAINS(mindlite_result_errmsg(r), "out_value is NULL");
  CHECK(mindlite_result_int64(r, 0, 0, &v) == MINDLITE_OK && v == 1);
  mindlite_result_free(r);

  /* Names that do not exist, and objects that already do. */
  exec(db, "CREATE TABLE dup (a INT)");
  CHECK(mindlite_query(db, "CREATE TABLE dup (a INT)", &r) != MINDLITE_OK);
  CHECK_CONTAINS(mindlite_errmsg(db), "dup");
  CHECK(mindlite_query(db, "DROP PROJECT mindsdb", &r) != MINDLITE_OK);
  CHECK_CONTAINS(mindlite_errmsg(db), "mindsdb");

  /* A failed statement changes nothing. */
  CHECK(mindlite_query(db, "INSERT INTO dup VALUES (1), ('not a number')", &r) != MINDLITE_OK);
  CHECK_OK(db, mindlite_query(db, "SELECT count(*) FROM dup", &r));
  CHECK(mindlite_result_int64(r, 0, 0, &v) == MINDLITE_OK && v == 0);
  mindlite_result_free(r);
}

static void use_after_close(void) {
  mindlite_database *db = NULL;
  mindlite_result *r = NULL;
  CHECK(mindlite_open_in_memory(NULL, &db, NULL) == MINDLITE_OK);
  exec(db, "CREATE TABLE kept (a INT)");
  exec(db, "INSERT INTO kept VALUES (7)");
  CHECK_OK(db, mindlite_query(db, "SELECT a FROM kept", &r));
  mindlite_cursor *cursor = NULL;
  CHECK_OK(db, mindlite_cursor_open(db, "SELECT a FROM kept", MINDLITE_FORMAT_JSONLINES, &cursor));

  CHECK(mindlite_close(db) == MINDLITE_OK);
  /* The closed handle is detected, not dereferenced. */
  mindlite_result *none = (mindlite_result *)&none;
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_query(db, "SELECT 1", &none));
  CHECK(none == NULL);
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_close(db));
  CHECK_CONTAINS(mindlite_errmsg(db), "closed");
  CHECK(mindlite_close(NULL) == MINDLITE_OK);

  /* Results and cursors made before the close stay valid. */
  int64_t v = 0;
  CHECK(mindlite_result_int64(r, 0, 0, &v) == MINDLITE_OK && v == 7);
  mindlite_result_free(r);
  const char *chunk = NULL;
  size_t chunks = 0;
  while (mindlite_cursor_next(cursor, &chunk, NULL) == MINDLITE_OK) chunks++;
  CHECK(chunks >= 2);
  mindlite_cursor_free(cursor);

  mindlite_free(NULL);
  mindlite_result_free(NULL);
  mindlite_cursor_free(NULL);
}

int main(int argc, char **argv) {
  CHECK(argc == 2);
  open_errors(argv[1]);
  mindlite_database *db = NULL;
  CHECK(mindlite_open_in_memory(NULL, &db, NULL) == MINDLITE_OK);
  query_errors(db);
  CHECK(mindlite_close(db) == MINDLITE_OK);
  use_after_close();
  puts("test_errors: ok");
  return 0;
}
