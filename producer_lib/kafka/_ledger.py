"""What one transaction wrote: rows per table and partition, first/last offsets, failures.

Rows are counted when produced. Offsets come from delivery reports of only the first and
the last message of each partition in each batch (messages of one partition are delivered
in order by the idempotent producer), so no Python callback runs per message. A failed
message without a callback still fails the transaction: librdkafka puts a transactional
producer into the abortable-error state when any message fails, and ``commit_transaction``
then raises (``tests/producer_lib/kafka/test_kafka_producer.py`` checks this).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Message

from producer_lib.errors import ProduceError

__all__ = ["CommitHook", "PartitionStats", "PendingCommit", "TransactionLedger"]


@dataclass
class PartitionStats:
    """Rows and offsets of one topic partition within one transaction."""

    rows: int = 0
    min_offset: int | None = None
    max_offset: int | None = None


@dataclass
class TransactionLedger:
    """Bookkeeping of one open transaction.

    Attributes:
        transaction_time: The ``__change_time`` of every row (µs since epoch, UTC).
        tables: Rows per ``(topic, table)``.
        partitions: Stats per ``(topic, partition)``.
        failures: Delivery errors seen so far, as text.
        purged: How many of them only say librdkafka purged the message, because the
            transaction itself failed.
        system_records: Records of system topics (``_execution_log``, ``_lineage``...).
        truncated: Text values cut to their declared length (an opt-in), per table and
            column; filled just before the commit.
    """

    transaction_time: int
    system_records: int = 0
    tables: dict[tuple[str, str], int] = field(default_factory=dict)
    partitions: dict[tuple[str, int], PartitionStats] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    purged: int = 0
    truncated: dict[str, dict[str, int]] = field(default_factory=dict)

    def count(self, topic: str, table: str, rows_per_partition: dict[int, int]) -> None:
        """Count produced rows of ``table`` by partition."""
        total = sum(rows_per_partition.values())
        self.tables[(topic, table)] = self.tables.get((topic, table), 0) + total
        for partition, rows in rows_per_partition.items():
            self.partitions.setdefault((topic, partition), PartitionStats()).rows += rows

    def on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        """Delivery report of a marked message: widen its partition's offset range."""
        if err is not None:
            self.failures.append(self._failure_text(err, msg))
            self.purged += err.code() == KafkaError._PURGE_QUEUE
            return
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        if topic is None or partition is None or offset is None:  # a delivered message has all
            return
        stats = self.partitions.setdefault((topic, partition), PartitionStats())
        if stats.min_offset is None or offset < stats.min_offset:
            stats.min_offset = offset
        if stats.max_offset is None or offset > stats.max_offset:
            stats.max_offset = offset

    def _failure_text(self, err: KafkaError, msg: Message) -> str:
        tables = ",".join(t for (topic, t) in self.tables if topic == msg.topic())
        where = f"topic={msg.topic()} table={tables} partition={msg.partition()}"
        if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:  # the whole batch fails, not one row
            return (
                f"{where}: the broker refused a batch holding a message larger than the "
                "topic's max.message.bytes; shorten the rows or raise it"
            )
        return f"{where}: {err}"

    def check(self, transaction_error: str = "") -> None:
        """Raise when a message failed or a partition lacks its offsets (after a flush).

        Args:
            transaction_error: Why librdkafka failed the transaction, if it did (its
                ``TXNERR`` text): the cause to name when the messages were only purged.

        Raises:
            ProduceError: Delivery failed; the transaction must be aborted.
        """
        if self.failures and transaction_error and self.purged == len(self.failures):
            raise ProduceError(
                f"the transaction failed ({transaction_error}), so its {len(self.failures)} "
                f"queued message(s) were purged, the first: {self.failures[0]}; the "
                "transaction was aborted",
            )
        if self.failures:
            raise ProduceError(
                f"{len(self.failures)} message(s) failed: {self.failures[0]}; "
                "the transaction was aborted",
            )
        missing = [key for key, s in self.partitions.items() if s.rows and s.min_offset is None]
        if missing:
            topic, partition = missing[0]
            raise ProduceError(
                "no delivery report for produced rows; the transaction was aborted",
                topic=topic,
                partition=partition,
            )

    @property
    def rows(self) -> int:
        """Rows produced in this transaction."""
        return sum(self.tables.values())

    def commit_record(self, **header: Any) -> dict[str, Any]:
        """The ``_commits`` value (``docs/WIRE.md``): ``header`` fields, then tables, partitions.

        Args:
            **header: ``commit_id``, ``producer``, ``source_system``, ``function_name``.
        """
        tables = [
            {"topic": topic, "table": table, "rows": rows}
            for (topic, table), rows in self.tables.items()
        ]
        partitions = [
            {
                "topic": topic,
                "partition": partition,
                "min_offset": s.min_offset,
                "max_offset": s.max_offset,
                "rows": s.rows,
            }
            for (topic, partition), s in sorted(self.partitions.items())
            if s.rows
        ]
        record = {
            **header,
            "transaction_time": self.transaction_time,
            "tables": tables,
            "partitions": partitions,
        }
        if self.truncated:
            record["truncated"] = self.truncated
        return record


class PendingCommit:
    """What a commit hook sees: the transaction about to be committed.

    Attributes:
        commit_id: Id of the commit (also the key of its ``_commits`` record).
        transaction_time: The ``__change_time`` of its rows (µs since epoch, UTC).
        rows: Data rows per table (``<namespace>.<name>``) in this transaction.
        topic_rows: Data rows per ``(topic, table)`` in this transaction.
        truncated: Text values cut to their declared length, per table and column.
    """

    def __init__(self, commit_id: str, ledger: TransactionLedger) -> None:
        self.commit_id = commit_id
        self.transaction_time = ledger.transaction_time
        self.truncated = ledger.truncated
        self.rows: dict[str, int] = {}
        self.topic_rows = dict(ledger.tables)
        for (_topic, table), rows in ledger.tables.items():
            self.rows[table] = self.rows.get(table, 0) + rows
        self._after: list[Callable[[], None]] = []

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the transaction has committed (not if it fails)."""
        self._after.append(callback)

    def committed(self) -> None:
        """Run the :meth:`after_commit` callbacks (the producer calls this once committed)."""
        for callback in self._after:
            callback()


CommitHook = Callable[[PendingCommit], None]
