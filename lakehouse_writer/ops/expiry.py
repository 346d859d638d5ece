"""Rows the writer has not read yet and Kafka will delete soon: said before they are lost.

A topic keeps a row for its ``retention.ms`` (producer_lib creates change topics with 7 days).
A writer that stays down or falls behind for longer loses nothing silently — the next batch
stops with a data gap naming the offsets (:mod:`lakehouse_writer.runtime.data_loss`) — but by
then the rows are gone. :class:`ExpiryWatch` warns while there is still time: after a batch (at most
once a minute), for each topic partition the writer reads, it asks Kafka for the first offset
written after ``now - retention.ms x warn_fraction``; when the writer's next offset is before
it, the writer's oldest unread row has used up more than that share of its retention, and a
warning names the topic, the partition, the offset and the retention.

It only reads metadata (the topic's configuration, an offset lookup by time) on a thread of
its own, so a slow or unreachable broker never holds up a batch, and never raises: a failed
lookup is logged at debug. :meth:`ExpiryWatch.close` waits for a running check and releases
the Kafka client.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType

from lakehouse_writer.runtime.status import BatchStats, Partition, end_offsets

__all__ = ["Behind", "ExpiryWatch"]

log = logging.getLogger(__name__)

CHECK_EVERY_S = 60.0  # a lookup per partition: not after every batch of a busy writer
WARN_FRACTION = 0.5  # warn once the oldest unread row has used half its retention
_TIMEOUT_S = 5.0
_CONFIG_TTL_S = 600.0  # a topic's retention rarely changes: read it every 10 minutes
_CLOSE_WAIT_S = 3 * _TIMEOUT_S  # a running check's lookups time out within this


@dataclass(frozen=True)
class Behind:
    """A topic partition whose oldest unread row is past the warning share of its retention.

    Attributes:
        topic: The topic.
        partition: The partition.
        next_offset: The writer's next offset to read there.
        retention_ms: The topic's ``retention.ms``.
    """

    topic: str
    partition: int
    next_offset: int
    retention_ms: int


class ExpiryWatch:
    """Warns when unread rows near their topic's retention; a :class:`~.status.StatusObserver`.

    Args:
        kafka_conf: librdkafka settings of the writer's Kafka connection.
        check_every_s: Least time between two checks.
        warn_fraction: Share of the retention after which an unread row is warned about.
        clock: Seconds since the epoch (tests pass their own).
    """

    def __init__(
        self,
        kafka_conf: Mapping[str, Any],
        *,
        check_every_s: float = CHECK_EVERY_S,
        warn_fraction: float = WARN_FRACTION,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._conf = dict(kafka_conf)
        self._every, self._fraction, self._clock = check_every_s, warn_fraction, clock
        self._admin: AdminClient | None = None
        self._retention: dict[str, tuple[float, int]] = {}  # topic -> (read at, retention.ms)
        self._last_check = float("-inf")
        self._worker: ThreadPoolExecutor | None = None
        self._running: Future[None] | None = None
        self.behind: list[Behind] = []

    def on_status(self, stats: BatchStats) -> None:
        """Nothing: the offsets come with the progress report."""

    def on_progress(self, progress: Mapping[str, Any]) -> None:
        """Start a check of the batch's end offsets, at most once per ``check_every_s``.

        The check runs on the watch's own thread; a check still running is not doubled.
        """
        ends = end_offsets(progress)
        now = self._clock()
        if not ends or now - self._last_check < self._every:
            return
        if self._running is not None and not self._running.done():
            return
        self._last_check = now
        self._worker = self._worker or ThreadPoolExecutor(1, thread_name_prefix="expiry-watch")
        self._running = self._worker.submit(self._check_and_warn, ends)

    def close(self) -> None:
        """Wait for a running check (bounded), stop the thread, release the Kafka client."""
        if self._running is not None:
            try:
                self._running.result(timeout=_CLOSE_WAIT_S)
            except Exception as exc:  # noqa: BLE001 - closing must not fail the writer's exit
                log.debug("retention check not finished at close error=%s", exc)
        if self._worker is not None:
            self._worker.shutdown(wait=False, cancel_futures=True)
        self._worker, self._running, self._admin = None, None, None

    def _check_and_warn(self, ends: Mapping[Partition, int]) -> None:
        try:
            self.behind = self.check(ends)
        except Exception as exc:  # noqa: BLE001 - a warning aid must never fail a batch
            log.debug("retention check failed error=%s", exc)
            return
        for late in self.behind:
            log.warning(
                "writer behind retention topic=%s partition=%d next_offset=%d: rows not read "
                "yet were written more than %.0f%% of the topic's retention ago "
                "(retention.ms=%d); Kafka deletes them after it, and the writer would then "
                "stop with a data gap. Let the writer catch up, or raise the topic's retention",
                late.topic,
                late.partition,
                late.next_offset,
                self._fraction * 100,
                late.retention_ms,
            )

    def check(self, next_offsets: Mapping[Partition, int]) -> list[Behind]:
        """The partitions whose next offset to read is older than the warning share."""
        admin = self._admin = self._admin or AdminClient(self._conf)
        now_ms = int(self._clock() * 1000)
        specs: dict[TopicPartition, Any] = {}
        retention: dict[Partition, int] = {}
        for topic, partition in next_offsets:
            ms = self._retention_ms(admin, topic)
            if ms <= 0:  # kept for ever
                continue
            retention[(topic, partition)] = ms
            cutoff = now_ms - int(ms * self._fraction)
            specs[TopicPartition(topic, partition)] = OffsetSpec.for_timestamp(cutoff)
        if not specs:
            return []
        found = admin.list_offsets(specs, request_timeout=_TIMEOUT_S)
        ends = admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in specs}, request_timeout=_TIMEOUT_S
        )
        behind = []
        for tp in specs:
            first_recent = found[tp].result(timeout=_TIMEOUT_S).offset
            end = ends[tp].result(timeout=_TIMEOUT_S).offset
            boundary = end if first_recent < 0 else first_recent  # -1: every row is older
            offset = next_offsets[(tp.topic, tp.partition)]
            if offset < boundary:
                behind.append(
                    Behind(tp.topic, tp.partition, offset, retention[(tp.topic, tp.partition)])
                )
        return behind

    def _retention_ms(self, admin: AdminClient, topic: str) -> int:
        now = time.monotonic()
        cached = self._retention.get(topic)
        if cached is not None and now - cached[0] < _CONFIG_TTL_S:
            return cached[1]
        resource = ConfigResource(ResourceType.TOPIC, topic)
        config = admin.describe_configs([resource])[resource].result(timeout=_TIMEOUT_S)
        ms = int(config["retention.ms"].value)
        self._retention[topic] = (now, ms)
        return ms
