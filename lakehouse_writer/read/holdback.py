"""Transactions apply whole and in commit order: rows a micro-batch cannot apply wait.

A micro-batch ends at an offset per partition. With ``--max-offsets-per-trigger`` (or a
commit landing while Spark plans the batch) that end can cut a producer transaction in two,
and can take a later transaction's rows on one partition before an earlier transaction's
rows on another. Applied as they come, "the last row per key by (partition, offset)" and a
DELETE's place after an earlier upsert would then depend on where the batch ended.

So, before the scan, the writer reads the commit records (``docs/WIRE.md`` ``_commits``:
each lists the first and last offset its transaction wrote per partition) with a
driver-side consumer, in ``_commits`` order, from the first that held rows back in the
batch before (kept in the writer state as ``awaits``) up to the last stable offset —
whether the writer's topics regex takes ``_commits`` in or not, and past the batch's end,
since a transaction's rows may be in the batch while its record is not. The first
transaction that is not complete within the batch is a barrier: its rows, and those of
every later transaction, are held back — from the first of them on each partition
(:func:`cut_offsets`). The batch applies what is before the cuts.
The held ranges go into the writer state, and the next batch reads them again from Kafka
(:func:`~lakehouse_writer.read.ranges.range_read`) ahead of its own rows. A held transaction
therefore applies in the first batch that holds all of it and of every transaction
committed before it; the result no longer depends on where a batch ends.

Rows that no commit record covers (a producer that writes none) apply as they come. A
commit whose rows can never arrive (past its partition's end: the topic was deleted and
made again; or before its start: they expired unread) holds nothing back; it is logged.
Without a cap, a batch ends at each partition's last stable offset, so holding back is rare
and costs nothing but the read-ahead of ``_commits`` (a few records).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from confluent_kafka import Consumer, KafkaError, TopicPartition

from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.read.commits import BadCommitRecord, CommitRecord
from lakehouse_writer.read.ranges import OffsetRanges, offset_ranges, range_read
from producer_lib.kafka.topic_reader import consumer_config

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

TopicFilter = Callable[[str], bool]


class Progress(Protocol):
    """What the writer applied before the batch (the writer state, as the holdback reads it).

    Attributes:
        held: Offsets held back by the batch before, ``[from, until)`` per partition.
        awaits: Where this batch reads ``_commits`` from, per partition.
        offsets: The highest offset processed per partition.
    """

    held: OffsetRanges
    awaits: dict[int, int]
    offsets: dict[tuple[str, int], int]


Offsets = Mapping[tuple[str, int], int]
_READ_TIMEOUT_S = 30.0


class CommitsUnreadable(LakehouseWriterError):
    """The commit records ahead of the batch could not be read in time."""


def cut_offsets(
    commits: Sequence[CommitRecord], spans: OffsetRanges, before: Offsets, ours: TopicFilter
) -> tuple[dict[tuple[str, int], int], list[CommitRecord]]:
    """Where to end the batch on each partition: whole transactions, none after a part one.

    The batch then applies only transactions it holds whole, and none that an incomplete
    one precedes in ``_commits``.

    Args:
        commits: Commit records in ``_commits`` order (pending ones first).
        spans: The batch's ``[from, until)`` per partition, rows held before included.
        before: The highest offset processed per partition before the batch.
        ours: Which topics the writer reads.

    Returns:
        (first held offset per partition that holds some back, the commits that are
        incomplete within the batch: the barrier and those after it that hold rows).
    """
    processed = dict(before)
    for key, (_, until) in spans.items():
        processed[key] = max(processed.get(key, -1), until - 1)
    cuts: dict[tuple[str, int], int] = {}
    changed = True
    while changed:  # a cut can make an earlier commit incomplete: again, until none moves
        changed, blocked, holding = False, False, []
        for commit in commits:
            if not blocked and commit.is_complete(processed, ours):
                continue
            blocked = True
            for topic, partition, first in commit.starts:
                key = (topic, partition)
                if not ours(topic) or key not in spans:
                    continue
                start, until = spans[key]
                at = start if first is None else max(first, start)
                if at < until and at <= processed[key]:
                    cuts[key], processed[key], changed = at, at - 1, True
            if commit.concerns(ours):
                holding.append(commit)
    return cuts, holding


def keep_before(source: DataFrame, cuts: Mapping[tuple[str, int], int]) -> DataFrame:
    """``source`` without the rows at or after each partition's cut.

    The cuts are one map literal looked up per row, not a condition per partition: a batch
    over hundreds of partitions would otherwise nest hundreds of ORs, which overflowed the
    JVM's stack while Spark planned it (500 tables, one partition each).
    """
    from pyspark.sql import functions as F

    if not cuts:
        return source
    pairs = [F.lit(_partition_key(topic, partition)) for topic, partition in sorted(cuts)]
    values = [F.lit(cuts[key]).cast("long") for key in sorted(cuts)]
    by_partition = F.create_map(*[x for pair in zip(pairs, values, strict=True) for x in pair])
    key = F.concat(F.col("topic"), F.lit(_SEPARATOR), F.col("partition").cast("string"))
    cut = F.try_element_at(by_partition, key)
    return source.filter(cut.isNull() | (F.col("offset") < cut))


_SEPARATOR = "\x00"  # not in a topic name (letters, digits, '.', '_', '-')


def _partition_key(topic: str, partition: int) -> str:
    return f"{topic}{_SEPARATOR}{partition}"


@dataclass
class Plan:
    """What a batch applies and what it holds back.

    Attributes:
        source: The batch's rows to apply: those held by the batch before, then its own,
            up to the cuts.
        held: The ranges held back for the next batch.
        processed: Per partition with a cut, the offset before it (processed up to there).
        awaits: Per ``_commits`` partition, where the next batch reads commit records from:
            the first one that held rows back, else the end.
        changed: True when ``source`` is not the batch as Spark gave it.
        ranges: The offset ranges of the batch as Spark gave it (None: not found).
        reads: The offset ranges ``source`` reads: the held ones, then the batch's, up to
            the cuts (None: not found).
    """

    source: DataFrame
    held: OffsetRanges = field(default_factory=dict)
    processed: dict[tuple[str, int], int] = field(default_factory=dict)
    awaits: dict[int, int] = field(default_factory=dict)
    changed: bool = False
    ranges: OffsetRanges | None = None
    reads: OffsetRanges | None = None


class Holdback:
    """Plans each batch (:meth:`plan`); reads ``_commits`` ahead with its own consumer.

    Args:
        kafka_conf: Librdkafka settings of the writer (secrets revealed: never logged).
        source_options: The Kafka source's options (to read held ranges again).
        commits_topic: The commit records' topic.
        ours: Which topics the writer reads.
    """

    def __init__(
        self,
        kafka_conf: Mapping[str, Any],
        source_options: Mapping[str, str],
        commits_topic: str,
        ours: TopicFilter,
    ) -> None:
        self._conf = dict(kafka_conf)
        self._options = dict(source_options)
        self._topic = commits_topic
        self._ours = ours
        self._consumer: Consumer | None = None
        self._warned = False

    def close(self) -> None:
        """Close the read-ahead consumer."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def plan(self, source: DataFrame, state: Progress, batch_id: int) -> Plan:
        """The batch to apply: ``state``'s held rows read again, then ``source``, cut."""
        ranges = offset_ranges(source)
        held = dict(state.held)
        if held:
            again = range_read(source.sparkSession, self._options, held)
            if again is not None:
                source = again.unionByName(source)
        if ranges is None:
            if not self._warned:
                log.warning(
                    "the batch's offset ranges are not known: transactions split "
                    "by a batch end apply in parts"
                )
                self._warned = True
            return Plan(source, awaits=dict(state.awaits), changed=bool(held), ranges=None)
        spans = dict(ranges)
        for key, (first, _) in held.items():
            spans[key] = (first, spans.get(key, held[key])[1])
        commits, ends = self._read(state.awaits)
        cuts, holding = cut_offsets(commits, spans, state.offsets, self._ours)
        if cuts:
            orphans = self._orphans(holding)
            if orphans:
                commits = [c for c in commits if c.commit_id not in orphans]
                cuts, holding = cut_offsets(commits, spans, state.offsets, self._ours)
        awaits = dict(ends)
        for commit in holding:  # read again from the first that holds rows back
            awaits[commit.partition] = min(
                commit.offset, awaits.get(commit.partition, commit.offset)
            )
        reads = {key: (first, min(end, cuts.get(key, end))) for key, (first, end) in spans.items()}
        if not cuts:
            return Plan(source, awaits=awaits, changed=bool(held), ranges=ranges, reads=reads)
        plan = Plan(
            keep_before(source, cuts),
            held={key: (at, spans[key][1]) for key, at in cuts.items()},
            processed={key: at - 1 for key, at in cuts.items()},
            awaits=awaits,
            changed=True,
            ranges=ranges,
            reads=reads,
        )
        log.info(
            "rows held back batch=%d partitions=%s transactions=%d first=%s",
            batch_id,
            {f"{t}/{p}": list(r) for (t, p), r in sorted(plan.held.items())},
            len(holding),
            holding[0].commit_id,
        )
        return plan

    def _read(self, starts: Mapping[int, int]) -> tuple[list[CommitRecord], dict[int, int]]:
        """The commit records from ``starts`` on, in ``_commits`` order, and where each ends.

        ``starts``: partition -> offset; a partition absent is read from its first record.
        """
        consumer = self._open()
        meta = consumer.list_topics(self._topic, timeout=10).topics.get(self._topic)
        if meta is None or meta.error is not None or not meta.partitions:
            return [], {}
        read: dict[int, int] = {}
        ends, assign = {}, []
        for partition in sorted(meta.partitions):
            tp = TopicPartition(self._topic, partition)
            low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            start = max(starts.get(partition, 0), low)
            read[partition] = start
            if start < high:
                ends[partition] = high
                assign.append(TopicPartition(self._topic, partition, start))
        if not assign:
            return [], read
        consumer.assign(assign)
        records: list[CommitRecord] = []
        deadline = time.monotonic() + _READ_TIMEOUT_S
        try:
            while ends:
                if time.monotonic() > deadline:
                    raise CommitsUnreadable(
                        f"{self._topic}: partitions {sorted(ends)} not read "
                        f"to their end in {_READ_TIMEOUT_S:.0f} s"
                    )
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                partition, offset, error = msg.partition() or 0, msg.offset() or 0, msg.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise CommitsUnreadable(f"{self._topic}: {error}")
                    ends.pop(partition, None)
                    continue
                read[partition] = offset + 1
                if offset + 1 >= ends.get(partition, 0):
                    ends.pop(partition, None)
                records += self._parsed(msg.value(), partition, offset)
        finally:
            consumer.unassign()
        return sorted(records, key=lambda c: (c.partition, c.offset)), read

    def _parsed(self, value: bytes | None, partition: int, offset: int) -> list[CommitRecord]:
        try:
            text = bytes(value or b"").decode("utf-8")
            return [CommitRecord.parse(text, self._topic, partition, offset)]
        except (BadCommitRecord, UnicodeDecodeError):
            return []  # the batch that reads it rejects it (``_rejected``)

    def _orphans(self, holding: Sequence[CommitRecord]) -> set[str]:
        """Ids of the holding commits whose rows can never arrive on some partition.

        Their rows are past its end (the topic was made again) or before its start (they
        expired unread).
        """
        consumer = self._open()
        marks: dict[tuple[str, int], tuple[int, int]] = {}
        orphans: set[str] = set()
        for commit in holding:
            for topic, partition, last in commit.ends:
                if not self._ours(topic):
                    continue
                key = (topic, partition)
                if key not in marks:
                    tp = TopicPartition(topic, partition)
                    marks[key] = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
                low, high = marks[key]
                if last >= high or last < low:
                    log.warning(
                        "commit record's rows can never arrive; it holds nothing back "
                        "commit=%s topic=%s partition=%d max_offset=%d offsets=[%d, %d)",
                        commit.commit_id,
                        topic,
                        partition,
                        last,
                        low,
                        high,
                    )
                    orphans.add(commit.commit_id)
        return orphans

    def _open(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                consumer_config(
                    self._conf,
                    purpose="lakehouse-writer-holdback",
                    # The end of a partition is known from a fetch that finds nothing; at the
                    # default (500 ms) every batch's plan waited that long for it.
                    fetch_wait_max_ms=10,
                    auto_offset_reset="largest",  # librdkafka's default, as before
                )
            )
        return self._consumer
