"""A bounded, read_committed read of a Kafka topic, in Arrow batches of raw message values.

:class:`TopicRange` fixes, when it opens, where each partition starts (given offsets, the first
offset at or after a timestamp, or the consumer group's committed offsets, else the earliest)
and where it ends (the last stable offset at that moment: committed transactions only). It
then yields batches of ``(partition, offset, value)`` as Arrow tables until every partition
reached its end; messages produced later wait for the next read. Nothing is committed until
:meth:`TopicRange.commit` is called (after the flow published what it read).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import OFFSET_INVALID, Consumer, IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, OffsetSpec

from producer_lib.errors import ConfigError, SourceError
from producer_lib.settings import KafkaSettings

_log = logging.getLogger(__name__)
RAW_SCHEMA = pa.schema([("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.binary())])
_CONSUMER_DEFAULTS = {
    "isolation.level": "read_committed",  # aborted transactions are never rows
    "enable.auto.commit": False,  # offsets move only when the flow published what it read
    "enable.partition.eof": True,  # the end of a partition is an event, not a silence
    "auto.offset.reset": "error",  # a start offset that no longer exists is an error
}


class TopicRange:
    """The messages of ``topic`` between fixed start and end offsets, read in batches.

    Args:
        settings: How to reach Kafka (:class:`~producer_lib.settings.KafkaSettings`).
        topic: The topic to read.
        group_id: Consumer group whose committed offsets are the default start and which
            :meth:`commit` advances; None: a throwaway group (nothing is committed).
        start_offsets: Start offset by partition; partitions not named start as by default.
        start_time: Start of every partition: its first offset at or after this instant.
        batch_size: Most messages per Arrow batch.
        idle_timeout_s: Longest wait for the next message of an unfinished partition.

    Raises:
        ConfigError: Both ``start_offsets`` and ``start_time`` were given.
    """

    def __init__(
        self,
        settings: KafkaSettings,
        topic: str,
        *,
        group_id: str | None = None,
        start_offsets: Mapping[int, int] | None = None,
        start_time: datetime | None = None,
        batch_size: int = 50_000,
        idle_timeout_s: float = 30.0,
    ) -> None:
        if start_offsets is not None and start_time is not None:
            raise ConfigError("Give start_offsets or start_time, not both", topic=topic)
        self.settings, self.topic, self.group_id = settings, topic, group_id
        self.start_offsets, self.start_time = dict(start_offsets or {}), start_time
        self.batch_size, self.idle_timeout_s = batch_size, idle_timeout_s
        self.starts: dict[int, int] = {}
        """Start offset of each partition, once opened."""
        self.ends: dict[int, int] = {}
        """End offset (exclusive) of each partition, once opened: where the next read starts."""
        self._consumer: Any = None

    # -- opening: where to start and where to stop ------------------------------------------

    def open(self) -> None:
        """Connect, and fix the start and end offset of every partition.

        Raises:
            SourceError: The topic does not exist, the cluster cannot be reached, or a start
                offset lies outside the partition (names topic and partition).
        """
        conf = self.settings.to_librdkafka()
        group = self.group_id or f"producer-lib-json-{uuid.uuid4().hex}"
        self._consumer = Consumer({**conf, **_CONSUMER_DEFAULTS, "group.id": group})
        admin = AdminClient(conf)
        partitions = self._partitions()
        self.ends = self._list(admin, {p: OffsetSpec.latest() for p in partitions})
        earliest = self._list(admin, {p: OffsetSpec.earliest() for p in partitions})
        self.starts = self._starts(admin, partitions, earliest)
        for partition, start in self.starts.items():
            if not earliest[partition] <= start <= self.ends[partition]:
                raise SourceError(
                    "The start offset lies outside the partition",
                    topic=self.topic,
                    partition=partition,
                    offset=start,
                    earliest=earliest[partition],
                    end=self.ends[partition],
                )
        _log.info("topic range topic=%s starts=%s ends=%s", self.topic, self.starts, self.ends)

    def _partitions(self) -> list[int]:
        try:
            metadata = self._consumer.list_topics(self.topic, timeout=self.idle_timeout_s)
        except KafkaException as exc:
            raise SourceError(
                f"Cannot reach Kafka: {exc}", topic=self.topic, kafka=self.settings.describe()
            ) from exc
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise SourceError(
                "The topic does not exist", topic=self.topic, kafka=self.settings.describe()
            )
        return sorted(topic.partitions)

    def _list(self, admin: AdminClient, specs: Mapping[int, OffsetSpec]) -> dict[int, int]:
        """Offsets of ``specs`` as the broker lists them (read_committed: the stable end)."""
        request = {TP(self.topic, p): spec for p, spec in specs.items()}
        futures = admin.list_offsets(
            request,
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=self.idle_timeout_s,
        )
        try:
            return {tp.partition: f.result().offset for tp, f in futures.items()}
        except KafkaException as exc:
            raise SourceError(f"Cannot list the topic's offsets: {exc}", topic=self.topic) from exc

    def _starts(
        self, admin: AdminClient, partitions: list[int], earliest: Mapping[int, int]
    ) -> dict[int, int]:
        """Start of each partition: given offset, timestamp, committed offset or earliest."""
        if self.start_time is not None:
            stamp = int(self.start_time.timestamp() * 1000)
            found = self._list(admin, {p: OffsetSpec.for_timestamp(stamp) for p in partitions})
            return {p: self.ends[p] if found[p] < 0 else found[p] for p in partitions}
        unknown = set(self.start_offsets) - set(partitions)
        if unknown:
            raise SourceError(
                "The topic has no such partition",
                topic=self.topic,
                partition=min(unknown),
                partitions=len(partitions),
            )
        committed = self._committed(partitions) if self.group_id else {}
        return {p: self.start_offsets.get(p, committed.get(p, earliest[p])) for p in partitions}

    def _committed(self, partitions: list[int]) -> dict[int, int]:
        tps = [TP(self.topic, p) for p in partitions]
        try:
            found = self._consumer.committed(tps, timeout=self.idle_timeout_s)
        except KafkaException as exc:
            raise SourceError(
                f"Cannot read the group's offsets: {exc}", topic=self.topic, group=self.group_id
            ) from exc
        return {tp.partition: tp.offset for tp in found if tp.offset != OFFSET_INVALID}

    # -- reading ------------------------------------------------------------------------------

    def batches(self) -> Iterator[pa.Table]:
        """Yield the range's messages as Arrow tables of :data:`RAW_SCHEMA`, in batches.

        Raises:
            SourceError: A partition stalled for ``idle_timeout_s`` before its end, or the
                consumer failed (names topic, partition and the offsets).
        """
        todo = {p: s for p, s in self.starts.items() if s < self.ends[p]}
        if not todo:
            return
        self._consumer.assign([TP(self.topic, p, s) for p, s in todo.items()])
        chunks: list[pa.Table] = []
        last_progress = time.monotonic()
        while todo:
            messages = self._consumer.consume(self.batch_size, timeout=1.0)
            if messages:
                last_progress = time.monotonic()
                chunks.append(self._take(messages, todo))
            self._finish_by_position(todo)
            if sum(c.num_rows for c in chunks) >= self.batch_size or not todo:
                batch = pa.concat_tables(chunks) if chunks else RAW_SCHEMA.empty_table()
                chunks = []
                if batch.num_rows:
                    yield batch
            elif time.monotonic() - last_progress > self.idle_timeout_s:
                first = min(todo)
                raise SourceError(
                    "No message before the partition's end",
                    topic=self.topic,
                    partition=first,
                    offset=self._position(first),
                    end=self.ends[first],
                    idle_timeout_s=self.idle_timeout_s,
                )
        self._consumer.unassign()

    def _take(self, messages: list[Any], todo: dict[int, int]) -> pa.Table:
        """The messages within the range as a table; partition ends and errors handled.

        Column by column (one comprehension each): a branch per message costs more.
        """
        data = [m for m in messages if m.error() is None]
        if len(data) != len(messages):
            self._events([m for m in messages if m.error() is not None], todo)
        partitions = pa.array([m.partition() for m in data], pa.int32())
        offsets = pa.array([m.offset() for m in data], pa.int64())
        table = pa.Table.from_arrays(
            [partitions, offsets, pa.array([m.value() for m in data], pa.binary())],
            schema=RAW_SCHEMA,
        )
        ends = pa.array([self.ends.get(p, 0) for p in range(max(self.ends) + 1)], pa.int64())
        return table.filter(pc.less(offsets, pc.take(ends, partitions)))  # past the end: skip

    def _events(self, events: list[Any], todo: dict[int, int]) -> None:
        """Finish partitions at their end; fail on any other consumer error."""
        for event in events:
            error, partition, offset = event.error(), event.partition(), event.offset()
            if error.code() != KafkaError._PARTITION_EOF:
                raise SourceError(
                    f"Consuming failed: {error.str()}",
                    topic=self.topic,
                    partition=partition,
                    offset=offset,
                )
            if partition in todo and offset >= self.ends[partition]:
                self._done(partition, todo)

    def _finish_by_position(self, todo: dict[int, int]) -> None:
        """Finish partitions whose position passed their end (transaction markers skipped)."""
        for partition in list(todo):
            if self._position(partition) >= self.ends[partition]:
                self._done(partition, todo)

    def _position(self, partition: int) -> int:
        [tp] = self._consumer.position([TP(self.topic, partition)])
        return int(tp.offset)

    def _done(self, partition: int, todo: dict[int, int]) -> None:
        todo.pop(partition, None)
        self._consumer.pause([TP(self.topic, partition)])

    # -- after the flow published -------------------------------------------------------------

    def commit(self) -> dict[int, int]:
        """Commit the end offsets to the consumer group, so the next read starts there.

        Returns:
            The committed offset of each partition.

        Raises:
            ConfigError: No ``group_id`` was given.
            SourceError: The commit failed.
        """
        if not self.group_id:
            raise ConfigError("Committing offsets needs a group_id", topic=self.topic)
        offsets = [TP(self.topic, p, end) for p, end in self.ends.items()]
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            raise SourceError(
                f"Cannot commit the offsets: {exc}", topic=self.topic, group=self.group_id
            ) from exc
        return dict(self.ends)

    def close(self) -> None:
        """Close the consumer (nothing is committed)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
