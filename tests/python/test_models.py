"""Models from Python: the typed helpers over the engine (create, wait, list, get, describe,
predict, retrain, set active, drop), with the GIL released while the engine works."""

import json

import pytest

import mindlite


@pytest.fixture
def con():
    con = mindlite.connect()
    con.execute("CREATE TABLE homes (rooms INT, area VARCHAR, price DOUBLE)")
    rows = [(i % 7, ["center", "north", "south"][i % 3]) for i in range(300)]
    con.cursor().executemany(
        "INSERT INTO homes VALUES (:rooms, :area, :price)",
        [{"rooms": r, "area": a, "price": 3 * r + (10 if a == "center" else 0)} for r, a in rows],
    )
    yield con
    con.close()


def test_models_are_created_waited_for_described_predicted_and_dropped(con):
    created = con.create_model("CREATE MODEL homes_model FROM mindsdb (SELECT * FROM homes) PREDICT price")
    assert (created["name"], created["version"], created["status"]) == ("homes_model", 1, "generating")
    done = con.wait_model("homes_model", timeout=120)
    assert done["status"] == "complete" and done["accuracy"] > 0.9
    assert [(m["name"], m["version"]) for m in con.models()] == [("homes_model", 1)]
    assert con.model("HOMES_MODEL")["predict"] == "price"
    described = con.describe_model("homes_model")
    assert described["outputs"] == ["price"] and max(described["column_importances"].values()) == 1.0
    [one] = con.predict("homes_model", {"rooms": 2, "area": "center"})
    assert abs(one["price"] - 16) < 2, one
    # MindsDB's prediction columns: the interval holds 90 % of values; the explanation is JSON.
    assert one["price_confidence"] == 0.9 and one["price_min"] < one["price"] < one["price_max"]
    assert json.loads(one["price_explain"])["predicted_value"] == one["price"]
    many = con.predict("homes_model", [{"rooms": 1}, {"rooms": 6, "area": "north"}])
    assert len(many) == 2 and many[1]["price"] > many[0]["price"]
    retrained = con.retrain_model("homes_model", "SELECT * FROM homes WHERE area = 'north'")
    assert (retrained["version"], retrained["status"], retrained["active"]) == (2, "generating", False)
    con.wait_model("homes_model", timeout=120)
    assert con.model("homes_model")["version"] == 2
    [north] = con.predict("homes_model", {"rooms": 2, "area": "center"})
    assert abs(north["price"] - 6) < 2, north  # version 2 never saw the center bonus
    assert con.set_active_model("homes_model", 1)["active"] is True
    assert con.model("homes_model")["version"] == 1
    with pytest.raises(mindlite.ProgrammingError, match="version 9"):
        con.set_active_model("homes_model", 9)
    assert con.retrain_model("homes_model")["version"] == 3
    con.wait_model("homes_model", timeout=120)
    con.drop_model("homes_model")
    with pytest.raises(mindlite.ProgrammingError, match="homes_model"):
        con.model("homes_model")


def test_model_errors_are_clear(con):
    with pytest.raises(mindlite.ProgrammingError, match="CREATE MODEL"):
        con.create_model("SELECT 1")
    with pytest.raises(mindlite.ProgrammingError, match="'nope'"):
        con.create_model("CREATE MODEL m FROM mindsdb (SELECT * FROM homes) PREDICT nope")
    con.create_model("CREATE MODEL tiny FROM mindsdb (SELECT * FROM homes LIMIT 2) PREDICT price")
    with pytest.raises(mindlite.OperationalError, match="rows"):
        con.wait_model("tiny", timeout=60)
    with pytest.raises(mindlite.ProgrammingError, match="model creation not completed"):
        con.predict("tiny", {"rooms": 1})
    con.create_model("CREATE MODEL ok FROM mindsdb (SELECT * FROM homes) PREDICT price")
    con.wait_model("ok", timeout=120)
    with pytest.raises(mindlite.ProgrammingError, match="rooms"):
        con.predict("ok", {"rooms": "many"})
