"""Users of the hosted edition from Python: the operator's connection administers them, and
each user works through a connection from as_user() that sees only that user's objects."""

import pytest

import mindlite


@pytest.fixture
def hosted():
    """A fresh in-memory database of the hosted edition, through the operator's connection."""
    connection = mindlite.connect(config={"edition": "hosted"})
    yield connection
    connection.close()


def _key(hosted, name):
    """Creates the user `name` and returns an API key's text for it."""
    hosted.create_user(name)
    return hosted.create_api_key(name)["key"]


def test_refusals_have_their_own_operational_error_classes():
    for name in ["UnauthorizedError", "ForbiddenError", "QuotaExceededError"]:
        cls = getattr(mindlite, name)
        assert issubclass(cls, mindlite.OperationalError), name
        assert getattr(mindlite.Connection, name) is cls
        assert name in mindlite.__all__


def test_users_are_created_listed_and_read(hosted):
    alice = hosted.create_user("alice")
    assert alice["name"] == "alice" and alice["plan"] == "free" and alice["disabled"] is False
    assert alice["api_keys"] == [] and alice["created_at"]
    assert hosted.create_user("bob", plan="pro")["plan"] == "pro"
    assert [u["name"] for u in hosted.users()] == ["alice", "bob"]
    assert hosted.user("ALICE")["id"] == alice["id"]
    with pytest.raises(mindlite.ProgrammingError, match="User 'alice' already exists"):
        hosted.create_user("alice")
    with pytest.raises(mindlite.ProgrammingError, match="User 'carol' not found"):
        hosted.user("carol")


def test_api_keys_are_shown_once_and_listed_without_their_text(hosted):
    hosted.create_user("alice")
    issued = hosted.create_api_key("alice")
    assert issued["user"] == "alice" and issued["key"].startswith("mlk_")
    [listed] = hosted.user("alice")["api_keys"]
    assert listed["id"] == issued["id"] and "key" not in listed
    assert issued["key"].startswith(listed["prefix"]) and listed["prefix"] != issued["key"]


def test_each_user_sees_only_its_own_rows_and_tables(hosted):
    alice = hosted.as_user(_key(hosted, "alice"))
    bob = hosted.as_user(_key(hosted, "bob"))
    assert isinstance(alice, mindlite.Connection) and alice is not hosted
    for con, rows in [(alice, [(1, "a1"), (2, "a2")]), (bob, [(10, "b1")])]:
        assert con.current_db == "mindsdb"
        cur = con.cursor()
        cur.execute("CREATE TABLE t (id INT, name VARCHAR)")
        cur.executemany("INSERT INTO t VALUES (:id, :name)", [{"id": i, "name": n} for i, n in rows])
        assert cur.rowcount == len(rows)
    assert alice.execute("SELECT id, name FROM t ORDER BY id").fetchall() == [(1, "a1"), (2, "a2")]
    assert bob.sql("SELECT id, name FROM mindsdb.t").fetchall() == [(10, "b1")]
    alice.execute("CREATE TABLE alice_notes (note VARCHAR)")
    with pytest.raises(mindlite.ProgrammingError, match="alice_notes"):
        bob.execute("SELECT * FROM alice_notes")
    with pytest.raises(mindlite.ProgrammingError, match="alice_notes"):
        bob.sql("SELECT * FROM mindsdb.alice_notes")
    with pytest.raises(mindlite.ProgrammingError, match="alice_notes"):
        hosted.execute("SELECT * FROM alice_notes")
    assert [p["name"] for p in bob.projects()] == ["mindsdb"]
    # Each connection closes on its own.
    alice.close()
    assert alice.closed and not bob.closed and not hosted.closed
    assert bob.execute("SELECT count(*) FROM t").fetchone() == (1,)
    bob.close()


def test_a_users_connection_cannot_administer_users(hosted):
    alice = hosted.as_user(_key(hosted, "alice"))
    with pytest.raises(mindlite.ForbiddenError, match="Only the operator"):
        alice.create_user("mallory")
    with pytest.raises(mindlite.ForbiddenError):
        alice.users()
    with pytest.raises(mindlite.ForbiddenError):
        alice.create_api_key("alice")
    with pytest.raises(mindlite.ForbiddenError):
        alice.update_user("alice", plan="pro")
    assert [u["name"] for u in hosted.users()] == ["alice"]
    alice.close()


def test_an_unknown_key_is_unauthorized(hosted):
    _key(hosted, "alice")
    for key in ["mlk_not-a-key", "", "pat_whatever"]:
        with pytest.raises(mindlite.UnauthorizedError, match="Invalid API key"):
            hosted.as_user(key)


def test_a_revoked_key_is_refused_and_the_others_still_work(hosted):
    hosted.create_user("alice")
    first, second = hosted.create_api_key("alice"), hosted.create_api_key("alice")
    hosted.as_user(first["key"]).close()
    user = hosted.revoke_api_key("alice", first["id"])
    assert [k["id"] for k in user["api_keys"]] == [second["id"]]
    with pytest.raises(mindlite.UnauthorizedError, match="Invalid API key"):
        hosted.as_user(first["key"])
    hosted.as_user(second["key"]).close()
    with pytest.raises(mindlite.ProgrammingError, match=f"no API key {first['id']}"):
        hosted.revoke_api_key("alice", first["id"])


def test_plans_change_and_unknown_plans_are_named(hosted):
    alice = hosted.as_user(_key(hosted, "alice"))
    assert alice.limits()["plan"] == "free"
    assert hosted.update_user("alice", plan="pro")["plan"] == "pro"
    assert hosted.user("alice")["plan"] == "pro"
    assert alice.limits()["plan"] == "pro" and alice.limits()["minds"]["limit"] == 50
    with pytest.raises(mindlite.ProgrammingError, match="Unknown plan 'platinum'; the plans are: free, pro"):
        hosted.update_user("alice", plan="platinum")
    with pytest.raises(mindlite.ProgrammingError, match="'platinum'"):
        hosted.create_user("bob", plan="platinum")
    assert hosted.user("alice")["plan"] == "pro"
    alice.close()


def test_a_disabled_user_is_refused_until_enabled_again(hosted):
    key = _key(hosted, "alice")
    assert hosted.update_user("alice", disabled=True)["disabled"] is True
    with pytest.raises(mindlite.ForbiddenError, match="User 'alice' is disabled"):
        hosted.as_user(key)
    # Disabling keeps the plan, and enabling keeps it too.
    user = hosted.update_user("alice", disabled=False)
    assert user["disabled"] is False and user["plan"] == "free"
    hosted.as_user(key).close()


def test_limits_show_the_plan_and_each_quota(hosted):
    alice = hosted.as_user(_key(hosted, "alice"))
    limits = alice.limits()
    assert limits["plan"] == "free" and limits["callbacks"] is False
    assert limits["minds"] == {"limit": 3, "used": 0, "remaining": 3}
    assert limits["datasources"] == {"limit": 3, "used": 0, "remaining": 3}
    assert limits["questions"] == {
        "limit": 100, "used": 0, "remaining": 100, "window_secs": 86400, "resets_at": None,
    }
    with pytest.raises(mindlite.ProgrammingError, match="hosted edition"):
        hosted.limits()
    alice.close()


def test_a_question_over_the_plans_quota_raises_quota_exceeded():
    config = {"edition": "hosted", "hosted": {"default_plan": "mute", "plans": {"mute": {"questions_per_window": 0}}}}
    with mindlite.connect(config=config) as hosted:
        with hosted.as_user(_key(hosted, "alice")) as alice:
            alice.create_agent("a")
            with pytest.raises(mindlite.QuotaExceededError, match="Quota exceeded: questions"):
                alice.ask_agent("a", "hello?")
            assert alice.limits()["questions"]["used"] == 0
