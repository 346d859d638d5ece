"""System tables: ``_rejected`` and the tables of the system topics.

``_rejected`` holds every row the writer could not decode or apply, with where it came from
(topic, partition, offset), its raw key and value bytes, the table it was meant for (when
known) and the error. ``_execution_log`` and ``_lineage`` hold the records of the system topics
of the same names, parsed (``docs/WIRE.md``); ``_commits`` rows are built by
:mod:`lakehouse_writer.read.commits`. All are append-only Delta tables at ``<lakehouse>/<name>``,
written idempotently per batch.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from lakehouse_writer.engines import ids
from lakehouse_writer.engines.spark import txn
from lakehouse_writer.rules.dialect import DATAFUSION, sql_literal

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


_FEATURES_WRITER = 7  # the writer version that names its features


class DeltaRsAppend:
    """Appends of a few rows to one local system table, by delta-rs.

    Spark's append of a batch's few ``_writer_state`` or ``_commits`` rows costs a job and a
    commit, about 0.4 s of every batch; delta-rs appends them in tens of milliseconds, with the same
    ``SetTransaction`` of (app id, version), so a replay is skipped by either engine. It
    declines (the caller appends through Spark) where delta-rs cannot reach its storage, does
    not exist yet, has a writer feature delta-rs does not write, or where a write of it
    failed once (not tried again in this process).
    """

    def __init__(self, path: str) -> None:
        from lakehouse_writer.runtime.storage import delta_rs_path

        self._path = path
        self._where = delta_rs_path(path)
        self._on = self._where is not None
        self._table: DeltaTable | None = None

    def append(self, data: pa.Table, app_id: str, version: int) -> bool:
        """Append ``data`` once as (``app_id``, ``version``); False: Spark is to append it."""
        from deltalake import CommitProperties, Transaction, write_deltalake
        from deltalake.exceptions import DeltaError

        table = self._handle() if self._on else None
        if table is None:
            return False
        done = table.transaction_version(app_id)
        if done is not None and done >= version:
            return True  # a replay
        try:
            write_deltalake(
                table,
                data,
                mode="append",
                commit_properties=CommitProperties(app_transactions=[Transaction(app_id, version)]),
            )
        except DeltaError as exc:  # Spark appends (it skips a version the table holds)
            log.warning("system table append left to Spark path=%s error=%s", self._path, exc)
            self._on, self._table = False, None
            return False
        return True

    def _handle(self) -> DeltaTable | None:
        """The table, brought up to its latest version; None where delta-rs is not to write."""
        from deltalake.exceptions import TableNotFoundError

        from lakehouse_writer.engines.delta_rs.writes import WRITABLE_FEATURES

        if self._table is not None:
            self._table.update_incremental()
            return self._table
        if self._where is None:
            return None
        try:
            table = self._where.open()
        except TableNotFoundError:
            return None  # Spark creates it
        protocol = table.protocol()
        if (
            protocol.min_writer_version < 7
            or set(protocol.writer_features or ()) - WRITABLE_FEATURES
        ):
            self._on = False
            return None
        self._table = table
        return table


def read_rows(spark: SparkSession, path: str, column: str, value: str) -> list[Any]:
    """The rows of the small system table at ``path`` whose ``column`` is ``value``.

    Each row has its columns as attributes, as Spark's rows do; no table, or an empty one,
    gives none. delta-rs reads a table it reaches (local, Azure) whose readers need no feature
    (no deletion vectors, no column mapping) in some 20 ms; Spark reads any other (a snapshot
    and a job, about 1.5 s: a writer's start read ``_writer_state`` that way twice).
    """
    rows = _read_by_delta_rs(path, column, value)
    if rows is not None:
        return rows
    from pyspark.sql import functions as F

    from lakehouse_writer.tables.manager import no_data_files

    if no_data_files(spark, path):
        return []
    frame = spark.read.format("delta").load(path)
    return frame.filter(F.col(column) == value).collect()


def _read_by_delta_rs(path: str, column: str, value: str) -> list[Any] | None:
    """:func:`read_rows` by delta-rs; None where Spark is to read."""
    from lakehouse_writer.runtime.storage import delta_rs_path

    where = delta_rs_path(path)
    if where is None:
        return None
    table = where.open_existing()
    if table is None:
        return []
    if table.protocol().min_reader_version > 1:
        return None
    found = select_small(table, f"{DATAFUSION.quote(column)} = {sql_literal(value)}")
    return [SimpleNamespace(**row) for row in found]


def append_system(df: DataFrame, path: str, instance_id: str, batch_id: int) -> None:
    """Append ``df`` to the system table at ``path``, once per batch (idempotent)."""
    from pyspark.sql import functions as F

    rows = df.withColumn("batch_id", F.lit(batch_id).cast("long")).withColumn(
        "written_at", F.current_timestamp()
    )
    app_id, version = system_txn(instance_id, path, batch_id)
    txn.append(rows, path, app_id, version, merge_schema=True)


def system_txn(instance_id: str, path: str, batch_id: int) -> tuple[str, int]:
    """The (app id, version) of a batch's append to the system table at ``path``."""
    return ids.app_id_for(instance_id, path.rsplit("/", 1)[-1]), ids.txn_version(
        batch_id, ids.STEP_SYSTEM
    )


EXECUTION_LOG_JSON_SCHEMA = (
    "run_id STRING, function_name STRING, dataflow STRING, `partition` STRING, status STRING, "
    "`load` STRING, started_at STRING, finished_at STRING, `rows` MAP<STRING, BIGINT>, "
    "delta_pointer VARIANT, commit_id STRING, error STRING"
)
LINEAGE_JSON_SCHEMA = (
    "target STRING, sources ARRAY<STRING>, columns ARRAY<STRUCT<target: STRING, "
    "sources: ARRAY<STRING>, kind: STRING, expression: STRING>>, `sql` STRING, dialect STRING, "
    "commit_id STRING"
)
LOG_TABLES = {"_execution_log": EXECUTION_LOG_JSON_SCHEMA, "_lineage": LINEAGE_JSON_SCHEMA}
_TIMESTAMPS = ("started_at", "finished_at")


def log_rows(df: DataFrame, table: str) -> DataFrame:
    """``_execution_log`` / ``_lineage`` messages, parsed (``docs/WIRE.md``).

    Each row holds the record's fields (``started_at``/``finished_at`` as timestamps,
    ``delta_pointer`` as JSON text), the message key, where it was read (``kafka_topic``,
    ``kafka_partition``, ``kafka_offset``) and the JSON as received (``raw``).
    """
    from pyspark.sql import functions as F

    raw = F.col("value").cast("string")
    parsed = df.select(
        F.from_json(raw, LOG_TABLES[table]).alias("r"),
        F.col("key").cast("string").alias("key"),
        F.col("topic").alias("kafka_topic"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        raw.alias("raw"),
    ).select("r.*", "key", "kafka_topic", "kafka_partition", "kafka_offset", "raw")
    for name in _TIMESTAMPS:
        if name in parsed.columns:
            parsed = parsed.withColumn(name, F.col(name).cast("timestamp"))
    if "delta_pointer" in parsed.columns:
        exact = F.to_json("delta_pointer")  # the pointer's JSON text, whatever its JSON type
        parsed = parsed.withColumn("delta_pointer", exact)
    return parsed


def select_small(table: DeltaTable, where: str, columns: str = "*") -> list[dict[str, Any]]:
    """The rows of the small delta-rs ``table`` that match the SQL condition ``where``.

    Read by delta-rs's own query engine (DataFusion, in Rust), not pyarrow's dataset scanner:
    a scanner whose filter leaves no row can leave C++ threads running into the interpreter's
    exit, which then aborts ("terminate called without an active exception", apache/arrow
    #34314) — an operator's ``resume-table`` refusal exited with SIGABRT instead of 1.
    """
    import pyarrow as pa
    from deltalake import QueryBuilder

    query = QueryBuilder().register("t", table)
    found = query.execute(f"select {columns} from t where {where}").read_all()
    return pa.table(found).to_pylist()
