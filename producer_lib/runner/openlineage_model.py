"""The datasets of a flow run for OpenLineage: named by the naming spec, gathered per commit.

Pure (no client, no I/O): :mod:`producer_lib.runner.openlineage` decides whether events are
sent, :mod:`producer_lib.runner.openlineage_events` builds them from what is here.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from producer_lib.sources import SourceAdapter

__all__ = [
    "ColumnInput",
    "Dataset",
    "EventType",
    "OutputLineage",
    "RunDatasets",
    "RunFacts",
    "SourceNaming",
    "file_dataset",
    "kafka_namespace",
    "source_naming",
]

EventType = Literal["START", "COMPLETE", "FAIL"]
# A table function reading a path or URL: read_parquet('x.parquet'), delta_scan('abfss://...').
_TABLE_FUNCTION = re.compile(r"^\s*[A-Za-z_][A-Za-z0-9_]*\(\s*'((?:[^']|'')*)'")


@dataclass(frozen=True, order=True)
class Dataset:
    """An OpenLineage dataset identifier: the datasource's namespace and the dataset's name."""

    namespace: str
    name: str


@dataclass(frozen=True)
class RunFacts:
    """What every event of a run says of the run and its job."""

    run_id: str  # the _execution_log run id, a UUID
    job_namespace: str
    job_name: str
    function_name: str
    dataflow: str
    partition: str
    load: str
    source_system: str


@dataclass(frozen=True)
class ColumnInput:
    """One source column a target column reads, and how (``copy`` or ``expression``)."""

    dataset: Dataset
    field: str
    kind: str
    expression: str | None = None


@dataclass(frozen=True)
class OutputLineage:
    """A topic the run committed rows to: rows, columns in order, their source columns."""

    dataset: Dataset
    rows: int
    tables: tuple[str, ...]
    columns: Mapping[str, tuple[ColumnInput, ...]]  # empty when no SQL is known for it


def kafka_namespace(bootstrap_servers: str) -> str:
    """``kafka://<host>:<port>`` of the first bootstrap server (the naming spec)."""
    first = bootstrap_servers.split(",")[0].strip()
    return f"kafka://{first.split('://', 1)[-1]}"


def file_dataset(path: str) -> Dataset:
    """A file or object by the naming spec: ``file`` + absolute path, ``s3://bucket`` + key..."""
    if "://" not in path:
        return Dataset("file", os.path.abspath(path))
    parts = urlsplit(path)
    if parts.scheme == "file":
        return Dataset("file", parts.path)
    return Dataset(f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/"))


@dataclass(frozen=True)
class SourceNaming:
    """Names the tables a flow's SQL reads (as ``_lineage`` writes them) as datasets.

    Attributes:
        namespace: The namespace of tables the naming spec has no rule for (DuckDB, Oracle
            without a parsed DSN): the flow's ``lineage_namespace``, else
            ``<dialect>://<source system>``.
        postgres: ``(postgres://host:port, database)`` when the reader is a PostgreSQL one:
            tables are then named ``database.schema.table`` (schema ``public`` if unwritten).
    """

    namespace: str
    postgres: tuple[str, str] | None = None

    def dataset(self, table: str) -> Dataset:
        """The dataset of a source table as the SQL names it."""
        match = _TABLE_FUNCTION.match(table)
        if match:
            return file_dataset(match.group(1).replace("''", "'"))
        if self.postgres is not None:
            namespace, database = self.postgres
            parts = table.split(".")
            parts = (["public"] if len(parts) == 1 else []) + parts
            parts = ([database] if len(parts) == 2 else []) + parts
            return Dataset(namespace, ".".join(parts))
        return Dataset(self.namespace, table)


def source_naming(reader: SourceAdapter | None, source_system: str, namespace: str) -> SourceNaming:
    """The naming of ``reader``'s tables; ``namespace`` overrides the fallback namespace."""
    dialect = getattr(reader, "sql_dialect", None) or "source"
    fallback = namespace or f"{dialect}://{source_system.lower()}"
    dsn = getattr(reader, "dsn", None)
    if dialect == "postgres" and isinstance(dsn, str):
        return SourceNaming(fallback, _postgres(dsn))
    return SourceNaming(fallback)


def _postgres(dsn: str) -> tuple[str, str]:
    """``(postgres://host:port, database)`` of a libpq URL or key=value string, libpq defaults."""
    if "://" in dsn:
        url = urlsplit(dsn)
        host, port = url.hostname or "", str(url.port or "")
        database, user = url.path.lstrip("/"), url.username or ""
    else:
        pairs = dict(item.split("=", 1) for item in shlex.split(dsn) if "=" in item)
        host, port = pairs.get("host", ""), pairs.get("port", "")
        database, user = pairs.get("dbname", ""), pairs.get("user", "")
    host = (host or os.environ.get("PGHOST") or "localhost").split(",")[0]
    port = (port or os.environ.get("PGPORT") or "5432").split(",")[0]
    database = database or os.environ.get("PGDATABASE") or user or os.environ.get("PGUSER", "")
    return f"postgres://{host}:{port}", database


@dataclass
class RunDatasets:
    """What the commits of one run wrote: rows per topic and table, ``_lineage`` documents.

    Attributes:
        kafka: The namespace of the topics (:func:`kafka_namespace`).
        naming: How the source tables are named.
    """

    kafka: str
    naming: SourceNaming
    _rows: dict[tuple[str, str], int] = field(default_factory=dict)  # (topic, table) -> rows
    _documents: dict[str, dict[str, Any]] = field(default_factory=dict)  # table -> latest

    def add_commit(
        self, documents: Sequence[Mapping[str, Any]], topic_rows: Mapping[tuple[str, str], int]
    ) -> None:
        """Take what one committed transaction wrote."""
        for key, rows in topic_rows.items():
            self._rows[key] = self._rows.get(key, 0) + rows
        for document in documents:
            self._documents[document["target"]] = dict(document)

    @property
    def documents(self) -> Mapping[str, Mapping[str, Any]]:
        """The latest ``_lineage`` document of each table, by table."""
        return self._documents

    def inputs(self) -> list[Dataset]:
        """The source tables the committed loads read, sorted."""
        tables = {t for document in self._documents.values() for t in document["sources"]}
        return sorted({self.naming.dataset(table) for table in tables})

    def outputs(self) -> list[OutputLineage]:
        """The topics rows were committed to, sorted, with their column lineage."""
        topics: dict[str, list[str]] = {}
        for topic, table in self._rows:
            topics.setdefault(topic, []).append(table)
        return [
            OutputLineage(
                Dataset(self.kafka, topic),
                sum(self._rows[(topic, table)] for table in tables),
                tuple(tables),
                self._columns(tables),
            )
            for topic, tables in sorted(topics.items())
        ]

    def _columns(self, tables: Sequence[str]) -> dict[str, tuple[ColumnInput, ...]]:
        columns: dict[str, tuple[ColumnInput, ...]] = {}
        for table in tables:
            document = self._documents.get(table, {"sources": [], "columns": []})
            for column in document["columns"]:
                inputs = (self._input(document["sources"], s, column) for s in column["sources"])
                columns[column["target"]] = tuple(inputs)
        return columns

    def _input(self, tables: Sequence[str], source: str, column: Mapping[str, Any]) -> ColumnInput:
        """``table.column`` of a document as a column of a dataset (the longest table wins)."""
        table = max((t for t in tables if source.startswith(f"{t}.")), key=len, default=None)
        if table is None:  # a document always names the table of each source column
            table, _, name = source.rpartition(".")
        else:
            name = source[len(table) + 1 :]
        return ColumnInput(self.naming.dataset(table), name, column["kind"], column["expression"])
