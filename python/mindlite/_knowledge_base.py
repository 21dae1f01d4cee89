"""A knowledge base of a connection: documents chunked, embedded and searchable by meaning."""

from __future__ import annotations

import json as _json
from typing import TYPE_CHECKING, Any, Callable, Dict, Mapping, Optional

from ._convert import _arrow_stream, _progress
from ._result import Result

if TYPE_CHECKING:
    from ._connection import Connection


class KnowledgeBase:
    """A knowledge base of a connection (``con.create_knowledge_base`` or
    ``con.knowledge_base``): documents chunked, embedded and searchable by meaning. ``info``
    is its record as MindsDB's REST API shows it (the embedding model's API key masked)."""

    def __init__(self, connection: "Connection", info: Dict[str, Any]) -> None:
        self._connection = connection
        self.info = info
        self.name: str = info["name"]
        self.project: str = info["project"]

    def __repr__(self) -> str:
        return f"KnowledgeBase({self.project}.{self.name})"

    def insert(
        self, data: Any, progress: Optional[Callable[[Dict[str, Any]], Any]] = None
    ) -> int:
        """Inserts documents: a dict or a list of dicts (one per row), a pandas or polars
        DataFrame, or pyarrow data. Columns are matched by name (the id, content and metadata
        columns); a document whose id is there already is replaced. All or nothing; returns
        the documents inserted.

        ``progress``, when given, is called after each embedding request and at the end with
        a dict: ``status`` (``reading``, ``storing``, ``done``, ``failed``), ``documents``,
        ``chunks``, ``embedded``, ``indexed``, ``started_at``, ``updated_at``, ``error``.
        Returning ``False`` stops the insert (nothing is written and it raises
        ``OperationalError``); what it raises stops the insert and is raised."""
        self._connection._check()
        db = self._connection._db
        if isinstance(data, Mapping):
            data = [data]
        if isinstance(data, list):
            body = _json.dumps({"rows": data}, default=str)
            return db.insert_knowledge_base_json(
                self.project, self.name, body, _progress(progress)
            )
        return db.insert_knowledge_base_arrow(
            self.project, self.name, _arrow_stream(data), _progress(progress)
        )

    def insert_query(
        self, query: str, progress: Optional[Callable[[Dict[str, Any]], Any]] = None
    ) -> int:
        """Inserts the rows of ``query`` (one SELECT, run in the knowledge base's project);
        ``progress`` as for ``insert``."""
        self._connection._check()
        body = _json.dumps({"query": query})
        return self._connection._db.insert_knowledge_base_json(
            self.project, self.name, body, _progress(progress)
        )

    def search(
        self,
        text: str,
        filters: Optional[Mapping[str, Any]] = None,
        limit: Optional[int] = None,
    ) -> Result:
        """The ``limit`` chunks nearest ``text`` (10 by default), nearest first, among those
        whose columns equal ``filters`` (a value, a list of values, or None for NULL):
        ``id, chunk_id, chunk_content, metadata``, the metadata columns, ``distance``,
        ``relevance``. The search's settings are filters too: ``{"hybrid_search": True}``
        mixes in keyword scores, ``{"hybrid_search_alpha": a}`` weighs them (0: keywords only),
        ``{"reranking": False}`` skips the reranker. Read it with ``.df()``, ``.arrow()`` or
        ``.fetchall()``."""
        self._connection._check()
        query = self._connection._db.search_knowledge_base(
            self.project, self.name, text, _json.dumps(dict(filters or {}), default=str), limit
        )
        return Result(query)
