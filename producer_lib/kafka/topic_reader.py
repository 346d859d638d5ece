"""Reading a Kafka topic to its end, or over fixed offset ranges: the one read loop of ours.

Every bounded read (the ``_execution_log`` pointer, the schema catalog, a JSON events range;
the writer's catalog and its driver-side batch read) is the same three steps::

    with consumer(settings, purpose="flow-pointer") as c:        # assigned, never commits
        ranges = ranges_to_end(c, "_execution_log", timeout_s=10)  # [first, stable end)
        for messages in read_ranges(c, ranges, stall_s=30):     # lists of data messages
            ...

A partition is done when the consumer's position reaches the end of its range (librdkafka
steps over transaction markers and aborted rows and moves the position past them; under
``read_committed`` the position cannot pass an open transaction), or when an end-of-partition
event comes at or after that end. Messages at or past the end are never handed out. A read
whose position stops moving for ``stall_s`` raises :class:`ReadStalled`, naming every
partition left with its position and end; any other consumer error raises
:class:`TopicReadError` naming topic, partition and offset. Nothing is skipped silently: the
consumer's ``auto.offset.reset`` is ``error``, so a start offset that no longer exists is an
error, not a jump.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from producer_lib.errors import ProducerLibError, Transient
from producer_lib.settings import KafkaSettings

__all__ = [
    "MESSAGE_SCHEMA",
    "OffsetRanges",
    "ReadStalled",
    "TopicReadError",
    "consumer",
    "consumer_config",
    "high_watermarks",
    "messages_to_arrow",
    "ranges_to_end",
    "read_ranges",
    "read_ranges_arrow",
]

OffsetRanges = Mapping[tuple[str, int], tuple[int, int]]
"""``(topic, partition) -> (from, until)``: the offsets ``from <= offset < until``."""

MESSAGE_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
    ]
)

_CONSUMER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,  # a bounded read moves no group's offsets by itself
    "enable.partition.eof": True,  # the end of a partition is an event, not a silence
    "isolation.level": "read_committed",  # aborted transactions are never read
    "auto.offset.reset": "error",  # a start offset gone from Kafka is said, never skipped
}
_BATCH = 10_000  # messages taken from librdkafka's queue per call
_POLL_S = 0.1  # a call that finds nothing returns after this; positions are checked then


class TopicReadError(ProducerLibError):
    """A topic could not be read over its range (the context names topic, partition, offset)."""


class ReadStalled(Transient, TopicReadError):
    """A read stopped short of its end: no message and no position change for ``stall_s``.

    Attributes:
        left: ``{"topic/partition": [position, end]}`` of every partition not read to its end.
        stall_s: How long the read waited.
    """


def consumer_config(
    settings_or_conf: KafkaSettings | Mapping[str, Any], **overrides: Any
) -> dict[str, Any]:
    """The librdkafka settings of a bounded read: the cluster's, ours, then ``overrides``.

    Args:
        settings_or_conf: The cluster (``KafkaSettings``, or librdkafka settings as they are).
        **overrides: librdkafka settings with ``_`` for ``.`` (``isolation_level="..."``,
            ``group_id="orders-flow"``), and ``purpose``: the prefix of the throwaway group
            id when no ``group_id`` is given.
    """
    base = (
        settings_or_conf.to_librdkafka()
        if isinstance(settings_or_conf, KafkaSettings)
        else dict(settings_or_conf)
    )
    purpose = overrides.pop("purpose", "flow-platform-read")
    asked = {name.replace("_", "."): value for name, value in overrides.items()}
    group = f"{purpose}-{uuid.uuid4().hex}"  # assigned, never subscribed: it never joins
    return {**base, **_CONSUMER_DEFAULTS, "group.id": group, **asked}


@contextmanager
def consumer(
    settings_or_conf: KafkaSettings | Mapping[str, Any], **overrides: Any
) -> Iterator[Consumer]:
    """A consumer with :func:`consumer_config`'s settings, closed when the block ends."""
    client = Consumer(consumer_config(settings_or_conf, **overrides))
    try:
        yield client
    finally:
        client.close()


def ranges_to_end(
    client: Consumer,
    topic: str,
    *,
    timeout_s: float,
    starts: Mapping[int, int] | None = None,
    partitions: Sequence[int] | None = None,
    ends: Mapping[int, int] | None = None,
) -> dict[tuple[str, int], tuple[int, int]] | None:
    """From each partition's start to its end as the consumer sees it; None without the topic.

    The end is the high watermark; for a ``read_committed`` consumer (the default) the
    broker answers the last stable offset: the end of what is committed, before any
    transaction still open.

    Args:
        client: A consumer of the cluster.
        topic: The topic.
        timeout_s: How long the metadata and watermark requests may take.
        starts: Start offset per partition; default: its first offset (the low watermark).
        partitions: The partitions to read; default: all of them.
        ends: End offset per partition, where the caller knows better (e.g.
            :func:`high_watermarks`: through transactions still open).

    Returns:
        ``[start, end)`` per partition (an empty range where there is nothing).

    Raises:
        TopicReadError: The cluster answered with an error for the topic or a partition.
    """
    try:
        metadata = client.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None:
            code = metadata.error.code() if metadata is not None and metadata.error else None
            if code in (None, KafkaError.UNKNOWN_TOPIC_OR_PART):
                return None
            raise TopicReadError(f"cannot read {topic}: {metadata.error}", topic=topic)
        if not metadata.partitions:
            return None
        wanted = sorted(metadata.partitions) if partitions is None else list(partitions)
        ranges = {}
        for partition in wanted:
            low, high = client.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout_s
            )
            start = low if starts is None or partition not in starts else starts[partition]
            end = high if ends is None or partition not in ends else ends[partition]
            ranges[(topic, partition)] = (start, max(start, end))
        return ranges
    except KafkaException as exc:
        raise TopicReadError(f"cannot read {topic}: {exc.args[0]}", topic=topic) from exc


def high_watermarks(
    settings_or_conf: KafkaSettings | Mapping[str, Any], topic: str, *, timeout_s: float
) -> dict[int, int] | None:
    """Each partition's high watermark, past transactions still open; None without the topic.

    A ``read_committed`` consumer sees a partition end at the last stable offset, which also
    lags for a moment after a commit (the broker writes the commit markers after
    ``commit_transaction`` returns). A read that must not miss a commit that just returned
    reads to these ends instead, and waits (up to its ``stall_s``) for the markers.

    Raises:
        TopicReadError: The cluster answered with an error for the topic.
    """
    with consumer(settings_or_conf, isolation_level="read_uncommitted") as probe:
        ranges = ranges_to_end(probe, topic, timeout_s=timeout_s)
    return None if ranges is None else {p: end for (_, p), (_, end) in ranges.items()}


def read_ranges(
    client: Consumer,
    ranges: OffsetRanges,
    *,
    stall_s: float,
    batch_size: int = _BATCH,
    poll_s: float = _POLL_S,
) -> Iterator[list[Message]]:
    """The data messages of ``ranges``, in lists as the consumer gives them.

    Each partition's messages come in offset order; a partition's list is never past its
    ``until``. The consumer is assigned the ranges for the read, and unassigned after
    (also when the caller stops early).

    Raises:
        ReadStalled: No message and no position change for ``stall_s`` before the end.
        TopicReadError: The consumer reported an error (a start offset out of range, ...).
    """
    pending = {key: span for key, span in ranges.items() if span[1] > span[0]}
    if not pending:
        return
    assigned = [TopicPartition(t, p, start) for (t, p), (start, _) in pending.items()]
    client.assign(assigned)
    try:
        yield from _consume(client, pending, stall_s, batch_size, poll_s)
    except KafkaException as exc:
        topic, partition = next(iter(pending), ("", None))
        raise TopicReadError(
            f"cannot read {topic}: {exc.args[0]}", topic=topic, partition=partition
        ) from exc
    finally:
        # Resumed before unassigned: a partition unassigned while paused and assigned again
        # later waited about 1 s for its first fetch (librdkafka 2.16).
        client.resume(assigned)
        client.unassign()


def _consume(
    client: Consumer,
    pending: dict[tuple[str, int], tuple[int, int]],
    stall_s: float,
    batch_size: int,
    poll_s: float,
) -> Iterator[list[Message]]:
    ends = {key: span[1] for key, span in pending.items()}
    moved, seen = time.monotonic(), _positions(client, pending)
    while pending:
        messages = client.consume(batch_size, poll_s)
        data = [m for m in messages if m.error() is None]
        if len(data) != len(messages):
            _events([m for m in messages if m.error() is not None], pending, client)
        now = _positions(client, pending)
        past = {key for key, at in now.items() if at > ends[key]} | (ends.keys() - now.keys())
        if past and data:  # only a partition past its end may have handed out too much
            data = [m for m in data if _before_end(m, ends)]
        if data:
            yield data
        _finish(client, pending, now)
        if data or now != seen:
            moved, seen = time.monotonic(), now
        elif pending and time.monotonic() - moved > stall_s:
            raise _stalled(pending, now, stall_s)


def _before_end(message: Message, ends: Mapping[tuple[str, int], int]) -> bool:
    key = (message.topic() or "", message.partition() or 0)
    return (message.offset() or 0) < ends[key]


def _events(
    events: list[Message], pending: dict[tuple[str, int], tuple[int, int]], client: Consumer
) -> None:
    """End-of-partition events finish a partition at its end; any other error raises."""
    for event in events:
        error = event.error()
        key = (event.topic() or "", event.partition() or 0)
        offset = event.offset()
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            raise TopicReadError(
                f"cannot read {key[0]}: {error.str()}",
                topic=key[0],
                partition=key[1],
                offset=offset,
            )
        if key in pending and offset is not None and offset >= pending[key][1]:
            _finish(client, pending, {key: offset})


def _finish(
    client: Consumer, pending: dict[tuple[str, int], tuple[int, int]], at: Mapping[Any, int]
) -> None:
    """Pause and drop the pending partitions that ``at`` puts at or past their end."""
    done = [key for key, offset in at.items() if key in pending and offset >= pending[key][1]]
    if done:
        client.pause([TopicPartition(t, p) for t, p in done])
        for key in done:
            del pending[key]


def _positions(client: Consumer, pending: OffsetRanges) -> dict[tuple[str, int], int]:
    """The consumer's position (the next offset it gives) per pending partition."""
    asked = [TopicPartition(t, p) for t, p in pending]
    return {(tp.topic, tp.partition): tp.offset for tp in client.position(asked)}


def _stalled(
    pending: OffsetRanges, positions: Mapping[tuple[str, int], int], stall_s: float
) -> ReadStalled:
    left = {f"{t}/{p}": [positions.get((t, p)), end] for (t, p), (_, end) in pending.items()}
    (topic, partition), (_, end) = next(iter(pending.items()))
    return ReadStalled(
        f"{topic} was not read to its end: no message for {stall_s:g} s",
        topic=topic,
        partition=partition,
        offset=positions.get((topic, partition)),
        end=end,
        left=left,
        stall_s=stall_s,
    )


def messages_to_arrow(messages: Sequence[Message], schema: pa.Schema = MESSAGE_SCHEMA) -> pa.Table:
    """The messages as an Arrow table of ``schema``: a subset of :data:`MESSAGE_SCHEMA`.

    Column by column (one comprehension each): a branch per message costs more.
    """
    getters = {
        "topic": Message.topic,
        "partition": Message.partition,
        "offset": Message.offset,
        "key": Message.key,
        "value": Message.value,
    }
    arrays = [pa.array([getters[field.name](m) for m in messages], field.type) for field in schema]
    return pa.Table.from_arrays(arrays, schema=schema)


def read_ranges_arrow(
    client: Consumer,
    ranges: OffsetRanges,
    *,
    stall_s: float,
    schema: pa.Schema = MESSAGE_SCHEMA,
) -> pa.Table:
    """Every data message of ``ranges`` in one Arrow table, partition after partition.

    Raises:
        ReadStalled: See :func:`read_ranges`.
        TopicReadError: See :func:`read_ranges`.
    """
    read = [m for messages in read_ranges(client, ranges, stall_s=stall_s) for m in messages]
    table = messages_to_arrow(read).sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    )
    return table.select(schema.names).cast(schema)
