/* Knowledge bases through the C API: create, list, get, insert, search and drop, embedding
 * through a fake OpenAI-compatible /embeddings server on 127.0.0.1 run by a thread here. Its
 * vector of a text is (1, 0) when the text mentions cats, else (0, 1). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

static int listener = -1;

/* Reads one request, answers it with a vector per input text, closes the connection. */
static void answer(int conn) {
  static char request[65536];
  size_t got = 0;
  char *body = NULL;
  long length = -1;
  while (got < sizeof request - 1) {
    ssize_t n = read(conn, request + got, sizeof request - 1 - got);
    if (n <= 0) break;
    got += (size_t)n;
    request[got] = '\0';
    char *end = strstr(request, "\r\n\r\n");
    if (end != NULL && length < 0) {
      char *cl = strstr(request, "content-length:");
      if (cl == NULL) cl = strstr(request, "Content-Length:");
      length = cl != NULL ? strtol(cl + 15, NULL, 10) : 0;
      body = end + 4;
    }
    if (body != NULL && (long)(request + got - body) >= length) break;
  }
  static char reply[65536];
  size_t at = (size_t)snprintf(reply, sizeof reply, "{\"data\": [");
  /* The texts are the strings of the "input" list; the test's texts hold no quotes. */
  char *input = body != NULL ? strstr(body, "\"input\":[") : NULL;
  int index = 0;
  for (char *p = input != NULL ? input + 9 : NULL; p != NULL && *p == '"'; index++) {
    char *close = strchr(p + 1, '"');
    if (close == NULL) break;
    *close = '\0';
    int cats = strstr(p + 1, "cat") != NULL;
    at += (size_t)snprintf(reply + at, sizeof reply - at, "%s{\"index\": %d, \"embedding\": [%d, %d]}",
                           index > 0 ? ", " : "", index, cats, !cats);
    p = close + 1;
    if (*p == ',') p++;
  }
  snprintf(reply + at, sizeof reply - at, "]}");
  char head[256];
  int head_len = snprintf(head, sizeof head,
                          "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %zu\r\n"
                          "connection: close\r\n\r\n",
                          strlen(reply));
  CHECK(write(conn, head, (size_t)head_len) == head_len);
  CHECK(write(conn, reply, strlen(reply)) == (ssize_t)strlen(reply));
  close(conn);
}

/* A progress handler: counts reports, remembers the last, stops once `stop_after` came. */
struct progress {
  int reports;
  int stop_after;
  char last[1024];
};

static int on_progress(const char *json, void *user_data) {
  struct progress *p = (struct progress *)user_data;
  p->reports++;
  snprintf(p->last, sizeof p->last, "%s", json);
  return p->stop_after > 0 && p->reports >= p->stop_after;
}

static void *serve(void *unused) {
  (void)unused;
  for (;;) {
    int conn = accept(listener, NULL, NULL);
    if (conn < 0) return NULL;
    answer(conn);
  }
}

int main(void) {
  listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK(bind(listener, (struct sockaddr *)&addr, sizeof addr) == 0);
  CHECK(listen(listener, 16) == 0);
  socklen_t len = sizeof addr;
  CHECK(getsockname(listener, (struct sockaddr *)&addr, &len) == 0);
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, serve, NULL) == 0);

  char config[256];
  snprintf(config, sizeof config,
           "{\"embedding\": {\"base_url\": \"http://127.0.0.1:%d/v1\", \"model_name\": \"fake\"}}",
           ntohs(addr.sin_port));
  mindlite_database *db = NULL;
  CHECK_OK(db, mindlite_open_in_memory(config, &db, NULL));

  char *json = NULL;
  CHECK_OK(db, mindlite_kb_create(db, "mindsdb",
                                  "{\"name\": \"notes\", \"metadata_columns\": [\"topic\"],"
                                  " \"embedding_model\": {\"api_key\": \"sk-secret\"}}",
                                  &json));
  CHECK_CONTAINS(json, "\"name\":\"notes\"");
  CHECK_CONTAINS(json, "\"api_key\":\"******\"");
  mindlite_free(json);
  CHECK_STATUS(MINDLITE_CONFLICT, mindlite_kb_create(db, "mindsdb", "{\"name\": \"notes\"}", NULL));
  CHECK_STATUS(MINDLITE_INVALID, mindlite_kb_create(db, "mindsdb", "{\"name\": \"b\", \"params\": {\"colour\": 1}}", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "colour");

  uint64_t count = 0;
  CHECK_OK(db, mindlite_kb_insert(db, "mindsdb", "notes",
                                  "{\"rows\": [{\"id\": 1, \"content\": \"dogs bark\", \"topic\": \"pets\"},"
                                  " {\"id\": 2, \"content\": \"the cat sleeps\", \"topic\": \"pets\"},"
                                  " {\"id\": 3, \"content\": \"markets fell\", \"topic\": \"money\"}]}",
                                  &count));
  CHECK(count == 3);
  /* A progress handler sees the insert through to "done", and stops one when it says so. */
  struct progress progress = {0, 0, ""};
  CHECK_OK(db, mindlite_kb_progress_handler(db, on_progress, &progress));
  CHECK_OK(db, mindlite_kb_insert(db, "mindsdb", "notes",
                                  "{\"rows\": [{\"id\": 5, \"content\": \"a cat naps\"}]}", &count));
  CHECK(progress.reports >= 2);
  CHECK_CONTAINS(progress.last, "\"status\":\"done\"");
  CHECK_CONTAINS(progress.last, "\"indexed\":1");
  progress.reports = 0;
  progress.stop_after = 1;
  CHECK_STATUS(MINDLITE_UNAVAILABLE, mindlite_kb_insert(db, "mindsdb", "notes",
                                                       "{\"rows\": [{\"id\": 6, \"content\": \"never\"}]}", NULL));
  CHECK_CONTAINS(progress.last, "\"status\":\"failed\"");
  CHECK_OK(db, mindlite_kb_progress_handler(db, NULL, NULL));
  CHECK_STATUS(MINDLITE_INVALID, mindlite_kb_insert(db, "mindsdb", "notes", "{\"rows\": [{\"id\": 4}]}", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "content column");

  mindlite_result *r = NULL;
  CHECK_OK(db, mindlite_kb_search(db, "mindsdb", "notes", "where is the cat", NULL, 1, &r));
  uint64_t rows = 0;
  CHECK(mindlite_result_row_count(r, &rows) == MINDLITE_OK && rows == 1);
  const char *text = NULL;
  CHECK(mindlite_result_text(r, 0, 0, &text, NULL) == MINDLITE_OK && strcmp(text, "2") == 0);
  mindlite_result_free(r);
  /* A filter applies before ranking: the best of the money documents. */
  CHECK_OK(db, mindlite_kb_search(db, "mindsdb", "notes", "cat", "{\"topic\": \"money\"}", -1, &r));
  CHECK(mindlite_result_row_count(r, &rows) == MINDLITE_OK && rows == 1);
  CHECK(mindlite_result_text(r, 0, 0, &text, NULL) == MINDLITE_OK && strcmp(text, "3") == 0);
  mindlite_result_free(r);
  CHECK_STATUS(MINDLITE_INVALID, mindlite_kb_search(db, "mindsdb", "notes", "cat", "{\"colour\": 1}", -1, &r));
  CHECK(r == NULL);

  CHECK_OK(db, mindlite_kb_list(db, "mindsdb", &json));
  CHECK(json[0] == '[');
  CHECK_CONTAINS(json, "\"metadata_columns\":[\"topic\"]");
  mindlite_free(json);
  CHECK_OK(db, mindlite_kb_drop(db, "mindsdb", "notes"));
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_kb_get(db, "mindsdb", "notes", &json));
  CHECK_CONTAINS(mindlite_errmsg(db), "Knowledge Base with name notes does not exist");
  CHECK_OK(db, mindlite_close(db));
  shutdown(listener, SHUT_RDWR);
  close(listener);
  pthread_join(thread, NULL);
  puts("test_knowledge_bases: ok");
  return 0;
}
