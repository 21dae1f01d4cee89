/* Open a file, create, insert, query, typed access, JSON, USE, projects, reopen, login.
 * Usage: test_basic DIR (a fresh directory for the database file). */
#include "check.h"

static void typed_access(mindlite_database *db) {
  mindlite_result *r = NULL;
  CHECK_OK(db, mindlite_query(db, "SELECT id, score, ok, name, small FROM t ORDER BY id", &r));

  uint64_t rows = 0, cols = 0;
  CHECK_OK(db, mindlite_result_row_count(r, &rows));
  CHECK_OK(db, mindlite_result_column_count(r, &cols));
  CHECK(rows == 3 && cols == 5);

  const char *expected_names[] = {"id", "score", "ok", "name", "small"};
  const char *expected_type_names[] = {"Int64", "Float64", "Boolean", "Utf8View", "Int32"};
  const mindlite_type expected_types[] = {MINDLITE_TYPE_INT64, MINDLITE_TYPE_DOUBLE,
                                          MINDLITE_TYPE_BOOL, MINDLITE_TYPE_TEXT,
                                          MINDLITE_TYPE_INT64};
  for (uint64_t c = 0; c < cols; c++) {
    const char *name = NULL;
    const char *type_name = NULL;
    mindlite_type type = -1;
    CHECK(mindlite_result_column_name(r, c, &name) == MINDLITE_OK);
    CHECK(mindlite_result_column_type_name(r, c, &type_name) == MINDLITE_OK);
    CHECK(mindlite_result_column_type(r, c, &type) == MINDLITE_OK);
    CHECK_STR(name, expected_names[c]);
    CHECK_STR(type_name, expected_type_names[c]);
    CHECK(type == expected_types[c]);
  }

  int64_t i = 0;
  double d = 0;
  bool b = false;
  bool is_null = true;
  const char *text = NULL;
  size_t len = 0;

  CHECK(mindlite_result_int64(r, 0, 0, &i) == MINDLITE_OK && i == 1);
  CHECK(mindlite_result_int64(r, 2, 4, &i) == MINDLITE_OK && i == -3);
  CHECK(mindlite_result_double(r, 0, 1, &d) == MINDLITE_OK && d == 1.5);
  CHECK(mindlite_result_double(r, 2, 0, &d) == MINDLITE_OK && d == 3.0);
  CHECK(mindlite_result_bool(r, 0, 2, &b) == MINDLITE_OK && b);
  CHECK(mindlite_result_bool(r, 1, 2, &b) == MINDLITE_OK && !b);
  CHECK(mindlite_result_text(r, 0, 3, &text, &len) == MINDLITE_OK);
  CHECK_STR(text, "one");
  CHECK(len == 3);
  CHECK(mindlite_result_text(r, 2, 1, &text, NULL) == MINDLITE_OK);
  CHECK_STR(text, "2.25");
  CHECK(mindlite_result_text(r, 1, 0, &text, &len) == MINDLITE_OK);
  CHECK_STR(text, "2");
  CHECK(mindlite_result_text(r, 0, 2, &text, &len) == MINDLITE_OK);
  CHECK_STR(text, "true");

  /* NULLs: is_null says so, typed getters answer MINDLITE_NULL_VALUE and zero. */
  CHECK(mindlite_result_is_null(r, 1, 1, &is_null) == MINDLITE_OK && is_null);
  CHECK(mindlite_result_is_null(r, 0, 1, &is_null) == MINDLITE_OK && !is_null);
  d = 9;
  CHECK_STATUS(MINDLITE_NULL_VALUE, mindlite_result_double(r, 1, 1, &d));
  CHECK(d == 0);
  CHECK_CONTAINS(mindlite_result_errmsg(r), "NULL");
  CHECK_STATUS(MINDLITE_NULL_VALUE, mindlite_result_text(r, 2, 3, &text, &len));
  CHECK(text == NULL);
  CHECK_STATUS(MINDLITE_NULL_VALUE, mindlite_result_int64(r, 1, 4, &i));
  CHECK_STATUS(MINDLITE_NULL_VALUE, mindlite_result_bool(r, 2, 2, &b));

  /* Wrong types and out-of-range indexes name what was wrong. */
  CHECK_STATUS(MINDLITE_MISMATCH, mindlite_result_int64(r, 0, 3, &i));
  CHECK_CONTAINS(mindlite_result_errmsg(r), "column 'name' is Utf8View, not an integer");
  CHECK_STATUS(MINDLITE_MISMATCH, mindlite_result_int64(r, 0, 1, &i));
  CHECK_STATUS(MINDLITE_MISMATCH, mindlite_result_bool(r, 0, 0, &b));
  CHECK_STATUS(MINDLITE_MISMATCH, mindlite_result_double(r, 0, 3, &d));
  CHECK_STATUS(MINDLITE_RANGE, mindlite_result_int64(r, 0, 5, &i));
  CHECK_CONTAINS(mindlite_result_errmsg(r), "column 5 is out of range: the result has 5 columns");
  CHECK_STATUS(MINDLITE_RANGE, mindlite_result_int64(r, 3, 0, &i));
  CHECK_CONTAINS(mindlite_result_errmsg(r), "row 3 is out of range: the result has 3 rows");
  CHECK_STATUS(MINDLITE_RANGE, mindlite_result_column_name(r, 9, &text));
  /* A success clears the message. */
  CHECK(mindlite_result_int64(r, 1, 0, &i) == MINDLITE_OK && i == 2);
  CHECK_STR(mindlite_result_errmsg(r), "not an error");

  int64_t affected = 0;
  CHECK(mindlite_result_affected_rows(r, &affected) == MINDLITE_OK && affected == -1);
  mindlite_result_free(r);
}

static void json_document(mindlite_database *db) {
  mindlite_result *r = NULL;
  char *json = NULL;
  CHECK_OK(db, mindlite_query(db, "SELECT id, name FROM t WHERE id < 3 ORDER BY id", &r));
  CHECK(mindlite_result_json(r, &json) == MINDLITE_OK);
  CHECK_STR(json,
            "{\"type\":\"table\",\"data\":[[1,\"one\"],[2,\"two\"]],\"column_names\":[\"id\",\"name\"],"
            "\"context\":{\"show_secrets\":false,\"db\":\"mindsdb\"}}");
  mindlite_free(json);
  mindlite_result_free(r);

  /* An empty table keeps its columns. */
  CHECK_OK(db, mindlite_query(db, "SELECT id FROM t WHERE id > 100", &r));
  uint64_t rows = 1, cols = 0;
  CHECK(mindlite_result_row_count(r, &rows) == MINDLITE_OK && rows == 0);
  CHECK(mindlite_result_column_count(r, &cols) == MINDLITE_OK && cols == 1);
  CHECK(mindlite_result_json(r, &json) == MINDLITE_OK);
  CHECK_CONTAINS(json, "\"type\":\"table\",\"data\":[],\"column_names\":[\"id\"]");
  mindlite_free(json);
  mindlite_result_free(r);
}

static void projects_and_use(mindlite_database *db) {
  mindlite_result *r = NULL;
  const char *current = NULL;
  exec(db, "CREATE PROJECT IF NOT EXISTS analytics");
  CHECK_OK(db, mindlite_query(db, "USE analytics", &r));
  CHECK(mindlite_result_current_db(r, &current) == MINDLITE_OK);
  CHECK_STR(current, "analytics");
  mindlite_result_free(r);

  /* One-part names now resolve in analytics; the default project stays reachable by name. */
  exec(db, "CREATE TABLE IF NOT EXISTS events (kind VARCHAR)");
  exec(db, "INSERT INTO events VALUES ('click')");
  CHECK_OK(db, mindlite_query(db, "SELECT count(*) AS n FROM analytics.events", &r));
  int64_t n = 0;
  CHECK(mindlite_result_int64(r, 0, 0, &n) == MINDLITE_OK && n == 1);
  mindlite_result_free(r);
  CHECK_OK(db, mindlite_query(db, "SELECT count(*) AS n FROM mindsdb.t", &r));
  CHECK(mindlite_result_int64(r, 0, 0, &n) == MINDLITE_OK && n == 3);
  mindlite_result_free(r);
  exec(db, "USE mindsdb");

  char *json = NULL;
  CHECK_OK(db, mindlite_project_list(db, &json));
  CHECK_CONTAINS(json, "\"name\":\"analytics\"");
  CHECK_CONTAINS(json, "\"name\":\"mindsdb\"");
  mindlite_free(json);
  CHECK_OK(db, mindlite_project_get(db, "Analytics", &json));
  CHECK_CONTAINS(json, "\"name\":\"analytics\"");
  mindlite_free(json);
  json = NULL;
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_project_get(db, "nosuch", &json));
  CHECK(json == NULL);
  CHECK_CONTAINS(mindlite_errmsg(db), "nosuch");

  CHECK_OK(db, mindlite_status_get(db, false, &json));
  CHECK_CONTAINS(json, "\"environment\":\"local\"");
  CHECK_CONTAINS(json, "\"http_auth_enabled\":false");
  mindlite_free(json);
}

static void parameters(mindlite_database *db) {
  mindlite_result *r = NULL;
  uint64_t rows = 0;
  const char *text = NULL;
  exec(db, "CREATE TABLE people (id INT, name VARCHAR)");
  /* Values are bound, never spliced: quotes and semicolons stay data. */
  CHECK_OK(db, mindlite_query_params(db, "INSERT INTO people VALUES (:id, :name), (2, 'Ann'), (3, NULL)",
                                     "{\"id\": 1, \"name\": \"O'Brien'); DROP TABLE people; --\"}", &r));
  mindlite_result_free(r);
  CHECK_OK(db, mindlite_query_params(db, "SELECT id, name FROM people WHERE id IN :ids AND name <> :skip ORDER BY id",
                                     "{\"ids\": [1, 2, 3], \"skip\": \"Ann\"}", &r));
  CHECK(mindlite_result_row_count(r, &rows) == MINDLITE_OK && rows == 1);
  CHECK(mindlite_result_text(r, 0, 1, &text, NULL) == MINDLITE_OK);
  CHECK_STR(text, "O'Brien'); DROP TABLE people; --");
  mindlite_result_free(r);
  CHECK_OK(db, mindlite_query_params(db, "SELECT count(*) FROM people WHERE name IS NOT DISTINCT FROM :n",
                                     "{\"n\": null}", &r));
  int64_t n = 0;
  CHECK(mindlite_result_int64(r, 0, 0, &n) == MINDLITE_OK && n == 1);
  mindlite_result_free(r);
  CHECK_OK(db, mindlite_query_params(db, "SELECT 1", NULL, &r));
  mindlite_result_free(r);

  CHECK_STATUS(MINDLITE_INVALID, mindlite_query_params(db, "SELECT :missing", "{}", &r));
  CHECK(r == NULL);
  CHECK_CONTAINS(mindlite_errmsg(db), "missing");
  CHECK_STATUS(MINDLITE_INVALID, mindlite_query_params(db, "SELECT :a", "[1]", &r));
  CHECK_CONTAINS(mindlite_errmsg(db), "params_json must be a JSON object");
}

/* BEGIN … ROLLBACK undoes; BEGIN … COMMIT keeps; the close below finds only committed rows. */
static void transactions(mindlite_database *db) {
  mindlite_result *r = NULL;
  int64_t count = -1;
  exec(db, "BEGIN");
  exec(db, "INSERT INTO t (id) VALUES (100), (101)");
  CHECK_OK(db, mindlite_query(db, "SELECT count(*) FROM t", &r));
  CHECK(mindlite_result_int64(r, 0, 0, &count) == MINDLITE_OK && count == 5);
  mindlite_result_free(r);
  exec(db, "ROLLBACK");
  CHECK_OK(db, mindlite_query(db, "SELECT count(*) FROM t", &r));
  CHECK(mindlite_result_int64(r, 0, 0, &count) == MINDLITE_OK && count == 3);
  mindlite_result_free(r);
  CHECK_STATUS(MINDLITE_INVALID, mindlite_query(db, "COMMIT", &r));
  CHECK_CONTAINS(mindlite_errmsg(db), "no transaction is active");
  mindlite_result_free(r);
  exec(db, "BEGIN; INSERT INTO t (id) VALUES (0); COMMIT");
  /* Left open: closing the database rolls it back. */
  exec(db, "BEGIN; INSERT INTO t (id) VALUES (1000)");
}

static void login(void) {
  mindlite_database *db = NULL;
  char *token = NULL;
  uint64_t expires = 0;
  bool was_live = false;
  const char *config = "[auth]\nusername = \"admin\"\npassword = \"s3cret\"\n";
  CHECK(mindlite_open_in_memory(config, &db, NULL) == MINDLITE_OK);

  CHECK_STATUS(MINDLITE_UNAUTHORIZED, mindlite_login(db, "admin", "wrong", &token, NULL));
  CHECK(token == NULL);
  CHECK_STATUS(MINDLITE_INVALID, mindlite_login(db, "admin", NULL, &token, NULL));
  CHECK_OK(db, mindlite_login(db, "admin", "s3cret", &token, &expires));
  CHECK(token != NULL && strlen(token) >= 32 && expires > 0);
  CHECK_OK(db, mindlite_verify(db, token));
  CHECK_STATUS(MINDLITE_UNAUTHORIZED, mindlite_verify(db, "not-a-token"));
  CHECK_OK(db, mindlite_logout(db, token, &was_live));
  CHECK(was_live);
  CHECK_STATUS(MINDLITE_UNAUTHORIZED, mindlite_verify(db, token));
  CHECK_OK(db, mindlite_logout(db, token, &was_live));
  CHECK(!was_live);
  mindlite_free(token);

  char *json = NULL;
  CHECK_OK(db, mindlite_status_get(db, true, &json));
  CHECK_CONTAINS(json, "\"http_auth_enabled\":true");
  mindlite_free(json);
  CHECK(mindlite_close(db) == MINDLITE_OK);
}

int main(int argc, char **argv) {
  CHECK(argc == 2);
  const char *file = path_in(argv[1], "basic.redb");
  CHECK(strlen(mindlite_version()) > 0);

  mindlite_database *db = NULL;
  char *error = NULL;
  CHECK(mindlite_open(file, NULL, &db, &error) == MINDLITE_OK);
  CHECK(db != NULL && error == NULL);

  mindlite_result *r = NULL;
  exec(db, "CREATE TABLE t (id BIGINT, score DOUBLE, ok BOOLEAN, name VARCHAR, small INT)");
  CHECK_OK(db, mindlite_query(db,
                              "INSERT INTO t VALUES (1, 1.5, true, 'one', 10), "
                              "(2, NULL, false, 'two', NULL), (3, 2.25, NULL, NULL, -3)",
                              &r));
  int64_t affected = 0;
  uint64_t rows = 9;
  CHECK(mindlite_result_affected_rows(r, &affected) == MINDLITE_OK && affected == 3);
  CHECK(mindlite_result_row_count(r, &rows) == MINDLITE_OK && rows == 0);
  mindlite_result_free(r);

  typed_access(db);
  json_document(db);
  projects_and_use(db);
  parameters(db);
  transactions(db);

  /* A second open of the same file is refused while the first is open, naming the file. */
  mindlite_database *second = NULL;
  CHECK_STATUS(MINDLITE_UNAVAILABLE, mindlite_open(file, NULL, &second, &error));
  CHECK(second == NULL);
  CHECK_CONTAINS(error, "basic.redb");
  mindlite_free(error);

  /* Everything is on disk after close. */
  CHECK(mindlite_close(db) == MINDLITE_OK);
  CHECK(mindlite_open(file, "{\"storage\": {}}", &db, NULL) == MINDLITE_OK);
  CHECK_OK(db, mindlite_query(db, "SELECT sum(id) AS s FROM t", &r));
  int64_t sum = 0;
  CHECK(mindlite_result_int64(r, 0, 0, &sum) == MINDLITE_OK && sum == 6);
  mindlite_result_free(r);
  CHECK_OK(db, mindlite_query(db, "SELECT kind FROM analytics.events", &r));
  CHECK(mindlite_result_row_count(r, &rows) == MINDLITE_OK && rows == 1);
  mindlite_result_free(r);
  CHECK(mindlite_close(db) == MINDLITE_OK);

  login();
  puts("test_basic: ok");
  return 0;
}
