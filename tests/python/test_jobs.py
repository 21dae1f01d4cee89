"""Jobs from Python: the typed helpers over the engine create, list, read and drop them as
MindsDB's REST API shows them, and a job created here runs on the engine's scheduler."""

import time

import pytest

import mindlite


def test_jobs_are_created_listed_run_and_dropped(con):
    con.execute("CREATE TABLE seen (n INT)")
    job = con.create_job("Stamp", "INSERT INTO seen VALUES (1)", schedule="every 1 hour")
    assert job["name"] == "stamp" and job["schedule_str"] == "every 1 hour"
    assert [j["name"] for j in con.jobs()] == ["stamp"]
    assert con.job("STAMP")["query"].startswith("INSERT INTO seen VALUES")
    # Its first run is due at once; the scheduler runs it and keeps its history.
    deadline = time.monotonic() + 30
    while not con.job_history("stamp") and time.monotonic() < deadline:
        time.sleep(0.1)
    runs = con.job_history("stamp")
    assert len(runs) >= 1 and runs[0]["error"] is None, runs
    assert con.execute("SELECT count(*) FROM seen").fetchone()[0] >= 1
    con.drop_job("stamp")
    assert con.jobs() == []
    with pytest.raises(mindlite.ProgrammingError, match="stamp"):
        con.job("stamp")


def test_bad_jobs_raise_clear_errors(con):
    with pytest.raises(mindlite.ProgrammingError):
        con.create_job("bad", "SELEC 1")
    con.create_job("once", "SELECT 1", start_at="2099-01-01 00:00:00")
    with pytest.raises(mindlite.ProgrammingError, match="already exists"):
        con.create_job("once", "SELECT 1")
    with pytest.raises(mindlite.ProgrammingError):
        con.drop_job("ghost")
