/* Uploaded files through the C API: bytes become the table files.<name>, listed as JSON,
 * queried with SQL, and removed; bad bytes and names are refused with a message. */
#include "check.h"

int main(void) {
  mindlite_database *db = NULL;
  CHECK_OK(db, mindlite_open_in_memory(NULL, &db, NULL));

  const char csv[] = "x,y\n1,2\n3,4\n5,6\n";
  uint64_t rows = 0;
  CHECK_OK(db, mindlite_file_upload(db, "pairs", (const uint8_t *)csv, strlen(csv), "csv", &rows));
  CHECK(rows == 3);
  const char json[] = "[{\"k\": \"a\"}, {\"k\": \"b\"}]";
  CHECK_OK(db, mindlite_file_upload(db, "keys", (const uint8_t *)json, strlen(json), NULL, NULL));

  char *listed = NULL;
  CHECK_OK(db, mindlite_file_list(db, &listed));
  CHECK_CONTAINS(listed, "{\"columns\":[\"k\"],\"name\":\"keys\",\"row_count\":2}");
  CHECK_CONTAINS(listed, "\"name\":\"pairs\"");
  mindlite_free(listed);

  mindlite_result *r = NULL;
  CHECK_OK(db, mindlite_query(db, "SELECT sum(y) FROM files.pairs", &r));
  uint64_t count = 0;
  CHECK(mindlite_result_row_count(r, &count) == MINDLITE_OK && count == 1);
  mindlite_result_free(r);

  CHECK_STATUS(MINDLITE_CONFLICT, mindlite_file_upload(db, "pairs", (const uint8_t *)csv, strlen(csv), NULL, NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "already exists");
  CHECK_STATUS(MINDLITE_INVALID, mindlite_file_upload(db, "bad", (const uint8_t *)"[1]", 3, NULL, NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "not an object");
  CHECK_STATUS(MINDLITE_INVALID, mindlite_file_upload(db, "bad", (const uint8_t *)csv, strlen(csv), "xml", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "Unknown file format 'xml'");
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_file_upload(db, "bad", NULL, 5, NULL, NULL));

  /* A document becomes rows of its text's chunks. */
  const char *html = "<html><body><h1>Title</h1><p>Body &amp; more</p><script>x()</script></body></html>";
  CHECK_OK(db, mindlite_file_upload(db, "page", (const uint8_t *)html, strlen(html), "html", &rows));
  CHECK(rows == 1);
  CHECK_OK(db, mindlite_query(db, "SELECT content FROM files.page WHERE content = 'Title\nBody & more'", &r));
  CHECK(mindlite_result_row_count(r, &count) == MINDLITE_OK && count == 1);
  mindlite_result_free(r);

  /* URLs: nothing listens on port 9; a URL that is none is refused before any connection. */
  CHECK_STATUS(MINDLITE_UNAVAILABLE, mindlite_file_upload_url(db, "fetched", "http://127.0.0.1:9/x.csv", NULL, NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "Error getting file");
  CHECK_STATUS(MINDLITE_INVALID, mindlite_file_upload_url(db, "fetched", "ftp://x/y.csv", NULL, NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "not valid");
  CHECK_STATUS(MINDLITE_CONFLICT, mindlite_file_upload_url(db, "page", "http://127.0.0.1:9/x.csv", NULL, NULL));

  CHECK_OK(db, mindlite_file_delete(db, "pairs"));
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_file_delete(db, "pairs"));
  CHECK_CONTAINS(mindlite_errmsg(db), "'pairs'");
  CHECK_OK(db, mindlite_close(db));
  puts("test_files: ok");
  return 0;
}
