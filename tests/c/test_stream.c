/* Streaming: cursors in the jsonlines, SSE and JSON framings, and the Arrow C stream read by a
 * small consumer that walks the buffers itself. */
#include "check.h"

#define ROWS 100000

/* Reads a cursor to the end; returns the chunk count and the concatenated text (caller frees). */
static size_t drain(mindlite_database *db, const char *sql, mindlite_format format, char **out) {
  mindlite_cursor *cursor = NULL;
  CHECK_OK(db, mindlite_cursor_open(db, sql, format, &cursor));
  size_t chunks = 0, used = 0, capacity = 1024;
  char *all = (char *)malloc(capacity);
  CHECK(all != NULL);
  const char *chunk = NULL;
  size_t len = 0;
  mindlite_status status;
  while ((status = mindlite_cursor_next(cursor, &chunk, &len)) == MINDLITE_OK) {
    CHECK(chunk != NULL && strlen(chunk) == len);
    while (used + len + 1 > capacity) {
      capacity *= 2;
      all = (char *)realloc(all, capacity);
      CHECK(all != NULL);
    }
    memcpy(all + used, chunk, len);
    used += len;
    chunks++;
  }
  CHECK(status == MINDLITE_DONE);
  CHECK(chunk == NULL && len == 0);
  /* Done stays done. */
  CHECK(mindlite_cursor_next(cursor, &chunk, &len) == MINDLITE_DONE);
  mindlite_cursor_free(cursor);
  all[used] = '\0';
  *out = all;
  return chunks;
}

static size_t count(const char *text, const char *needle) {
  size_t n = 0;
  for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle)) n++;
  return n;
}

static void cursors(mindlite_database *db) {
  char *text = NULL;
  size_t chunks = drain(db, "SELECT n, label FROM nums ORDER BY n", MINDLITE_FORMAT_JSONLINES, &text);
  /* A header line, then lines of rows, sent in many chunks rather than one. */
  CHECK(chunks > 2);
  CHECK(strncmp(text, "{\"type\":\"table\",\"column_names\":[\"n\",\"label\"]}\n[[1,\"row 1\"],", 59) == 0);
  CHECK(count(text, "\n") > 2);
  CHECK(count(text, ",\"row ") == ROWS);
  CHECK_CONTAINS(text, "[100000,\"row 100000\"]]\n");
  free(text);

  chunks = drain(db, "SELECT n FROM nums WHERE n <= 3 ORDER BY n", MINDLITE_FORMAT_SSE, &text);
  CHECK(chunks >= 2);
  CHECK(strncmp(text, "data: ", 6) == 0);
  CHECK(count(text, "data: ") == count(text, "\n\n"));
  CHECK_CONTAINS(text, "[3]");
  free(text);

  /* The JSON framing is the whole document in one chunk, the same bytes as the result's JSON. */
  const char *small = "SELECT n, label FROM nums WHERE n IN (1, 2) ORDER BY n";
  chunks = drain(db, small, MINDLITE_FORMAT_JSON, &text);
  CHECK(chunks == 1);
  mindlite_result *r = NULL;
  char *json = NULL;
  CHECK_OK(db, mindlite_query(db, small, &r));
  CHECK(mindlite_result_json(r, &json) == MINDLITE_OK);
  CHECK_STR(text, json);
  mindlite_free(json);
  mindlite_result_free(r);
  free(text);

  /* An SQL error is an error item in the stream, as MindsDB sends it. */
  drain(db, "SELECT * FROM no_such_table", MINDLITE_FORMAT_JSONLINES, &text);
  CHECK_CONTAINS(text, "\"type\":\"error\"");
  CHECK_CONTAINS(text, "no_such_table");
  free(text);

  /* A cursor freed half-way leaks nothing. */
  mindlite_cursor *cursor = NULL;
  const char *chunk = NULL;
  CHECK_OK(db, mindlite_cursor_open(db, "SELECT * FROM nums", MINDLITE_FORMAT_JSONLINES, &cursor));
  CHECK(mindlite_cursor_next(cursor, &chunk, NULL) == MINDLITE_OK);
  mindlite_cursor_free(cursor);
}

/* Sums an int64 column and counts rows, reading the Arrow buffers directly. */
static void arrow_consumer(mindlite_database *db) {
  struct ArrowArrayStream stream;
  CHECK_OK(db, mindlite_query_arrow(db, "SELECT n, label FROM nums", &stream));

  struct ArrowSchema schema;
  CHECK(stream.get_schema(&stream, &schema) == 0);
  CHECK_STR(schema.format, "+s");
  CHECK(schema.n_children == 2);
  CHECK_STR(schema.children[0]->name, "n");
  CHECK_STR(schema.children[0]->format, "l");
  CHECK_STR(schema.children[1]->name, "label");
  schema.release(&schema);
  CHECK(schema.release == NULL);

  int64_t rows = 0, sum = 0, batches = 0;
  for (;;) {
    struct ArrowArray batch;
    CHECK(stream.get_next(&stream, &batch) == 0);
    if (batch.release == NULL) break; /* end of stream */
    CHECK(batch.n_children == 2);
    const struct ArrowArray *n = batch.children[0];
    CHECK(n->n_buffers == 2 && n->null_count == 0);
    const int64_t *values = (const int64_t *)n->buffers[1];
    for (int64_t i = 0; i < n->length; i++) sum += values[n->offset + i];
    rows += batch.length;
    batches++;
    batch.release(&batch);
  }
  CHECK(rows == ROWS);
  CHECK(sum == (int64_t)ROWS * (ROWS + 1) / 2);
  CHECK(batches > 1);
  stream.release(&stream);
  CHECK(stream.release == NULL);

  /* A statement without rows: no columns, no batches. */
  CHECK_OK(db, mindlite_query_arrow(db, "CREATE TABLE IF NOT EXISTS other (a INT)", &stream));
  CHECK(stream.get_schema(&stream, &schema) == 0);
  CHECK(schema.n_children == 0);
  schema.release(&schema);
  struct ArrowArray end;
  CHECK(stream.get_next(&stream, &end) == 0 && end.release == NULL);
  stream.release(&stream);

  /* Failures: at planning time a status, at run time get_next's error with a message. */
  CHECK_STATUS(MINDLITE_INVALID, mindlite_query_arrow(db, "SELECT nope FROM nums", &stream));
  CHECK_CONTAINS(mindlite_errmsg(db), "nope");
  CHECK_OK(db, mindlite_query_arrow(db, "SELECT CAST(label AS INT) AS bad FROM nums", &stream));
  int failed = 0;
  for (;;) {
    struct ArrowArray batch;
    int code = stream.get_next(&stream, &batch);
    if (code != 0) {
      failed = 1;
      CHECK(stream.get_last_error(&stream) != NULL);
      CHECK_CONTAINS(stream.get_last_error(&stream), "'row ");
      break;
    }
    if (batch.release == NULL) break;
    batch.release(&batch);
  }
  CHECK(failed);
  stream.release(&stream);
}

int main(int argc, char **argv) {
  (void)argv;
  CHECK(argc == 1);
  mindlite_database *db = NULL;
  CHECK(mindlite_open_in_memory(NULL, &db, NULL) == MINDLITE_OK);
  exec(db,
       "CREATE TABLE nums AS SELECT value AS n, 'row ' || CAST(value AS VARCHAR) AS label "
       "FROM generate_series(1, 100000)");
  cursors(db);
  arrow_consumer(db);
  CHECK(mindlite_close(db) == MINDLITE_OK);
  puts("test_stream: ok");
  return 0;
}
