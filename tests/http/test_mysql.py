"""The MySQL door (`mysql.port`, MindsDB's 47335), reached by the real clients, unchanged: the
MariaDB command-line client, PyMySQL (text protocol), MySQL Connector/Python (prepared
statements over the binary protocol) and SQLAlchemy 2 with pandas. Every server the suite
starts opens the door on a free port (`Server.mysql_port`)."""

from __future__ import annotations

import datetime
import decimal
import os
import shutil
import socket
import struct
import subprocess
import time

import pytest

from hosted import hosted_server
from mlserver import AUTH_CONFIG


def connect(server, user="mindsdb", password="", database=None, **options):
    import pymysql

    return pymysql.connect(host="127.0.0.1", port=server.mysql_port, user=user, password=password,
                           database=database, connect_timeout=10, read_timeout=60, **options)


def rows(connection, query, args=None):
    with connection.cursor() as cursor:
        cursor.execute(query, args)
        return cursor.fetchall()


def mariadb() -> str:
    found = shutil.which("mariadb") or shutil.which("mysql")
    if found is None:
        pytest.fail("the MariaDB client is not installed (Debian: mariadb-client; .ci/run installs it)")
    return found


def test_the_mariadb_client_runs_a_script_unchanged(server):
    script = """
CREATE TABLE mindsdb.fruit (id INT, name VARCHAR, price DOUBLE);
INSERT INTO mindsdb.fruit VALUES (1, 'apple', 1.5), (2, 'pear''s', 2), (3, NULL, NULL);
SELECT id, name, price FROM mindsdb.fruit ORDER BY id;
USE mindsdb;
SELECT count(*) AS n FROM fruit;
SHOW DATABASES;
"""
    done = subprocess.run([mariadb(), "--host=127.0.0.1", f"--port={server.mysql_port}", "--user=mindsdb",
                           "--skip-ssl", "--batch", "--raw"],
                          input=script, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "id\tname\tprice\n1\tapple\t1.5\n2\tpear's\t2\n3\tNULL\tNULL\n" in out, out
    assert "n\n3\n" in out, out
    for database in ("information_schema", "mindsdb", "files"):
        assert f"\n{database}\n" in out, out
    # An error is MySQL's: a code and SQLSTATE, the engine's message.
    failed = subprocess.run([mariadb(), "--host=127.0.0.1", f"--port={server.mysql_port}", "--user=mindsdb",
                             "--skip-ssl", "--batch", "-e", "SELECT * FROM mindsdb.nosuch"],
                            capture_output=True, text=True, timeout=60)
    assert failed.returncode != 0
    assert "ERROR 1146 (42S02)" in failed.stderr and "nosuch" in failed.stderr, failed.stderr


def test_pymysql_reads_every_type_and_binds_quotes_as_values(server):
    connection = connect(server, database="mindsdb")
    got = rows(connection, "SELECT 1 AS i, CAST(-2 AS TINYINT) AS t, CAST(7 AS BIGINT UNSIGNED) AS u, "
                           "2.5 AS f, CAST(12.50 AS DECIMAL(10, 2)) AS d, 'text é' AS s, NULL AS n, "
                           "true AS b, DATE '2024-02-29' AS day, "
                           "TIMESTAMP '2024-01-02 03:04:05.250' AS at, [1, 2] AS l")
    assert got == ((1, -2, 7, 2.5, decimal.Decimal("12.50"), "text é", None, 1,
                    datetime.date(2024, 2, 29), datetime.datetime(2024, 1, 2, 3, 4, 5, 250000), "[1,2]"),), got
    rows(connection, "CREATE TABLE people (name VARCHAR, note VARCHAR)")
    hostile = ["O'Brien", 'say "hi"', "x'); DROP TABLE people; --", "back\\slash", "∑ unicode"]
    with connection.cursor() as cursor:
        cursor.executemany("INSERT INTO people VALUES (%s, %s)", [(h, None) for h in hostile])
    assert sorted(r[0] for r in rows(connection, "SELECT name FROM people")) == sorted(hostile)
    assert rows(connection, "SELECT count(*) FROM people WHERE note IS NULL") == ((5,),)
    # The engine's errors arrive as MySQL errors; the connection goes on.
    import pymysql

    with pytest.raises(pymysql.err.MySQLError) as failed:
        rows(connection, "SELEC 1")
    assert failed.value.args[0] == 1149, failed.value.args
    assert rows(connection, "SELECT 2") == ((2,),)
    # Stacked statements need the client's MULTI_STATEMENTS flag, as in MySQL: without it an
    # injected "; DROP …" is a syntax error, not a second statement.
    with pytest.raises(pymysql.err.MySQLError):
        rows(connection, "SELECT 1; DROP TABLE people")
    assert rows(connection, "SELECT count(*) FROM people") == ((5,),)
    from pymysql.constants import CLIENT

    stacked = connect(server, database="mindsdb", client_flag=CLIENT.MULTI_STATEMENTS)
    assert rows(stacked, "SELECT 1; SELECT 2") == ((2,),)
    stacked.close()
    # Two commands in one write (as a client sends COM_STMT_CLOSE and its next query): each
    # is answered in turn.
    def packet(payload: bytes) -> bytes:
        return struct.pack("<I", len(payload))[:3] + b"\x00" + payload

    piped = connect(server)
    piped._sock.sendall(packet(b"\x03SELECT 7 AS seven") + packet(b"\x0e"))  # noqa: SLF001
    time.sleep(0.5)
    answers = piped._sock.recv(65536)  # noqa: SLF001
    # The query's rows, then the ping's OK packet (7 bytes, sequence 1, header 0).
    assert b"seven" in answers and answers[-11:-6] == b"\x07\x00\x00\x01\x00", answers
    piped.close()
    assert server.death() is None
    # The clients' own statements on connect: versions, variables, SET NAMES.
    version = rows(connection, "SELECT VERSION()")[0][0]
    assert version.startswith("8.0"), version
    rows(connection, "SET NAMES utf8mb4")
    assert connection.get_server_info().startswith("8.0.17-mindlite")
    connection.ping()
    connection.close()


def test_connector_python_prepared_statements_bind_every_type(server):
    import mysql.connector

    connection = mysql.connector.connect(host="127.0.0.1", port=server.mysql_port, user="mindsdb",
                                         password="", database="mindsdb", use_pure=True)
    cursor = connection.cursor(prepared=True)
    cursor.execute("CREATE TABLE typed (i BIGINT, f DOUBLE, d DECIMAL(10, 2), s VARCHAR, "
                   "day DATE, at TIMESTAMP, b BYTEA)")
    values = (7, 2.5, decimal.Decimal("12.50"), "it's; DROP TABLE typed; --", datetime.date(2024, 2, 29),
              datetime.datetime(2024, 1, 2, 3, 4, 5, 123456), b"\x00\xff\x01")
    cursor.execute("INSERT INTO typed VALUES (?, ?, ?, ?, ?, ?, ?)", values)
    cursor.execute("INSERT INTO typed VALUES (?, ?, ?, ?, ?, ?, ?)", (None,) * 7)
    cursor.execute("SELECT i, f, d, s, day, at, b FROM typed WHERE i = ? AND s = ?", (7, values[3]))
    got = cursor.fetchall()
    assert len(got) == 1, got
    row = got[0]
    assert row[:5] == (7, 2.5, decimal.Decimal("12.50"), values[3], datetime.date(2024, 2, 29)), row
    assert row[5] == datetime.datetime(2024, 1, 2, 3, 4, 5, 123456), row
    assert bytes(row[6]) == b"\x00\xff\x01", row
    cursor.execute("SELECT count(*) FROM typed WHERE i IS NULL AND day IS NULL")
    assert cursor.fetchall() == [(1,)]
    # A value that only looks like SQL stays a value: the table is still there.
    cursor.execute("SELECT count(*) FROM typed WHERE s = ?", ("x' OR '1'='1",))
    assert cursor.fetchall() == [(0,)]
    cursor.close()
    connection.close()


def test_sqlalchemy_and_pandas_read_through_the_door(server):
    import pandas as pd
    import sqlalchemy

    engine = sqlalchemy.create_engine(f"mysql+pymysql://mindsdb:@127.0.0.1:{server.mysql_port}/mindsdb")
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text("CREATE TABLE scores (name VARCHAR, score DOUBLE)"))
        connection.execute(sqlalchemy.text("INSERT INTO scores VALUES (:n, :s)"),
                           [{"n": "a", "s": 1.5}, {"n": "b", "s": 2.5}])
    frame = pd.read_sql("SELECT name, score FROM scores ORDER BY name", engine)
    assert frame.to_dict("list") == {"name": ["a", "b"], "score": [1.5, 2.5]}
    engine.dispose()


def test_a_large_result_streams_without_the_server_holding_it(server):
    import pymysql.cursors

    connection = connect(server, database="mindsdb", cursorclass=pymysql.cursors.SSCursor)
    before = rss(server.pid)
    with connection.cursor() as cursor:
        # 100,000 rows of 1 KB: 100 MB sent, which the server must not hold at once.
        cursor.execute("SELECT value, repeat('x', 1000) AS pad FROM generate_series(1, 100000)")
        count, peak = 0, before
        for row in cursor:
            count += 1
            if count % 10_000 == 0:
                peak = max(peak, rss(server.pid))
    assert count == 100_000
    assert peak - before < 64 << 20, f"the server grew by {(peak - before) >> 20} MiB while streaming"
    # A client that leaves in the middle of a result: the server stops its statement and goes on.
    with connection.cursor() as cursor:
        cursor.execute("SELECT value, repeat('x', 1000) FROM generate_series(1, 10000000)")
        cursor.fetchone()
    connection._sock.close()  # noqa: SLF001 (a client that drops without a word)
    time.sleep(0.5)
    fresh = connect(server)
    assert rows(fresh, "SELECT 1") == ((1,),)
    assert server.death() is None


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_logins_are_checked_with_both_scrambles(start_server):
    import mysql.connector
    import pymysql

    server = start_server(AUTH_CONFIG)
    with pytest.raises(pymysql.err.OperationalError) as refused:
        connect(server, user="admin", password="wrong")
    assert refused.value.args[0] in (1045, 1698), refused.value.args
    with pytest.raises(pymysql.err.OperationalError):
        connect(server, user="someone", password="secret")
    # mysql_native_password (PyMySQL follows the server's plugin).
    assert rows(connect(server, user="admin", password="secret"), "SELECT 1") == ((1,),)
    # caching_sha2_password's fast path, as MySQL 8's clients log in.
    connection = mysql.connector.connect(host="127.0.0.1", port=server.mysql_port, user="admin",
                                         password="secret", auth_plugin="caching_sha2_password",
                                         use_pure=True, ssl_disabled=True)
    cursor = connection.cursor()
    cursor.execute("SELECT 2")
    assert cursor.fetchall() == [(2,)]
    connection.close()
    # A password set at run time (PUT /api/config) logs in over MySQL too.
    import requests

    from mlserver import bearer

    token = requests.post(server.url + "/api/login", json={"username": "admin", "password": "secret"},
                          timeout=10).json()["token"]
    changed = requests.put(server.url + "/api/config", json={"auth": {"password": "n3w"}},
                           headers=bearer(token), timeout=10)
    assert changed.status_code == 200, changed.text
    assert rows(connect(server, user="admin", password="n3w"), "SELECT 3") == ((3,),)
    with pytest.raises(pymysql.err.OperationalError):
        connect(server, user="admin", password="secret")


def test_logins_count_against_the_address_rate_and_change_user_is_refused(start_server):
    import pymysql

    server = start_server(AUTH_CONFIG + "\n[http]\nunauthenticated_per_minute = 3\n")
    for _ in range(3):
        with pytest.raises(pymysql.err.OperationalError):
            connect(server, user="admin", password="wrong")
    # Over the rate, even the right password waits, as HTTP's /api/login does.
    with pytest.raises(pymysql.err.OperationalError):
        connect(server, user="admin", password="secret")
    assert "http.unauthenticated_per_minute" in server.log_text(), server.log_tail()

    plain = start_server()
    connection = connect(plain)
    # COM_CHANGE_USER would be answered OK by the protocol crate without changing anything:
    # the connection ends instead.
    with pytest.raises(pymysql.err.MySQLError):
        connection._execute_command(0x11, b"bob\x00\x00")  # noqa: SLF001
        connection._read_ok_packet()  # noqa: SLF001
    assert rows(connect(plain), "SELECT 1") == ((1,),)


def test_each_hosted_user_logs_in_with_an_api_key_and_sees_its_own(start_server):
    import pymysql

    server, keys = hosted_server(start_server, 'edition = "hosted"\n', "alice", "bob")
    alice = connect(server, user="alice", password=keys["alice"])
    rows(alice, "CREATE TABLE mindsdb.secret (x INT)")
    rows(alice, "INSERT INTO mindsdb.secret VALUES (42)")
    assert rows(alice, "SELECT x FROM mindsdb.secret") == ((42,),)
    bob = connect(server, user="bob", password=keys["bob"])
    with pytest.raises(pymysql.err.MySQLError):
        rows(bob, "SELECT x FROM mindsdb.secret")
    # Another user's key is no password of this one's.
    with pytest.raises(pymysql.err.OperationalError):
        connect(server, user="bob", password=keys["alice"])


def test_a_statement_stops_at_its_deadline_and_the_connection_goes_on(start_server):
    import pymysql

    server = start_server("[query]\nstatement_timeout_secs = 1\n")
    connection = connect(server)
    started = time.monotonic()
    with pytest.raises(pymysql.err.MySQLError) as stopped:
        rows(connection, "SELECT count(*) FROM generate_series(1, 100000) a, generate_series(1, 100000) b "
                         "WHERE a.value + b.value = 7")
    assert time.monotonic() - started < 30
    assert stopped.value.args[0] == 1317 and "statement_timeout_secs" in stopped.value.args[1], stopped.value.args
    assert rows(connection, "SELECT 1") == ((1,),)


def test_the_door_holds_its_limits(start_server):
    server = start_server("[mysql]\nhandshake_timeout_secs = 1\nmax_packet_mb = 1\n"
                          "max_connections = 8\nmax_connections_per_address = 4\n")
    # A connection that never logs in is closed.
    silent = socket.create_connection(("127.0.0.1", server.mysql_port), timeout=10)
    greeting = silent.recv(4096)
    assert greeting[4] == 10, "the server's greeting (protocol 10)"
    silent.settimeout(10)
    assert silent.recv(4096) == b"", "closed after mysql.handshake_timeout_secs"
    # A command past mysql.max_packet_mb ends the connection before it is read whole.
    import pymysql

    connection = connect(server)
    with pytest.raises(pymysql.err.OperationalError):
        rows(connection, "SELECT '" + "x" * (2 << 20) + "'")
    # Connections past an address's share that are all busy logging in are refused with 1040.
    held = [socket.create_connection(("127.0.0.1", server.mysql_port), timeout=10) for _ in range(4)]
    refused = socket.create_connection(("127.0.0.1", server.mysql_port), timeout=10)
    packet = refused.recv(4096)
    assert packet[4] == 0xFF and struct.unpack("<H", packet[5:7])[0] == 1040, packet
    assert b"mysql.max_connections_per_address" in packet
    for s in held + [refused, silent]:
        s.close()
    time.sleep(0.2)
    assert rows(connect(server), "SELECT 1") == ((1,),)
    assert server.death() is None


def test_hostile_packets_end_only_their_connection(server):
    """Malformed packets a fuzzer would send: a prepared statement executed with parameters
    shorter than their types, an unknown type byte, a multi-part packet with a wrong sequence
    number. Each ends its own connection or gets an error; the server goes on."""
    import mysql.connector

    connection = mysql.connector.connect(host="127.0.0.1", port=server.mysql_port, user="mindsdb",
                                         password="", use_pure=True)
    cursor = connection.cursor(prepared=True)
    cursor.execute("SELECT ? + 1", (1,))
    assert cursor.fetchall() == [(2,)]
    sock = connection._socket.sock  # noqa: SLF001 (raw packets on a logged-in connection)
    statement = cursor._prepared["statement_id"]  # noqa: SLF001
    for payload in (
        bytes([0x17]) + struct.pack("<I", statement) + b"\x00\x01\x00\x00\x00" + b"\x00" + b"\x01" + b"\x08\x00",
        bytes([0x17]) + struct.pack("<I", statement) + b"\x00\x01\x00\x00\x00" + b"\x00" + b"\x01" + b"\xee\x00" + b"\x01",
        bytes([0x17]) + struct.pack("<I", statement) + b"\x00\x01\x00\x00\x00" + b"\x00" + b"\x00",
    ):
        try:
            sock.sendall(struct.pack("<I", len(payload))[:3] + b"\x00" + payload)
            sock.settimeout(5)
            sock.recv(4096)
        except OSError:
            break
    raw = socket.create_connection(("127.0.0.1", server.mysql_port), timeout=10)
    raw.recv(4096)
    raw.sendall(b"\xff\xff\xff\x01" + b"\x00" * 0xFFFFFF + b"\x01\x00\x00\x07" + b"\x00")
    raw.close()
    time.sleep(0.3)
    assert server.death() is None
    assert rows(connect(server), "SELECT 1") == ((1,),)


def test_off_with_port_0(start_server, server_bin, tmp_path):
    from mlserver import child_environment

    log = tmp_path / "off.log"
    with open(log, "wb") as out:
        process = subprocess.Popen([str(server_bin), "--data", str(tmp_path / "off" / "m.redb"), "--port", "0",
                                    "--mysql-port", "0"], stdout=out, stderr=out, env=child_environment())
    try:
        deadline = time.monotonic() + 30
        while b"listening on" not in log.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.05)
        text = log.read_text()
        assert "listening on" in text and "MySQL protocol" not in text, text
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert os.path.exists(tmp_path / "off" / "m.redb")
