"""A connection to a database file (or one in memory): PEP 249, DuckDB-style results, and the
engine's objects (projects, agents, knowledge bases, files, models, users, callbacks)."""

from __future__ import annotations

import json as _json
import os as _os
import time as _time
from typing import (
    Any,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Union,
    cast,
)

from . import _native
from ._convert import _arrow_stream, _callback_body
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
)
from ._result import Result
from ._types import Params


def connect(
    path: Union[str, "_os.PathLike[str]", None] = None,
    config: Union[Mapping[str, Any], str, None] = None,
) -> "Connection":
    """Opens the database file at ``path``, creating it (and its directory) when missing.

    ``path=None`` or ``":memory:"`` opens a fresh database in memory. ``config`` is a dict (as
    in the TOML config file: ``{"query": {"batch_size": 4096}}``) or TOML/JSON text; unknown
    keys are errors. A file another process has open raises ``OperationalError``.
    """
    if path is not None and _os.fspath(path) == ":memory:":
        path = None
    if isinstance(config, Mapping):
        config = _json.dumps(config)
    elif config is not None and not isinstance(config, str):
        raise InterfaceError("config must be a dict or TOML/JSON text")
    native_path = None if path is None else _os.fspath(path)
    return Connection(_native.Database(native_path, config))


class Connection:
    """A PEP 249 connection to one database, safe to share across threads."""

    # PEP 249's optional extension: the exception classes as connection attributes.
    Warning = Warning
    Error = Error
    InterfaceError = InterfaceError
    DatabaseError = DatabaseError
    DataError = DataError
    OperationalError = OperationalError
    UnauthorizedError = UnauthorizedError
    ForbiddenError = ForbiddenError
    QuotaExceededError = QuotaExceededError
    IntegrityError = IntegrityError
    InternalError = InternalError
    ProgrammingError = ProgrammingError
    NotSupportedError = NotSupportedError

    def __init__(self, db: _native.Database) -> None:
        self._db = db

    def _check(self) -> None:
        if self._db.closed:
            raise InterfaceError("The connection is closed")

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._db.closed

    @property
    def current_db(self) -> str:
        """The project one-part table names resolve in; ``USE`` changes it."""
        return self._db.current_db

    def cursor(self) -> Cursor:
        """A new cursor."""
        self._check()
        return Cursor(self)

    def execute(self, operation: str, parameters: Params = None) -> Cursor:
        """A new cursor that has run ``operation`` (as sqlite3's shortcut)."""
        return self.cursor().execute(operation, parameters)

    def sql(
        self,
        query: str,
        params: Params = None,
        db: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> Result:
        """Runs ``query`` with ``:name`` parameters in project ``db`` (the current one when
        ``None``) and returns its result. ``timeout`` (seconds) stops it sooner than the
        configured statement time limit (``query.statement_timeout_secs``), never later."""
        self._check()
        return Result(self._db.execute(query, params, db, timeout))

    def interrupt(self) -> None:
        """Stops every statement running on this connection, from another thread (as
        ``sqlite3.Connection.interrupt``): each raises ``OperationalError`` ("The statement was
        interrupted") and a write that had not committed writes nothing. Statements started
        afterwards run normally."""
        self._check()
        self._db.interrupt()

    def register(self, name: str, data: Any, db: Optional[str] = None) -> int:
        """Stores ``data`` (pyarrow, pandas, polars, or any Arrow stream) as the table ``name``,
        replacing a table of that name, in one transaction. Returns the rows stored."""
        self._check()
        return self._db.load(name, _arrow_stream(data), "replace", db)

    def insert(self, table: str, data: Any, db: Optional[str] = None) -> int:
        """Appends ``data``'s rows to the existing ``table`` in one transaction, all or none;
        columns are matched by position and cast to the table's types. Returns the rows added."""
        self._check()
        return self._db.load(table, _arrow_stream(data), "append", db)

    # Typed helpers for the engine's records, as plain dicts. Later features (agents, models,
    # callbacks, users) add theirs in the same shape.

    def projects(self) -> List[Dict[str, Any]]:
        """The projects: ``[{"id": 1, "name": "mindsdb", "created_at": "…"}, …]``."""
        self._check()
        return cast(List[Dict[str, Any]], _json.loads(self._db.projects()))

    def project(self, name: str) -> Dict[str, Any]:
        """One project by name (case-insensitive); ``ProgrammingError`` when there is none."""
        self._check()
        return cast(Dict[str, Any], _json.loads(self._db.project(name)))

    def status(self) -> Dict[str, Any]:
        """The engine's status, as MindsDB's ``GET /api/status`` reports it."""
        self._check()
        return cast(Dict[str, Any], _json.loads(self._db.status()))

    def agents(self, project: Optional[str] = None) -> List[Dict[str, Any]]:
        """The agents of ``project`` (the current project by default), as MindsDB's REST API
        shows them: ``{"id", "name", "project_id", "created_at", "updated_at", "model", "data",
        "prompt_template", "params"}``, empty fields left out."""
        self._check()
        text = self._db.agents(project or self.current_db)
        return cast(List[Dict[str, Any]], _json.loads(text))

    def agent(self, name: str, project: Optional[str] = None) -> Dict[str, Any]:
        """One agent by name (case-insensitive); ``ProgrammingError`` when there is none."""
        self._check()
        return cast(Dict[str, Any], _json.loads(self._db.agent(project or self.current_db, name)))

    def knowledge_bases(self, project: Optional[str] = None) -> List[KnowledgeBase]:
        """The knowledge bases of ``project`` (the current project by default)."""
        self._check()
        text = self._db.knowledge_bases(project or self.current_db)
        return [KnowledgeBase(self, info) for info in _json.loads(text)]

    def knowledge_base(self, name: str, project: Optional[str] = None) -> KnowledgeBase:
        """One knowledge base by name; ``ProgrammingError`` when there is none."""
        self._check()
        text = self._db.knowledge_base(project or self.current_db, name)
        return KnowledgeBase(self, _json.loads(text))

    def create_knowledge_base(
        self,
        name: str,
        *,
        embedding_model: Optional[Mapping[str, Any]] = None,
        content_columns: Optional[Sequence[str]] = None,
        metadata_columns: Optional[Sequence[str]] = None,
        id_column: Optional[str] = None,
        preprocessing: Optional[Mapping[str, Any]] = None,
        project: Optional[str] = None,
    ) -> KnowledgeBase:
        """Creates a knowledge base, as ``CREATE KNOWLEDGE_BASE`` does: ``embedding_model``
        like ``{"provider": "openai", "model_name": "text-embedding-3-small", "base_url": …,
        "api_key": …}`` (the configured ``[embedding]`` model when left out),
        ``content_columns`` (default ``["content"]``), ``metadata_columns`` (default: every
        other column of the first insert), ``id_column`` (default ``"id"``), ``preprocessing``
        like ``{"text_chunking_config": {"chunk_size": 1000, "chunk_overlap": 200}}``."""
        self._check()
        body: Dict[str, Any] = {"name": name}
        for key, value in (
            ("embedding_model", embedding_model),
            ("content_columns", list(content_columns) if content_columns is not None else None),
            ("metadata_columns", list(metadata_columns) if metadata_columns is not None else None),
            ("id_column", id_column),
            ("preprocessing", preprocessing),
        ):
            if value is not None:
                body[key] = value
        text = self._db.create_knowledge_base(project or self.current_db, _json.dumps(body))
        return KnowledgeBase(self, _json.loads(text))

    def drop_knowledge_base(self, name: str, project: Optional[str] = None) -> None:
        """Drops a knowledge base and its documents."""
        self._check()
        self._db.drop_knowledge_base(project or self.current_db, name)

    def create_agent(
        self,
        name: str,
        *,
        model: Optional[Mapping[str, Any]] = None,
        data: Optional[Mapping[str, Any]] = None,
        prompt_template: Optional[str] = None,
        params: Optional[Mapping[str, Any]] = None,
        project: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Creates an agent: ``model`` like ``{"provider": "openai", "model_name": "gpt-4o",
        "base_url": …, "api_key": …}`` (the configured default model when left out), ``data``
        like ``{"tables": ["mindsdb.sales", "files.*"]}``, ``params`` like ``{"timeout": 30}``.
        Returns the agent."""
        self._check()
        spec: Dict[str, Any] = {"name": name}
        for key, value in (
            ("model", model),
            ("data", data),
            ("prompt_template", prompt_template),
            ("params", params),
        ):
            if value is not None:
                spec[key] = value
        text = self._db.create_agent(project or self.current_db, _json.dumps(spec))
        return cast(Dict[str, Any], _json.loads(text))

    def update_agent(
        self, name: str, changes: Mapping[str, Any], project: Optional[str] = None
    ) -> Dict[str, Any]:
        """Updates an agent as MindsDB's PUT does: ``changes`` merged into it key by key, a
        ``None`` dropping a key, a different ``"name"`` renaming it. Returns the agent."""
        self._check()
        text = self._db.update_agent(project or self.current_db, name, _json.dumps(dict(changes)))
        return cast(Dict[str, Any], _json.loads(text))

    def drop_agent(self, name: str, project: Optional[str] = None) -> None:
        """Deletes an agent; ``ProgrammingError`` when there is none of that name."""
        self._check()
        self._db.delete_agent(project or self.current_db, name)

    def jobs(self, project: Optional[str] = None) -> List[Dict[str, Any]]:
        """The jobs of ``project`` (the current project by default), as MindsDB's REST API
        shows them: ``{"id", "name", "project", "start_at", "end_at", "next_run_at",
        "schedule_str", "query", "if_query", "variables"}``."""
        self._check()
        return cast(List[Dict[str, Any]], _json.loads(self._db.jobs(project or self.current_db)))

    def job(self, name: str, project: Optional[str] = None) -> Dict[str, Any]:
        """One job by name (case-insensitive); ``ProgrammingError`` when there is none."""
        self._check()
        return cast(Dict[str, Any], _json.loads(self._db.job(project or self.current_db, name)))

    def create_job(
        self,
        name: str,
        query: str,
        *,
        schedule: Optional[str] = None,
        start_at: Optional[str] = None,
        end_at: Optional[str] = None,
        if_query: Optional[str] = None,
        project: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Creates a job that runs ``query`` (statements separated by ``;``) as
        ``CREATE JOB`` does: ``schedule`` like ``"every 2 hours"`` (once when left out),
        ``start_at`` / ``end_at`` like ``"2026-01-01 00:00:00"``, and ``if_query`` a query
        whose rows decide whether a run goes on. Returns the job."""
        self._check()
        spec: Dict[str, Any] = {"name": name, "query": query}
        for key, value in (
            ("schedule_str", schedule),
            ("start_at", start_at),
            ("end_at", end_at),
            ("if_query", if_query),
        ):
            if value is not None:
                spec[key] = value
        text = self._db.create_job(project or self.current_db, _json.dumps(spec))
        return cast(Dict[str, Any], _json.loads(text))

    def drop_job(self, name: str, project: Optional[str] = None) -> None:
        """Deletes a job (its runs stay in its history); ``ProgrammingError`` when there is
        none of that name."""
        self._check()
        self._db.delete_job(project or self.current_db, name)

    def job_history(self, name: str, project: Optional[str] = None) -> List[Dict[str, Any]]:
        """A job's runs, oldest first: ``{"name", "project", "run_start", "run_end",
        "error", "query"}``."""
        self._check()
        text = self._db.job_history(project or self.current_db, name)
        return cast(List[Dict[str, Any]], _json.loads(text))

    def ask_agent(
        self,
        name: str,
        question: Union[str, Sequence[Mapping[str, Any]]],
        project: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Asks an agent. ``question`` is the text, or a whole conversation as
        ``[{"role": "user" | "assistant", "content": …}, …]`` ending with the user's turn.
        Returns ``{"content": answer, "role": "assistant", "trace_id": …}``. The agent runs
        with the GIL released; Ctrl-C stops it. ``OperationalError`` when its model provider
        fails or times out."""
        self._check()
        messages = (
            [{"role": "user", "content": question}]
            if isinstance(question, str)
            else [dict(m) for m in question]
        )
        text = self._db.ask_agent(project or self.current_db, name, _json.dumps(messages))
        return cast(Dict[str, Any], _json.loads(text)["message"])

    def upload_file(
        self,
        name: str,
        data: Union[bytes, str, "_os.PathLike[str]"],
        format: Optional[str] = None,
    ) -> int:
        """Stores a file as the table ``files.<name>``; returns the rows stored. ``data`` is the
        file's content (bytes or text) or a path to read. ``format`` is ``"csv"``, ``"json"``,
        ``"parquet"`` or ``"xlsx"`` (a typed table), ``"txt"``, ``"md"``, ``"html"``, ``"pdf"``
        or ``"docx"`` (rows of the text's chunks: ``content``, ``metadata``), or ``"zip"`` (an
        archive of one such file); by default the path's extension or the first bytes decide.
        ``ProgrammingError`` when a file of that name exists or the file cannot be read."""
        self._check()
        file_name: Optional[str] = None
        if isinstance(data, _os.PathLike):
            file_name = _os.fspath(data)
            with open(file_name, "rb") as f:
                content = f.read()
        elif isinstance(data, str):
            content = data.encode()
        else:
            content = bytes(data)
        return self._db.upload_file(name, content, format, file_name)

    def upload_url(self, name: str, url: str, file_name: Optional[str] = None) -> int:
        """Fetches the file at ``url`` (http or https, through the engine's egress policy, no
        redirects) and stores it as :meth:`upload_file` does; ``file_name`` names its format,
        else the URL's last path segment or the answer's ``Content-Type``."""
        self._check()
        return self._db.upload_url(name, url, file_name)

    def files(self) -> List[Dict[str, Any]]:
        """The uploaded files: ``[{"name", "row_count", "columns"}]``."""
        self._check()
        return cast(List[Dict[str, Any]], _json.loads(self._db.files()))

    def delete_file(self, name: str) -> None:
        """Removes the uploaded file ``name`` (``ProgrammingError`` when there is none)."""
        self._check()
        self._db.delete_file(name)

    def models(self, project: Optional[str] = None) -> List[Dict[str, Any]]:
        """Every version of every model of ``project`` (the current project by default), as
        MindsDB's REST API shows them: ``{"name", "version", "status", "active", "accuracy",
        "predict", "error", …}``."""
        self._check()
        return cast(List[Dict[str, Any]], _json.loads(self._db.models(project or self.current_db)))

    def model(
        self, name: str, version: Optional[int] = None, project: Optional[str] = None
    ) -> Dict[str, Any]:
        """One model's version, the active one unless ``version`` is given;
        ``ProgrammingError`` when there is none."""
        self._check()
        text = self._db.model(project or self.current_db, name, version)
        return cast(Dict[str, Any], _json.loads(text))

    def create_model(self, statement: str, project: Optional[str] = None) -> Dict[str, Any]:
        """Runs one ``CREATE MODEL … FROM db (SELECT …) PREDICT col`` statement; returns the new
        version (status ``generating``: training goes on in the background, see
        :meth:`wait_model`)."""
        self._check()
        return cast(Dict[str, Any], _json.loads(self._db.create_model(project or self.current_db, statement)))

    def wait_model(
        self, name: str, timeout: float = 600.0, project: Optional[str] = None
    ) -> Dict[str, Any]:
        """Waits until the model's latest version is ``complete`` and returns it;
        ``OperationalError`` with the reason when training fails or takes over ``timeout`` s."""
        deadline = _time.monotonic() + timeout
        while True:
            latest = max(
                (m for m in self.models(project) if m["name"].lower() == name.lower()),
                key=lambda m: int(m["version"]),
                default=None,
            )
            if latest is None:
                raise ProgrammingError(f"Model '{name}' does not exist")
            if latest["status"] == "complete":
                return latest
            if latest["status"] == "error":
                raise OperationalError(f"Training of model '{name}' failed: {latest['error']}")
            if _time.monotonic() > deadline:
                raise OperationalError(f"Model '{name}' is still {latest['status']} after {timeout} s")
            _time.sleep(0.05)

    def retrain_model(
        self,
        name: str,
        query: Optional[str] = None,
        data_db: Optional[str] = None,
        project: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Adds a version trained from ``query`` (a SELECT run in ``data_db``, the current
        project by default), or from the latest version's query when ``query`` is None;
        returns it (status ``generating``; it becomes the active one when complete, see
        :meth:`wait_model`)."""
        self._check()
        text = self._db.retrain_model(project or self.current_db, name, query, data_db)
        return cast(Dict[str, Any], _json.loads(text))

    def set_active_model(
        self, name: str, version: int, project: Optional[str] = None
    ) -> Dict[str, Any]:
        """Makes a complete version the active one (the one predictions use); returns it."""
        self._check()
        text = self._db.set_active_model(project or self.current_db, name, version)
        return cast(Dict[str, Any], _json.loads(text))

    def describe_model(
        self, name: str, version: Optional[int] = None, project: Optional[str] = None
    ) -> Dict[str, Any]:
        """What training found: ``{"accuracies", "column_importances", "inputs", "outputs",
        "model"}``."""
        self._check()
        text = self._db.describe_model(project or self.current_db, name, version)
        return cast(List[Dict[str, Any]], _json.loads(text))[0]

    def predict(
        self,
        name: str,
        rows: Union[Mapping[str, Any], Sequence[Mapping[str, Any]]],
        version: Optional[int] = None,
        project: Optional[str] = None,
    ) -> List[Dict[str, Any]]:
        """Predicts with a model (its active version unless ``version`` is given) for one row
        or a list of rows given as ``{column: value}``; returns the rows with the prediction
        filled in. Missing inputs are allowed; ``ProgrammingError`` when the model is not
        complete or a value does not fit its column."""
        self._check()
        listed = [dict(rows)] if isinstance(rows, Mapping) else [dict(r) for r in rows]
        text = self._db.predict(project or self.current_db, name, _json.dumps(listed, default=str), version)
        return cast(List[Dict[str, Any]], _json.loads(text))

    def drop_model(
        self, name: str, version: Optional[int] = None, project: Optional[str] = None
    ) -> None:
        """Drops a model with every version, or only ``version``."""
        self._check()
        self._db.drop_model(project or self.current_db, name, version)

    # The hosted edition's users. Administration belongs to the connection connect() returned
    # (the operator's): on a user's connection these raise ForbiddenError.

    def as_user(self, api_key: str) -> "Connection":
        """A new connection to the same database acting as the user ``api_key`` belongs to: it
        sees and changes only that user's projects, tables, models and agents, under the user's
        plan's quotas, starting in the user's own default project. The key is checked here,
        once: revoking it or disabling the user refuses later calls, not this connection. Each
        connection closes on its own; the file stays open while any is open.
        ``UnauthorizedError`` for an unknown or revoked key, ``ForbiddenError`` for a disabled
        user."""
        self._check()
        return Connection(self._db.as_user(api_key))

    def create_user(self, name: str, plan: Optional[str] = None) -> Dict[str, Any]:
        """Creates a user, with its own default project and no API key yet, on ``plan`` (the
        configured ``hosted.default_plan`` when ``None``). Returns ``{"id", "name", "plan",
        "disabled", "created_at", "api_keys"}``. ``ProgrammingError`` for a taken or invalid
        name or an unknown plan."""
        self._check()
        return cast(Dict[str, Any], _json.loads(self._db.create_user(name, plan)))

    def users(self) -> List[Dict[str, Any]]:
        """Every user, in creation order, as :meth:`create_user` returns them; ``api_keys``
        lists the live keys as ``{"id", "prefix", "created_at"}``, without their text."""
        self._check()
        return cast(List[Dict[str, Any]], _json.loads(self._db.users()))

    def user(self, name: str) -> Dict[str, Any]:
        """One user by name (case-insensitive); ``ProgrammingError`` when there is none."""
        self._check()
        return cast(Dict[str, Any], _json.loads(self._db.user(name)))

    def update_user(
        self, name: str, plan: Optional[str] = None, disabled: Optional[bool] = None
    ) -> Dict[str, Any]:
        """Moves a user to ``plan`` and/or disables it (``disabled=True``: :meth:`as_user`
        refuses its keys, its objects are kept) or enables it again; ``None`` leaves a field as it is. Returns the
        user. ``ProgrammingError`` for an unknown plan, naming it and the configured ones."""
        self._check()
        return cast(Dict[str, Any], _json.loads(self._db.update_user(name, plan, disabled)))

    def create_api_key(self, user: str) -> Dict[str, Any]:
        """Issues an API key for ``user``: ``{"id", "user", "key", "created_at"}``. The
        ``"key"`` text is shown here only (the database keeps its hash); pass it to
        :meth:`as_user`."""
        self._check()
        return cast(Dict[str, Any], _json.loads(self._db.create_api_key(user)))

    def revoke_api_key(self, user: str, key_id: int) -> Dict[str, Any]:
        """Revokes ``user``'s API key ``key_id`` (its ``"id"``): :meth:`as_user` refuses it
        from now on. Returns the user; ``ProgrammingError`` when
        the user has no such key."""
        self._check()
        return cast(Dict[str, Any], _json.loads(self._db.revoke_api_key(user, key_id)))

    def limits(self) -> Dict[str, Any]:
        """This user's plan, quotas and usage, as the Minds API's ``GET /limits/``: ``{"plan",
        "minds": {"limit", "used", "remaining"}, "datasources": {…}, "questions": {"limit",
        "used", "remaining", "window_secs", "resets_at"}, "callbacks"}``. On a user's
        connection only (``ProgrammingError`` on the operator's)."""
        self._check()
        return cast(Dict[str, Any], _json.loads(self._db.limits()))

    # A user's model-status callbacks (hosted edition, on a connection from as_user() whose plan
    # includes them): ForbiddenError otherwise, ProgrammingError in the local edition.

    def register_callback(
        self,
        url: str,
        model_name: Optional[str] = None,
        project_name: Optional[str] = None,
        count: Optional[int] = None,
        interval: Optional[int] = None,
        http_timeout: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Registers ``url`` (http or https) to be POSTed when one of this user's models becomes
        ``complete`` or ``error``. ``model_name`` and ``project_name`` are regexes a model's and
        its project's names must match from their start (``None``: any); ``count`` attempts,
        ``interval`` seconds apart, each waiting ``http_timeout`` seconds (``None``: the
        configured default). Returns ``{"id", "secret"}``: the secret (``whsec_…``) signs the
        deliveries and is shown here only. ``ProgrammingError`` naming the field for a bad URL,
        regex or attempt value."""
        self._check()
        body = _callback_body(url, model_name, project_name, count, interval, http_timeout)
        return cast(Dict[str, Any], _json.loads(self._db.register_callback(_json.dumps(body))))

    def callbacks(self) -> List[Dict[str, Any]]:
        """This user's callbacks, by id: ``[{"id", "created_at", "url"}, …]``, ``created_at``
        an HTTP-date."""
        self._check()
        return cast(List[Dict[str, Any]], _json.loads(self._db.callbacks()))

    def callback(self, id: int) -> Dict[str, Any]:
        """One callback's settings, without its secret: ``{"id", "url", "created_at", "filter":
        {"model_name", "project_name"}, "attempt": {"count", "interval", "http_timeout"}}``.
        ``ProgrammingError`` for an unknown id, and for another user's."""
        self._check()
        return cast(Dict[str, Any], _json.loads(self._db.callback(id)))

    def update_callback(
        self,
        id: int,
        url: Optional[str] = None,
        model_name: Optional[str] = None,
        project_name: Optional[str] = None,
        count: Optional[int] = None,
        interval: Optional[int] = None,
        http_timeout: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Changes a callback; ``None`` leaves a setting as it is, except that giving either
        pattern replaces the filter as a pair (the other one then matches any name). The secret
        stays the same. Returns the callback as :meth:`callback` shows it."""
        self._check()
        body = _callback_body(url, model_name, project_name, count, interval, http_timeout)
        return cast(Dict[str, Any], _json.loads(self._db.update_callback(id, _json.dumps(body))))

    def delete_callback(self, id: int) -> None:
        """Deletes a callback with its delivery log; deliveries still pending are never sent.
        ``ProgrammingError`` for an unknown id."""
        self._check()
        self._db.delete_callback(id)

    def callback_deliveries(self, id: int) -> List[Dict[str, Any]]:
        """A callback's delivery log, one entry per attempt, oldest first: ``{"event_id",
        "attempt", "at", "enqueued_at", "duration_ms", "status", "error", "delivered"}``;
        ``status`` is the receiver's HTTP status (``None`` when it did not answer), ``error``
        why the attempt failed."""
        self._check()
        return cast(List[Dict[str, Any]], _json.loads(self._db.callback_deliveries(id)))

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open (``begin()`` or ``BEGIN``), as ``sqlite3``'s."""
        self._check()
        return self._db.in_transaction

    def begin(self) -> None:
        """Opens a transaction (``BEGIN``): until ``commit()``, writes are seen only by this
        connection and are lost if the process ends; ``rollback()`` undoes them. Without one,
        every statement commits on its own (autocommit, as DuckDB's connections)."""
        self.sql("BEGIN")

    def commit(self) -> None:
        """Commits the open transaction durably; nothing to do without one (autocommit)."""
        self._check()
        if self._db.in_transaction:
            self.sql("COMMIT")

    def rollback(self) -> None:
        """Undoes everything since ``begin()`` / ``BEGIN``; nothing to do without a transaction
        (every statement has committed on its own)."""
        self._check()
        if self._db.in_transaction:
            self.sql("ROLLBACK")

    def close(self) -> None:
        """Closes the connection; results still being read keep the file open until dropped."""
        self._db.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
