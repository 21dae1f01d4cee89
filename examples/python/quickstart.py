"""mindlite from Python in two minutes: a file database, DB-API cursors, results as pandas,
pyarrow and polars, and loading DataFrames. Run: python examples/python/quickstart.py"""

import datetime
import decimal
import os
import tempfile

import mindlite

with tempfile.TemporaryDirectory() as scratch:
    path = os.path.join(scratch, "shop.redb")

    # A database file, created on first use. mindlite.connect() alone opens one in memory.
    with mindlite.connect(path) as con:
        # DB-API 2.0: cursors, named parameters, description, rowcount.
        cur = con.cursor()
        cur.execute(
            "CREATE TABLE orders (id INT NOT NULL, customer VARCHAR, amount DECIMAL(10,2), placed DATE)"
        )
        cur.executemany(
            "INSERT INTO orders VALUES (:id, :customer, :amount, :placed)",
            [
                {"id": 1, "customer": "ada", "amount": decimal.Decimal("12.50"), "placed": datetime.date(2026, 1, 5)},
                {"id": 2, "customer": "bob", "amount": decimal.Decimal("7.25"), "placed": datetime.date(2026, 1, 6)},
                {"id": 3, "customer": "ada", "amount": decimal.Decimal("30.00"), "placed": datetime.date(2026, 2, 1)},
            ],
        )
        print("inserted", cur.rowcount, "rows")
        cur.execute(
            "SELECT customer, sum(amount) AS total FROM orders WHERE placed >= :since"
            " GROUP BY customer ORDER BY customer",
            {"since": datetime.date(2026, 1, 1)},
        )
        print([column[0] for column in cur.description], cur.fetchall())

        # DuckDB-style results: iterate, or hand them to pyarrow / pandas / polars.
        for row in con.sql("SELECT id, customer FROM orders ORDER BY id"):
            print("row", row)
        try:
            frame = con.sql("SELECT * FROM orders ORDER BY id").df()
            print(frame)
            import pyarrow

            # Loading: a pyarrow Table (or a pandas / polars DataFrame) becomes a table.
            con.register("customers", pyarrow.table({"name": ["ada", "bob"], "city": ["Oslo", "Lima"]}))
            joined = con.sql(
                "SELECT c.city, count(*) AS orders FROM orders o JOIN customers c ON o.customer = c.name"
                " GROUP BY c.city ORDER BY c.city"
            ).arrow()
            print(joined.to_pylist())
            assert joined.to_pylist() == [{"city": "Lima", "orders": 1}, {"city": "Oslo", "orders": 2}]
        except ImportError:
            print("(pandas / pyarrow not installed: skipping the DataFrame part)")

        # Errors are PEP 249 classes carrying the engine's message.
        try:
            con.execute("INSERT INTO orders (id) VALUES (NULL)")
        except mindlite.IntegrityError as e:
            print("refused:", e)

    # The data is on disk.
    with mindlite.connect(path) as con:
        (count,) = con.execute("SELECT count(*) FROM orders").fetchone()
        assert count == 3, count
        print("reopened: orders has", count, "rows")
