"""The ``_execution_log`` topic: one record per run state, and the delta pointer read back.

Layout (``docs/WIRE.md``): compacted, key ``"<function>|<dataflow>|<partition>"``, value UTF-8
JSON. Every record carries the delta pointer that holds *after* it: STARTED and FAILED carry
the pointer the run started from, COMPLETED the new one. So the latest committed record of a
key always holds the current pointer, and compaction (which keeps only that record) loses
nothing. COMPLETED is produced inside the data transaction, so the pointer moves exactly when
the data becomes visible.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from producer_lib.errors import ProduceError
from producer_lib.settings import KafkaSettings

__all__ = ["ExecutionRecord", "LoadKind", "RunStatus", "log_key", "read_latest"]

LoadKind = Literal["initial", "delta"]
RunStatus = Literal["STARTED", "COMPLETED", "FAILED"]
_POLL_S = 0.2


def log_key(function_name: str, dataflow: str, partition: str) -> str:
    """The ``_execution_log`` key of one (function, dataflow, partition)."""
    return f"{function_name}|{dataflow}|{partition}"


@dataclass(frozen=True)
class ExecutionRecord:
    """One ``_execution_log`` value (see ``docs/WIRE.md``)."""

    run_id: str
    function_name: str
    dataflow: str
    partition: str
    status: RunStatus
    load: LoadKind
    started_at: str
    finished_at: str | None = None
    rows: dict[str, int] = field(default_factory=dict)
    delta_pointer: Any = None
    commit_id: str | None = None
    error: str | None = None

    @property
    def key(self) -> str:
        """The record's key."""
        return log_key(self.function_name, self.dataflow, self.partition)

    def encode(self) -> tuple[bytes, bytes]:
        """Key and value bytes.

        Raises:
            ProduceError: The delta pointer is not JSON-serialisable.
        """
        try:
            value = json.dumps(asdict(self), separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise ProduceError(
                f"the delta pointer must be JSON-serialisable (str, int, float, bool, None, "
                f"list, dict): {exc}",
                flow=self.function_name,
                dataflow=self.dataflow,
            ) from exc
        return self.key.encode(), value.encode()


def read_latest(
    settings: KafkaSettings,
    topic: str,
    key: str,
    timeout_s: float = 30.0,
    where: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any] | None:
    """The latest committed value of ``key`` on ``topic`` (``read_committed``), or None.

    ``where`` narrows it to the latest value it accepts (e.g. the records of one run).

    Reads every partition from the start up to its end. A ``read_committed`` reader can hit
    end-of-partition at the last stable offset before the commit markers of a just-committed
    transaction land, so a partition counts as read only when that end reaches the high
    watermark taken before reading; an end that stays behind (a transaction of another flow
    still open there) is waited for, up to ``timeout_s``, then an error: a stale pointer
    must never be used.

    Raises:
        ProduceError: The topic cannot be read, or stays behind an open transaction.
    """
    consumer = Consumer(_consumer_config(settings))
    try:
        partitions = _partitions(consumer, topic, settings.connect_timeout_s)
        if not partitions:
            return None
        ends = {
            p: consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=settings.connect_timeout_s
            )[1]
            for p in partitions
        }
        todo = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in todo])
        return _scan(consumer, topic, key.encode(), todo, ends, timeout_s, where)
    except KafkaException as exc:
        raise ProduceError(f"cannot read {topic}: {exc.args[0]}", topic=topic, key=key) from exc
    finally:
        consumer.close()


def _scan(
    consumer: Consumer,
    topic: str,
    key: bytes,
    todo: set[int],
    ends: dict[int, int],
    timeout_s: float,
    where: Callable[[dict[str, Any]], bool] | None,
) -> dict[str, Any] | None:
    latest: dict[str, Any] | None = None
    deadline = time.monotonic() + timeout_s
    while todo:
        if time.monotonic() > deadline:
            raise ProduceError(
                f"{topic} could not be read to its end within {timeout_s:g} s (a transaction "
                "is still open there); retry the run",
                topic=topic,
                partitions=sorted(todo),
            )
        msg = consumer.poll(_POLL_S)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() != KafkaError._PARTITION_EOF:
                raise ProduceError(f"cannot read {topic}: {msg.error()}", topic=topic)
            if msg.offset() >= ends[msg.partition()]:
                todo.discard(msg.partition())
            continue
        if msg.key() == key and msg.value() is not None:
            value = json.loads(msg.value())
            if where is None or where(value):
                latest = value
    return latest


def _partitions(consumer: Consumer, topic: str, timeout_s: float) -> list[int]:
    metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if metadata is None or metadata.error is not None:
        code = metadata.error.code() if metadata is not None and metadata.error else None
        if code in (None, KafkaError.UNKNOWN_TOPIC_OR_PART):
            return []  # no run was ever logged
        raise ProduceError(f"cannot read {topic}: {metadata.error}", topic=topic)
    return sorted(metadata.partitions)


def _consumer_config(settings: KafkaSettings) -> dict[str, Any]:
    return {
        **settings.to_librdkafka(),
        "group.id": f"producer-lib-pointer-{uuid.uuid4().hex}",  # assign only, never commits
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",  # the pointer of aborted runs must not count
        "auto.offset.reset": "earliest",
    }
