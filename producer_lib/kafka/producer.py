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

import json
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import duckdb
import numpy as np
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from producer_lib.errors import ProduceError
from producer_lib.kafka._ledger import TransactionLedger
from producer_lib.kafka._send import EncodedBatch, encoded_ahead, send_batch
from producer_lib.kafka._target import Target, build_target, check_columns, relation, row_table
from producer_lib.kafka.catalog import SchemaCatalog, catalog_from_settings
from producer_lib.kafka.config import producer_config
from producer_lib.kafka.partitioner import partitions_for_keys
from producer_lib.kafka.progress import Progress
from producer_lib.kafka.topics import COMMITS_TOPIC, ensure_topic
from producer_lib.kafka.transactions import TransactionFailed, call_transactional
from producer_lib.schema.row_types import RowType
from producer_lib.schema.value_schema import KeySchema, ValueSchema
from producer_lib.settings import KafkaSettings

__all__ = ["KafkaProducer", "Target"]

log = logging.getLogger(__name__)

_COMMIT_ATTEMPTS = 3  # retriable commit/abort errors (coordinator moving): then give up


class KafkaProducer:
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
        self.source_system = source_system
        self.function_name = function_name
        self.transactional_id = f"{environment}.{zone}.{function_name}.{instance}"
        self._settings = kafka_settings
        self._log = logger or log
        self._duckdb = duckdb_connection
        self._catalog = schema_catalog
        self._kafka: Producer | None = None
        self._admin: AdminClient | None = None
        self._targets: dict[str, Target] = {}
        self._ledger: TransactionLedger | None = None
        self._last_time = 0
        self._state = "new"  # new -> open -> closed | broken
        self._broken_reason = ""

    # -- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> KafkaProducer:
        """Connect, fence older instances and get ready to produce.

        Raises:
            ProduceError: The cluster is unreachable within ``connect_timeout_s`` or refuses.
        """
        if self._state != "new":
            raise ProduceError("a KafkaProducer can be entered once; create a new one",
                               producer=self.transactional_id)  # fmt: skip
        conf = producer_config(self._settings, self.transactional_id)
        kafka = Producer(conf)
        timeout = self._settings.connect_timeout_s
        try:
            call_transactional("init_transactions", lambda: kafka.init_transactions(timeout),
                               attempts=1, producer=self.transactional_id)  # fmt: skip
        except TransactionFailed as exc:
            kafka.purge()
            raise ProduceError(
                f"cannot start a transactional producer within {timeout:g} s: {exc.message}; "
                "is the cluster reachable and are the settings right?",
                bootstrap_servers=self._settings.bootstrap_servers,
                producer=self.transactional_id,
            ) from exc
        self._kafka, self._admin, self._state = kafka, AdminClient(conf), "open"
        ensure_topic(self._admin, COMMITS_TOPIC, 1, timeout_s=timeout,
                     replication_factor=self._settings.topic_replication_factor)  # fmt: skip
        if self._catalog is None:
            self._catalog = catalog_from_settings(self._settings)
        self._log.info("producer ready producer=%s %s", self.transactional_id,
                       self._settings.describe())  # fmt: skip
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Abort an open transaction and close; leaving with uncommitted rows is an error.

        Raises:
            ProduceError: The block ended normally but rows were produced and not committed.
        """
        left_open = self._ledger is not None and self._state == "open"
        if left_open:
            self._abort("left the with block" if exc is None else f"{exc_type.__name__}")
        self._close()
        if left_open and exc is None:
            raise ProduceError("rows were produced but not committed; call commit() before "
                               "leaving the with block (they were aborted)",
                               producer=self.transactional_id)  # fmt: skip

    def _close(self) -> None:
        if self._kafka is not None and self._state == "open":
            self._kafka.flush(self._settings.connect_timeout_s)
        if self._state != "broken":
            self._state = "closed"
        self._kafka = None

    def _require_open(self) -> Producer:
        if self._state == "open" and self._kafka is not None:
            return self._kafka
        reason = {
            "new": "the producer is not started; use it in a with block",
            "closed": "the producer is closed; create a new KafkaProducer",
            "broken": f"the producer is unusable ({self._broken_reason}); create a new one",
        }[self._state]
        raise ProduceError(reason, producer=self.transactional_id)

    # -- targets ---------------------------------------------------------------------------

    def add_target(
        self,
        topic: str,
        schema_name: str,
        key_schema: KeySchema,
        value_schema: ValueSchema,
        partitions: int | None = None,
    ) -> Target:
        """Create ``topic`` if missing, register its schemas and return the target.

        Args:
            topic: Kafka topic of the table.
            schema_name: Name of the table's schema, for logs.
            key_schema: Key schema (primary key, or transaction time when append-only).
            value_schema: Value schema.
            partitions: Partitions if the topic is created (default: settings).

        Raises:
            ProduceError: The topic cannot be created or a schema cannot be stored.
            SchemaError: A schema is invalid.
        """
        self._require_open()
        assert self._admin is not None and self._catalog is not None
        count = ensure_topic(
            self._admin, topic, partitions or self._settings.topic_partitions,
            replication_factor=self._settings.topic_replication_factor,
            timeout_s=self._settings.connect_timeout_s,
        )  # fmt: skip
        target = build_target(topic, schema_name, key_schema, value_schema, count, self._catalog)
        self._targets[topic] = target
        self._log.info("target added topic=%s table=%s partitions=%d", topic, target.table, count)
        return target

    def _check_target(self, target: Target) -> None:
        if self._targets.get(getattr(target, "topic", None)) is not target:  # type: ignore[arg-type]
            raise ProduceError("unknown target: add it with add_target() on this producer first",
                               topic=getattr(target, "topic", repr(target)))  # fmt: skip

    def _check_partition(self, target: Target, partition: int | None) -> None:
        if partition is not None and not 0 <= partition < target.partitions:
            raise ProduceError(f"partition out of range 0..{target.partitions - 1}",
                               topic=target.topic, partition=partition)  # fmt: skip

    # -- producing ------------------------------------------------------------------------

    def _begin(self) -> TransactionLedger:
        kafka = self._require_open()
        if self._ledger is None:
            self._run_txn("begin_transaction", kafka.begin_transaction)
            now = time.time_ns() // 1000
            self._ledger = TransactionLedger(max(now, self._last_time + 1))
            self._last_time = self._ledger.transaction_time
        return self._ledger

    def _constants(self, target: Target, row_type: RowType, txn_time: int) -> tuple[dict, dict]:
        values = {"__change_type": RowType(row_type).value, "__change_time": txn_time,
                  "__source_system": self.source_system}  # fmt: skip
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
            ProduceError: Unknown target, closed producer, or Kafka refused the message.
            SchemaError: The row does not fit the schema (the transaction is aborted).
        """
        self._check_target(target)
        self._check_partition(target, partition)
        ledger = self._begin()
        with self._aborting_on_error():
            keys, values = self._constants(target, row_type, ledger.transaction_time)
            key_table = row_table(key_row, target.key_schema.get_pyarrow(), target, "key")
            value_table = row_table(value_row, target.value_schema.get_pyarrow(), target, "value")
            kbuf = target.key_encoder.encode_buffer(key_table, keys, target.key_header)
            vbuf = target.value_encoder.encode_buffer(value_table, values, target.value_header)
            if partition is None:
                parts = partitions_for_keys(kbuf[0], kbuf[1], target.partitions)
            else:
                parts = np.array([partition], dtype=np.int64)
            self._send(target, EncodedBatch.from_buffers(kbuf, vbuf, parts, target.partitions))

    def produce_from_duckdb(
        self,
        table_or_query: str,
        target: Target,
        batch_size: int,
        row_type: RowType,
        partition: int | None = None,
    ) -> int:
        """Produce every row of a DuckDB table or query in the open transaction.

        Args:
            table_or_query: A table name, or a query (``SELECT``/``WITH``/``FROM``...).
            target: From :meth:`add_target`.
            batch_size: Rows read, encoded and sent at a time.
            row_type: Goes into ``__change_type`` of every row.
            partition: Explicit partition for all rows (default: murmur2 of each key).

        Returns:
            The number of rows produced.

        Raises:
            ProduceError: Unknown target, closed producer, or Kafka refused a message.
            SchemaError: Columns or values do not fit the schema (the transaction is
                aborted; nothing of it becomes visible).
        """
        self._check_target(target)
        self._check_partition(target, partition)
        if batch_size < 1:
            raise ProduceError("batch_size must be positive", topic=target.topic,
                               batch_size=batch_size)  # fmt: skip
        ledger = self._begin()
        progress = Progress(f"topic={target.topic} table={target.table}", self._log)
        with self._aborting_on_error():
            con = self._duckdb if self._duckdb is not None else duckdb.default_connection()
            reader = relation(con, table_or_query).to_arrow_reader(batch_size)
            check_columns(reader.schema, target)
            constants = self._constants(target, row_type, ledger.transaction_time)
            for encoded in encoded_ahead(reader, target, constants, partition):
                self._send(target, encoded)
                progress.add(len(encoded))
        progress.finish()
        return progress.rows

    def _send(self, target: Target, batch: EncodedBatch) -> None:
        assert self._ledger is not None and self._kafka is not None
        self._ledger.count(target.topic, target.table, batch.rows_per_partition)
        send_batch(self._kafka, target.topic, batch, self._ledger.on_delivery)
        self._kafka.poll(0)  # serve delivery reports so they do not pile up

    # -- transactions ---------------------------------------------------------------------

    def commit(self) -> str | None:
        """Write the ``_commits`` record and commit the open transaction.

        Returns:
            The commit id, or None when nothing was produced since the last commit.

        Raises:
            ProduceError: A message or the commit failed; the transaction was aborted (or,
                when the error is fatal, the producer must be recreated).
        """
        kafka = self._require_open()
        ledger = self._ledger
        if ledger is None:
            self._log.info("nothing to commit producer=%s", self.transactional_id)
            return None
        commit_id = str(uuid.uuid4())
        with self._aborting_on_error():
            remaining = kafka.flush(self._settings.transaction_timeout_ms / 1000)
            if remaining:
                raise ProduceError(f"{remaining} message(s) not delivered in time",
                                   producer=self.transactional_id)  # fmt: skip
            ledger.check()
            record = ledger.commit_record(
                commit_id=commit_id, producer=self.transactional_id,
                source_system=self.source_system, function_name=self.function_name,
            )  # fmt: skip
            kafka.produce(COMMITS_TOPIC, json.dumps(record).encode(), commit_id.encode(), 0)
            timeout = self._settings.transaction_timeout_ms / 1000
            self._run_txn("commit_transaction", lambda: kafka.commit_transaction(timeout))
        self._ledger = None
        self._log.info("committed producer=%s commit_id=%s transaction_time=%d rows=%d",
                       self.transactional_id, commit_id, ledger.transaction_time,
                       ledger.rows)  # fmt: skip
        return commit_id

    def _run_txn(self, operation: str, call: Any) -> Any:
        try:
            return call_transactional(operation, call, attempts=_COMMIT_ATTEMPTS,
                                      producer=self.transactional_id)  # fmt: skip
        except TransactionFailed as exc:
            if exc.kind == "fatal":
                self._state, self._broken_reason = "broken", exc.message
            raise

    @contextmanager
    def _aborting_on_error(self) -> Iterator[None]:
        """Any exception inside aborts the open transaction, then propagates."""
        try:
            yield
        except BaseException as exc:
            self._abort(f"{type(exc).__name__}: {exc}")
            raise

    def _abort(self, reason: str) -> None:
        """Abort the open transaction; log (not raise) when even that fails."""
        ledger, self._ledger = self._ledger, None
        if ledger is None or self._kafka is None or self._state != "open":
            return
        kafka, timeout = self._kafka, self._settings.transaction_timeout_ms / 1000
        try:
            self._run_txn("abort_transaction", lambda: kafka.abort_transaction(timeout))
            self._log.warning("transaction aborted producer=%s reason=%s rows=%d",
                              self.transactional_id, reason, ledger.rows)  # fmt: skip
        except TransactionFailed as exc:
            self._state, self._broken_reason = "broken", exc.message
            self._log.error("abort failed producer=%s error=%s", self.transactional_id, exc)
