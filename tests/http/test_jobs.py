"""Jobs against a real server: `CREATE JOB … EVERY … [IF (…)]` runs on schedule as its owner,
`LAST` reads only the rows added since the last run and survives a restart, a one-time job runs
once and is gone, failures are kept in the history; `SHOW JOBS`, the project's `jobs` and
`jobs_history` tables, `information_schema.jobs[_history]`, MindsDB's REST job routes and
`mindsdb_sdk`'s `project.jobs`. The scheduler looks every 100 ms here (`jobs.poll_interval_ms`)."""

import time

import mindsdb_sdk
import requests

FAST = "[jobs]\npoll_interval_ms = 100\n"


def wait_for(check, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.1)


def ids(server, table: str) -> list:
    return [row[0] for row in server.sql_ok(f"SELECT id FROM mindsdb.{table} ORDER BY id")["data"]]


def runs(server, name: str) -> list:
    return server.sql_ok(
        f"SELECT RUN_START, RUN_END, ERROR, QUERY FROM information_schema.jobs_history "
        f"WHERE NAME = '{name}' ORDER BY RUN_START")["data"]


def test_a_job_runs_on_schedule_and_last_reads_only_new_rows_across_a_restart(start_server):
    server = start_server(FAST)
    server.sql_ok("CREATE TABLE events (id INT, kind VARCHAR)")
    server.sql_ok("INSERT INTO events VALUES (1, 'a'), (2, 'a'), (3, 'b')")
    server.sql_ok("CREATE TABLE seen (id INT)")
    server.sql_ok("CREATE JOB mindsdb.copier (INSERT INTO seen SELECT id FROM mindsdb.events "
                  "WHERE kind = 'a' AND id > LAST) EVERY 1 second")
    shown = server.sql_ok("SHOW JOBS")
    assert shown["column_names"][:2] == ["NAME", "PROJECT"], shown
    row = dict(zip(shown["column_names"], shown["data"][0]))
    assert (row["NAME"], row["PROJECT"], row["SCHEDULE_STR"]) == ("copier", "mindsdb", "every 1 second")

    # The first run reads nothing new (LAST starts at what the table holds), as in MindsDB.
    wait_for(lambda: len(runs(server, "copier")) >= 1, "the first run")
    assert ids(server, "seen") == []
    server.sql_ok("INSERT INTO events VALUES (4, 'a'), (5, 'b'), (6, 'a')")
    wait_for(lambda: ids(server, "seen") == [4, 6], "the new rows")
    first = runs(server, "copier")
    assert all(error is None for _, _, error, _ in first), first
    assert "id > 3 AND id <= 6" in " ".join(q for *_, q in first), first

    # Kept in the file: after a restart the job goes on from the last value it read.
    server.restart()
    server.sql_ok("INSERT INTO events VALUES (7, 'a')")
    wait_for(lambda: ids(server, "seen") == [4, 6, 7], "the row added after the restart")
    time.sleep(1.5)
    assert ids(server, "seen") == [4, 6, 7], "a row read twice"
    variables = server.sql_ok("SELECT VARIABLES FROM information_schema.jobs WHERE NAME = 'copier'")
    assert '"mindsdb.events.id":"7"' in variables["data"][0][0], variables

    # mindsdb_sdk reads the project's jobs and history tables.
    project = mindsdb_sdk.connect(server.url).get_project("mindsdb")
    assert [job.name for job in project.jobs.list()] == ["copier"]
    history = project.jobs.get("copier").get_history()
    assert len(history) >= 3 and set(history["ERROR"].dropna()) == set()
    project.jobs.drop("copier")
    assert server.sql_ok("SHOW JOBS")["data"] == []
    # Its history stays.
    assert len(runs(server, "copier")) >= 3


def test_a_condition_gates_a_job_a_one_time_job_is_gone_and_failures_are_kept(start_server):
    server = start_server(FAST)
    server.sql_ok("CREATE TABLE flags (id INT)")
    server.sql_ok("CREATE TABLE ticks (id INT)")
    server.sql_ok("CREATE JOB gated (INSERT INTO ticks SELECT 1) EVERY 1 second "
                  "IF (SELECT * FROM flags WHERE id > 0)")
    wait_for(lambda: len(runs(server, "gated")) >= 2, "two runs")
    assert ids(server, "ticks") == []
    server.sql_ok("INSERT INTO flags VALUES (1)")
    wait_for(lambda: ids(server, "ticks"), "a run once the condition holds")
    server.sql_ok("DROP JOB gated")

    server.sql_ok("CREATE JOB once AS (INSERT INTO ticks SELECT 100; INSERT INTO ticks SELECT 101)")
    wait_for(lambda: 101 in ids(server, "ticks"), "the one-time job")
    wait_for(lambda: server.sql_ok("SHOW JOBS LIKE 'once'")["data"] == [], "the one-time job gone")
    [(start, end, error, query)] = runs(server, "once")
    assert end >= start and error is None
    assert query == "INSERT INTO ticks SELECT 100; INSERT INTO ticks SELECT 101"

    server.sql_ok("CREATE JOB broken (INSERT INTO ticks SELECT 200; SELECT * FROM nowhere; "
                  "INSERT INTO ticks SELECT 201)")
    # A run is listed from its start, without an end until it ends.
    [(_, _, error, query)] = wait_for(
        lambda: [run for run in runs(server, "broken") if run[1] is not None], "the failed run")
    assert "nowhere" in error and query.endswith("SELECT * FROM nowhere"), (error, query)
    assert 200 in ids(server, "ticks") and 201 not in ids(server, "ticks")

    # A job is refused when it is written wrong, by name.
    for statement, says in (
        ("CREATE JOB j (SELEC 1)", "SELEC"),
        ("CREATE JOB j (SELECT 1) EVERY 3 fortnights", "fortnights"),
        ("CREATE JOB j (SELECT 1) START '2030-01-01' END '2029-01-01' EVERY day", "end date"),
        ("CREATE JOB j (SELECT 1) START 'soon'", "Can't parse date"),
        ("CREATE JOB nope.j (SELECT 1)", "nope"),
        ("DROP JOB nosuch", "does not exist"),
        (f"CREATE JOB big (SELECT '{'x' * 300_000}')", "262144 bytes"),
    ):
        failed = server.sql(statement).json()
        assert failed["type"] == "error" and says in failed["error_message"], (statement, failed)
    server.sql_ok("CREATE JOB later (SELECT 1) START '2999-01-01' EVERY 1 day")
    again = server.sql("CREATE JOB later (SELECT 2)").json()
    assert again["type"] == "error" and "already exists" in again["error_message"]
    server.sql_ok("CREATE JOB IF NOT EXISTS later (SELECT 2)")
    server.sql_ok("DROP JOB IF EXISTS nosuch")
    # A dropped project takes its jobs with it.
    server.sql_ok("CREATE PROJECT temp")
    server.sql_ok("CREATE JOB temp.j (SELECT 1) START '2999-01-01'")
    server.sql_ok("DROP DATABASE temp")
    assert server.sql_ok("SELECT NAME FROM information_schema.jobs")["data"] == [["later"]]


def test_mindsdbs_job_routes_create_read_list_and_delete(start_server):
    server = start_server(FAST)
    url = server.url + "/api/projects/mindsdb/jobs"
    server.sql_ok("CREATE TABLE hits (id INT)")
    made = requests.post(url, timeout=10, json={"job": {
        "name": "rest_job", "query": "INSERT INTO hits SELECT 1", "start_at": None,
        "end_at": None, "schedule_str": "every 2 days"}})
    assert made.status_code == 200, made.text
    record = made.json()
    assert (record["name"], record["project"], record["schedule_str"]) == ("rest_job", "mindsdb", "every 2 days")
    assert record["query"] == "INSERT INTO hits SELECT 1" and record["if_query"] is None
    assert [j["name"] for j in requests.get(url, timeout=10).json()] == ["rest_job"]
    assert requests.get(f"{url}/rest_job", timeout=10).json()["id"] == record["id"]
    wait_for(lambda: requests.get(f"{url}/rest_job/history", timeout=10).json(), "its first run")
    [run] = requests.get(f"{url}/rest_job/history", timeout=10).json()
    assert run["name"] == "rest_job" and run["error"] is None and run["run_end"]
    assert ids(server, "hits") == [1]

    for body, status, title in (
        ({}, 400, "Missing parameter"),
        ({"job": {"query": "SELECT 1"}}, 400, "Invalid job"),
        ({"job": {"name": "x", "query": "SELECT 1", "schedule_str": "sometimes"}}, 400, "Invalid job"),
        ({"job": {"name": "rest_job", "query": "SELECT 1"}}, 409, "Job already exists"),
    ):
        r = requests.post(url, json=body, timeout=10)
        assert (r.status_code, r.json()["title"]) == (status, title), (body, r.text)
    missing = requests.get(f"{url}/nosuch", timeout=10)
    assert missing.status_code == 404 and missing.json()["title"] == "Job not found"
    assert requests.get(f"{url}/nosuch/history", timeout=10).status_code == 404
    gone = requests.get(server.url + "/api/projects/nope/jobs", timeout=10)
    assert gone.status_code == 404 and gone.json()["title"] == "Project not found"
    assert requests.delete(f"{url}/rest_job", timeout=10).status_code == 204
    assert requests.delete(f"{url}/rest_job", timeout=10).status_code == 404


def test_a_users_jobs_run_as_that_user_within_the_limits(start_server):
    """Hosted: each user sees and runs only their own jobs, each run acting as its owner; the
    number of jobs and how often one repeats are bounded (`jobs.max_jobs`,
    `jobs.min_period_secs`)."""
    from hosted import hosted_server, sql, sql_ok

    config = 'edition = "hosted"\n[jobs]\npoll_interval_ms = 100\nmax_jobs = 2\nmin_period_secs = 60\n'
    server, keys = hosted_server(start_server, config, "alice", "bob")
    alice, bob = keys["alice"], keys["bob"]
    for key in (alice, bob):
        sql_ok(server, key, "CREATE TABLE mine (id INT)")
    sql_ok(server, alice, "CREATE JOB filler (INSERT INTO mine SELECT 1) EVERY 1 minute")
    wait_for(lambda: sql_ok(server, alice, "SELECT id FROM mine")["data"] == [[1]], "alice's run")
    assert sql_ok(server, bob, "SELECT id FROM mine")["data"] == []
    assert sql_ok(server, bob, "SHOW JOBS")["data"] == []
    assert sql_ok(server, bob, "SELECT * FROM information_schema.jobs_history")["data"] == []
    assert len(sql_ok(server, alice, "SELECT * FROM information_schema.jobs_history")["data"]) == 1
    refused = sql(server, bob, "DROP JOB filler")
    assert refused["type"] == "error" and "does not exist" in refused["error_message"]

    often = sql(server, alice, "CREATE JOB often (SELECT 1) EVERY 30 seconds")
    assert often["type"] == "error" and "jobs.min_period_secs" in often["error_message"], often
    sql_ok(server, alice, "CREATE JOB second (SELECT 1) START '2999-01-01'")
    third = sql(server, alice, "CREATE JOB third (SELECT 1) START '2999-01-01'")
    assert third["type"] == "error" and "jobs.max_jobs" in third["error_message"], third
