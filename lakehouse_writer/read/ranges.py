"""Kafka offset ranges: those a micro-batch reads, and a batch read of given ranges.

A ``foreachBatch`` frame does not say which offsets it covers; :func:`offset_ranges` finds
them in its plan (no Spark job). :func:`range_read` reads exact ranges again, for the reload
bet (:mod:`lakehouse_writer.engines.spark.reload`) and for rows held back a batch
(:mod:`lakehouse_writer.read.holdback`).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lakehouse_writer.runtime.lines import seq_as_java

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

OffsetRanges = dict[tuple[str, int], tuple[int, int]]  # (topic, partition) -> [from, until)


def messages_per_topic(ranges: OffsetRanges) -> dict[str, int]:
    """How many offsets of each topic ``ranges`` span (transaction markers included)."""
    spans: dict[str, int] = {}
    for (topic, _), (first, end) in ranges.items():
        spans[topic] = spans.get(topic, 0) + end - first
    return spans


def offset_ranges(batch: DataFrame) -> OffsetRanges | None:
    """The Kafka offset ranges a ``foreachBatch`` frame reads, from its RDD's partitions.

    None when they are not found (not a Kafka source, or Spark's classes differ).
    """
    from py4j.protocol import Py4JError

    spark = batch.sparkSession
    try:
        pending = [batch._jdf.queryExecution().analyzed().rdd()]
        while pending:
            rdd = pending.pop()
            if rdd.getClass().getSimpleName() == "DataSourceRDD":
                return _from_text(rdd) or _walked(rdd, spark)
            pending += [d.rdd() for d in seq_as_java(spark, rdd.dependencies())]
    except Py4JError as exc:
        log.debug("offset ranges of the batch not found: %s", exc)
    return None


# A Kafka topic's name holds only these characters; ``topic-partition,from,until,``.
_RANGE = re.compile(r"KafkaOffsetRange\(([A-Za-z0-9._-]+)-(\d+),(-?\d+),(-?\d+),")


def _from_text(rdd: Any) -> OffsetRanges | None:
    """The ranges read from the text of the RDD's input partitions: one py4j call.

    Walking the partitions costs some ten py4j calls each (0.3-1.8 s a batch over 100
    topics, ``docs/PERFORMANCE.md``). The text also holds the consumer's settings; it is
    parsed here and kept nowhere. None unless it gives one range per partition, each
    partition once (then :func:`_walked` reads them one by one).
    """
    found = _RANGE.findall(str(rdd.inputPartitions().toString()))
    ranges = {(topic, int(p)): (int(first), int(until)) for topic, p, first, until in found}
    if len(found) != rdd.getNumPartitions() or len(ranges) != len(found):
        return None
    return ranges


def _walked(rdd: Any, spark: SparkSession) -> OffsetRanges:
    """The ranges, read from each input partition of the RDD."""
    ranges: OffsetRanges = {}
    for part in rdd.partitions():
        for split in seq_as_java(spark, part.inputPartitions()):
            r = split.offsetRange()
            ranges[(str(r.topic()), int(r.partition()))] = (
                int(r.fromOffset()),
                int(r.untilOffset()),
            )
    return ranges


def range_read(
    spark: SparkSession,
    options: Mapping[str, str],
    ranges: OffsetRanges,
    min_partitions: int | None = None,
) -> DataFrame | None:
    """A Kafka batch read of exactly ``ranges``; None when they hold no offsets.

    ``min_partitions``: split the ranges into at least this many Spark tasks.
    """
    wanted = {k: v for k, v in ranges.items() if v[1] > v[0]}
    if not wanted:
        return None
    assign: dict[str, list[int]] = {}
    for topic, partition in sorted(wanted):
        assign.setdefault(topic, []).append(partition)
    start = {t: {str(p): wanted[(t, p)][0] for p in parts} for t, parts in assign.items()}
    end = {t: {str(p): wanted[(t, p)][1] for p in parts} for t, parts in assign.items()}
    reader = spark.read.format("kafka").options(**options)
    if min_partitions:
        reader = reader.option("minPartitions", str(min_partitions))
    return (
        reader.option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(start))
        .option("endingOffsets", json.dumps(end))
        .load()
    )


def held_record(until: int) -> str:
    """The ``record`` text of a held range in ``_writer_state``."""
    return json.dumps({"until": until})


def held_until(record: str) -> int:
    """The end of a held range from its ``record`` text."""
    return int(json.loads(record)["until"])
