"""SourceAdapter: the base of every reader, loading a source into a DuckDB staging table.

A reader implements two steps; the base class does the rest of :meth:`SourceAdapter.load`::

    describe  (_describe)   columns and types of the SQL projection -> ValueSchema
    augment   (_augment)    primary/foreign keys and comments from the data dictionary
    prepare   prepare_load  create the DuckDB table from the schema's Arrow types
    copy      (_copy)       pages of rows -> insert_page (safe from tasks and threads)
    check     check_primary_key  duplicate or null keys fail the load, before producing

A reader may instead override ``load`` itself, as the flow authors' documentation shows::

    async def load(self, duckdb_table_name, table_schema, *args, **kwargs):
        pa_schema = self.prepare_load(duckdb_table_name, table_schema)  # records table_schema
        await asyncio.gather(*(self.load_page(p, duckdb_table_name, pa_schema) for p in pages))

    async def load_page(self, page, duckdb_table_name, pa_schema):
        self.insert_page(duckdb_table_name, pa.Table.from_pylist(rows, schema=pa_schema))

``prepare_load`` and ``insert_page`` are plain methods: the work is done when they return,
from the event loop, from gathered tasks or from threads alike. They hold a lock around the
DuckDB connection, so one call runs at a time; called on the event loop they block it while
DuckDB creates the table or appends the page (milliseconds for pages of thousands of rows),
which costs less than a hop to a worker thread per page. Code written when both were
coroutines keeps working, deprecated (a ``FlowPlatformDeprecationWarning`` naming the release
that removes it): ``await reader.insert_page(...)`` awaits the row count it returns (an
``int`` that is also awaitable), and ``await reader.prepare_load(...)`` gets the schema (see
:meth:`SourceAdapter.prepare_load` for how). A reader of the library calls both plainly and
passes the result through :func:`settle`, which awaits only a subclass's coroutine override.
"""

from __future__ import annotations

import asyncio
import dis
import functools
import inspect
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass, field
from types import CodeType, TracebackType
from typing import Any, Self, TypeVar, cast

import duckdb
import pyarrow as pa

from producer_lib._deprecation import deprecated
from producer_lib.errors import SourceError
from producer_lib.schema import ValueSchema
from producer_lib.sources.progress import Progress
from producer_lib.staging import (
    append_arrow,
    check_primary_key,
    connection_lock,
    create_table,
    default_connection,
)

_log = logging.getLogger(__name__)
_T = TypeVar("_T")


@dataclass(frozen=True)
class LoadRecord:
    """What one :meth:`SourceAdapter.load` read: the input of its lineage document.

    Attributes:
        target: ``<namespace>.<name>`` of the schema the load produced.
        sql: The SQL given to ``load``.
        dialect: sqlglot dialect of that SQL, or None when it is not SQL (REST resources).
        columns: Output columns, by original name.
        source_schema: Columns and types of the tables the SQL reads (table -> column ->
            type), for ``select *``; best effort, empty when unknown.
    """

    target: str
    sql: str
    dialect: str | None
    columns: tuple[str, ...]
    source_schema: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


class PageRows(int):
    """The rows :meth:`SourceAdapter.insert_page` appended: an ``int`` that ``await`` accepts.

    ``insert_page`` used to be a coroutine; awaiting its result gives the same count, with a
    deprecation warning pointing at the ``await``.
    """

    def __await__(self) -> Generator[Any, None, int]:
        deprecated("awaiting SourceAdapter.insert_page", "a plain call", removed_in="1.0.0")
        return _ready(int(self)).__await__()


async def _ready(value: _T) -> _T:
    return value


async def settle(result: Any) -> Any:
    """The result of a staging call, awaited only where a subclass's override is a coroutine.

    For the library's own readers: they call ``insert_page`` (and ``prepare_load``) plainly,
    as flow authors do, and must still await what an override written as a coroutine returns,
    without tripping the deprecation of awaiting the plain methods.
    """
    if isinstance(result, PageRows) or not inspect.isawaitable(result):
        return result
    return await result


def _awaited_by_caller() -> bool:
    """True when the caller of ``prepare_load`` awaits its result right away.

    Only ``prepare_load`` asks: its result must be a real :class:`pyarrow.Schema` (pyarrow's
    functions accept nothing else), and that type can be neither subclassed with an
    ``__await__`` nor given one, so the awaited form cannot be told apart by the value. The
    caller's next bytecode instruction tells it instead. Goes with the deprecation.
    """
    frame = sys._getframe(2)
    return _awaits_after(frame.f_code, frame.f_lasti)


@functools.lru_cache(maxsize=4096)
def _awaits_after(code: CodeType, last_instruction: int) -> bool:
    """True when the instruction after ``last_instruction`` of ``code`` awaits its result."""
    for instruction in dis.get_instructions(code):
        if instruction.offset > last_instruction:
            return instruction.opname == "GET_AWAITABLE"
    return False


def _marks_open(enter: Callable[..., Awaitable[Any]]) -> Callable[..., Coroutine[Any, Any, Any]]:
    """Wrap a subclass's ``__aenter__`` so that :attr:`SourceAdapter.is_open` follows it."""

    @functools.wraps(enter)
    async def aenter(self: SourceAdapter, *args: Any, **kwargs: Any) -> Any:
        result = await enter(self, *args, **kwargs)
        self._open = True
        return result

    return aenter


def _marks_closed(leave: Callable[..., Awaitable[Any]]) -> Callable[..., Coroutine[Any, Any, Any]]:
    """Wrap a subclass's ``__aexit__`` so that :attr:`SourceAdapter.is_open` follows it.

    While a detached run holds the reader (:meth:`SourceAdapter.hold`), the exit waits for it.
    """

    @functools.wraps(leave)
    async def aexit(self: SourceAdapter, *args: Any, **kwargs: Any) -> Any:
        if self._defer_exit(functools.partial(aexit_now, self, *args, **kwargs)):
            return None
        return await aexit_now(self, *args, **kwargs)

    async def aexit_now(self: SourceAdapter, *args: Any, **kwargs: Any) -> Any:
        try:
            return await leave(self, *args, **kwargs)
        finally:
            self._open = False

    return aexit


class SourceAdapter:
    """Base of every reader: loads a source into a DuckDB table and describes it.

    Args:
        logger: Where progress and best-effort failures are logged; default: this module's.
        connection: The DuckDB database to stage in; default: DuckDB's process-wide default
            connection, the one ``duckdb.sql(...)`` and the producer use. Staging tables
            are created in its current database and schema. Readers and the producer's
            exports use it one at a time (:func:`~producer_lib.staging.connection_lock`,
            from the event loop and threads): do not use it from another thread while a
            load runs.

    Use as ``async with Reader(logger) as reader: await reader.load(...)``. A subclass may
    override ``__aenter__``/``__aexit__`` without calling ``super()``: :attr:`is_open`
    still follows them, so a runner given an open reader does not open it again.

    Attributes:
        sql_dialect: sqlglot dialect of the SQL the reader takes (lineage is derived from
            it); None when ``load`` does not take SQL.
        loads: What each load read, by target ``<namespace>.<name>`` (the last load wins).
    """

    sql_dialect: str | None = "duckdb"

    def __init__(
        self,
        logger: logging.Logger | None = None,
        *,
        connection: duckdb.DuckDBPyConnection | None = None,
    ) -> None:
        self.logger = logger or _log
        self.connection = connection if connection is not None else default_connection()
        self._lock = connection_lock(self.connection)  # one DuckDB call at a time, any reader
        self._table_schema: ValueSchema | None = None
        self._augmented: ValueSchema | None = None
        self._schema_name: tuple[str, str] | None = None
        self._progress: dict[str, Progress] = {}
        self.source_system: str | None = None
        self.last_sql: str | None = None
        self.loads: dict[str, LoadRecord] = {}
        self._open = False
        self._holds = 0  # detached runs using the reader: see hold()
        self._deferred_exit: Callable[[], Awaitable[Any]] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Let :attr:`is_open` follow a subclass's own ``__aenter__``/``__aexit__``."""
        super().__init_subclass__(**kwargs)
        if "__aenter__" in cls.__dict__:
            cls.__aenter__ = _marks_open(cls.__dict__["__aenter__"])  # type: ignore[method-assign]
        if "__aexit__" in cls.__dict__:
            cls.__aexit__ = _marks_closed(cls.__dict__["__aexit__"])  # type: ignore[method-assign]

    @property
    def is_open(self) -> bool:
        """True inside ``async with`` (between ``__aenter__`` and ``__aexit__``)."""
        return self._open

    async def __aenter__(self) -> Self:
        await self.open()
        self._open = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._defer_exit(self._close_now):
            return
        await self._close_now()

    async def _close_now(self) -> None:
        self._open = False
        await self.close()

    # -- detached runs ----------------------------------------------------------------------

    def hold(self) -> None:
        """Keep the reader open past its ``async with`` block until :meth:`release`.

        A run that goes on after its HTTP request answered (202, see
        :mod:`producer_lib.runner.runs`) holds the reader the caller's ``async with``
        opened: leaving that block then does not close it (neither this class's
        ``__aexit__`` nor a subclass's own), the close waits for the run.
        """
        self._holds += 1

    async def release(self) -> None:
        """End one :meth:`hold`; after the last, run the ``__aexit__`` that was deferred.

        Never raises: an error of the deferred close is logged.
        """
        self._holds = max(0, self._holds - 1)
        if self._holds or self._deferred_exit is None:
            return
        leave, self._deferred_exit = self._deferred_exit, None
        try:
            await leave()
        except Exception as exc:  # the run is over; nobody is left to raise to
            self.logger.error(
                "deferred close of reader %s failed: %s: %s",
                type(self).__name__,
                type(exc).__name__,
                exc,
            )

    @property
    def is_held(self) -> bool:
        """True while a detached run holds the reader (see :meth:`hold`)."""
        return self._holds > 0

    def _defer_exit(self, leave: Callable[[], Awaitable[Any]]) -> bool:
        """Keep ``leave`` for :meth:`release` when held (True), else False."""
        if not getattr(self, "_holds", 0):  # also a subclass that skipped super().__init__
            return False
        if self._deferred_exit is None:  # the outermost __aexit__ is the one to replay
            self._deferred_exit = leave
            self.logger.info(
                "reader %s stays open for the run that holds it; it closes when that run ends",
                type(self).__name__,
            )
        return True

    async def open(self) -> None:
        """Open the source (connections, sessions). Readers extend this."""

    async def close(self) -> None:
        """Release what :meth:`open` acquired. Readers extend this."""

    # -- schema ---------------------------------------------------------------------------

    @property
    def table_schema(self) -> ValueSchema:
        """The value schema of the last load (set by :meth:`load` and :meth:`prepare_load`).

        Raises:
            SourceError: Nothing was loaded yet.
        """
        if self._table_schema is None:
            raise SourceError("No table_schema yet: call load() first")
        return self._table_schema

    def set_schema_name_for_sql(self, name: str, namespace: str) -> None:
        """Name the schema the next :meth:`load` derives (default: its table and namespace)."""
        self._schema_name = (name, namespace)

    async def augment_schema(self) -> None:
        """Add keys and comments from the source's data dictionary, best effort.

        Once per schema: :meth:`load` already augments, so calling this after it (as the
        documentation's sequence does) changes nothing. A failure is logged as a warning,
        never raised: the load goes on without them.
        """
        schema, sql = self.table_schema, self.last_sql or ""
        if self._augmented is schema:
            return
        try:
            await self._augment(schema, sql)
        except Exception as exc:  # best effort by contract: log, never fail the load
            self.logger.warning("schema not augmented table=%s error=%s", schema.name, exc)
            return
        self._augmented = schema

    # -- staging --------------------------------------------------------------------------

    def prepare_load(self, duckdb_table: str, table_schema: ValueSchema) -> pa.Schema:
        """Create (or replace) the DuckDB table for ``table_schema``; return its Arrow schema.

        ``table_schema`` becomes :attr:`table_schema`, so a reader that overrides
        :meth:`load` needs nothing else. A plain method: the table exists when it returns.

        The result is a real :class:`pyarrow.Schema`: pyarrow's functions need one. Code
        written when this was a coroutine (``await reader.prepare_load(...)``) gets the
        schema in a finished awaitable instead, with a deprecation warning
        (:func:`_awaited_by_caller` tells the two calls apart).
        """
        arrow_schema = table_schema.get_pyarrow(technical=False)
        with self._lock:
            result = create_table(self.connection, duckdb_table, arrow_schema)
            self._progress[duckdb_table] = Progress(self.logger, duckdb_table)
            self._table_schema = table_schema
        if _awaited_by_caller():
            deprecated("awaiting SourceAdapter.prepare_load", "a plain call", removed_in="1.0.0")
            return cast(pa.Schema, _ready(result))
        return result

    def insert_page(self, duckdb_table: str, arrow_table: pa.Table) -> PageRows:
        """Append a page to ``duckdb_table`` (columns by name); return the rows appended.

        A plain method, safe from concurrent tasks and threads: the page is in the table
        when it returns (appends take the connection's lock one at a time). The count is
        also awaitable, so ``await reader.insert_page(...)`` works as it did (deprecated).

        Raises:
            SourceError: A column is unknown or a value does not fit (names the table).
        """
        with self._lock:
            rows = append_arrow(self.connection, duckdb_table, arrow_table)
            progress = self._progress.setdefault(duckdb_table, Progress(self.logger, duckdb_table))
            progress.add(rows)
        return PageRows(rows)

    async def run_locked(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run ``function(*args)`` in a worker thread holding the connection's lock.

        For long DuckDB work (an ``INSERT ... SELECT``) that should not block the event loop.
        """

        def locked() -> _T:
            with self._lock:
                return function(*args)

        return await asyncio.to_thread(locked)

    def check_primary_key(self, duckdb_table: str, schema: ValueSchema | None = None) -> None:
        """Fail on duplicate or null primary keys in ``duckdb_table`` (see staging)."""
        with self._lock:
            check_primary_key(duckdb_table, schema or self.table_schema, self.connection)

    # -- the load -------------------------------------------------------------------------

    async def load(
        self,
        duckdb_table: str,
        sql: str,
        namespace: str | None = None,
        source_system: str | None = None,
    ) -> ValueSchema:
        """Load the result of ``sql`` on the source into the DuckDB table ``duckdb_table``.

        Args:
            duckdb_table: The staging table to (re)create, e.g. ``"SAMPLE_PLAN"``; also the
                schema's name unless :meth:`set_schema_name_for_sql` named it.
            sql: What to read, in the source's language (a SQL query; RestReader: a resource).
            namespace: Namespace of the schema, e.g. ``"LABWARE"``; default: source_system,
                else ``"default"``.
            source_system: Name of the source system, e.g. ``"LABWARE"``; kept as
                ``self.source_system`` and as the schema property ``sourceSystem``.

        Returns:
            The value schema, also :attr:`table_schema`.

        Raises:
            SourceError: Reading failed, or the primary key has duplicate or null values.
        """
        name, space = self._schema_name or (duckdb_table, namespace or source_system or "default")
        self._schema_name, self.last_sql, self.source_system = None, sql, source_system
        self._table_schema = schema = await self._describe(sql, name, space)
        if source_system:
            schema.properties["sourceSystem"] = source_system
        await self.augment_schema()
        arrow_schema = await settle(self.prepare_load(duckdb_table, schema))
        await self._copy(duckdb_table, sql, arrow_schema)
        self._progress[duckdb_table].done()
        started = time.monotonic()
        self.check_primary_key(duckdb_table, schema)
        if schema.pks:
            seconds = time.monotonic() - started
            self.logger.info("primary key checked table=%s seconds=%.2f", duckdb_table, seconds)
        await self._record_load(schema, sql)
        return schema

    async def _record_load(self, schema: ValueSchema, sql: str) -> None:
        target = f"{schema.namespace}.{schema.name}"
        source_schema: Mapping[str, Mapping[str, str]] = {}
        if self.sql_dialect:  # `*` and unqualified columns of joins need the sources' columns
            try:
                source_schema = await self._lineage_schema(sql)
            except Exception as exc:  # lineage is best effort: never fail the load for it
                self.logger.warning("source columns unknown table=%s error=%s", target, exc)
        self.loads[target] = LoadRecord(
            target, sql, self.sql_dialect, tuple(schema.fields), source_schema
        )

    async def _lineage_schema(self, sql: str) -> Mapping[str, Mapping[str, str]]:
        """Columns and types of the tables ``sql`` reads. Readers that can, implement it."""
        return {}

    async def _describe(self, sql: str, name: str, namespace: str) -> ValueSchema:
        """Return the columns and types of ``sql``'s projection. Readers implement this."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _describe")

    async def _augment(self, schema: ValueSchema, sql: str) -> None:
        """Add keys and comments from the data dictionary. Default: nothing to add."""

    async def _copy(self, duckdb_table: str, sql: str, arrow_schema: pa.Schema) -> None:
        """Copy the rows of ``sql`` into ``duckdb_table``. Readers implement this."""
        raise NotImplementedError(f"{type(self).__name__} does not implement _copy")
