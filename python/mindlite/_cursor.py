"""PEP 249's cursor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple

from . import _native
from ._native import InterfaceError, ProgrammingError
from ._result import _ITER_ROWS, Result
from ._types import Params, Row

if TYPE_CHECKING:
    from ._connection import Connection


class Cursor:
    """A PEP 249 cursor. Each thread should use its own."""

    #: Rows ``fetchmany()`` returns when given no size.
    arraysize: int

    def __init__(self, connection: "Connection") -> None:
        self._connection = connection
        self._query: Optional[_native.Query] = None
        self._closed = False
        self._rowcount = -1
        self.arraysize = 1

    @property
    def connection(self) -> "Connection":
        """The connection this cursor runs on."""
        return self._connection

    @property
    def description(self) -> Optional[List[Tuple[Any, ...]]]:
        """For a statement with rows: ``(name, type_code, None, None, None, None, null_ok)`` per
        column, the type code an SQL type name that the type objects (``NUMBER`` …) compare
        equal to; otherwise ``None``."""
        query = self._query
        if query is None or not query.has_rows:
            return None
        return [
            (name, type_code, None, None, None, None, nullable)
            for name, type_code, nullable in zip(query.columns, query.types, query.nullable)
        ]

    @property
    def rowcount(self) -> int:
        """Rows changed by the last INSERT/UPDATE/DELETE (summed over ``executemany``), or -1."""
        return self._rowcount

    @property
    def lastrowid(self) -> None:
        """mindlite tables have no row ids: always ``None``."""
        return None

    def _check(self) -> None:
        if self._closed:
            raise InterfaceError("The cursor is closed")
        self._connection._check()

    def execute(self, operation: str, parameters: Params = None) -> "Cursor":
        """Runs one statement (or several separated by ``;``, the last one's result kept) with
        ``:name`` parameters from ``parameters``."""
        self._check()
        self._query = None
        self._rowcount = -1
        query = self._connection._db.execute(operation, parameters)
        self._query = query
        if query.affected_rows is not None:
            self._rowcount = query.affected_rows
        return self

    def executemany(self, operation: str, seq_of_parameters: Sequence[Params]) -> "Cursor":
        """Runs ``operation`` once per parameter mapping; ``rowcount`` is the total changed."""
        self._check()
        total = 0
        counted = False
        for parameters in seq_of_parameters:
            self.execute(operation, parameters)
            if self._rowcount >= 0:
                total += self._rowcount
                counted = True
        self._query = None
        self._rowcount = total if counted else -1
        return self

    def _rows(self) -> _native.Query:
        self._check()
        if self._query is None or not self._query.has_rows:
            raise ProgrammingError("The last statement produced no rows to fetch")
        return self._query

    def fetchone(self) -> Optional[Row]:
        """The next row, or ``None`` at the end."""
        rows = self._rows().fetch(1)
        return rows[0] if rows else None

    def fetchmany(self, size: Optional[int] = None) -> List[Row]:
        """Up to ``size`` (default ``arraysize``) more rows."""
        return self._rows().fetch(max(self.arraysize if size is None else size, 0))

    def fetchall(self) -> List[Row]:
        """All remaining rows."""
        return self._rows().fetch(None)

    # What DuckDB 2.0's DB-API results answer besides PEP 249's: the remaining rows handed
    # over as a result's are.

    def fetchnumpy(self) -> Dict[str, Any]:
        """The remaining rows as a dict of NumPy arrays, one per column (see
        ``Result.fetchnumpy``)."""
        return Result(self._rows()).fetchnumpy()

    def to_arrow_table(self) -> Any:
        """The remaining rows as a ``pyarrow.Table``."""
        return Result(self._rows()).to_arrow_table()

    def to_arrow_reader(self, batch_size: Optional[int] = None) -> Any:
        """The remaining rows as a ``pyarrow.RecordBatchReader`` (see
        ``Result.to_arrow_reader``)."""
        return Result(self._rows()).to_arrow_reader(batch_size)

    def __iter__(self) -> Iterator[Row]:
        query = self._rows()
        while True:
            rows = query.fetch(_ITER_ROWS)
            if not rows:
                return
            yield from rows

    def setinputsizes(self, sizes: Any) -> None:
        """PEP 249: accepted and ignored."""

    def setoutputsize(self, size: Any, column: Any = None) -> None:
        """PEP 249: accepted and ignored."""

    def close(self) -> None:
        """Frees the result; the cursor can no longer be used. Closing twice does nothing."""
        self._query = None
        self._closed = True

    def __enter__(self) -> "Cursor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
