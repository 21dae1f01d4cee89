/* Models through the C API: create from a CREATE MODEL statement, follow the status until
 * training completes, list, describe, predict, retrain, set the active version, and drop, as
 * JSON in and out. */
#define _POSIX_C_SOURCE 200809L /* nanosleep under -std=c11 */
#include <time.h>

#include "check.h"

/* Polls a version (0: the active one) until it leaves generating/training; returns its final
 * JSON record. */
static char *wait_version(mindlite_database *db, const char *name, uint32_t version) {
  for (int i = 0; i < 6000; i++) {
    char *json = NULL;
    CHECK_OK(db, mindlite_model_get(db, "mindsdb", name, version, &json));
    if (strstr(json, "\"status\":\"complete\"") || strstr(json, "\"status\":\"error\"")) return json;
    mindlite_free(json);
    struct timespec nap = {0, 20 * 1000 * 1000};
    nanosleep(&nap, NULL);
  }
  fprintf(stderr, "the model %s never finished training\n", name);
  exit(1);
}

static char *wait_done(mindlite_database *db, const char *name) { return wait_version(db, name, 0); }

int main(void) {
  mindlite_database *db = NULL;
  CHECK_OK(db, mindlite_open_in_memory(NULL, &db, NULL));
  mindlite_result *r = NULL;
  CHECK_OK(db, mindlite_query(db, "CREATE TABLE homes AS SELECT value % 7 AS rooms, "
                                  "3 * (value % 7) + 1 AS price FROM generate_series(1, 60)", &r));
  mindlite_result_free(r);

  char *json = NULL;
  CHECK_OK(db, mindlite_model_create(db, "mindsdb",
                                     "CREATE MODEL m FROM mindsdb (SELECT rooms, price FROM homes) PREDICT price", &json));
  CHECK_CONTAINS(json, "\"name\":\"m\"");
  CHECK_CONTAINS(json, "\"status\":\"generating\"");
  mindlite_free(json);
  CHECK_STATUS(MINDLITE_CONFLICT, mindlite_model_create(db, "mindsdb",
                                                        "CREATE MODEL m FROM mindsdb (SELECT * FROM homes) PREDICT price", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "Model already exists: mindsdb.m");
  CHECK_STATUS(MINDLITE_INVALID, mindlite_model_create(db, "mindsdb", "SELECT 1", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "CREATE MODEL");

  json = wait_done(db, "m");
  CHECK_CONTAINS(json, "\"status\":\"complete\"");
  mindlite_free(json);
  CHECK_OK(db, mindlite_model_list(db, "mindsdb", &json));
  CHECK(json[0] == '[');
  CHECK_CONTAINS(json, "\"version\":1");
  mindlite_free(json);
  CHECK_OK(db, mindlite_model_describe(db, "mindsdb", "m", 0, &json));
  CHECK_CONTAINS(json, "\"outputs\":[\"price\"]");
  mindlite_free(json);

  CHECK_OK(db, mindlite_model_predict(db, "mindsdb", "m", 1, "[{\"rooms\": 2}, {\"rooms\": 5}]", &json));
  CHECK_CONTAINS(json, "\"rooms\":2");
  CHECK_CONTAINS(json, "\"price\":");
  mindlite_free(json);
  CHECK_STATUS(MINDLITE_INVALID, mindlite_model_predict(db, "mindsdb", "m", 0, "[{\"rooms\": \"x\"}]", &json));
  CHECK(json == NULL);
  CHECK_CONTAINS(mindlite_errmsg(db), "rooms");
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_model_get(db, "mindsdb", "m", 9, &json));

  /* A second version from other rows becomes active when complete; version 1 can come back. */
  CHECK_OK(db, mindlite_model_retrain(db, "mindsdb", "m", "SELECT rooms, price FROM homes WHERE rooms > 1",
                                      "mindsdb", &json));
  CHECK_CONTAINS(json, "\"version\":2");
  CHECK_CONTAINS(json, "\"status\":\"generating\"");
  mindlite_free(json);
  json = wait_version(db, "m", 2);
  CHECK_CONTAINS(json, "\"status\":\"complete\"");
  CHECK_CONTAINS(json, "\"active\":true");
  mindlite_free(json);
  CHECK_OK(db, mindlite_model_set_active(db, "mindsdb", "m", 1, &json));
  CHECK_CONTAINS(json, "\"version\":1");
  CHECK_CONTAINS(json, "\"active\":true");
  mindlite_free(json);
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_model_set_active(db, "mindsdb", "m", 7, NULL));
  CHECK_OK(db, mindlite_model_retrain(db, "mindsdb", "m", NULL, NULL, NULL));
  CHECK_STATUS(MINDLITE_INVALID, mindlite_model_retrain(db, "mindsdb", "m", NULL, "mindsdb", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "needs a query");
  json = wait_version(db, "m", 3);
  CHECK_CONTAINS(json, "\"status\":\"complete\"");
  mindlite_free(json);

  CHECK_OK(db, mindlite_model_delete(db, "mindsdb", "m", 0));
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_model_get(db, "mindsdb", "m", 0, &json));
  CHECK_CONTAINS(mindlite_errmsg(db), "'m'");
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_model_delete(db, NULL, "m", 0));
  CHECK_OK(db, mindlite_close(db));
  puts("test_models: ok");
  return 0;
}
