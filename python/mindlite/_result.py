"""A statement's rows, read as they are asked for (DuckDB-style, and under DuckDB 2.0's names)."""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional

from . import _native
from ._types import Row

# How many rows iteration pulls from the engine at a time.
_ITER_ROWS = 1024


class Result:
    """The rows of one statement, read as they are asked for.

    Iterate for rows (pulled from the engine a batch at a time, so memory stays bounded), or
    take them all at once: ``fetchall()``, ``arrow()``, ``df()``, ``pl()``; DuckDB 2.0's
    names answer too (``to_arrow_table()``, ``to_arrow_reader()``, ``iter_rows()``,
    ``to_dicts()``, ``fetchnumpy()``). ``pyarrow.table(r)``
    and ``polars.from_arrow(r)`` take a result directly through ``__arrow_c_stream__``. Rows
    handed over go out of the result: each row is read once, by one of these.
    """

    def __init__(self, query: _native.Query) -> None:
        self._query = query

    @property
    def columns(self) -> List[str]:
        """Column names, as the engine shows them."""
        return self._query.columns

    @property
    def types(self) -> List[str]:
        """Each column's SQL type name (``BIGINT``, ``VARCHAR``, ``DECIMAL(10,2)``, …)."""
        return self._query.types

    @property
    def affected_rows(self) -> Optional[int]:
        """Rows inserted, updated or deleted; ``None`` for queries and DDL."""
        return self._query.affected_rows

    def __iter__(self) -> Iterator[Row]:
        return self.iter_rows()

    def fetchone(self) -> Optional[Row]:
        """The next row, or ``None`` at the end."""
        rows = self._query.fetch(1)
        return rows[0] if rows else None

    def fetchmany(self, size: int = 1) -> List[Row]:
        """Up to ``size`` more rows."""
        return self._query.fetch(max(size, 0))

    def fetchall(self) -> List[Row]:
        """All remaining rows."""
        return self._query.fetch(None)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """The Arrow PyCapsule interface: the remaining rows as an Arrow C stream."""
        return self._query.__arrow_c_stream__(requested_schema)

    def _hand_over(self, consume: Any) -> Any:
        # A Ctrl-C inside the consumer's read ends its stream with an error; raise it as
        # what it was.
        try:
            return consume()
        except Exception:
            if self._query.interrupted:
                raise KeyboardInterrupt from None
            raise

    def arrow(self) -> Any:
        """The remaining rows as a ``pyarrow.Table`` (needs pyarrow)."""
        import pyarrow  # type: ignore[import-untyped, unused-ignore]

        return self._hand_over(lambda: pyarrow.RecordBatchReader.from_stream(self).read_all())

    def record_batches(self) -> Any:
        """The remaining rows as a ``pyarrow.RecordBatchReader``, read batch by batch."""
        import pyarrow  # type: ignore[import-untyped, unused-ignore]

        return pyarrow.RecordBatchReader.from_stream(self)

    # DuckDB 2.0's names for the same, which its users now type.

    def to_arrow_table(self) -> Any:
        """The remaining rows as a ``pyarrow.Table`` (DuckDB 2.0's name of ``arrow()``)."""
        return self.arrow()

    def to_arrow_reader(self, batch_size: Optional[int] = None) -> Any:
        """The remaining rows as a ``pyarrow.RecordBatchReader`` (DuckDB 2.0's name of
        ``record_batches()``), in batches of at most ``batch_size`` rows when given."""
        if batch_size is not None:
            _check_batch_size(batch_size)
        reader = self.record_batches()
        if batch_size is None:
            return reader
        import pyarrow  # type: ignore[import-untyped, unused-ignore]

        def sliced() -> Iterator[Any]:
            for batch in reader:
                for start in range(0, batch.num_rows, batch_size):
                    yield batch.slice(start, batch_size)

        return pyarrow.RecordBatchReader.from_batches(reader.schema, sliced())

    def iter_rows(self, batch_size: int = _ITER_ROWS) -> Iterator[Row]:
        """The remaining rows one by one, pulled from the engine ``batch_size`` at a time."""
        _check_batch_size(batch_size)
        return self._rows(batch_size)

    def _rows(self, batch_size: int) -> Iterator[Row]:
        while True:
            rows = self._query.fetch(batch_size)
            if not rows:
                return
            yield from rows

    def to_dicts(self) -> List[Dict[str, Any]]:
        """The remaining rows as dicts keyed by column name."""
        columns = self.columns
        return [dict(zip(columns, row)) for row in self.iter_rows()]

    def fetchnumpy(self) -> Dict[str, Any]:
        """The remaining rows as a dict of NumPy arrays, one per column (needs pyarrow and
        numpy); a column with NULLs is a masked array."""
        table = self.arrow()
        return {name: _numpy_column(table.column(i)) for i, name in enumerate(table.column_names)}

    def df(self) -> Any:
        """The remaining rows as a pandas DataFrame (needs pandas and pyarrow)."""
        return self.arrow().to_pandas()

    def pl(self) -> Any:
        """The remaining rows as a polars DataFrame (needs polars)."""
        import polars

        return self._hand_over(lambda: polars.DataFrame(self))

    def __repr__(self) -> str:
        if not self._query.has_rows:
            return f"<mindlite.Result affected_rows={self.affected_rows}>"
        return f"<mindlite.Result columns={self.columns!r}>"


def _check_batch_size(batch_size: int) -> None:
    """Refuses a batch size below 1, before any row is read."""
    if batch_size < 1:
        raise _native.InterfaceError(f"batch_size must be at least 1, not {batch_size}")


def _numpy_column(column: Any) -> Any:
    """A pyarrow column as a NumPy array, masked where it holds NULLs (as DuckDB's are); an
    integer or boolean column keeps its type (its NULLs are filled before the mask hides
    them, rather than turning it into floats)."""
    import numpy
    import pyarrow  # type: ignore[import-untyped, unused-ignore]

    if column.null_count == 0:
        return column.to_numpy(zero_copy_only=False)
    mask = column.is_null().to_numpy(zero_copy_only=False)
    kind = column.type
    if pyarrow.types.is_integer(kind) or pyarrow.types.is_boolean(kind):
        filled = column.fill_null(pyarrow.scalar(0, kind) if pyarrow.types.is_integer(kind) else False)
        return numpy.ma.masked_array(filled.to_numpy(zero_copy_only=False), mask=mask)
    return numpy.ma.masked_array(column.to_numpy(zero_copy_only=False), mask=mask)
