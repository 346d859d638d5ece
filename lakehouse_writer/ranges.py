"""Kafka offset ranges: those a micro-batch reads, and a batch read of given ranges.

A ``foreachBatch`` frame does not say which offsets it covers; :func:`offset_ranges` finds
them in its plan (no Spark job). :func:`range_read` reads exact ranges again, for the reload
bet (:mod:`lakehouse_writer.reload`) and for rows held back a batch
(:mod:`lakehouse_writer.holdback`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

OffsetRanges = dict[tuple[str, int], tuple[int, int]]  # (topic, partition) -> [from, until)


def offset_ranges(batch: DataFrame) -> OffsetRanges | None:
    """The Kafka offset ranges a ``foreachBatch`` frame reads, from its RDD's partitions.

    None when they are not found (not a Kafka source, or Spark's classes differ).
    """
    from py4j.protocol import Py4JError

    spark = batch.sparkSession
    convert = spark._jvm.scala.jdk.javaapi.CollectionConverters  # type: ignore[union-attr]
    try:
        pending = [batch._jdf.queryExecution().analyzed().rdd()]
        while pending:
            rdd = pending.pop()
            if rdd.getClass().getSimpleName() == "DataSourceRDD":
                ranges: OffsetRanges = {}
                for part in rdd.partitions():
                    for split in convert.asJava(part.inputPartitions()):
                        r = split.offsetRange()
                        ranges[(str(r.topic()), int(r.partition()))] = (
                            int(r.fromOffset()),
                            int(r.untilOffset()),
                        )
                return ranges
            pending += [d.rdd() for d in convert.asJava(rdd.dependencies())]
    except Py4JError as exc:
        log.debug("offset ranges of the batch not found: %s", exc)
    return None


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
