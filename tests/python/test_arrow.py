"""Results handed to pyarrow, pandas and polars, and data loaded from them."""

import pytest

import mindlite

pa = pytest.importorskip("pyarrow")


def test_result_to_pyarrow_pandas_polars(con):
    con.execute("CREATE TABLE t (id INT, name VARCHAR)")
    con.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, NULL)")
    table = con.sql("SELECT id, name FROM t ORDER BY id").arrow()
    assert isinstance(table, pa.Table)
    assert table.column_names == ["id", "name"]
    assert table.to_pylist() == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": None}]

    pd = pytest.importorskip("pandas")
    frame = con.sql("SELECT id, name FROM t ORDER BY id").df()
    assert isinstance(frame, pd.DataFrame)
    assert list(frame.columns) == ["id", "name"] and frame["id"].tolist() == [1, 2, 3]

    pl = pytest.importorskip("polars")
    frame = con.sql("SELECT id, name FROM t ORDER BY id").pl()
    assert isinstance(frame, pl.DataFrame)
    assert frame.columns == ["id", "name"] and frame["name"].to_list() == ["a", "b", None]


def test_capsule_protocol_takes_results_directly(con):
    # The names the engine shows, not Arrow's expression names.
    assert pa.table(con.sql("SELECT 1, 'x' AS s")).column_names == ["1", "s"]
    pl = pytest.importorskip("polars")
    # polars reads any Arrow stream as a Series of structs; a DataFrame is its unnesting.
    taken = pl.from_arrow(con.sql("SELECT 1 AS a, 'x' AS b"))
    frame = taken if isinstance(taken, pl.DataFrame) else taken.struct.unnest()
    assert frame.to_dicts() == [{"a": 1, "b": "x"}]
    assert pl.DataFrame(con.sql("SELECT 1 AS a")).to_dicts() == [{"a": 1}]
    reader = con.sql("SELECT * FROM generate_series(1, 20000) ORDER BY 1").record_batches()
    sizes = [batch.num_rows for batch in reader]
    assert sum(sizes) == 20000 and len(sizes) > 1


def test_results_answer_to_duckdb_2_names(con):
    con.execute("CREATE TABLE t (id INT, name VARCHAR, score DOUBLE)")
    con.execute("INSERT INTO t VALUES (1, 'a', 0.5), (2, 'b', NULL), (3, NULL, 1.5)")
    query = "SELECT id, name, score FROM t ORDER BY id"
    assert con.sql(query).to_arrow_table().to_pylist() == con.sql(query).arrow().to_pylist()
    assert con.sql(query).to_dicts() == [
        {"id": 1, "name": "a", "score": 0.5},
        {"id": 2, "name": "b", "score": None},
        {"id": 3, "name": None, "score": 1.5},
    ]
    rows = con.sql(query).iter_rows(batch_size=2)
    assert next(rows) == (1, "a", 0.5) and list(rows) == [(2, "b", None), (3, None, 1.5)]
    # A bad batch size is refused at the call, before any row is taken from the result.
    refused = con.sql(query)
    with pytest.raises(mindlite.InterfaceError, match="batch_size"):
        refused.iter_rows(batch_size=0)
    with pytest.raises(mindlite.InterfaceError, match="batch_size"):
        refused.to_arrow_reader(batch_size=0)
    assert len(refused.fetchall()) == 3

    np = pytest.importorskip("numpy")
    columns = con.sql(query).fetchnumpy()
    assert list(columns) == ["id", "name", "score"]
    assert columns["id"].tolist() == [1, 2, 3] and not np.ma.isMaskedArray(columns["id"])
    # An integer column with NULLs stays integer, masked.
    ints = con.sql("SELECT CASE WHEN id = 2 THEN NULL ELSE id END AS i FROM t ORDER BY id").fetchnumpy()["i"]
    assert ints.dtype.kind == "i" and ints.mask.tolist() == [False, True, False]
    assert ints.compressed().tolist() == [1, 3]
    # NULLs are masked, as DuckDB's fetchnumpy masks them.
    assert np.ma.isMaskedArray(columns["score"]) and columns["score"].mask.tolist() == [False, True, False]
    assert columns["name"][0] == "a" and columns["name"].mask.tolist() == [False, False, True]

    series = "SELECT value FROM generate_series(1, 20000) ORDER BY value"
    sizes = [batch.num_rows for batch in con.sql(series).to_arrow_reader(batch_size=3000)]
    assert sum(sizes) == 20000 and max(sizes) <= 3000 and len(sizes) >= 7
    assert sum(b.num_rows for b in con.sql(series).to_arrow_reader()) == 20000

    # A DB-API cursor answers DuckDB's DB-API names, handing over the rows it has left.
    cur = con.cursor().execute(query)
    assert cur.fetchone() == (1, "a", 0.5)
    assert cur.to_arrow_table().column("id").to_pylist() == [2, 3]
    assert con.cursor().execute(query).fetchnumpy()["id"].tolist() == [1, 2, 3]
    sizes = [b.num_rows for b in con.cursor().execute(series).to_arrow_reader(batch_size=5000)]
    assert sum(sizes) == 20000 and max(sizes) <= 5000
    assert repr(type(con)) == "<class 'mindlite.Connection'>"


def test_rows_read_once_across_fetch_and_arrow(con):
    result = con.sql("SELECT value FROM generate_series(1, 5) ORDER BY value")
    assert result.fetchmany(2) == [(1,), (2,)]
    assert result.arrow().column(0).to_pylist() == [3, 4, 5]
    assert result.fetchall() == []
    empty = con.sql("CREATE TABLE t (a INT)").arrow()
    assert empty.num_columns == 0 and empty.num_rows == 0


def test_register_and_insert_from_pyarrow_pandas_polars(con):
    assert con.register("t", pa.table({"id": [1, 2], "name": ["a", "b"]})) == 2
    assert con.insert("t", pa.record_batch({"id": [3], "name": ["c"]})) == 1
    reader = pa.RecordBatchReader.from_batches(
        pa.schema([("id", pa.int64()), ("name", pa.string())]),
        [pa.record_batch({"id": [4], "name": ["d"]})],
    )
    assert con.insert("t", reader) == 1

    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"id": [5, 6], "name": ["e", None]}, index=[10, 20])
    assert con.insert("t", frame) == 2
    pl = pytest.importorskip("polars")
    assert con.insert("t", pl.DataFrame({"id": [7], "name": ["g"]})) == 1
    assert con.sql("SELECT id, name FROM t ORDER BY id").fetchall() == [
        (1, "a"), (2, "b"), (3, "c"), (4, "d"), (5, "e"), (6, None), (7, "g"),
    ]
    # register replaces, columns and rows.
    assert con.register("t", pl.DataFrame({"x": [1.5]})) == 1
    assert con.sql("SELECT * FROM t").fetchall() == [(1.5,)]
    assert con.sql("SELECT * FROM t").columns == ["x"]


def test_loads_are_all_or_nothing(con):
    con.execute("CREATE TABLE t (id INT NOT NULL, name VARCHAR)")
    good = pa.table({"id": [1], "name": ["a"]})
    con.insert("t", good)
    with pytest.raises(mindlite.DataError, match="'id'"):
        con.insert("t", pa.table({"id": ["2", "not a number"], "name": ["b", "c"]}))
    with pytest.raises(mindlite.IntegrityError, match="NOT NULL"):
        con.insert("t", pa.table({"id": pa.array([2, None], pa.int64()), "name": ["b", "c"]}))
    with pytest.raises(mindlite.ProgrammingError, match="2 columns but 1"):
        con.insert("t", pa.table({"id": [2]}))
    with pytest.raises(mindlite.ProgrammingError, match="'nosuch' not found"):
        con.insert("nosuch", good)
    with pytest.raises(mindlite.InterfaceError, match="cannot load a dict"):
        con.insert("t", {"id": [1]})
    assert con.sql("SELECT * FROM t").fetchall() == [(1, "a")]
