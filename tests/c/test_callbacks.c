/* Model-status callbacks through the C API: a hosted user on a plan with callbacks registers,
 * lists, reads, updates and deletes them; bad URLs, regexes and attempt values are named; a
 * plan without callbacks is forbidden; another user's callback and the local edition are not
 * found. */
#include "check.h"

/* The number in `"field":N` in `json`. */
static uint64_t json_number(const char *json, const char *field) {
  char pattern[64];
  int n = snprintf(pattern, sizeof pattern, "\"%s\":", field);
  CHECK(n > 0 && (size_t)n < sizeof pattern);
  const char *start = strstr(json, pattern);
  CHECK(start != NULL);
  return strtoull(start + n, NULL, 10);
}

/* Creates the user `name` on `plan` and opens a handle acting as it. */
static mindlite_database *open_user(mindlite_database *db, const char *name, const char *plan) {
  CHECK_OK(db, mindlite_user_create(db, name, plan, NULL));
  char *json = NULL;
  CHECK_OK(db, mindlite_api_key_create(db, name, &json));
  const char *key = strstr(json, "\"key\":\"");
  CHECK(key != NULL);
  key += strlen("\"key\":\"");
  char text[128];
  const char *end = strchr(key, '"');
  CHECK(end != NULL && (size_t)(end - key) < sizeof text);
  memcpy(text, key, (size_t)(end - key));
  text[end - key] = '\0';
  mindlite_free(json);
  mindlite_database *user = NULL;
  CHECK_OK(db, mindlite_open_as_user(db, text, &user));
  return user;
}

/* `call` must fail with `MINDLITE_INVALID` and a message on `db` containing `field`. */
#define CHECK_INVALID(db, call, field)                 \
  do {                                                 \
    CHECK_STATUS(MINDLITE_INVALID, call);              \
    CHECK_CONTAINS(mindlite_errmsg(db), field);        \
  } while (0)

int main(void) {
  mindlite_database *db = NULL;
  CHECK_OK(db, mindlite_open_in_memory("edition = \"hosted\"\n", &db, NULL));
  mindlite_database *alice = open_user(db, "alice", "pro");
  mindlite_database *bob = open_user(db, "bob", "free");
  mindlite_database *carol = open_user(db, "carol", "pro");
  char *json = NULL;

  /* A plan without callbacks is forbidden, and says which plans have them. */
  CHECK_STATUS(MINDLITE_FORBIDDEN,
               mindlite_callback_register(bob, "{\"url\": \"https://example.com/hook\"}", &json));
  CHECK(json == NULL);
  CHECK_CONTAINS(mindlite_errmsg(bob), "not included in plan 'free'");
  CHECK_CONTAINS(mindlite_errmsg(bob), "pro");
  CHECK_STATUS(MINDLITE_FORBIDDEN, mindlite_callback_list(bob, &json));
  CHECK(json == NULL);
  /* The operator's handle is no user's. */
  CHECK_STATUS(MINDLITE_FORBIDDEN, mindlite_callback_list(db, &json));
  CHECK_CONTAINS(mindlite_errmsg(db), "belong to users");

  /* Register: the id and the signing secret, shown this once. */
  CHECK_OK(alice, mindlite_callback_register(
                      alice,
                      "{\"url\": \"https://example.com/hook\", \"filter\": {\"model_name\": "
                      "\"house_.*\"}, \"attempt\": {\"count\": 2}}",
                      &json));
  CHECK_CONTAINS(json, "\"secret\":\"whsec_");
  uint64_t id = json_number(json, "id");
  CHECK(id > 0);
  mindlite_free(json);

  CHECK_OK(alice, mindlite_callback_list(alice, &json));
  CHECK(json[0] == '[');
  CHECK_CONTAINS(json, "\"url\":\"https://example.com/hook\"");
  CHECK_CONTAINS(json, "\"created_at\":\"");
  CHECK(json_number(json, "id") == id);
  mindlite_free(json);

  CHECK_OK(alice, mindlite_callback_get(alice, id, &json));
  CHECK_CONTAINS(json, "\"url\":\"https://example.com/hook\"");
  CHECK_CONTAINS(json, "\"model_name\":\"house_.*\"");
  CHECK_CONTAINS(json, "\"project_name\":null");
  CHECK_CONTAINS(json, "\"count\":2");
  CHECK(strstr(json, "secret") == NULL && strstr(json, "whsec_") == NULL);
  mindlite_free(json);

  /* Update: the new URL, the rest kept. */
  CHECK_OK(alice, mindlite_callback_update(alice, id, "{\"url\": \"https://example.com/v2\"}", &json));
  CHECK_CONTAINS(json, "\"url\":\"https://example.com/v2\"");
  mindlite_free(json);
  CHECK_OK(alice, mindlite_callback_update(alice, id, "{\"attempt\": {\"interval\": 30}}", NULL));
  CHECK_OK(alice, mindlite_callback_get(alice, id, &json));
  CHECK_CONTAINS(json, "\"url\":\"https://example.com/v2\"");
  CHECK_CONTAINS(json, "\"model_name\":\"house_.*\"");
  CHECK_CONTAINS(json, "\"count\":2");
  CHECK_CONTAINS(json, "\"interval\":30");
  mindlite_free(json);

  /* Bad input is named, and changes nothing. */
  CHECK_INVALID(alice, mindlite_callback_register(alice, "{\"url\": \"ftp://x\"}", &json), "'url'");
  CHECK(json == NULL);
  CHECK_INVALID(alice, mindlite_callback_update(alice, id, "{\"url\": \"ftp://x\"}", &json), "'url'");
  CHECK(json == NULL);
  CHECK_INVALID(alice, mindlite_callback_register(alice, "{}", &json), "'url' is required");
  CHECK_INVALID(alice,
                mindlite_callback_register(
                    alice, "{\"url\": \"https://example.com\", \"filter\": {\"model_name\": \"(\"}}",
                    &json),
                "'filter.model_name' is not a valid regex");
  CHECK_INVALID(alice,
                mindlite_callback_register(
                    alice, "{\"url\": \"https://example.com\", \"attempt\": {\"count\": 0}}", &json),
                "'attempt.count'");
  CHECK_INVALID(alice, mindlite_callback_update(alice, id, "{\"attempt\": {\"count\": 0}}", NULL),
                "'attempt.count'");
  CHECK_INVALID(alice, mindlite_callback_register(alice, "{\"url\": ", &json),
                "'body_json' is not valid JSON");
  CHECK_INVALID(alice, mindlite_callback_register(alice, "[]", &json), "must be a JSON object");
  CHECK_OK(alice, mindlite_callback_list(alice, &json));
  CHECK(json_number(json, "id") == id && strstr(json, "},{") == NULL);
  mindlite_free(json);
  CHECK_OK(alice, mindlite_callback_get(alice, id, &json));
  CHECK_CONTAINS(json, "\"url\":\"https://example.com/v2\"");
  CHECK_CONTAINS(json, "\"count\":2");
  mindlite_free(json);
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_callback_register(alice, NULL, &json));
  CHECK_STATUS(MINDLITE_MISUSE,
               mindlite_callback_register(alice, "{\"url\": \"https://example.com\"}", NULL));

  /* A fresh callback has delivered nothing yet. */
  CHECK_OK(alice, mindlite_callback_deliveries(alice, id, &json));
  CHECK_STR(json, "[]");
  mindlite_free(json);

  /* Another user's callback is not found, whatever the call. */
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_callback_get(carol, id, &json));
  CHECK(json == NULL);
  CHECK_CONTAINS(mindlite_errmsg(carol), "not found");
  CHECK_STATUS(MINDLITE_NOT_FOUND,
               mindlite_callback_update(carol, id, "{\"url\": \"https://evil.example\"}", NULL));
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_callback_deliveries(carol, id, &json));
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_callback_delete(carol, id));
  CHECK_OK(carol, mindlite_callback_list(carol, &json));
  CHECK_STR(json, "[]");
  mindlite_free(json);
  CHECK_OK(alice, mindlite_callback_get(alice, id, &json));
  CHECK_CONTAINS(json, "\"url\":\"https://example.com/v2\"");
  mindlite_free(json);

  /* Deleted, it is gone. */
  CHECK_OK(alice, mindlite_callback_delete(alice, id));
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_callback_get(alice, id, &json));
  CHECK(json == NULL);
  CHECK_CONTAINS(mindlite_errmsg(alice), "not found");
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_callback_deliveries(alice, id, &json));
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_callback_delete(alice, id));
  CHECK_OK(alice, mindlite_callback_list(alice, &json));
  CHECK_STR(json, "[]");
  mindlite_free(json);

  CHECK_OK(alice, mindlite_close(alice));
  CHECK_OK(bob, mindlite_close(bob));
  CHECK_OK(carol, mindlite_close(carol));
  CHECK_OK(db, mindlite_close(db));

  /* The local edition has no callbacks. */
  mindlite_database *local = NULL;
  CHECK_OK(local, mindlite_open_in_memory(NULL, &local, NULL));
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_callback_list(local, &json));
  CHECK(json == NULL);
  CHECK_CONTAINS(mindlite_errmsg(local), "hosted edition only");
  CHECK_STATUS(MINDLITE_NOT_FOUND,
               mindlite_callback_register(local, "{\"url\": \"https://example.com\"}", &json));
  CHECK_OK(local, mindlite_close(local));
  puts("test_callbacks: ok");
  return 0;
}
