"""What the lakehouse's tables say, read by delta-rs: no Spark, no scan of a data table.

For the status page (:mod:`lakehouse_writer.ops.ui`) and the freshness metric
(:mod:`lakehouse_writer.ops.metrics`):

- :class:`TableReader`: per table, from its Delta log alone, the rows (file statistics, less
  the rows deletion vectors delete), the last commit (version, time, operation) and the newest
  ``__change_time`` (the files' ``maxValues``: the writer keeps statistics for that column).
  Each table's facts are read again only when its version moved.
- :func:`table_names`: the tables the writer applied (``_writer_state``'s ``table`` rows).
- :func:`read_runs`: the flows' runs from ``_execution_log``, the latest record of each run.
- :func:`read_rejected`: ``_rejected`` rows per table and error, with the newest as a sample.

System tables are read through delta-rs' ``QueryBuilder`` (DataFusion SQL), which reads tables
with deletion vectors too. A table that does not exist yet reads as empty.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import DeltaError, TableNotFoundError

from lakehouse_writer.runtime.storage import is_local, local_path
from lakehouse_writer.tables.files import table_path

__all__ = [
    "RejectedGroup",
    "Run",
    "TableFacts",
    "TableReader",
    "read_rejected",
    "read_runs",
    "table_names",
]

log = logging.getLogger(__name__)

CHANGE_TIME = "__change_time"
_SAMPLE_BYTES = 48  # of a rejected row's raw value, shown as hex
_ERROR_CHARS = 2000  # of an error text: a whole JVM trace is not for a page


@dataclass(frozen=True)
class TableFacts:
    """One table, from its Delta log.

    Attributes:
        name: ``NAMESPACE.NAME``.
        version: The table's latest version.
        rows: Rows it holds (None: a data file without statistics).
        committed_at: When its latest version was committed.
        operation: What that commit did (``MERGE``, ``WRITE``, ``DELETE``, ...).
        newest_change: The newest ``__change_time`` it holds (None: no rows, no statistics).
    """

    name: str
    version: int
    rows: int | None
    committed_at: datetime | None
    operation: str
    newest_change: datetime | None


@dataclass(frozen=True)
class Run:
    """A flow's run: the latest ``_execution_log`` record of its run id."""

    run_id: str
    function: str
    dataflow: str
    load: str
    status: str
    started_at: datetime | None
    finished_at: datetime | None
    rows: int
    error: str | None

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to finish (None: not finished)."""
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


@dataclass(frozen=True)
class RejectedGroup:
    """``_rejected`` rows of one table (None: not known) and one error, with a sample."""

    table: str | None
    error: str
    rows: int
    topic: str
    partition: int
    offset: int
    value_hex: str
    last_at: datetime | None


def _uri(path: str) -> str:
    return str(local_path(path)) if is_local(path) else path


def _open(path: str) -> DeltaTable | None:
    try:
        return DeltaTable(_uri(path))
    except TableNotFoundError:
        return None


def query(path: str, sql: str) -> list[dict[str, Any]]:
    """Rows of ``sql`` over the table at ``path``, registered as ``t`` ([] without a table)."""
    table = _open(path)
    if table is None:
        return []
    result = QueryBuilder().register("t", table).execute(sql)
    return list(pa.table(result).to_pylist())


class TableReader:
    """The facts of a lakehouse's tables, each read again only when its version moved.

    Thread-safe: the metrics scrape and the page may ask at the same time.
    """

    def __init__(self, lakehouse: str) -> None:
        self.lakehouse = lakehouse
        self._lock = threading.Lock()
        self._handles: dict[str, DeltaTable] = {}
        self._facts: dict[str, TableFacts] = {}

    def facts(self, name: str) -> TableFacts | None:
        """The facts of table ``NAMESPACE.NAME`` (None: no table there, or unreadable)."""
        with self._lock:
            try:
                table = self._handle(name)
                if table is None:
                    return None
                cached = self._facts.get(name)
                if cached is not None and cached.version == table.version():
                    return cached
                self._facts[name] = facts = _read_facts(name, table)
                return facts
            except (DeltaError, OSError) as exc:
                log.warning("table not readable table=%s error=%s", name, exc)
                self._handles.pop(name, None)
                return None

    def _handle(self, name: str) -> DeltaTable | None:
        table = self._handles.get(name)
        if table is not None:
            table.update_incremental()
            return table
        table = _open(table_path(self.lakehouse, name))
        if table is not None:
            self._handles[name] = table
        return table


def _read_facts(name: str, table: DeltaTable) -> TableFacts:
    actions = pa.table(table.get_add_actions(flatten=True))
    counts = actions.column("num_records").to_pylist() if actions.num_rows else []
    rows = None if None in counts else sum(counts) - _deleted_rows(table)
    newest = None
    column = f"max.{CHANGE_TIME}"
    if column in actions.column_names:
        times = [t for t in actions.column(column).to_pylist() if t is not None]
        newest = _utc(max(times)) if times else None
    last = (table.history(1) or [{}])[0]
    stamp = last.get("timestamp")
    return TableFacts(
        name=name,
        version=table.version(),
        rows=rows,
        committed_at=datetime.fromtimestamp(stamp / 1000, UTC) if stamp else None,
        operation=str(last.get("operation") or ""),
        newest_change=newest,
    )


def _deleted_rows(table: DeltaTable) -> int:
    """Rows the table's deletion vectors delete (0 without the feature)."""
    if "deletionVectors" not in (table.protocol().reader_features or []):
        return 0
    vectors = pa.table(table.deletion_vectors())
    return sum(keep.count(False) for keep in vectors.column("selection_vector").to_pylist())


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def table_names(lakehouse: str) -> list[str]:
    """The tables the writer applied rows to, from ``_writer_state``, sorted."""
    sql = 'SELECT DISTINCT "table" AS name FROM t WHERE kind = \'table\' AND "table" IS NOT NULL'
    return sorted(str(row["name"]) for row in query(f"{lakehouse.rstrip('/')}/_writer_state", sql))


_RUNS_SQL = """
SELECT run_id, function_name, dataflow, "load", status, started_at, finished_at, "rows", error
FROM (
  SELECT *, row_number() OVER (
    PARTITION BY run_id ORDER BY kafka_partition, kafka_offset DESC) AS latest
  FROM t WHERE run_id IS NOT NULL)
WHERE latest = 1
ORDER BY started_at DESC NULLS LAST, run_id
LIMIT {limit}
"""


def read_runs(lakehouse: str, limit: int = 50) -> list[Run]:
    """The latest ``limit`` runs in ``_execution_log`` (by start), newest first."""
    rows = query(f"{lakehouse.rstrip('/')}/_execution_log", _RUNS_SQL.format(limit=int(limit)))
    return [
        Run(
            run_id=str(r["run_id"]),
            function=str(r["function_name"] or ""),
            dataflow=str(r["dataflow"] or "default"),
            load=str(r["load"] or ""),
            status=str(r["status"] or ""),
            started_at=_utc(r["started_at"]) if r["started_at"] else None,
            finished_at=_utc(r["finished_at"]) if r["finished_at"] else None,
            rows=sum(int(n or 0) for _, n in (r["rows"] or [])),
            error=str(r["error"])[:_ERROR_CHARS] if r["error"] else None,
        )
        for r in rows
    ]


_REJECTED_SQL = """
SELECT "table", error, topic, "partition", "offset", value, written_at, n
FROM (
  SELECT "table", error, topic, "partition", "offset", value, written_at,
    count(*) OVER (PARTITION BY "table", error) AS n,
    row_number() OVER (
      PARTITION BY "table", error ORDER BY written_at DESC, "offset" DESC) AS newest
  FROM t)
WHERE newest = 1
ORDER BY n DESC, "table", error
LIMIT {limit}
"""


def read_rejected(lakehouse: str, limit: int = 100) -> list[RejectedGroup]:
    """``_rejected`` rows counted per table and error, the most frequent first."""
    rows = query(f"{lakehouse.rstrip('/')}/_rejected", _REJECTED_SQL.format(limit=int(limit)))
    return [
        RejectedGroup(
            table=r["table"],
            error=str(r["error"] or "")[:_ERROR_CHARS],
            rows=int(r["n"]),
            topic=str(r["topic"] or ""),
            partition=int(r["partition"] if r["partition"] is not None else -1),
            offset=int(r["offset"] if r["offset"] is not None else -1),
            value_hex=bytes(r["value"] or b"")[:_SAMPLE_BYTES].hex(" "),
            last_at=_utc(r["written_at"]) if r["written_at"] else None,
        )
        for r in rows
    ]
