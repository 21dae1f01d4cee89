"""Values round trip between Python and the engine: as parameters, as Arrow, and back."""

import datetime
import decimal

import pytest

import mindlite

VALUES = {
    "i": 42,
    "big": 2**62,
    "f": 1.25,
    "s": "héllo, 'world'",
    "ok": True,
    "nothing": None,
    "d": datetime.date(2024, 2, 29),
    "ts": datetime.datetime(2024, 1, 2, 3, 4, 5, 678901),
    "raw": b"\x00\x01\xfe\xff",
    "amount": decimal.Decimal("-1234.50"),
}


def test_types_round_trip_through_a_table(con):
    con.execute(
        "CREATE TABLE t (i INT, big BIGINT, f DOUBLE, s VARCHAR, ok BOOLEAN, nothing INT,"
        " d DATE, ts TIMESTAMP, raw BYTEA, amount DECIMAL(10,2))"
    )
    cur = con.execute(
        "INSERT INTO t VALUES (:i, :big, :f, :s, :ok, :nothing, :d, :ts, :raw, :amount)", VALUES
    )
    assert cur.rowcount == 1
    cur = con.execute("SELECT * FROM t")
    row = cur.fetchone()
    assert row == tuple(VALUES.values())
    for value, expected in zip(row, VALUES.values()):
        assert type(value) is type(expected)
    assert [d[1] for d in cur.description] == [
        "INTEGER",
        "BIGINT",
        "DOUBLE",
        "VARCHAR",
        "BOOLEAN",
        "INTEGER",
        "DATE",
        "TIMESTAMP",
        "BLOB",
        "DECIMAL(10,2)",
    ]


def test_typed_params_keep_their_type_without_a_table(con):
    row = con.execute("SELECT :d AS d, :ts AS ts, :raw AS raw, :amount AS amount", VALUES).fetchone()
    assert row == (VALUES["d"], VALUES["ts"], VALUES["raw"], VALUES["amount"])
    assert con.execute("SELECT :d + INTERVAL '1 day'", VALUES).fetchone() == (datetime.date(2024, 3, 1),)
    assert con.execute("SELECT :b", {"b": bytearray(b"ab")}).fetchone() == (b"ab",)
    assert con.execute("SELECT :b", {"b": memoryview(b"cd")}).fetchone() == (b"cd",)


def test_zoned_datetimes_bind_as_utc_and_zoned_columns_read_as_utc(con):
    zoned = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))
    assert con.execute("SELECT :t", {"t": zoned}).fetchone() == (datetime.datetime(2024, 1, 2, 1, 4, 5),)
    (value,) = con.execute(
        "SELECT arrow_cast('2024-01-02T03:04:05+02:00', 'Timestamp(Microsecond, Some(\"UTC\"))')"
    ).fetchone()
    assert value == zoned and value.tzinfo == datetime.timezone.utc


def test_bad_param_values_are_refused_by_name(con):
    with pytest.raises(mindlite.DataError, match=":n"):
        con.execute("SELECT :n", {"n": 2**70})
    with pytest.raises(mindlite.DataError, match=":x"):
        con.execute("SELECT :x", {"x": float("nan")})
    with pytest.raises(mindlite.DataError, match=":dec"):
        con.execute("SELECT :dec", {"dec": decimal.Decimal("Infinity")})
    with pytest.raises(mindlite.ProgrammingError, match="38"):
        con.execute("SELECT :dec", {"dec": decimal.Decimal("1" * 40)})


def test_engine_values_become_python_values(con):
    row = con.execute(
        "SELECT CAST(1 AS TINYINT), CAST(2 AS SMALLINT), CAST(3 AS INT UNSIGNED), CAST(1.5 AS FLOAT),"
        " CAST('12:34:56.5' AS TIME), [1, 2, NULL], named_struct('a', 1, 'b', 'x'),"
        " arrow_cast(1000000, 'Duration(Microsecond)'), CAST(NULL AS VARCHAR)"
    ).fetchone()
    assert row == (
        1,
        2,
        3,
        1.5,
        datetime.time(12, 34, 56, 500000),
        [1, 2, None],
        {"a": 1, "b": "x"},
        datetime.timedelta(seconds=1),
        None,
    )


def test_arrow_types_load_and_read_back(con):
    pa = pytest.importorskip("pyarrow")
    table = pa.table(
        {
            "i": pa.array([1, None], pa.int64()),
            "f": pa.array([0.5, None], pa.float64()),
            "s": pa.array(["a", None], pa.large_string()),
            "cat": pa.array(["x", "y"]).dictionary_encode(),
            "b": pa.array([True, None]),
            "d": pa.array([datetime.date(2024, 1, 1), None], pa.date32()),
            "ts": pa.array([datetime.datetime(2024, 1, 1, 12), None], pa.timestamp("ns")),
            "raw": pa.array([b"\x00", None], pa.binary()),
            "dec": pa.array([decimal.Decimal("1.10"), None], pa.decimal128(5, 2)),
        }
    )
    assert con.register("all_types", table) == 2
    result = con.sql("SELECT * FROM all_types")
    assert result.types == [
        "BIGINT",
        "DOUBLE",
        "VARCHAR",
        "VARCHAR",
        "BOOLEAN",
        "DATE",
        "TIMESTAMP",
        "BLOB",
        "DECIMAL(5,2)",
    ]
    assert result.fetchall() == [
        (1, 0.5, "a", "x", True, datetime.date(2024, 1, 1), datetime.datetime(2024, 1, 1, 12), b"\x00", decimal.Decimal("1.10")),
        (None, None, None, "y", None, None, None, None, None),
    ]
    back = con.sql("SELECT i, s, dec FROM all_types").arrow()
    assert back.column("i").to_pylist() == [1, None]
    assert back.schema.field("dec").type == pa.decimal128(5, 2)


def test_far_datetimes_and_missing_values_bind(con):
    far = datetime.datetime(3000, 1, 1, 0, 0, 0, 1)
    early = datetime.datetime(1500, 6, 1)
    assert con.execute("SELECT :a, :b", {"a": far, "b": early}).fetchone() == (far, early)
    pd = pytest.importorskip("pandas")
    assert con.execute("SELECT :t IS NULL", {"t": pd.NaT}).fetchone() == (True,)
