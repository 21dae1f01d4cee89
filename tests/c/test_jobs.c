/* Jobs through the C API: create, list, get, history and delete as JSON in and out; a job
 * whose statement does not parse, a taken name and an unknown job are named. */
#include "check.h"

int main(void) {
  mindlite_database *db = NULL;
  CHECK_OK(db, mindlite_open_in_memory(NULL, &db, NULL));
  mindlite_result *r = NULL;
  CHECK_OK(db, mindlite_query(db, "CREATE TABLE seen (at TIMESTAMP)", &r));
  mindlite_result_free(r);

  char *json = NULL;
  CHECK_OK(db, mindlite_job_create(db, "mindsdb",
                                   "{\"name\": \"Stamp\", \"query\": \"INSERT INTO seen SELECT now()\","
                                   " \"schedule_str\": \"every 2 hours\"}",
                                   &json));
  CHECK_CONTAINS(json, "\"name\":\"stamp\"");
  CHECK_CONTAINS(json, "\"schedule_str\":\"every 2 hours\"");
  mindlite_free(json);
  CHECK_STATUS(MINDLITE_CONFLICT,
               mindlite_job_create(db, "mindsdb", "{\"name\": \"stamp\", \"query\": \"SELECT 1\"}", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "already exists");
  CHECK_STATUS(MINDLITE_INVALID,
               mindlite_job_create(db, "mindsdb", "{\"name\": \"bad\", \"query\": \"SELEC 1\"}", NULL));
  CHECK_STATUS(MINDLITE_INVALID, mindlite_job_create(db, "mindsdb", "{\"name\": ", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "job_json");

  CHECK_OK(db, mindlite_job_list(db, "mindsdb", &json));
  CHECK(json[0] == '[');
  CHECK_CONTAINS(json, "\"query\":\"INSERT INTO seen SELECT now()\"");
  mindlite_free(json);
  CHECK_OK(db, mindlite_job_get(db, "mindsdb", "STAMP", &json));
  CHECK_CONTAINS(json, "\"project\":\"mindsdb\"");
  mindlite_free(json);
  CHECK_OK(db, mindlite_job_history(db, "mindsdb", "stamp", &json));
  CHECK(json[0] == '[');
  mindlite_free(json);

  CHECK_OK(db, mindlite_job_delete(db, "mindsdb", "stamp"));
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_job_get(db, "mindsdb", "stamp", &json));
  CHECK(json == NULL);
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_job_delete(db, "mindsdb", "stamp"));
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_job_list(db, "nope", &json));
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_job_delete(db, NULL, "stamp"));
  CHECK_OK(db, mindlite_close(db));
  puts("test_jobs: ok");
  return 0;
}
