"""Models over MindsDB's SQL route (`docs/mindsdb-wire.md` §4, the sql_*model* captures): CREATE MODEL
answers the one-row model-info table at once, training finishes in the background, the models
table and DESCRIBE show it, a model predicts from `WHERE`, and MindsDB's own `mindsdb_sdk` 3.5.0
models API (create, wait_complete, list, get, describe, retrain, drop) works unmodified."""

from __future__ import annotations

import json
import time

import mindsdb_sdk
import pytest

INFO_COLUMNS = ["NAME", "ENGINE", "PROJECT", "ACTIVE", "VERSION", "STATUS", "ACCURACY", "PREDICT",
                "UPDATE_STATUS", "MINDSDB_VERSION", "ERROR", "SELECT_DATA_QUERY",
                "TRAINING_OPTIONS", "TAG"]


@pytest.fixture
def homes_server(server):
    """A server with `homes`: price = 3·rooms + 10 in the center, + small noise."""
    rows = []
    for i in range(300):
        rooms = i % 7
        area = ["center", "north", "south"][i % 3]
        price = 3 * rooms + (10 if area == "center" else 0) + ((i * 37) % 10) / 20
        rows.append(f"({rooms}, '{area}', {price})")
    server.sql_ok("CREATE TABLE homes (rooms INT, area VARCHAR, price DOUBLE)")
    server.sql_ok(f"INSERT INTO homes VALUES {', '.join(rows)}")
    return server


def wait_status(server, name: str, project: str = "mindsdb") -> list:
    deadline = time.monotonic() + 60
    while True:
        row = server.sql_ok(f"SELECT status, error FROM {project}.models WHERE name = '{name}'")["data"][0]
        if row[0] in ("complete", "error"):
            return row
        assert time.monotonic() < deadline, f"{name} still {row}"
        time.sleep(0.05)


def test_create_model_answers_the_model_info_row_then_trains(homes_server):
    body = homes_server.sql_ok(
        "CREATE MODEL mindsdb.m1 FROM mindsdb (SELECT * FROM homes) PREDICT price USING engine = 'lightwood'")
    assert body["type"] == "table" and body["column_names"] == INFO_COLUMNS, body
    row = dict(zip(INFO_COLUMNS, body["data"][0]))
    assert (row["NAME"], row["ENGINE"], row["PROJECT"], row["ACTIVE"], row["VERSION"]) == \
        ("m1", "lightwood", "mindsdb", True, 1)
    assert row["STATUS"] == "generating" and row["ACCURACY"] is None and row["ERROR"] is None
    assert row["SELECT_DATA_QUERY"] == "SELECT * FROM homes"
    assert row["TRAINING_OPTIONS"] == "{'__mdb_sql_task': None, 'target': 'price', 'using': {'engine': 'lightwood'}}"
    assert wait_status(homes_server, "m1") == ["complete", None]
    listed = homes_server.sql_ok("SELECT name, status FROM mindsdb.models")
    assert listed["column_names"] == ["NAME", "STATUS"] and listed["data"] == [["m1", "complete"]]
    accuracy = homes_server.sql_ok("SELECT accuracy FROM models WHERE active = '1'")["data"][0][0]
    assert accuracy > 0.9
    predicted = homes_server.sql_ok("SELECT price FROM mindsdb.m1 WHERE rooms = 2 AND area = 'north'")
    assert abs(predicted["data"][0][0] - 6) < 2, predicted
    duplicate = homes_server.sql("CREATE MODEL mindsdb.m1 FROM mindsdb (SELECT * FROM homes) PREDICT price").json()
    assert duplicate["type"] == "error" and duplicate["error_message"] == "Model already exists: mindsdb.m1"


def test_describe_answers_as_a_table(homes_server):
    homes_server.sql_ok("CREATE MODEL m2 FROM mindsdb (SELECT * FROM homes) PREDICT area")
    assert wait_status(homes_server, "m2")[0] == "complete"
    described = homes_server.sql_ok("DESCRIBE mindsdb.m2")
    assert described["column_names"] == ["TABLES"] + INFO_COLUMNS
    assert described["data"][0][0] == ["info", "features", "model"]
    info = homes_server.sql_ok("DESCRIBE mindsdb.m2.info")
    assert info["column_names"] == ["ACCURACIES", "COLUMN_IMPORTANCES", "INPUTS", "OUTPUTS", "MODEL"]
    accuracies = json.loads(info["data"][0][0])
    assert list(accuracies) == ["balanced_accuracy_score"]
    assert json.loads(info["data"][0][3]) == ["area"]


def test_predicting_with_a_model_that_failed_says_why(homes_server):
    homes_server.sql_ok("CREATE MODEL tiny FROM mindsdb (SELECT * FROM homes LIMIT 3) PREDICT price")
    status, error = wait_status(homes_server, "tiny")
    assert status == "error" and "rows" in error
    failed = homes_server.sql("SELECT price FROM tiny WHERE rooms = 1").json()
    assert failed["type"] == "error" and "model creation not completed" in failed["error_message"]


def test_mindsdb_sdk_models_api_unmodified(homes_server):
    con = mindsdb_sdk.connect(homes_server.url)
    project = con.get_project("mindsdb")
    model = project.models.create("price_model", predict="price", query="select * from homes",
                                  database="mindsdb", options={"note": "sdk"})
    assert model.name == "price_model" and model.data["status"] == "generating"
    model.wait_complete()
    assert model.get_status() == "complete"
    assert model.data["accuracy"] > 0.9
    assert [m.name for m in project.models.list()] == ["price_model"]
    fetched = project.models.get("price_model")
    assert fetched.data["predict"] == "price" and fetched.data["version"] == 1
    info = fetched.describe("info")
    assert "rooms" in json.loads(info["COLUMN_IMPORTANCES"][0])
    features = fetched.describe("features")
    assert set(features["COLUMN"]) == {"rooms", "area", "price"}
    fetched.retrain()
    versions = fetched.list_versions()
    assert [v.version for v in versions] == [1, 2]
    deadline = time.monotonic() + 60
    while project.models.get("price_model").data["version"] != 2:
        assert time.monotonic() < deadline, "version 2 never became active"
        time.sleep(0.1)
    project.models.drop("price_model")
    assert project.models.list() == []


def models_url(server, *parts: str, project: str = "mindsdb") -> str:
    return "/".join([server.url, "api/projects", project, "models", *parts])


def test_rest_routes_create_list_get_predict_describe_delete(homes_server):
    import requests

    created = requests.post(models_url(homes_server), timeout=30, json={
        "query": "CREATE MODEL mindsdb.rest_m FROM mindsdb (SELECT * FROM homes) PREDICT price"})
    assert created.status_code == 201, created.text
    record = created.json()
    assert (record["name"], record["version"], record["status"], record["active"]) == \
        ("rest_m", 1, "generating", True)
    assert record["problem_definition"]["target"] == "price" and record["engine"] == "builtin"
    assert wait_status(homes_server, "rest_m")[0] == "complete"
    duplicate = requests.post(models_url(homes_server), timeout=30, json={
        "query": "CREATE MODEL rest_m FROM mindsdb (SELECT * FROM homes) PREDICT price"})
    assert duplicate.status_code == 409 and duplicate.json()["title"] == "Model already exists"
    missing_query = requests.post(models_url(homes_server), json={}, timeout=10)
    assert missing_query.status_code == 400
    not_create = requests.post(models_url(homes_server), json={"query": "SELECT 1"}, timeout=10)
    assert not_create.status_code == 400 and "CREATE MODEL" in not_create.json()["detail"]

    listed = requests.get(models_url(homes_server), timeout=10).json()
    assert [(m["name"], m["version"]) for m in listed] == [("rest_m", 1)]
    got = requests.get(models_url(homes_server, "rest_m"), timeout=10)
    assert got.status_code == 200 and got.json()["accuracy"] > 0.9
    assert requests.get(models_url(homes_server, "rest_m.1"), timeout=10).json()["version"] == 1
    assert requests.get(models_url(homes_server, "rest_m.7"), timeout=10).status_code == 404
    nosuch = requests.get(models_url(homes_server, "nosuch"), timeout=10)
    assert nosuch.status_code == 404 and nosuch.json()["title"] == "Model not found"
    noproject = requests.get(models_url(homes_server, project="nosuchproj"), timeout=10)
    assert noproject.status_code == 404 and noproject.json()["title"] == "Project not found"

    predicted = requests.post(models_url(homes_server, "rest_m", "predict"), timeout=10, json={
        "data": [{"rooms": 2, "area": "north"}, {"rooms": 5, "area": "center"}], "params": {}})
    assert predicted.status_code == 200, predicted.text
    rows = predicted.json()
    assert [r["rooms"] for r in rows] == [2, 5] and abs(rows[0]["price"] - 6) < 2
    assert abs(rows[1]["price"] - 25) < 3, rows
    # MindsDB's prediction columns beside the target: a 90 % interval and an explanation.
    assert all(r["price_min"] < r["price"] < r["price_max"] for r in rows), rows
    assert json.loads(rows[0]["price_explain"])["confidence"] == rows[0]["price_confidence"] == 0.9
    as_text = requests.post(models_url(homes_server, "rest_m", "predict"), timeout=10,
                            json={"data": json.dumps([{"rooms": 1}])})
    assert as_text.status_code == 200 and len(as_text.json()) == 1
    bad_value = requests.post(models_url(homes_server, "rest_m", "predict"), timeout=10,
                              json={"data": [{"rooms": "many"}]})
    assert bad_value.status_code == 400 and "rooms" in bad_value.json()["detail"]

    described = requests.get(models_url(homes_server, "rest_m", "describe"), timeout=10)
    assert described.status_code == 200
    [info] = described.json()
    assert set(info) == {"accuracies", "column_importances", "inputs", "outputs", "model"}
    assert info["outputs"] == ["price"] and " --> " in info["model"]
    with_body = requests.get(models_url(homes_server, "rest_m", "describe"), timeout=10,
                             json={"attribute": "info"})
    assert with_body.json() == described.json()
    features = requests.get(models_url(homes_server, "rest_m", "describe"), timeout=10,
                            json={"attribute": "features"}).json()
    assert {f["column"]: f["role"] for f in features} == \
        {"rooms": "feature", "area": "feature", "price": "target"}
    unknown = requests.get(models_url(homes_server, "rest_m", "describe"), timeout=10,
                           json={"attribute": "nosuch"})
    assert unknown.status_code == 400 and "info, features" in unknown.json()["detail"]

    deleted = requests.delete(models_url(homes_server, "rest_m"), timeout=10)
    assert deleted.status_code == 204 and deleted.content == b""
    assert requests.get(models_url(homes_server, "rest_m"), timeout=10).status_code == 404


def test_mindsdb_sdk_predicts_from_a_dict_and_a_dataframe(homes_server):
    import pandas as pd

    con = mindsdb_sdk.connect(homes_server.url)
    model = con.models.create("sdk_predict", predict="price", query="select * from homes",
                              database="mindsdb")
    model.wait_complete()
    one = model.predict({"rooms": 3, "area": "south"})
    assert abs(one["price"][0] - 9) < 2, one
    many = model.predict(pd.DataFrame({"rooms": [1, 6], "area": ["north", "center"]}))
    assert list(many["rooms"]) == [1, 6] and many["price"][1] > many["price"][0]


def test_join_predicts_100k_rows_as_a_stream_with_bounded_memory(homes_server):
    """`t JOIN model` over jsonlines: every row arrives with its prediction, in several lines,
    while the server's peak RSS grows by a fixed bound, not with the rows."""
    import requests

    homes_server.sql_ok("CREATE MODEL mindsdb.jm FROM mindsdb (SELECT * FROM homes) PREDICT price")
    assert wait_status(homes_server, "jm") == ["complete", None]
    rows = 100_000
    query = ("SELECT t.id, t.rooms, m.price FROM (SELECT value AS id, value % 7 AS rooms, "
             f"'north' AS area FROM generate_series(1, {rows})) AS t JOIN mindsdb.jm AS m")
    assert len(homes_server.sql_ok(query + " LIMIT 2")["data"]) == 2
    baseline = homes_server.peak_rss_bytes()
    body = {"query": query, "response_format": "jsonlines"}
    seen, lines = 0, 0
    with requests.post(homes_server.url + "/api/sql/query", json=body, stream=True,
                       timeout=120) as r:
        assert r.status_code == 200 and r.headers.get("Transfer-Encoding") == "chunked"
        stream = r.iter_lines(chunk_size=64 * 1024)
        assert json.loads(next(stream)) == {"type": "table",
                                            "column_names": ["id", "rooms", "price"]}
        for line in stream:
            for row_id, rooms, price in json.loads(line):
                assert rooms == row_id % 7 and abs(price - 3 * rooms) < 2, (row_id, price)
                seen += 1
            lines += 1
    assert seen == rows and lines > 1
    growth = homes_server.peak_rss_bytes() - baseline
    print(f"join over {rows} rows: peak RSS grew {growth / 2**20:.1f} MiB")
    assert growth < 64 * 2**20, f"peak RSS grew {growth / 2**20:.1f} MiB"


def test_an_llm_model_asks_the_provider_once_per_row(homes_server):
    """`engine = 'openai'`: the template's slots are the inputs, each row one chat completion
    (the key sent, not shown), at most `max_concurrency` at a time, answers in row order, by
    WHERE, JOIN and the REST predict route."""
    import requests

    from fake_llm import FakeLLM, echo

    with FakeLLM() as llm:
        llm.fallback(echo("A: ", delay=0.05))
        created = homes_server.sql_ok(
            "CREATE MODEL mindsdb.reviewer PREDICT verdict USING engine = 'openai', "
            "prompt_template = 'Rate {{review}} ({{stars}} stars)', model_name = 'fake-model', "
            f"base_url = '{llm.base_url}', api_key = 'sk-secret', max_concurrency = 3")
        row = dict(zip(INFO_COLUMNS, created["data"][0]))
        assert (row["ENGINE"], row["STATUS"]) == ("openai", "generating")
        assert "sk-secret" not in row["TRAINING_OPTIONS"] and "******" in row["TRAINING_OPTIONS"]
        assert wait_status(homes_server, "reviewer") == ["complete", None]

        # Planning predicts nothing: EXPLAIN makes no call.
        explained = homes_server.sql_ok(
            "EXPLAIN SELECT verdict FROM mindsdb.reviewer WHERE review = 'great'")
        assert "PredictExec" in json.dumps(explained["data"]) and llm.requests == []
        one = homes_server.sql_ok(
            "SELECT verdict FROM mindsdb.reviewer WHERE review = 'great' AND stars = 5")
        assert one["data"] == [["A: Rate great (5 stars)"]]
        assert llm.requests[-1]["model"] == "fake-model"
        assert llm.headers[-1]["authorization"] == "Bearer sk-secret"

        homes_server.sql_ok("CREATE TABLE reviews (id INT, review VARCHAR, stars INT)")
        values = ", ".join(f"({i}, 'text {i}', {i % 5})" for i in range(1, 13))
        homes_server.sql_ok(f"INSERT INTO reviews VALUES {values}")
        before = len(llm.requests)
        joined = homes_server.sql_ok(
            "SELECT t.id, m.verdict FROM reviews AS t JOIN mindsdb.reviewer AS m ORDER BY t.id")
        assert joined["data"] == [[i, f"A: Rate text {i} ({i % 5} stars)"] for i in range(1, 13)]
        assert len(llm.requests) - before == 12
        assert 2 <= llm.max_in_flight <= 3, llm.max_in_flight

        predicted = requests.post(models_url(homes_server, "reviewer", "predict"), timeout=30,
                                  json={"data": [{"review": "meh", "stars": 2}]})
        assert predicted.status_code == 200, predicted.text
        assert predicted.json()[0]["verdict"] == "A: Rate meh (2 stars)"
        [info] = requests.get(models_url(homes_server, "reviewer", "describe"), timeout=10).json()
        assert (info["inputs"], info["outputs"]) == (["review", "stars"], ["verdict"])

        llm.fallback({"kind": "error", "status": 429, "message": "Rate limit reached",
                      "type": "requests", "code": "rate_limit_exceeded"})
        failed = homes_server.sql("SELECT t.id, m.verdict FROM reviews AS t JOIN reviewer AS m").json()
        assert failed["type"] == "error" and "Rate limit reached" in failed["error_message"], failed
        assert "predicting for the prompt 'Rate text" in failed["error_message"]

        # A condition on the rows' own columns is applied before predicting: 3 calls, not 12.
        llm.fallback(echo("B: "))
        before = len(llm.requests)
        filtered = homes_server.sql_ok(
            "SELECT t.id, m.verdict FROM reviews AS t JOIN reviewer AS m WHERE t.id <= 3 ORDER BY t.id")
        assert [row[0] for row in filtered["data"]] == [1, 2, 3]
        assert len(llm.requests) - before == 3


def test_llm_model_settings_are_checked_when_created(homes_server):
    for using, named in [
        ("engine = 'openai'", "needs a prompt"),
        ("engine = 'openai', prompt_template = 'x {{a'", "never closed"),
        ("engine = 'openai', prompt_template = '{{a}}', temprature = 1", "temprature"),
        ("engine = 'openai', prompt_template = '{{a}}', base_url = 'nope'", "base_url"),
        ("engine = 'openai', prompt_template = '{{y}}'", "predicted column"),
        ("engine = 'gpt'", "does not exist"),
        ("engine = 'openai', prompt_template = '{{a}}', base_url = 'http://h/v1', "
         "api_base = 'http://h/v1'", "give one"),
    ]:
        body = homes_server.sql(f"CREATE MODEL bad PREDICT y USING {using}").json()
        assert body["type"] == "error" and named in body["error_message"], (using, body)
    assert homes_server.sql_ok("SELECT * FROM mindsdb.models")["data"] == []


def test_an_ml_engine_holds_settings_its_models_use(server):
    """`CREATE ML_ENGINE oa FROM openai USING api_key = …, base_url = …`: a model that names
    `oa` as its engine uses the openai handler with those settings (its own win); `SHOW
    ML_ENGINES` lists the built-ins and it (the key masked); `DROP ML_ENGINE` removes it."""
    import mindsdb_sdk

    from fake_llm import FakeLLM, echo

    with FakeLLM() as llm:
        llm.fallback(echo("A: "))
        server.sql_ok(f"CREATE ML_ENGINE oa FROM openai USING api_key = 'sk-engine', "
                      f"base_url = '{llm.base_url}', model_name = 'engine-model'")
        again = server.sql("CREATE ML_ENGINE oa FROM openai USING api_key = 'x'").json()
        assert again["type"] == "error" and "already exists" in again["error_message"], again
        server.sql_ok("CREATE ML_ENGINE IF NOT EXISTS oa FROM openai")
        shown = server.sql_ok("SHOW ML_ENGINES")
        assert shown["column_names"] == ["NAME", "HANDLER", "CONNECTION_DATA"], shown
        rows = {r[0]: r for r in shown["data"]}
        assert rows["oa"][1] == "openai" and json.loads(rows["oa"][2])["api_key"] == "******"
        assert {"builtin", "lightwood", "openai"} <= set(rows)
        # MindsDB's spelling of the key is a secret too.
        server.sql_ok("CREATE ML_ENGINE oa2 FROM openai USING openai_api_key = 'sk-other'")
        shown2 = {r[0]: r for r in server.sql_ok("SHOW ML_ENGINES")["data"]}
        assert json.loads(shown2["oa2"][2]) == {"openai_api_key": "******"}
        server.sql_ok("DROP ML_ENGINE oa2")
        assert server.sql_ok("SHOW ML_ENGINES LIKE 'o%'")["data"] == [
            ["openai", "openai", "{}"], rows["oa"]]
        assert [r[0] for r in server.sql_ok("SHOW ML_ENGINES WHERE handler = 'openai' AND name <> 'openai'")["data"]] == ["oa"]

        server.sql_ok("CREATE MODEL mindsdb.echoer PREDICT answer USING engine = 'oa', "
                      "prompt_template = 'Say {{word}}'")
        assert wait_status(server, "echoer") == ["complete", None]
        assert server.sql_ok("SELECT answer FROM mindsdb.echoer WHERE word = 'hi'")["data"] == [["A: Say hi"]]
        assert llm.requests[-1]["model"] == "engine-model"
        assert llm.headers[-1]["authorization"] == "Bearer sk-engine"
        server.sql_ok("CREATE MODEL mindsdb.own PREDICT answer USING engine = 'oa', "
                      "prompt_template = 'Say {{word}}', model_name = 'own-model'")
        assert wait_status(server, "own") == ["complete", None]
        server.sql_ok("SELECT answer FROM mindsdb.own WHERE word = 'x'")
        assert llm.requests[-1]["model"] == "own-model"

        # mindsdb_sdk lists and drops them with its own statements.
        con = mindsdb_sdk.connect(server.url)
        assert "oa" in [e.name for e in con.ml_engines.list()]
        con.ml_engines.drop("oa")
        assert "oa" not in [e.name for e in con.ml_engines.list()]
        # A model made with it keeps working: it copied the settings.
        assert server.sql_ok("SELECT answer FROM mindsdb.echoer WHERE word = 'yo'")["data"] == [["A: Say yo"]]

    for statement, words in (
        ("CREATE ML_ENGINE x FROM nosuch", "no engine 'nosuch'"),
        ("CREATE ML_ENGINE x FROM openai USING apikey = 'k'", "apikey"),
        ("CREATE ML_ENGINE x FROM openai USING base_url = 'ftp://h'", "base_url"),
        ("CREATE ML_ENGINE x FROM builtin USING a = 1", "takes no settings"),
        ("CREATE ML_ENGINE openai FROM openai", "built-in"),
        ("CREATE ML_ENGINE x", "FROM handler"),
        ("DROP ML_ENGINE nosuch", "does not exist"),
        ("DROP ML_ENGINE builtin", "cannot be dropped"),
    ):
        failed = server.sql(statement).json()
        assert failed["type"] == "error" and words in failed["error_message"], (statement, failed)
    server.sql_ok("DROP ML_ENGINE IF EXISTS nosuch")


def test_handlers_are_this_builds_integrations(server):
    import mindsdb_sdk
    import requests

    shown = server.sql_ok("SHOW HANDLERS")
    assert shown["column_names"] == ["NAME", "TYPE", "TITLE", "DESCRIPTION", "VERSION",
                                     "CONNECTION_ARGS", "IMPORT_SUCCESS", "IMPORT_ERROR"], shown
    kinds = {r[0]: r[1] for r in shown["data"]}
    assert kinds == {"files": "data", "postgres": "data", "mysql": "data", "mariadb": "data",
                     "builtin": "ml", "lightwood": "ml", "openai": "ml"}
    assert all(r[6] is True and r[7] is None for r in shown["data"])
    postgres = next(r for r in shown["data"] if r[0] == "postgres")
    assert json.loads(postgres[5])["password"]["secret"] is True
    ml = server.sql_ok("SHOW HANDLERS WHERE type = 'ml'")["data"]
    assert sorted(r[0] for r in ml) == ["builtin", "lightwood", "openai"]
    assert server.sql_ok("SELECT name FROM information_schema.handlers WHERE name LIKE 'p%'")["data"] == [["postgres"]]
    con = mindsdb_sdk.connect(server.url)
    assert sorted(h.name for h in con.ml_handlers.list()) == ["builtin", "lightwood", "openai"]
    assert sorted(h.name for h in con.data_handlers.list()) == ["files", "mariadb", "mysql", "postgres"]

    listed = requests.get(server.url + "/api/handlers", timeout=10).json()
    assert {h["name"] for h in listed} == set(kinds)
    one = requests.get(server.url + "/api/handlers/postgres", timeout=10).json()
    assert one["type"] == "data" and one["import"]["success"] is True
    assert "host" in one["connection_args"]
    missing = requests.get(server.url + "/api/handlers/nosuch", timeout=10)
    assert missing.status_code == 404 and missing.json()["title"] == "Handler not found"


def test_the_model_routes_answer_mindsdbs_codes_for_what_is_missing(server):
    """Predict looks the model up before reading the body (404 without one), and a model of an
    engine this build lacks is 404 "ML handler not found", as in MindsDB."""
    import requests

    url = server.url + "/api/projects/mindsdb/models"
    for name in ("nosuch", "nosuch.2"):
        r = requests.post(f"{url}/{name}/predict", timeout=10)
        assert r.status_code == 404 and r.json()["title"] == "Model not found", r.text
    r = requests.post(server.url + "/api/projects/nope/models/m/predict", timeout=10)
    assert r.status_code == 404 and r.json()["title"] == "Project not found", r.text
    created = requests.post(url, timeout=10, json={
        "query": "CREATE MODEL mindsdb.m PREDICT y USING engine = 'nosuch'"})
    assert created.status_code == 404, created.text
    assert created.json()["title"] == "ML handler not found" and "nosuch" in created.json()["detail"]


def test_a_time_series_model_forecasts_over_sql_and_rest(server):
    """MindsDB's forecasting flow: ORDER BY … GROUP BY … WINDOW … HORIZON, then `t JOIN m`
    with `WHERE t.d > LATEST` for the future rows, and the REST predict given the history."""
    import requests

    weekly = [0, 5, 8, 6, 2, -9, -12]
    rows = [f"(DATE '2024-01-01' + INTERVAL '{day} days', '{store}', {level + weekly[day % 7]})"
            for store, level in (("north", 100), ("south", 40)) for day in range(70)]
    server.sql_ok("CREATE TABLE sales (d DATE, store VARCHAR, amount DOUBLE)")
    server.sql_ok(f"INSERT INTO sales VALUES {', '.join(rows)}")
    server.sql_ok("CREATE MODEL mindsdb.sales_m FROM mindsdb (SELECT * FROM sales) "
                  "PREDICT amount ORDER BY d GROUP BY store WINDOW 14 HORIZON 3")
    assert wait_status(server, "sales_m") == ["complete", None]
    future = server.sql_ok("SELECT t.d, t.store, m.amount FROM mindsdb.sales AS t "
                           "JOIN mindsdb.sales_m AS m WHERE t.d > LATEST ORDER BY t.store, t.d")
    assert [r[:2] for r in future["data"]] == [
        ["2024-03-11", "north"], ["2024-03-12", "north"], ["2024-03-13", "north"],
        ["2024-03-11", "south"], ["2024-03-12", "south"], ["2024-03-13", "south"]]
    for (_, store, amount), day in zip(future["data"], [70, 71, 72] * 2):
        level = 100 if store == "north" else 40
        assert abs(amount - (level + weekly[day % 7])) < 3, future
    history = [{"d": f"2024-01-{day + 1:02d}", "store": "north", "amount": 100 + weekly[day % 7]}
               for day in range(21)]
    answered = requests.post(models_url(server, "sales_m", "predict"), timeout=30,
                             json={"data": history})
    assert answered.status_code == 200, answered.text
    rows = answered.json()
    assert len(rows) == 21 + 3 and [r["d"] for r in rows[-3:]] == ["2024-01-22", "2024-01-23",
                                                                  "2024-01-24"]
    assert all(r["latest"] == "2024-01-21" and r["store"] == "north" for r in rows[-3:]), rows[-3:]
