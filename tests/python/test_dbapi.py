"""PEP 249 behaviour of connections and cursors."""

import datetime
import threading

import pytest

import mindlite


def test_module_globals():
    assert mindlite.apilevel == "2.0"
    assert mindlite.threadsafety == 2
    assert mindlite.paramstyle == "named"
    assert isinstance(mindlite.__version__, str) and mindlite.__version__


def test_exception_hierarchy():
    assert issubclass(mindlite.Error, Exception)
    assert issubclass(mindlite.Warning, Exception)
    assert issubclass(mindlite.InterfaceError, mindlite.Error)
    assert issubclass(mindlite.DatabaseError, mindlite.Error)
    for name in [
        "DataError",
        "OperationalError",
        "IntegrityError",
        "InternalError",
        "ProgrammingError",
        "NotSupportedError",
    ]:
        cls = getattr(mindlite, name)
        assert issubclass(cls, mindlite.DatabaseError), name
        # PEP 249's optional extension: the classes on the connection too.
        assert getattr(mindlite.Connection, name) is cls


def test_type_objects_and_constructors():
    assert mindlite.NUMBER == "BIGINT" and mindlite.NUMBER == "DECIMAL(10,2)"
    assert mindlite.STRING == "VARCHAR" and mindlite.STRING != "BIGINT"
    assert mindlite.BINARY == "BLOB"
    assert mindlite.DATETIME == "TIMESTAMP" and mindlite.DATETIME == "DATE"
    assert mindlite.ROWID != "BIGINT"
    assert mindlite.Date(2024, 1, 2) == datetime.date(2024, 1, 2)
    assert mindlite.Binary(b"x") == b"x"
    assert isinstance(mindlite.TimestampFromTicks(0), datetime.datetime)
    assert isinstance(mindlite.DateFromTicks(0), datetime.date)
    assert isinstance(mindlite.TimeFromTicks(0), datetime.time)


def test_cursor_execute_fetch_and_description(con):
    cur = con.cursor()
    assert cur.description is None and cur.rowcount == -1 and cur.arraysize == 1
    assert cur.execute("CREATE TABLE t (id INT NOT NULL, name VARCHAR)") is cur
    assert cur.description is None
    cur.execute("INSERT INTO t VALUES (1, 'one'), (2, 'two'), (3, NULL)")
    assert cur.rowcount == 3
    cur.execute("SELECT id, name FROM t ORDER BY id")
    assert cur.rowcount == -1
    assert cur.description == [
        ("id", "INTEGER", None, None, None, None, False),
        ("name", "VARCHAR", None, None, None, None, True),
    ]
    assert cur.description[0][1] == mindlite.NUMBER
    assert cur.description[1][1] == mindlite.STRING
    assert cur.fetchone() == (1, "one")
    assert cur.fetchmany() == [(2, "two")]
    assert cur.fetchmany(5) == [(3, None)]
    assert cur.fetchone() is None
    assert cur.fetchall() == []
    cur.arraysize = 2
    cur.execute("SELECT id FROM t ORDER BY id")
    assert cur.fetchmany() == [(1,), (2,)]
    assert list(cur) == [(3,)]


def test_fetch_without_rows_is_an_error(con):
    cur = con.cursor()
    with pytest.raises(mindlite.ProgrammingError, match="no rows"):
        cur.fetchone()
    cur.execute("CREATE TABLE t (a INT)")
    with pytest.raises(mindlite.ProgrammingError, match="no rows"):
        cur.fetchall()


def test_named_params_and_executemany(con):
    cur = con.cursor()
    cur.execute("CREATE TABLE t (id INT, name VARCHAR)")
    cur.executemany(
        "INSERT INTO t VALUES (:id, :name)",
        [{"id": 1, "name": "O'Brien"}, {"id": 2, "name": "x"}, {"id": 3, "name": None}],
    )
    assert cur.rowcount == 3
    assert cur.description is None
    cur.execute("SELECT name FROM t WHERE id = :id", {"id": 1})
    assert cur.fetchall() == [("O'Brien",)]
    cur.execute("SELECT id FROM t WHERE id IN :ids ORDER BY id", {"ids": [1, 3]})
    assert cur.fetchall() == [(1,), (3,)]
    cur.execute("SELECT count(*) FROM t WHERE id IN :ids", {"ids": []})
    assert cur.fetchall() == [(0,)]
    with pytest.raises(mindlite.InterfaceError, match="named"):
        cur.execute("SELECT :a", (1,))
    with pytest.raises(mindlite.ProgrammingError, match=":missing"):
        cur.execute("SELECT :missing")
    with pytest.raises(mindlite.InterfaceError, match=":obj"):
        cur.execute("SELECT :obj", {"obj": object()})


def test_connection_execute_and_sql_shortcuts(con):
    assert con.execute("SELECT 1 AS one").fetchall() == [(1,)]
    result = con.sql("SELECT 2 AS two")
    assert result.columns == ["two"] and result.fetchall() == [(2,)]
    assert con.sql("CREATE TABLE t (a INT)").affected_rows is None
    assert con.sql("INSERT INTO t VALUES (1), (2)").affected_rows == 2


def test_commit_rollback_semantics(con):
    con.execute("CREATE TABLE t (a INT)")
    con.execute("INSERT INTO t VALUES (1)")
    # Autocommit until a transaction is opened: commit and rollback have nothing to do.
    assert not con.in_transaction
    con.commit()
    con.rollback()
    assert con.execute("SELECT a FROM t").fetchall() == [(1,)]
    # A failing statement changes nothing.
    with pytest.raises(mindlite.DataError):
        con.execute("INSERT INTO t VALUES (2), ('x')")
    assert con.execute("SELECT a FROM t").fetchall() == [(1,)]

    con.begin()
    assert con.in_transaction
    con.execute("INSERT INTO t VALUES (2)")
    con.insert("t", __import__("pyarrow").table({"a": [3]}))
    assert con.execute("SELECT count(*) FROM t").fetchall() == [(3,)]
    con.rollback()
    assert not con.in_transaction
    assert con.execute("SELECT a FROM t").fetchall() == [(1,)]

    con.execute("BEGIN")
    con.execute("INSERT INTO t VALUES (4)")
    con.commit()
    assert not con.in_transaction
    assert con.execute("SELECT a FROM t ORDER BY a").fetchall() == [(1,), (4,)]
    with pytest.raises(mindlite.ProgrammingError, match="no transaction is active"):
        con.execute("COMMIT")
    # A failure inside a transaction aborts it, as in DuckDB: only rollback() ends it.
    con.begin()
    con.execute("INSERT INTO t VALUES (5)")
    with pytest.raises(mindlite.DataError):
        con.execute("INSERT INTO t VALUES ('x')")
    with pytest.raises(mindlite.ProgrammingError, match="transaction is aborted"):
        con.commit()
    con.rollback()
    assert con.execute("SELECT a FROM t ORDER BY a").fetchall() == [(1,), (4,)]


def test_a_connection_closed_in_a_transaction_rolls_it_back(path):
    con = mindlite.connect(path)
    con.execute("CREATE TABLE t (a INT)")
    con.begin()
    con.execute("INSERT INTO t VALUES (1)")
    con.close()
    con = mindlite.connect(path)
    assert con.execute("SELECT count(*) FROM t").fetchall() == [(0,)]
    con.close()


def test_close_and_context_managers(path):
    with mindlite.connect(path) as con:
        with con.cursor() as cur:
            cur.execute("CREATE TABLE t (a INT)")
        with pytest.raises(mindlite.InterfaceError, match="cursor is closed"):
            cur.execute("SELECT 1")
        assert not con.closed
    assert con.closed
    with pytest.raises(mindlite.InterfaceError, match="connection is closed"):
        con.cursor()
    with pytest.raises(mindlite.InterfaceError, match="connection is closed"):
        con.sql("SELECT 1")
    con.close()  # twice is fine


def test_file_persists_and_is_locked(path):
    con = mindlite.connect(path)
    con.execute("CREATE TABLE t (a INT)")
    con.execute("INSERT INTO t VALUES (7)")
    with pytest.raises(mindlite.OperationalError):
        mindlite.connect(path)
    con.close()
    with mindlite.connect(str(path)) as again:
        assert again.execute("SELECT a FROM t").fetchall() == [(7,)]


def test_config_dict_and_errors(tmp_path):
    with mindlite.connect(config={"query": {"default_project": "main"}}) as con:
        assert con.current_db == "main"
    with pytest.raises(mindlite.ProgrammingError, match="nosuch"):
        mindlite.connect(config={"nosuch": 1})
    with pytest.raises(mindlite.InterfaceError):
        mindlite.connect(config=42)


def test_use_changes_the_current_project(con):
    con.execute("CREATE PROJECT p")
    con.execute("USE p")
    assert con.current_db == "p"
    con.execute("CREATE TABLE t (a INT)")
    # A project also lists its `models` table, as MindsDB's do.
    assert con.sql("SHOW TABLES FROM p").fetchall() == [("models",), ("t",)]
    with pytest.raises(mindlite.ProgrammingError, match="'t' not found"):
        con.sql("SELECT * FROM t", db="mindsdb")
    # An explicit db runs that one query there and leaves the current project alone.
    assert con.current_db == "p"


def test_errors_map_to_classes_with_the_engines_message(con):
    con.execute("CREATE TABLE t (a INT NOT NULL)")
    cases = [
        ("SELEC 1", mindlite.ProgrammingError, "SELEC"),
        ("SELECT * FROM nosuch", mindlite.ProgrammingError, "Table 'nosuch' not found"),
        ("CREATE TABLE t (b INT)", mindlite.ProgrammingError, "already exists"),
        ("SELECT CAST('abc' AS INT)", mindlite.DataError, "abc"),
        ("SELECT CAST(300 AS TINYINT)", mindlite.DataError, "300"),
        ("INSERT INTO t VALUES (NULL)", mindlite.IntegrityError, "NOT NULL"),
        ("CREATE TABLE k (id INT PRIMARY KEY)", None, None),
        ("INSERT INTO k VALUES (1), (1)", mindlite.IntegrityError, "PRIMARY KEY"),
    ]
    for sql, cls, text in cases:
        if cls is None:
            con.execute(sql)
            continue
        with pytest.raises(cls, match=text):
            con.execute(sql).fetchall()


def test_threads_share_a_connection(con):
    con.execute("CREATE TABLE t (thread INT, i INT)")
    errors = []

    def work(n):
        try:
            cur = con.cursor()
            for i in range(20):
                cur.execute("INSERT INTO t VALUES (:n, :i)", {"n": n, "i": i})
                cur.execute("SELECT count(*) FROM t WHERE thread = :n", {"n": n})
                assert cur.fetchone() == (i + 1,)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert con.execute("SELECT count(*), count(DISTINCT thread) FROM t").fetchall() == [(120, 6)]


def test_close_releases_the_file_even_with_unread_results(path):
    con = mindlite.connect(path)
    con.execute("CREATE TABLE t (a INT)")
    con.execute("INSERT INTO t SELECT value FROM generate_series(1, 100000)")
    cur = con.execute("SELECT a FROM t")
    result = con.sql("SELECT a FROM t")
    assert cur.fetchone() is not None and result.fetchone() is not None
    con.close()
    with pytest.raises(mindlite.InterfaceError, match="closed"):
        result.fetchall()
    with pytest.raises(mindlite.InterfaceError, match="closed"):
        cur.fetchall()
    with mindlite.connect(path) as again:
        assert again.execute("SELECT count(*) FROM t").fetchone() == (100000,)


def test_record_helpers_return_plain_dicts(con):
    con.execute("CREATE PROJECT shop")
    names = [p["name"] for p in con.projects()]
    assert names == ["mindsdb", "shop"]
    shop = con.project("SHOP")
    assert shop["name"] == "shop" and isinstance(shop["id"], int) and shop["created_at"]
    with pytest.raises(mindlite.ProgrammingError, match="nope"):
        con.project("nope")
    status = con.status()
    assert status["environment"] == "local" and status["mindsdb_version"] == mindlite.__version__


def test_fetchall_after_a_partial_read_returns_only_the_rest(con):
    result = con.sql("SELECT value FROM generate_series(1, 5) ORDER BY value")
    assert result.fetchone() == (1,)
    assert result.fetchall() == [(2,), (3,), (4,), (5,)]
    cur = con.execute("SELECT value FROM generate_series(1, 3) ORDER BY value")
    assert cur.fetchone() == (1,)
    assert cur.fetchall() == [(2,), (3,)]


def test_a_use_in_one_thread_is_not_undone_by_anothers_statement(con):
    con.execute("CREATE PROJECT p1")
    con.execute("CREATE TABLE big (a BIGINT)")
    done = threading.Event()

    def slow():
        con.execute("INSERT INTO big SELECT value FROM generate_series(1, 2000000)")
        done.set()

    thread = threading.Thread(target=slow)
    thread.start()
    con.execute("USE p1")
    thread.join()
    assert done.is_set()
    assert con.current_db == "p1"


def test_values_python_cannot_hold_raise_data_error(con):
    with pytest.raises(mindlite.DataError):
        con.execute("SELECT arrow_cast(arrow_cast(100000000000000, 'Int64'), 'Timestamp(Second, None)')").fetchall()
    with pytest.raises(mindlite.DataError, match="year"):
        con.execute("SELECT arrow_cast(arrow_cast(4000000, 'Int32'), 'Date32')").fetchall()
