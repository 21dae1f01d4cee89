/* Hosted users through the C API: create users, issue API keys, open a handle as each user
 * (each sees only its own tables), admin calls refused on a user's handle, bad and revoked
 * keys, plan changes, disabled users and a user's limits. */
#include "check.h"

/* Copies the string value of `"field":"…"` in `json` into `buffer`. */
static void json_text(const char *json, const char *field, char *buffer, size_t size) {
  char pattern[64];
  int n = snprintf(pattern, sizeof pattern, "\"%s\":\"", field);
  CHECK(n > 0 && (size_t)n < sizeof pattern);
  const char *start = strstr(json, pattern);
  CHECK(start != NULL);
  start += n;
  const char *end = strchr(start, '"');
  CHECK(end != NULL && (size_t)(end - start) < size);
  memcpy(buffer, start, (size_t)(end - start));
  buffer[end - start] = '\0';
}

/* The number in `"field":N` in `json`. */
static uint64_t json_number(const char *json, const char *field) {
  char pattern[64];
  int n = snprintf(pattern, sizeof pattern, "\"%s\":", field);
  CHECK(n > 0 && (size_t)n < sizeof pattern);
  const char *start = strstr(json, pattern);
  CHECK(start != NULL);
  return strtoull(start + n, NULL, 10);
}

/* Issues an API key for `user`: its text into `key`, its id returned. */
static uint64_t issue_key(mindlite_database *db, const char *user, char *key, size_t size) {
  char *json = NULL;
  CHECK_OK(db, mindlite_api_key_create(db, user, &json));
  CHECK_CONTAINS(json, "\"key\":\"mlk_");
  json_text(json, "key", key, size);
  uint64_t id = json_number(json, "id");
  mindlite_free(json);
  return id;
}

/* `SELECT v FROM t ORDER BY v` on `db` must give exactly `expected` (`count` rows). */
static void check_rows(mindlite_database *db, const char *const *expected, uint64_t count) {
  mindlite_result *r = NULL;
  CHECK_OK(db, mindlite_query(db, "SELECT v FROM t ORDER BY v", &r));
  uint64_t rows = 0;
  CHECK(mindlite_result_row_count(r, &rows) == MINDLITE_OK);
  CHECK(rows == count);
  for (uint64_t i = 0; i < count; i++) {
    const char *text = NULL;
    CHECK(mindlite_result_text(r, i, 0, &text, NULL) == MINDLITE_OK);
    CHECK_STR(text, expected[i]);
  }
  const char *project = NULL;
  CHECK(mindlite_result_current_db(r, &project) == MINDLITE_OK);
  CHECK_STR(project, "mindsdb");
  mindlite_result_free(r);
}

int main(void) {
  mindlite_database *db = NULL;
  CHECK_OK(db, mindlite_open_in_memory("edition = \"hosted\"\n", &db, NULL));

  char *json = NULL;
  CHECK_OK(db, mindlite_user_create(db, "alice", NULL, &json));
  CHECK_CONTAINS(json, "\"name\":\"alice\"");
  CHECK_CONTAINS(json, "\"plan\":\"free\"");
  CHECK_CONTAINS(json, "\"api_keys\":[]");
  mindlite_free(json);
  CHECK_OK(db, mindlite_user_create(db, "bob", "free", NULL));
  CHECK_STATUS(MINDLITE_CONFLICT, mindlite_user_create(db, "ALICE", NULL, NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "already exists");
  CHECK_STATUS(MINDLITE_INVALID, mindlite_user_create(db, "carol", "gold", &json));
  CHECK(json == NULL);
  CHECK_CONTAINS(mindlite_errmsg(db), "Unknown plan 'gold'");

  CHECK_OK(db, mindlite_user_list(db, &json));
  CHECK(json[0] == '[');
  CHECK(strstr(json, "\"alice\"") != NULL && strstr(json, "\"bob\"") != NULL);
  CHECK(strstr(json, "carol") == NULL);
  mindlite_free(json);
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_user_get(db, "carol", &json));
  CHECK_CONTAINS(mindlite_errmsg(db), "User 'carol' not found");

  char key_a[128], key_b[128];
  issue_key(db, "alice", key_a, sizeof key_a);
  uint64_t key_b_id = issue_key(db, "bob", key_b, sizeof key_b);
  CHECK(strcmp(key_a, key_b) != 0);
  /* The key's text is shown once; the user keeps only its prefix. */
  CHECK_OK(db, mindlite_user_get(db, "BOB", &json));
  CHECK_CONTAINS(json, "\"prefix\":\"mlk_");
  CHECK(strstr(json, key_b) == NULL);
  mindlite_free(json);
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_api_key_create(db, "carol", &json));

  /* Each user has its own default project: the same table name, different rows. */
  mindlite_database *alice = NULL, *bob = NULL;
  CHECK_OK(db, mindlite_open_as_user(db, key_a, &alice));
  CHECK_OK(db, mindlite_open_as_user(db, key_b, &bob));
  CHECK(alice != NULL && bob != NULL && alice != bob && alice != db);
  exec(alice, "CREATE TABLE t (v VARCHAR)");
  exec(alice, "INSERT INTO t VALUES ('alice-1'), ('alice-2')");
  exec(bob, "CREATE TABLE t (v VARCHAR)");
  exec(bob, "INSERT INTO t VALUES ('bob-1')");
  const char *const alice_rows[] = {"alice-1", "alice-2"};
  const char *const bob_rows[] = {"bob-1"};
  check_rows(alice, alice_rows, 2);
  check_rows(bob, bob_rows, 1);
  mindlite_result *r = NULL;
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_query(db, "SELECT v FROM t", &r));
  CHECK(r == NULL);
  CHECK_CONTAINS(mindlite_errmsg(db), "Table 't' not found");

  /* Records functions work on a user's handle, within that user. */
  CHECK_OK(alice, mindlite_agent_create(alice, "mindsdb",
                                        "{\"name\": \"helper\", \"data\": {\"tables\": [\"mindsdb.t\"]}}",
                                        NULL));
  CHECK_OK(bob, mindlite_agent_list(bob, "mindsdb", &json));
  CHECK_STR(json, "[]");
  mindlite_free(json);

  /* Administration belongs to the operator's handle. */
  CHECK_STATUS(MINDLITE_FORBIDDEN, mindlite_user_list(alice, &json));
  CHECK(json == NULL);
  CHECK_CONTAINS(mindlite_errmsg(alice), "manages users");
  CHECK_STATUS(MINDLITE_FORBIDDEN, mindlite_api_key_create(alice, "bob", &json));
  CHECK_STATUS(MINDLITE_FORBIDDEN, mindlite_user_update(alice, "alice", "{\"plan\": \"pro\"}", NULL));

  /* Unknown and revoked keys are unauthorized. */
  mindlite_database *other = NULL;
  CHECK_STATUS(MINDLITE_UNAUTHORIZED, mindlite_open_as_user(db, "mlk_not-a-key", &other));
  CHECK(other == NULL);
  CHECK_CONTAINS(mindlite_errmsg(db), "Invalid API key");
  CHECK_OK(db, mindlite_api_key_revoke(db, "bob", key_b_id, &json));
  CHECK_CONTAINS(json, "\"api_keys\":[]");
  mindlite_free(json);
  CHECK_STATUS(MINDLITE_UNAUTHORIZED, mindlite_open_as_user(db, key_b, &other));
  CHECK(other == NULL);
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_api_key_revoke(db, "bob", key_b_id, NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "no API key");

  /* Plans: a known one changes the limits, an unknown one is named. */
  CHECK_OK(alice, mindlite_limits(alice, &json));
  CHECK_CONTAINS(json, "\"plan\":\"free\"");
  CHECK_CONTAINS(json, "\"minds\":{\"limit\":3,");
  mindlite_free(json);
  CHECK_OK(db, mindlite_user_update(db, "alice", "{\"plan\": \"pro\"}", &json));
  CHECK_CONTAINS(json, "\"plan\":\"pro\"");
  mindlite_free(json);
  CHECK_OK(alice, mindlite_limits(alice, &json));
  CHECK_CONTAINS(json, "\"plan\":\"pro\"");
  CHECK_CONTAINS(json, "\"minds\":{\"limit\":50,\"used\":0,\"remaining\":50}");
  mindlite_free(json);
  CHECK_STATUS(MINDLITE_INVALID, mindlite_user_update(db, "alice", "{\"plan\": \"platinum\"}", &json));
  CHECK(json == NULL);
  CHECK_CONTAINS(mindlite_errmsg(db), "'platinum'");
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_limits(db, &json));
  CHECK_CONTAINS(mindlite_errmsg(db), "Limits apply to users");

  /* changes_json: only "plan" (a string) and "disabled" (a boolean). */
  CHECK_STATUS(MINDLITE_INVALID, mindlite_user_update(db, "alice", "{\"colour\": \"red\"}", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "Unknown key 'colour'");
  CHECK_STATUS(MINDLITE_INVALID, mindlite_user_update(db, "alice", "{\"disabled\": \"yes\"}", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "'disabled' must be true or false");
  CHECK_STATUS(MINDLITE_INVALID, mindlite_user_update(db, "alice", "{\"plan\": 2}", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "'plan' must be a string");
  CHECK_STATUS(MINDLITE_INVALID, mindlite_user_update(db, "alice", "[]", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "must be a JSON object");
  CHECK_STATUS(MINDLITE_INVALID, mindlite_user_update(db, "alice", "{\"plan\": ", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "'changes_json' is not valid JSON");
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_user_update(db, "carol", "{}", NULL));

  /* A disabled user's key is forbidden; enabled again, it works. */
  CHECK_OK(db, mindlite_user_update(db, "alice", "{\"disabled\": true}", &json));
  CHECK_CONTAINS(json, "\"disabled\":true");
  mindlite_free(json);
  CHECK_STATUS(MINDLITE_FORBIDDEN, mindlite_open_as_user(db, key_a, &other));
  CHECK(other == NULL);
  CHECK_CONTAINS(mindlite_errmsg(db), "User 'alice' is disabled");
  CHECK_OK(db, mindlite_user_update(db, "alice", "{\"disabled\": false}", NULL));
  CHECK_OK(db, mindlite_open_as_user(db, key_a, &other));
  check_rows(other, alice_rows, 2);
  CHECK_OK(other, mindlite_close(other));

  CHECK_STATUS(MINDLITE_MISUSE, mindlite_open_as_user(db, NULL, &other));
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_open_as_user(db, key_a, NULL));
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_api_key_create(db, "alice", NULL));

  /* A user's handle outlives the operator's: the database stays open until both are closed. */
  CHECK_OK(db, mindlite_close(db));
  check_rows(alice, alice_rows, 2);
  CHECK_OK(alice, mindlite_close(alice));
  CHECK_OK(bob, mindlite_close(bob));
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_close(bob));
  puts("test_users: ok");
  return 0;
}
