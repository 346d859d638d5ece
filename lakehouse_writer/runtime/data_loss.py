"""Kafka data gaps: records gone from Kafka before the writer read them, said plainly.

The writer reads with ``failOnDataLoss=true``
(:data:`lakehouse_writer.read.decode.SOURCE_DEFAULTS`): when the offsets its checkpoint asks for
next were deleted (retention, ``delete-records``) Spark's Kafka source fails the batch before any
row of it is written, and every restart fails the same way: nothing is skipped. What reaches the
writer is a JVM trace whose root cause reads ``OffsetOutOfRangeException: Fetch position
FetchPosition{offset=4, ...} is out of range for partition orders-0``. :func:`data_gap_cause` finds
the gap in that trace and says it as one line: the topic, the partition, the offsets lost, and what
to do.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

__all__ = ["DataGap", "data_gap_cause", "find_gap", "log_start_offset"]

log = logging.getLogger(__name__)

_LOOKUP_TIMEOUT_S = 5.0  # the log start offset is a nicety; a failing writer must not hang
# What Spark's Kafka source (4.x) and the Kafka consumer say about a gap, most precise first.
_PATTERNS = (
    re.compile(
        r"Could not read records in offset \[(?P<first>\d+), (?P<end>\d+)\) "
        r"for topic partition (?P<tp>\S+)"
    ),
    re.compile(
        r"Cannot fetch offset (?P<first>\d+) \(GroupId: [^,]*, TopicPartition: "
        r"(?P<tp>[^)\s]+)\)"
    ),
    re.compile(
        r"Fetch position FetchPosition\{offset=(?P<first>\d+),.*?\} is out of range "
        r"for partition (?P<tp>\S+)"
    ),
)
_WENT_BACK = re.compile(
    r"Partition (?P<tp>\S+)'s offset was changed from (?P<first>\d+) to (?P<end>\d+)"
)


@dataclass(frozen=True)
class DataGap:
    """Offsets of a topic partition that Kafka no longer holds, though the writer needs them.

    Attributes:
        topic: The topic.
        partition: The partition.
        first_missing: The first offset the writer needed and Kafka no longer has.
        log_start: Where the partition starts now (None: unknown); the gap ends before it.
        went_back: The partition's offsets went back below what the writer had read (the
            topic was deleted and created again), rather than its start moving forward.
    """

    topic: str
    partition: int
    first_missing: int
    log_start: int | None = None
    went_back: bool = False

    def message(self) -> str:
        """One line for the status file and the log: what is lost and what to do."""
        where = f"topic {self.topic} partition {self.partition}"
        if self.went_back:
            lost = (
                f"{where} went back from offset {self.first_missing} to {self.log_start} "
                "(deleted and created again?) before the writer read the rest"
            )
        elif self.log_start is not None and self.log_start > self.first_missing:
            lost = (
                f"{where} no longer holds offsets {self.first_missing} to "
                f"{self.log_start - 1} (it now starts at {self.log_start}): deleted by "
                "retention or delete-records before the writer read them"
            )
        else:
            lost = (
                f"{where} no longer holds offset {self.first_missing} and maybe later "
                "ones: deleted by retention or delete-records before the writer read them"
            )
        return (
            f"Kafka data lost: {lost}. The writer stops rather than skip them (rows "
            f"before offset {self.first_missing} are applied). Reload the tables of that "
            "topic from their source, then see 'Kafka data gaps' in docs/WRITER.md"
        )


def find_gap(text: str) -> DataGap | None:
    """The data gap that ``text`` (a failure's trace) reports, or None."""
    for pattern in _PATTERNS:
        found = pattern.search(text)
        if found:
            topic, partition = _split(found["tp"])
            return DataGap(topic, partition, int(found["first"]))
    found = _WENT_BACK.search(text)
    if found:
        topic, partition = _split(found["tp"])
        return DataGap(topic, partition, int(found["first"]), int(found["end"]), went_back=True)
    return None


def data_gap_cause(trace: str, kafka_conf: dict[str, Any] | None = None) -> str | None:
    """The one-line cause of a failure that is a Kafka data gap, else None.

    Args:
        trace: The failure's whole trace (Python and JVM), secrets already hidden.
        kafka_conf: librdkafka settings to ask where the partition starts now; None, or no
            answer within 5 s: the message names the first lost offset only.
    """
    gap = find_gap(trace)
    if gap is None:
        return None
    if kafka_conf is not None and not gap.went_back:
        start = log_start_offset(kafka_conf, gap.topic, gap.partition)
        gap = DataGap(gap.topic, gap.partition, gap.first_missing, start)
    return gap.message()


def log_start_offset(
    kafka_conf: dict[str, Any], topic: str, partition: int, timeout_s: float = _LOOKUP_TIMEOUT_S
) -> int | None:
    """The first offset ``topic``/``partition`` holds now; None when Kafka does not say."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from producer_lib.kafka.topic_reader import consumer_config

    consumer = Consumer(
        {**consumer_config(kafka_conf, purpose="lakehouse-writer-gap"), "log_level": 3}
    )
    try:
        low, _high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=timeout_s
        )
        return int(low)
    except KafkaException as exc:
        log.warning(
            "log start offset unknown topic=%s partition=%d error=%s", topic, partition, exc
        )
        return None
    finally:
        consumer.close()


def _split(topic_partition: str) -> tuple[str, int]:
    """``orders-0`` -> (``orders``, 0): Kafka's ``TopicPartition.toString()`` form."""
    topic, _, partition = topic_partition.rpartition("-")
    return topic, int(partition)
