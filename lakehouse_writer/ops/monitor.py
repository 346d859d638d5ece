"""A consumer group for monitoring only: the writer's end offsets, committed after each batch.

Kafka tools see a consumer's lag through its group's committed offsets; the writer reads
through Spark, which commits none (its checkpoint holds the offsets). :class:`MonitorGroup`
commits, after each batch Spark reports, the offset after the last one the batch read per
topic partition (the progress report's ``endOffset``, the same meaning as a consumer's
committed offset) to a group nobody consumes with, so ``kafka-consumer-groups --describe
--group <group>`` and Kafka UIs show how far behind the writer is. The writer never reads
these offsets back: a restart resumes from its checkpoint and ``_writer_state``, whatever
the group says, and deleting or resetting the group changes nothing but what tools show.

Commits run on a thread of their own (a slow broker never holds up a batch), newest offsets
only, retried while the group's coordinator is loading; a refusal (an ACL, say) is logged
as a warning, never raised. :meth:`MonitorGroup.close` waits a few seconds for the last one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from lakehouse_writer.runtime.status import BatchStats, Partition, end_offsets

__all__ = ["GROUP_PREFIX", "MonitorGroup", "default_group"]

log = logging.getLogger(__name__)

GROUP_PREFIX = "lakehouse-writer-"  # devstack's secured broker lets the writer use these groups
_RETRY_S = 20.0  # a new group's coordinator may take seconds to load
_CLOSE_WAIT_S = 15.0  # bound on waiting for the last commit when the writer ends
_COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TIMED_OUT,
}


def default_group(instance_id: str) -> str:
    """The monitoring group of a writer instance (one per checkpoint): never shared."""
    return f"{GROUP_PREFIX}{instance_id}"


class MonitorGroup:
    """Commits each batch's end offsets to ``group``; a :class:`~.status.StatusObserver`.

    Args:
        kafka_conf: librdkafka settings of the writer's Kafka connection.
        group: The group's name, or a function that gives it on first use (the default
            name needs the instance id, which the run creates).
    """

    def __init__(self, kafka_conf: Mapping[str, Any], group: str | Callable[[], str]) -> None:
        """Connect lazily; start the committing thread."""
        self._conf = dict(kafka_conf)
        self._group: str | Callable[[], str] = group
        self._admin: AdminClient | None = None
        self._wanted: dict[Partition, int] = {}
        self._committed: dict[Partition, int] = {}
        self._changed = threading.Condition()
        self._closing = False
        self._refused = False  # warned once about a refusal
        self._thread = threading.Thread(target=self._loop, name="writer-monitor", daemon=True)
        self._thread.start()

    @property
    def group(self) -> str:
        """The group's name."""
        if callable(self._group):
            self._group = self._group()
        return self._group

    def on_status(self, stats: BatchStats) -> None:
        """Nothing: the offsets come with the progress report."""

    def on_progress(self, progress: Mapping[str, Any]) -> None:
        """Commit the batch's end offsets (on the committing thread)."""
        ends = end_offsets(progress)
        if not ends:
            return
        self.group  # noqa: B018 - named here, on the writer's thread (it may need the session)
        with self._changed:
            self._wanted = {**self._wanted, **ends}
            self._changed.notify()

    def close(self) -> None:
        """Commit what is still waiting (within a few seconds), then stop."""
        with self._changed:
            self._closing = True
            self._changed.notify()
        self._thread.join(_CLOSE_WAIT_S)
        if not self._thread.is_alive():
            self._admin = None  # its Kafka client goes with it (no reconnecting after the run)

    def _loop(self) -> None:
        while True:
            with self._changed:
                while self._wanted == self._committed and not self._closing:
                    self._changed.wait()
                wanted, closing = dict(self._wanted), self._closing
            if wanted != self._committed:
                self._commit(wanted)
            if closing:
                return

    def _commit(self, offsets: dict[Partition, int]) -> None:
        deadline = time.monotonic() + _RETRY_S
        while True:
            try:
                failed = self._send(offsets)
            except KafkaException as exc:
                failed = [(None, exc.args[0] if exc.args else exc)]
            except Exception as exc:  # noqa: BLE001 - a timeout, a bad setting: logged below
                failed = [(None, exc)]
            retry = [
                e
                for _, e in failed
                if isinstance(e, KafkaError) and e.code() in _COORDINATOR_MOVING
            ]
            if not failed or len(retry) < len(failed) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self._committed = offsets  # tried: the next batch's offsets come as a new commit
        if failed:
            self._warn(failed)
        else:
            log.debug("monitor group committed group=%s partitions=%d", self.group, len(offsets))

    def _send(self, offsets: dict[Partition, int]) -> list[tuple[Partition | None, Any]]:
        """Commit ``offsets``; the partitions refused, with their errors."""
        if self._admin is None:
            self._admin = AdminClient(self._conf)
        parts = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        request = [ConsumerGroupTopicPartitions(self.group, parts)]
        done = self._admin.alter_consumer_group_offsets(request, request_timeout=10)
        result = done[self.group].result(timeout=15)
        return [
            ((tp.topic, tp.partition), tp.error)
            for tp in result.topic_partitions
            if tp.error is not None
        ]

    def _warn(self, failed: list[tuple[Partition | None, Any]]) -> None:
        where, error = failed[0]
        level = logging.DEBUG if self._refused else logging.WARNING
        self._refused = True
        log.log(
            level,
            "monitor group not committed group=%s topic=%s partition=%s error=%s "
            "(monitoring only: the writer goes on)",
            self.group,
            where and where[0],
            where and where[1],
            error,
        )
