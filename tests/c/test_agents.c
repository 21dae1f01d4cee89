/* Agents through the C API: create, list, get, update, delete as JSON in and out, and a
 * question to an agent whose model provider is down (MINDLITE_UPSTREAM, with its message). */
#include "check.h"

int main(void) {
  /* Port 9 (discard) is closed on the test machines: the provider is down. */
  const char *config = "{\"llm\": {\"base_url\": \"http://127.0.0.1:9/v1\", \"timeout_secs\": 3}}";
  mindlite_database *db = NULL;
  CHECK_OK(db, mindlite_open_in_memory(config, &db, NULL));
  mindlite_result *r = NULL;
  CHECK_OK(db, mindlite_query(db, "CREATE TABLE sales (region VARCHAR, amount INT)", &r));
  mindlite_result_free(r);

  char *json = NULL;
  CHECK_OK(db, mindlite_agent_create(db, "mindsdb",
                                     "{\"name\": \"Analyst\", \"data\": {\"tables\": [\"mindsdb.sales\"]},"
                                     " \"prompt_template\": \"Answer about sales.\"}",
                                     &json));
  /* MindsDB's field order; the default model recorded by name. */
  const char *head = "{\"id\":1,\"name\":\"Analyst\",\"project_id\":1,\"updated_at\":\"";
  CHECK(strncmp(json, head, strlen(head)) == 0);
  CHECK_CONTAINS(json, "\"model\":{\"model_name\":\"gpt-4o\",\"provider\":\"openai\"}");
  mindlite_free(json);
  CHECK_STATUS(MINDLITE_CONFLICT, mindlite_agent_create(db, "mindsdb", "{\"name\": \"analyst\"}", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "already exists");
  CHECK_STATUS(MINDLITE_INVALID, mindlite_agent_create(db, "mindsdb", "{\"name\": \"b\", \"skills\": []}", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "Parameter 'skills' is not allowed");
  CHECK_STATUS(MINDLITE_INVALID, mindlite_agent_create(db, "mindsdb", "{\"name\": ", NULL));
  CHECK_CONTAINS(mindlite_errmsg(db), "agent_json");
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_agent_create(db, "nope", "{\"name\": \"b\"}", NULL));

  CHECK_OK(db, mindlite_agent_list(db, "mindsdb", &json));
  CHECK(json[0] == '[');
  CHECK_CONTAINS(json, "\"name\":\"Analyst\"");
  mindlite_free(json);

  CHECK_OK(db, mindlite_agent_update(db, "mindsdb", "analyst", "{\"prompt_template\": null, \"params\": {\"timeout\": 9}}", NULL));
  CHECK_OK(db, mindlite_agent_get(db, "mindsdb", "ANALYST", &json));
  CHECK(strstr(json, "prompt_template") == NULL);
  CHECK_CONTAINS(json, "\"params\":{\"timeout\":9}");
  mindlite_free(json);
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_agent_update(db, "mindsdb", "ghost", "{}", NULL));

  CHECK_STATUS(MINDLITE_UPSTREAM, mindlite_agent_ask(db, "mindsdb", "analyst",
                                                     "[{\"role\": \"user\", \"content\": \"Total?\"}]", &json));
  CHECK(json == NULL);
  CHECK_CONTAINS(mindlite_errmsg(db), "cannot be reached");
  CHECK_STATUS(MINDLITE_INVALID, mindlite_agent_ask(db, "mindsdb", "analyst", "[]", &json));
  CHECK_CONTAINS(mindlite_errmsg(db), "no question");

  CHECK_OK(db, mindlite_agent_delete(db, "mindsdb", "analyst"));
  CHECK_STATUS(MINDLITE_NOT_FOUND, mindlite_agent_get(db, "mindsdb", "analyst", &json));
  CHECK_CONTAINS(mindlite_errmsg(db), "Agent with name analyst does not exist");
  CHECK_STATUS(MINDLITE_MISUSE, mindlite_agent_delete(db, NULL, "analyst"));
  CHECK_OK(db, mindlite_close(db));
  puts("test_agents: ok");
  return 0;
}
