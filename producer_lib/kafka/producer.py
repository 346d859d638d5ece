"""KafkaProducer: publish change rows of DuckDB tables to Kafka, one transaction per commit.

Quickstart::

    with KafkaProducer("LABWARE", "labware_flow", "bronze", "dev", KafkaSettings(), log) as p:
        target = p.add_target("SAMPLE_PLAN", "SAMPLE_PLAN", KeySchema(schema), schema)
        p.produce_from_duckdb("SAMPLE_PLAN", target, 40_000, RowType.REPLACE)
        p.commit()          # rows and the `_commits` record become visible together

The producer is idempotent and transactional. Its ``transactional.id`` is
``<environment>.<zone>.<function_name>.<instance>``: a restarted instance fences the old one
and aborts whatever that one left open. A transaction begins at the first produce; every row
of it carries the same ``__change_time`` (the transaction time, strictly increasing per
producer). Partitions are computed here with Kafka's Java murmur2 over the framed key bytes
(:mod:`producer_lib.kafka.partitioner`), unless a ``partition`` is given.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from itertools import chain
from typing import Any, Self

import duckdb
import pyarrow as pa

from producer_lib.errors import ProduceError, SchemaError
from producer_lib.kafka._encode import Constants, encode_batch
from producer_lib.kafka._encode_process import ExportEncoding
from producer_lib.kafka._ledger import CommitHook, PendingCommit
from producer_lib.kafka._send import EncodedBatch, RowRejected, rejected_row_error, send_batch
from producer_lib.kafka._target import Target, build_target, check_columns, relation, row_table
from producer_lib.kafka._transactional import TransactionalProducer
from producer_lib.kafka.catalog import EmbeddedCatalog, SchemaCatalog, catalog_from_settings
from producer_lib.kafka.expectations import act_on, check_before_export, send_rejected
from producer_lib.kafka.progress import Progress
from producer_lib.kafka.topics import (
    REJECTED_ROWS_TOPIC,
    align_topic_config,
    data_topic_config,
    ensure_topic,
)
from producer_lib.schema.names import table_name_problem
from producer_lib.schema.row_types import RowType
from producer_lib.schema.value_schema import KeySchema, ValueSchema
from producer_lib.settings import KafkaSettings
from producer_lib.staging import connection_lock
from producer_lib.staging.expectations import ExpectationReport
from producer_lib.staging.pk_check import check_keys

__all__ = ["CommitHook", "KafkaProducer", "PendingCommit", "Target"]

log = logging.getLogger(__name__)


class KafkaProducer(TransactionalProducer):
    """Transactional producer of Avro change rows (a context manager).

    Args:
        source_system: Goes into ``__source_system`` of every row.
        function_name: The flow function; part of the transactional id.
        zone: Data zone (e.g. ``bronze``); part of the transactional id.
        environment: Deployment environment (e.g. ``dev``); part of the transactional id.
        kafka_settings: The cluster and client settings.
        logger: Where the producer logs (default: this module's logger).
        duckdb_connection: Where ``produce_from_duckdb`` reads (default: DuckDB's default).
        schema_catalog: Where schemas go (default: the registry when ``SCHEMA_REGISTRY_URL``
            is set, else the embedded ``_schemas`` topic).
        instance: Tells apart parallel instances of one function.
    """

    def __init__(
        self,
        source_system: str,
        function_name: str,
        zone: str,
        environment: str,
        kafka_settings: KafkaSettings,
        logger: logging.Logger | None = None,
        *,
        duckdb_connection: duckdb.DuckDBPyConnection | None = None,
        schema_catalog: SchemaCatalog | None = None,
        instance: str = "0",
    ) -> None:
        super().__init__(
            source_system,
            function_name,
            zone,
            environment,
            kafka_settings,
            logger or log,
            instance=instance,
        )
        self._duckdb = duckdb_connection
        self._catalog = schema_catalog
        self._own_catalog: SchemaCatalog | None = None
        self._targets: dict[str, Target] = {}
        self._expectation_reports: list[ExpectationReport] = []

    def __enter__(self) -> Self:
        """Connect, fence older instances and get ready to produce.

        Raises:
            ProduceError: The cluster is unreachable within ``connect_timeout_s`` or refuses.
        """
        super().__enter__()
        if self._catalog is None:
            self._catalog = self._own_catalog = catalog_from_settings(self._settings)
        return self

    def _close(self) -> None:
        super()._close()
        if isinstance(self._own_catalog, EmbeddedCatalog):  # one the caller passed is theirs
            self._own_catalog.close()

    # -- targets ---------------------------------------------------------------------------

    def add_target(
        self,
        topic: str,
        schema_name: str,
        key_schema: KeySchema,
        value_schema: ValueSchema,
        partitions: int | None = None,
        *,
        retention: timedelta | int | None = None,
        cleanup_policy: str | None = None,
    ) -> Target:
        """Create ``topic`` if missing, register its schemas and return the target.

        Args:
            topic: Kafka topic of the table.
            schema_name: Name of the table's schema, for logs.
            key_schema: Key schema (primary key, or transaction time when append-only).
            value_schema: Value schema.
            partitions: Partitions if the topic is created (default: settings).
            retention: How long the topic keeps a row (``retention.ms``): a timedelta,
                milliseconds, or -1 for ever. Default: ``KAFKA_TOPIC_RETENTION_MS`` (7 days)
                for a topic created here; an existing topic keeps its own unless given.
            cleanup_policy: ``delete`` (the default for a topic created here: a change topic
                keeps every change until it expires), ``compact,delete`` or ``compact``.
                Given for an existing topic whose settings differ, the topic is changed
                (``retention`` too; the flow's user needs ALTER_CONFIGS on it).

        Raises:
            ProduceError: The topic cannot be created or its configuration changed, or a
                schema cannot be stored.
            SchemaError: A schema is invalid, the lakehouse cannot hold its table's name (a
                namespace starting with ``_``, a dot in the name, a name too long for a path:
                :func:`~producer_lib.schema.names.table_name_problem`), or another topic
                already feeds the same table (``namespace.name``) with a column whose type
                Delta cannot merge.
            ValueError: ``retention`` under a minute, or an unknown ``cleanup_policy``.
        """
        self._require_open()
        problem = table_name_problem(value_schema.namespace, value_schema.name)
        if problem is not None:  # refused before a row is sent: the writer could not apply it
            table = f"{value_schema.namespace}.{value_schema.name}"
            raise SchemaError(problem, topic=topic, table=table[:300])
        assert self._admin is not None and self._catalog is not None
        policy = cleanup_policy or "delete"
        config = data_topic_config(retention, policy, self._settings.topic_retention_ms)
        self._catalog.check_binding(topic, value_schema, self._log)  # tables go by schema name
        count = ensure_topic(
            self._admin,
            topic,
            partitions or self._settings.topic_partitions,
            replication_factor=self._settings.topic_replication_factor,
            config=config,
            timeout_s=self._settings.connect_timeout_s,
        )
        given = {
            "retention.ms": retention is not None,
            "cleanup.policy": cleanup_policy is not None,
        }
        if any(given.values()):  # an existing topic keeps what the flow does not ask for
            asked = {k: v for k, v in config.items() if given[k]}
            align_topic_config(self._admin, topic, asked, self._settings.connect_timeout_s)
        target = build_target(topic, schema_name, key_schema, value_schema, count, self._catalog)
        self._targets[topic] = target
        self._log.info("target added topic=%s table=%s partitions=%d", topic, target.table, count)
        return target

    def _take_truncations(self) -> dict[str, dict[str, int]]:
        """Text values each target's encoder cut since the last take (opt-in truncation)."""
        taken: dict[str, dict[str, int]] = {}
        for target in self._targets.values():
            for column, count in target.value_encoder.take_truncations().items():
                per_table = taken.setdefault(target.table, {})
                per_table[column] = per_table.get(column, 0) + count
        return taken

    def _check_target(self, target: Target) -> None:
        if self._targets.get(getattr(target, "topic", None)) is not target:  # type: ignore[arg-type]
            raise ProduceError(
                "unknown target: add it with add_target() on this producer first",
                topic=getattr(target, "topic", repr(target)),
            )

    def _check_partition(self, target: Target, partition: int | None) -> None:
        if partition is not None and not 0 <= partition < target.partitions:
            raise ProduceError(
                f"partition out of range 0..{target.partitions - 1}",
                topic=target.topic,
                partition=partition,
            )

    # -- producing ------------------------------------------------------------------------

    def _constants(self, target: Target, row_type: RowType, txn_time: int) -> Constants:
        values = {
            "__change_type": RowType(row_type).value,
            "__change_time": txn_time,
            "__source_system": self.source_system,
        }
        keys = {"__change_time": txn_time} if target.key_schema.is_append_only else {}
        return keys, values

    def produce_row(
        self,
        target: Target,
        key_row: dict[str, Any],
        value_row: dict[str, Any],
        row_type: RowType,
        partition: int | None = None,
    ) -> None:
        """Produce one change row (e.g. a TRUNCATE) in the open transaction.

        Args:
            target: From :meth:`add_target`.
            key_row: Key fields by original name (``create_key_row``).
            value_row: Value fields by original name; missing nullable fields are null.
            row_type: Goes into ``__change_type``.
            partition: Explicit partition (default: murmur2 of the key).

        Raises:
            ProduceError: Unknown target, closed producer, Kafka refused the message, or an
                earlier error aborted the transaction (see :meth:`abort`).
            SchemaError: The row does not fit the schema (the transaction is aborted).
        """
        with self._aborting_on_error(topic=getattr(target, "topic", None)):
            self._check_target(target)
            self._check_partition(target, partition)
        ledger = self._begin()
        with self._aborting_on_error(topic=target.topic, table=target.table):
            keys, values = self._constants(target, row_type, ledger.transaction_time)
            key_table = row_table(key_row, target.key_schema.get_pyarrow(), target, "key")
            value_table = row_table(value_row, target.value_schema.get_pyarrow(), target, "value")
            buffers = encode_batch(
                target.encoding, value_table, (keys, values), partition, key_rows=key_table
            )
            self._send(target, EncodedBatch.from_buffers(buffers, key_table), rows_before=None)

    def produce_from_duckdb(
        self,
        table_or_query: str,
        target: Target,
        batch_size: int,
        row_type: RowType,
        partition: int | None = None,
        *,
        check_keys: bool = True,
    ) -> int:
        """Produce every row of a DuckDB table or query in the open transaction.

        Rows of a keyed table (a value schema with a primary key) are checked first: a
        duplicate or null key fails before anything of them is sent (Kafka would keep only
        the last row per key, silently).

        Args:
            table_or_query: A table name, or a query (``SELECT``/``WITH``/``FROM``...).
            target: From :meth:`add_target`.
            batch_size: Rows read, encoded and sent at a time.
            row_type: Goes into ``__change_type`` of every row.
            partition: Explicit partition for all rows (default: murmur2 of each key).
            check_keys: Check the primary key first (one scan of the key columns, a few
                per cent of the export); False for flows that guarantee unique keys.

        Returns:
            The number of rows produced.

        Raises:
            ProduceError: Unknown target, closed producer, Kafka refused a message, or an
                earlier error aborted the transaction (see :meth:`abort`).
            SchemaError: Columns or values do not fit the schema (the transaction is
                aborted; nothing of it becomes visible).
            SourceError: Duplicate or null keys (the transaction is aborted).
        """
        self._usable()
        con = self._duckdb if self._duckdb is not None else duckdb.default_connection()
        with connection_lock(con):  # another run's reader may use con from a worker thread
            return self._export(
                con, table_or_query, target, batch_size, row_type, partition, check_keys
            )

    def _export(
        self,
        con: duckdb.DuckDBPyConnection,
        table_or_query: str,
        target: Target,
        batch_size: int,
        row_type: RowType,
        partition: int | None,
        check_keys: bool,
    ) -> int:
        """:meth:`produce_from_duckdb`, holding the connection's lock."""
        progress = Progress(f"topic={target.topic} table={target.table}", self._log)
        context = {"topic": getattr(target, "topic", None), "table": getattr(target, "table", None)}
        with self._aborting_on_error(**context):  # bad SQL, columns or keys abort what is open
            self._check_arguments(target, partition, batch_size)
            check_columns(relation(con, table_or_query).columns, target)
            report = None
            if target.value_schema.expectations:  # a step in the log only where there are any
                with progress.steps("expectations"):
                    report = check_before_export(
                        con, table_or_query, target, row_type, self.function_name, self._log
                    )
            if report is not None:
                self._expectation_reports.append(report)  # reported, also when it fails
                act_on(report, target, self.function_name, self._log)
                table_or_query = report.kept_sql  # without the rows a drop expectation failed
            if check_keys and not target.key_schema.is_append_only:
                with progress.steps("check_keys"):
                    self._check_keys(con, table_or_query, target)  # a query: before the reader's
            if report is not None and report.drops:
                self._reject(con, report, target, row_type)
            reader = relation(con, table_or_query).to_arrow_reader(batch_size)
            first = next((b for b in reader if b.num_rows), None)
        if first is None:  # no rows: no transaction is begun for them
            progress.finish()
            return 0
        ledger = self._begin()
        with self._aborting_on_error(**context):
            batches = pa.RecordBatchReader.from_batches(reader.schema, chain([first], reader))
            constants = self._constants(target, row_type, ledger.transaction_time)
            after_rows = self._settings.encode_process_after_rows
            encoding = ExportEncoding(
                target,
                constants,
                partition,
                None if after_rows < 0 else after_rows,
                progress.steps.add,
            )
            for encoded in encoding.batches(batches):
                with progress.steps("send"):
                    self._send(target, encoded, rows_before=progress.rows)
                progress.add(len(encoded))
        progress.finish()
        return progress.rows

    def _reject(
        self,
        con: duckdb.DuckDBPyConnection,
        report: ExpectationReport,
        target: Target,
        row_type: RowType,
    ) -> None:
        """Send the rows drop expectations failed to ``_rejected_rows``, in the transaction."""
        retention = self._settings.topic_retention_ms
        self._system_topic(REJECTED_ROWS_TOPIC, data_topic_config(None, "delete", retention))
        rows = con.sql(report.dropped_sql).to_arrow_table()
        ledger = self._begin()
        constants = self._constants(target, row_type, ledger.transaction_time)
        assert self._kafka is not None
        send_rejected(self._kafka, ledger, target, rows, constants, self.function_name)

    def take_expectation_reports(self) -> list[ExpectationReport]:
        """The expectation checks of the exports since the last take (the runner's report)."""
        taken, self._expectation_reports = self._expectation_reports, []
        return taken

    def _check_arguments(self, target: Target, partition: int | None, batch_size: int) -> None:
        self._check_target(target)
        self._check_partition(target, partition)
        if batch_size < 1:
            raise ProduceError(
                "batch_size must be positive", topic=target.topic, batch_size=batch_size
            )

    def _check_keys(
        self, con: duckdb.DuckDBPyConnection, table_or_query: str, target: Target
    ) -> None:
        """Duplicate or null keys fail here, before a row of the table is sent."""
        check_keys(
            table_or_query,
            target.value_schema.pks,
            con,
            topic=target.topic,
            table=target.table,
            source=table_or_query,
        )

    def _send(self, target: Target, batch: EncodedBatch, rows_before: int | None) -> None:
        assert self._ledger is not None and self._kafka is not None
        self._ledger.count(target.topic, target.table, batch.rows_per_partition)
        try:
            send_batch(self._kafka, target.topic, batch, self._ledger.on_delivery)
        except RowRejected as exc:
            raise rejected_row_error(
                target, batch, exc, rows_before, self._max_message_bytes
            ) from exc.cause
        self._kafka.poll(0)  # serve delivery reports so they do not pile up
