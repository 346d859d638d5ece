"""Rows held back by a batch's cuts are filtered out in Spark, at any number of partitions."""

from __future__ import annotations

import pytest

from lakehouse_writer.read.holdback import keep_before

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_cuts_over_hundreds_of_partitions_keep_exactly_the_rows_before_them(spark):
    """A flow of 500 one-partition tables held back every partition; planning overflowed."""
    keys = [(f"t{p % 400}", p // 400) for p in range(800)]  # 400 topics, 2 partitions each
    rows = [(topic, partition, offset) for topic, partition in keys for offset in range(3)]
    source = spark.createDataFrame(rows, "topic string, partition int, offset long")
    cuts = {key: 1 + i % 2 for i, key in enumerate(keys) if i % 7}  # every 7th: not cut

    kept = {tuple(r) for r in keep_before(source, cuts).collect()}

    expected = {(t, p, o) for t, p, o in rows if (t, p) not in cuts or o < cuts[(t, p)]}
    assert kept == expected
    assert len(kept) == 115 * 3 + 342 * 1 + 343 * 2  # uncut, cut at offset 1, cut at 2


def test_no_cut_leaves_the_batch_as_it_is(spark):
    source = spark.createDataFrame([("a", 0, 5)], "topic string, partition int, offset long")
    assert keep_before(source, {}) is source
