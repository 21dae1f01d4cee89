"""PEP 249's type objects and constructors, and the shapes of parameters and rows."""

from __future__ import annotations

import datetime as _datetime
import time as _time
from typing import Any, Mapping, Optional, Tuple

#: Parameters of a statement: ``{"id": 7}`` for ``WHERE id = :id``.
Params = Optional[Mapping[str, Any]]
#: A row of a result.
Row = Tuple[Any, ...]


class _TypeObject:
    """A PEP 249 type object: equal to every type code (an SQL type name) of its group."""

    def __init__(self, name: str, *types: str) -> None:
        self._name = name
        self._types = frozenset(types)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _TypeObject):
            return self is other
        # DECIMAL(10,2) belongs where DECIMAL does.
        return isinstance(other, str) and other.split("(")[0].strip() in self._types

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self._name)

    def __repr__(self) -> str:
        return self._name


#: Type codes of text columns.
STRING = _TypeObject("STRING", "VARCHAR")
#: Type codes of binary columns.
BINARY = _TypeObject("BINARY", "BLOB")
#: Type codes of numeric columns.
NUMBER = _TypeObject(
    "NUMBER",
    "TINYINT",
    "SMALLINT",
    "INTEGER",
    "BIGINT",
    "TINYINT UNSIGNED",
    "SMALLINT UNSIGNED",
    "INTEGER UNSIGNED",
    "BIGINT UNSIGNED",
    "FLOAT",
    "DOUBLE",
    "DECIMAL",
    "BOOLEAN",
)
#: Type codes of date and time columns.
DATETIME = _TypeObject("DATETIME", "DATE", "TIMESTAMP", "TIME")
#: mindlite tables have no row ids; nothing compares equal to this.
ROWID = _TypeObject("ROWID")

Date = _datetime.date
Time = _datetime.time
Timestamp = _datetime.datetime
Binary = bytes


def DateFromTicks(ticks: float) -> _datetime.date:
    """PEP 249: the local date of a Unix time."""
    return Date(*_time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> _datetime.time:
    """PEP 249: the local time of day of a Unix time."""
    return Time(*_time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> _datetime.datetime:
    """PEP 249: the local date and time of a Unix time."""
    return Timestamp(*_time.localtime(ticks)[:6])
