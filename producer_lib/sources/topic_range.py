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
from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from datetime import datetime
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_INVALID, IsolationLevel, KafkaException
from confluent_kafka import TopicPartition as TP
from confluent_kafka.admin import AdminClient, OffsetSpec

from producer_lib.errors import ConfigError, SourceError
from producer_lib.kafka.topic_reader import (
    ReadStalled,
    TopicReadError,
    consumer,
    messages_to_arrow,
    read_ranges,
)
from producer_lib.settings import KafkaSettings

_log = logging.getLogger(__name__)
RAW_SCHEMA = pa.schema([("partition", pa.int32()), ("offset", pa.int64()), ("value", pa.binary())])


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
        self._closing = ExitStack()

    # -- opening: where to start and where to stop ------------------------------------------

    def open(self) -> None:
        """Connect, and fix the start and end offset of every partition.

        Raises:
            SourceError: The topic does not exist, the cluster cannot be reached, or a start
                offset lies outside the partition (names topic and partition).
        """
        group = {"group_id": self.group_id} if self.group_id else {}
        self._consumer = self._closing.enter_context(
            consumer(self.settings, purpose="producer-lib-json", **group)
        )
        admin = AdminClient(self.settings.to_librdkafka())
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
        ranges = {(self.topic, p): (start, self.ends[p]) for p, start in self.starts.items()}
        chunks: list[pa.Table] = []
        try:
            for messages in read_ranges(
                self._consumer, ranges, stall_s=self.idle_timeout_s, batch_size=self.batch_size
            ):
                chunks.append(messages_to_arrow(messages, RAW_SCHEMA))
                if sum(c.num_rows for c in chunks) >= self.batch_size:
                    yield pa.concat_tables(chunks)
                    chunks = []
        except ReadStalled as exc:
            raise SourceError(
                "No message before the partition's end",
                topic=self.topic,
                partition=exc.context.get("partition"),
                offset=exc.context.get("offset"),
                end=exc.context.get("end"),
                idle_timeout_s=self.idle_timeout_s,
            ) from exc
        except TopicReadError as exc:
            raise SourceError(f"Consuming failed: {exc.message}", **exc.context) from exc
        if chunks:
            yield pa.concat_tables(chunks)

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
        self._closing.close()
        self._consumer = None
