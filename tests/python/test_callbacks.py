"""Model-status callbacks from Python: a hosted user whose plan includes them registers, lists,
reads, updates and deletes them through its as_user() connection."""

import pytest

import mindlite


@pytest.fixture
def hosted():
    """A fresh in-memory database of the hosted edition, through the operator's connection."""
    connection = mindlite.connect(config={"edition": "hosted"})
    yield connection
    connection.close()


def _user(hosted, name, plan):
    """A connection acting as the new user `name` on `plan`."""
    hosted.create_user(name, plan=plan)
    return hosted.as_user(hosted.create_api_key(name)["key"])


@pytest.fixture
def alice(hosted):
    """A user on the "pro" plan, which includes callbacks."""
    connection = _user(hosted, "alice", "pro")
    yield connection
    connection.close()


def test_a_plan_without_callbacks_is_forbidden(hosted):
    with _user(hosted, "bob", "free") as bob:
        with pytest.raises(mindlite.ForbiddenError, match="not included in plan 'free'.*pro"):
            bob.register_callback("https://example.com/hook")
        with pytest.raises(mindlite.ForbiddenError):
            bob.callbacks()
    with pytest.raises(mindlite.ForbiddenError, match="belong to users"):
        hosted.callbacks()


def test_a_callback_is_registered_listed_and_read_without_its_secret(alice):
    registered = alice.register_callback(
        "https://example.com/hook", model_name="house_.*", count=2, http_timeout=5
    )
    assert set(registered) == {"id", "secret"} and registered["secret"].startswith("whsec_")
    [listed] = alice.callbacks()
    assert listed["id"] == registered["id"] and listed["url"] == "https://example.com/hook"
    assert listed["created_at"].endswith(" GMT")
    callback = alice.callback(registered["id"])
    assert "secret" not in callback and registered["secret"] not in str(callback)
    assert callback["url"] == "https://example.com/hook"
    assert callback["filter"] == {"model_name": "house_.*", "project_name": None}
    assert callback["attempt"]["count"] == 2 and callback["attempt"]["http_timeout"] == 5


def test_update_changes_what_is_given_and_keeps_the_rest(alice):
    id = alice.register_callback("https://example.com/hook", model_name="house_.*", count=2)["id"]
    updated = alice.update_callback(id, url="https://example.com/v2")
    assert updated["url"] == "https://example.com/v2"
    alice.update_callback(id, interval=30)
    callback = alice.callback(id)
    assert callback["url"] == "https://example.com/v2"
    assert callback["filter"]["model_name"] == "house_.*"
    assert callback["attempt"]["count"] == 2 and callback["attempt"]["interval"] == 30
    assert [c["url"] for c in alice.callbacks()] == ["https://example.com/v2"]
    # Either pattern replaces the filter as a pair.
    alice.update_callback(id, project_name="prod")
    assert alice.callback(id)["filter"] == {"model_name": None, "project_name": "prod"}


@pytest.mark.parametrize(
    "settings, field",
    [
        ({"url": "ftp://x"}, "'url' must use http or https"),
        ({"url": "not a url"}, "'url' is not a URL"),
        ({"url": "https://example.com", "model_name": "("}, "'filter.model_name' is not a valid regex"),
        ({"url": "https://example.com", "project_name": "[a-"}, "'filter.project_name'"),
        ({"url": "https://example.com", "count": 0}, "'attempt.count'"),
        ({"url": "https://example.com", "interval": 86401}, "'attempt.interval'"),
        ({"url": "https://example.com", "http_timeout": -1}, "'attempt.http_timeout'"),
    ],
)
def test_bad_settings_are_named_and_register_nothing(alice, settings, field):
    with pytest.raises(mindlite.ProgrammingError, match=field):
        alice.register_callback(**settings)
    assert alice.callbacks() == []


def test_a_bad_update_changes_nothing(alice):
    id = alice.register_callback("https://example.com/hook")["id"]
    with pytest.raises(mindlite.ProgrammingError, match="'url'"):
        alice.update_callback(id, url="ftp://x")
    with pytest.raises(mindlite.ProgrammingError, match="'filter.model_name'"):
        alice.update_callback(id, model_name="(")
    with pytest.raises(mindlite.ProgrammingError, match="'attempt.count'"):
        alice.update_callback(id, count=0)
    callback = alice.callback(id)
    assert callback["url"] == "https://example.com/hook"
    assert callback["filter"] == {"model_name": None, "project_name": None}


def test_a_fresh_callback_has_no_deliveries(alice):
    id = alice.register_callback("https://example.com/hook")["id"]
    assert alice.callback_deliveries(id) == []


def test_a_deleted_callback_is_gone(alice):
    id = alice.register_callback("https://example.com/hook")["id"]
    assert alice.delete_callback(id) is None
    assert alice.callbacks() == []
    with pytest.raises(mindlite.ProgrammingError, match=f"Callback {id} not found"):
        alice.callback(id)
    with pytest.raises(mindlite.ProgrammingError, match="not found"):
        alice.callback_deliveries(id)
    with pytest.raises(mindlite.ProgrammingError, match="not found"):
        alice.delete_callback(id)


def test_another_users_callback_is_not_found(hosted, alice):
    id = alice.register_callback("https://example.com/hook")["id"]
    with _user(hosted, "carol", "pro") as carol:
        assert carol.callbacks() == []
        with pytest.raises(mindlite.ProgrammingError, match="not found"):
            carol.callback(id)
        with pytest.raises(mindlite.ProgrammingError, match="not found"):
            carol.update_callback(id, url="https://evil.example")
        with pytest.raises(mindlite.ProgrammingError, match="not found"):
            carol.callback_deliveries(id)
        with pytest.raises(mindlite.ProgrammingError, match="not found"):
            carol.delete_callback(id)
    assert alice.callback(id)["url"] == "https://example.com/hook"


def test_the_local_edition_has_no_callbacks(con):
    with pytest.raises(mindlite.ProgrammingError, match="hosted edition only"):
        con.callbacks()
    with pytest.raises(mindlite.ProgrammingError, match="hosted edition only"):
        con.register_callback("https://example.com/hook")


def test_a_closed_connection_refuses_callbacks(hosted):
    bob = _user(hosted, "bob", "pro")
    bob.close()
    with pytest.raises(mindlite.InterfaceError, match="closed"):
        bob.callbacks()
