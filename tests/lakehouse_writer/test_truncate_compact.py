"""The applied-TRUNCATE list stays as short as the table's truncates since its last reload."""

from __future__ import annotations

import pytest

from lakehouse_writer.rules.truncate import Truncate, compact


def test_latest_whole_table_truncate_covers_every_earlier_one():
    eu, us = {"REGION": "EU"}, {"REGION": "US"}
    log = [
        Truncate(10, eu),
        Truncate(20),
        Truncate(30, us),
        Truncate(40),
        Truncate(40, eu),
        Truncate(50, eu),
    ]
    assert compact(log) == [Truncate(40), Truncate(50, {"REGION": "EU"})]


def test_scoped_truncates_alone_are_all_kept_once():
    log = [Truncate(30, {"A": "1"}), Truncate(10, {"A": "2"}), Truncate(30, {"A": "1"})]
    assert compact(log) == [Truncate(10, {"A": "2"}), Truncate(30, {"A": "1"})]


def _summary(frame):
    from pyspark.sql import functions as F

    from lakehouse_writer.read.summary import RowSummary, summary_aggregates

    change = F.col("__change_type")
    aggregates = summary_aggregates(None, F.col("__change_time"), change, F.col("__truncate"))
    return RowSummary.of_groups(frame.groupBy(change).agg(*aggregates).collect())


@pytest.mark.spark
@pytest.mark.slow
def test_truncates_of_one_time_with_a_null_scope_value_are_ordered(spark):
    df = spark.createDataFrame(
        [
            ("T", 5, {"REGION": None}),
            ("T", 5, {"REGION": "A"}),
            ("T", 3, None),
            ("T", 3, None),
            ("I", 1, {"REGION": "not a truncate"}),
        ],
        "__change_type STRING, t LONG, __truncate MAP<STRING, STRING>",
    ).selectExpr("__change_type", "timestamp_micros(t) AS __change_time", "__truncate")
    got = [(t.time_us, t.scope) for t in _summary(df).truncates]
    assert got == [(3, {}), (5, {"REGION": "A"}), (5, {"REGION": None})]


@pytest.mark.spark
@pytest.mark.slow
def test_the_row_summary_finds_the_oldest_row_that_is_not_a_truncate(spark):
    df = spark.createDataFrame(
        [("I", 7, None), ("T", 3, None), ("U", 4, None), ("T", 3, None)],
        "__change_type STRING, t LONG, __truncate MAP<STRING, STRING>",
    ).selectExpr("__change_type", "timestamp_micros(t) AS __change_time", "__truncate")

    assert _summary(df).truncates == (Truncate(3, {}),)
    assert _summary(df).oldest == 4  # the TRUNCATE at 3 is older, but it is no row to merge
    assert _summary(df.filter("__change_type = 'T'")).oldest is None
