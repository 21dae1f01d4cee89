"""mindlite: an embeddable data-and-AI query engine, in process.

SQL over tables stored in one file, through a DB-API 2.0 (PEP 249) connection or DuckDB-style
results that hand their rows to pyarrow, pandas and polars without copying::

    import mindlite

    con = mindlite.connect("shop.redb")          # or connect() for a database in memory
    con.execute("CREATE TABLE items (id INT, name VARCHAR)")
    con.execute("INSERT INTO items VALUES (:id, :name)", {"id": 1, "name": "pen"})
    con.sql("SELECT * FROM items").fetchall()    # [(1, 'pen')]
    con.sql("SELECT * FROM items").df()          # a pandas DataFrame

Transactions: every statement commits on its own when it succeeds and changes nothing when it
fails (autocommit), so ``commit()`` has nothing to do and ``rollback()`` raises
``NotSupportedError``.

Threads: a connection may be shared by any number of threads (``threadsafety = 2``); give each
thread its own cursor. The engine runs without the GIL, and Ctrl-C (KeyboardInterrupt) cancels
the query a thread is waiting for.

Hosted edition (``connect(config={"edition": "hosted"})``): the connection ``connect()`` returns
is the operator's, which administers users (``create_user``, ``create_api_key``, …);
``as_user(api_key)`` returns a connection acting as one user, which sees only that user's
objects, is held to its plan's quotas and, when the plan includes them, registers model-status
callbacks (``register_callback``, ``callbacks``, …).
"""

from __future__ import annotations

from ._connection import Connection, connect
from ._cursor import Cursor
from ._knowledge_base import KnowledgeBase
from ._native import (
    DatabaseError,
    DataError,
    Error,
    ForbiddenError,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    QuotaExceededError,
    UnauthorizedError,
    Warning,
    __version__,
)
from ._result import Result
from ._types import (
    BINARY,
    DATETIME,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    Date,
    DateFromTicks,
    Params,
    Row,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
)

__all__ = [
    "apilevel",
    "threadsafety",
    "paramstyle",
    "connect",
    "Connection",
    "Cursor",
    "Result",
    "KnowledgeBase",
    "Warning",
    "Error",
    "InterfaceError",
    "DatabaseError",
    "DataError",
    "OperationalError",
    "UnauthorizedError",
    "ForbiddenError",
    "QuotaExceededError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
    "Date",
    "Time",
    "Timestamp",
    "DateFromTicks",
    "TimeFromTicks",
    "TimestampFromTicks",
    "Binary",
    "STRING",
    "BINARY",
    "NUMBER",
    "DATETIME",
    "ROWID",
    "__version__",
]

#: PEP 249: the DB-API level.
apilevel = "2.0"
#: PEP 249: threads may share the module and connections, not cursors.
threadsafety = 2
#: PEP 249: parameters are named, ``WHERE id = :id`` with ``{"id": 7}``.
paramstyle = "named"

# The public classes are the package's, wherever they are defined.
for _public in (Connection, Cursor, KnowledgeBase, Result):
    _public.__module__ = __name__
del _public
