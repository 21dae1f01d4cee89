"""What the package hands the native module: Arrow streams of the caller's data, callback
bodies in MindsDB's shape, progress callbacks."""

from __future__ import annotations

import json as _json
from typing import Any, Callable, Dict, Optional

from ._native import InterfaceError


def _arrow_stream(data: Any) -> Any:
    """An Arrow C stream capsule of a pyarrow Table/RecordBatch/RecordBatchReader, a pandas
    or polars DataFrame, or anything with ``__arrow_c_stream__``."""
    if type(data).__module__.split(".")[0] == "pandas":
        try:
            import pyarrow  # type: ignore[import-untyped, unused-ignore]
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise InterfaceError("loading a pandas DataFrame needs pyarrow installed") from e
        # Without the index: it is row labels, not data.
        data = pyarrow.Table.from_pandas(data, preserve_index=False)
    if hasattr(data, "__arrow_c_stream__"):
        return data.__arrow_c_stream__()
    if hasattr(data, "__arrow_c_array__"):
        import pyarrow  # type: ignore[import-untyped, unused-ignore]

        return pyarrow.Table.from_batches([pyarrow.record_batch(data)]).__arrow_c_stream__()
    if hasattr(data, "to_arrow"):
        return data.to_arrow().__arrow_c_stream__()
    raise InterfaceError(
        f"cannot load a {type(data).__name__}: expected a pyarrow Table, RecordBatch or "
        "RecordBatchReader, a pandas or polars DataFrame, or an object with __arrow_c_stream__"
    )


def _callback_body(
    url: Optional[str],
    model_name: Optional[str],
    project_name: Optional[str],
    count: Optional[int],
    interval: Optional[int],
    http_timeout: Optional[int],
) -> Dict[str, Any]:
    """MindsDB's callback body ``{url, filter: {…}, attempt: {…}}``, without the settings left
    ``None``."""
    body: Dict[str, Any] = {}
    if url is not None:
        body["url"] = url
    patterns = {"model_name": model_name, "project_name": project_name}
    attempt = {"count": count, "interval": interval, "http_timeout": http_timeout}
    for key, values in (("filter", patterns), ("attempt", attempt)):
        given = {name: value for name, value in values.items() if value is not None}
        if given:
            body[key] = given
    return body


def _progress(
    callback: Optional[Callable[[Dict[str, Any]], Any]],
) -> Optional[Callable[[str], bool]]:
    """A user's progress callback as the native module calls it: with JSON text, going on
    unless it returned ``False``."""
    if callback is None:
        return None

    def call(text: str) -> bool:
        return callback(_json.loads(text)) is not False

    return call
