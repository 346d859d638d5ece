"""A reload written in the pass that reads it (lakehouse_writer.engines.spark.reload), real broker
and Delta.

The bet is made on batches of at least ``LAKEHOUSE_RELOAD_ONE_PASS_MIN_ROWS`` offsets of a
topic (50 000 by default); the tests lower it so that a few rows take that path.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from confluent_kafka import Producer

from lakehouse_writer.cli import main
from lakehouse_writer.engines.spark import reload
from lakehouse_writer.engines.spark.reload import refusal, unique_in_files
from lakehouse_writer.read.summary import RowSummary
from lakehouse_writer.rules.truncate import Truncate
from tests.support.writer import (
    T0,
    commit_message,
    once_argv,
    produce_transaction,
    publish_schemas,
    sample_schema,
    table_rows,
)

TABLE = "SHOP.ORDERS"


def _reload(ids: range, time_us: int = T0 + 1) -> list[dict]:
    """An unscoped TRUNCATE, then a REPLACE row per id (over partitions 0 and 1)."""
    rows: list[dict] = [{"ID": 0, "__change_type": "T", "__change_time": time_us}]
    rows += [
        {
            "ID": i,
            "NAME": f"n{i}",
            "REGION": "A",
            "__change_type": "R",
            "__change_time": time_us,
            "partition": i % 2,
        }
        for i in ids
    ]
    return rows


def _run(lake: Path, ckpt: Path, topics: str, bootstrap: str) -> None:
    argv = once_argv(lake, ckpt, topics, bootstrap)
    assert main(argv) == 0


def _stray_files(spark, path: Path) -> set[str]:
    """Data files in the table's directory that no version of the table refers to."""
    on_disk = {p.name for p in path.glob("*.parquet")}
    history = spark.read.json(str(path / "_delta_log" / "*.json"))
    added = {Path(r.add.path).name for r in history.where("add IS NOT NULL").collect()}
    return on_disk - added


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
class TestOnePass:
    @pytest.fixture
    def setup(self, kafka_bootstrap, new_topic, tmp_path, monkeypatch):
        topic = new_topic(partitions=2)
        schemas, commits = new_topic(suffix="_schemas"), new_topic(suffix="_commits")
        publish_schemas(kafka_bootstrap, topic, schemas, sample_schema())
        monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
        monkeypatch.setenv("LAKEHOUSE_COMMITS_TOPIC", commits)
        monkeypatch.setenv("LAKEHOUSE_RELOAD_ONE_PASS_MIN_ROWS", "1")
        return topic, commits, tmp_path / "lake", tmp_path / "ckpt"

    def test_a_reload_is_committed_once_with_its_commit_record(
        self, spark, kafka_bootstrap, setup, caplog
    ):
        topic, commits, lake, ckpt = setup
        schema = sample_schema()
        # partition 0: the TRUNCATE (offset 0) and the 15 even ids; partition 1: 15 odd ids
        ends = [(topic, 0, 0, 15), (topic, 1, 0, 14)]
        _, _, _, key, record = commit_message(commits, 0, T0 + 1, ends, [(topic, TABLE, 31)])
        produce_transaction(
            kafka_bootstrap, topic, schema, _reload(range(1, 31)), extra=[(commits, key, record)]
        )
        with caplog.at_level(logging.INFO, logger="lakehouse_writer"):
            _run(lake, ckpt, f"{topic}|{commits}", kafka_bootstrap)
        assert "one_pass=True" in caplog.text

        path = lake / "SHOP" / "ORDERS"
        assert table_rows(spark, str(path)) == [(i, f"n{i}") for i in range(1, 31)]
        history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
        assert [h.operation for h in history] == ["CREATE TABLE", "WRITE"]
        committed = spark.read.format("delta").load(str(lake / "_commits")).collect()
        assert [c.table_versions[TABLE] for c in committed] == [1]  # its offsets were recorded
        assert _stray_files(spark, path) == set()

        _run(lake, ckpt, f"{topic}|{commits}", kafka_bootstrap)  # nothing new: nothing changes
        assert spark.sql(f"DESCRIBE HISTORY delta.`{path}`").count() == 2
        assert spark.read.format("delta").load(str(lake / "_commits")).count() == 1

    def test_replace_rows_into_a_new_table_without_a_truncate_are_appended_in_one_pass(
        self, spark, kafka_bootstrap, setup, caplog
    ):
        """Issue 51: REPLACE rows into a table that has none of their keys cost an append."""
        topic, _, lake, ckpt = setup
        schema = sample_schema()
        produce_transaction(kafka_bootstrap, topic, schema, _reload(range(1, 21))[1:])
        with caplog.at_level(logging.INFO, logger="lakehouse_writer"):
            _run(lake, ckpt, topic, kafka_bootstrap)
        assert "one_pass=True" in caplog.text
        path = lake / "SHOP" / "ORDERS"
        assert table_rows(spark, str(path)) == [(i, f"n{i}") for i in range(1, 21)]
        history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").orderBy("version").collect()
        assert [h.operation for h in history] == ["CREATE TABLE", "WRITE"]
        assert _stray_files(spark, path) == set()

        # the table holds rows now: the next REPLACE rows of its keys are merged, not appended
        again = [
            {**r, "NAME": f"m{r['ID']}", "__change_time": T0 + 2} for r in _reload(range(1, 6))[1:]
        ]
        produce_transaction(kafka_bootstrap, topic, schema, again)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="lakehouse_writer"):
            _run(lake, ckpt, topic, kafka_bootstrap)
        assert "one_pass=True" not in caplog.text
        assert table_rows(spark, str(path)) == [
            (i, f"m{i}" if i <= 5 else f"n{i}") for i in range(1, 21)
        ]

    @pytest.mark.parametrize(
        "case", ["repeated key", "repeated key, Spark's check", "not a reload", "poison"]
    )
    def test_a_lost_bet_applies_the_rows_the_normal_way(
        self, spark, kafka_bootstrap, setup, caplog, monkeypatch, case
    ):
        topic, _, lake, ckpt = setup
        schema = sample_schema()
        if case == "repeated key, Spark's check":  # as for files not on the local disk
            monkeypatch.setattr(reload, "DRIVER_CHECK_MAX_ROWS", 0)
        if case.startswith("repeated key"):  # the later row of id 5 wins
            rows = [
                *_reload(range(1, 9)),
                {
                    "ID": 5,
                    "NAME": "last",
                    "REGION": "A",
                    "__change_type": "R",
                    "__change_time": T0 + 1,
                    "partition": 1,
                },
            ]
            expected = [(i, "last" if i == 5 else f"n{i}") for i in range(1, 9)]
            reason = "a key repeats"
        elif case == "not a reload":
            rows = [
                {
                    "ID": i,
                    "NAME": f"n{i}",
                    "__change_type": "I",
                    "__change_time": T0 + 1,
                    "partition": i % 2,
                }
                for i in range(1, 9)
            ]
            rows.append({"ID": 3, "__change_type": "D", "__change_time": T0 + 2, "partition": 1})
            expected = [(i, f"n{i}") for i in range(1, 9) if i != 3]
            reason = "row types other than upserts: other"
        else:
            rows = _reload(range(1, 9))
            expected = [(i, f"n{i}") for i in range(1, 9)]
            reason = "1 rows of other schemas or that do not decode"
        produce_transaction(kafka_bootstrap, topic, schema, rows)
        if case == "poison":
            producer = Producer({"bootstrap.servers": kafka_bootstrap})
            producer.produce(topic, value=b"random bytes, no header", partition=1)
            producer.flush(30)
        with caplog.at_level(logging.INFO, logger="lakehouse_writer"):
            _run(lake, ckpt, topic, kafka_bootstrap)
        assert (
            f"reload not written in one pass table={TABLE} batch=0 reason={reason}" in caplog.text
        )
        assert "one_pass=True" not in caplog.text

        path = lake / "SHOP" / "ORDERS"
        assert table_rows(spark, str(path)) == expected
        assert _stray_files(spark, path) == set()
        rejected = lake / "_rejected"
        found = spark.read.format("delta").load(str(rejected)).count() if rejected.exists() else 0
        assert found == (1 if case == "poison" else 0)


def _summary(
    counts: dict, truncates: tuple = (Truncate(T0),), oldest: int | None = T0
) -> RowSummary:
    return RowSummary(counts, None, oldest, truncates)


@pytest.mark.parametrize(
    ("summary", "undecoded", "applied", "reason"),
    [
        (_summary({"T": 1, "R": 5}), 0, (), None),
        (_summary({"T": 2, "I": 3, "U": 1, "A": 1, "R": 5}), 0, (Truncate(T0 - 5),), None),
        (_summary({"T": 1}, oldest=None), 0, (), None),  # a reload of no rows
        (_summary({"T": 1, "R": 5}), 2, (), "2 rows of other schemas or that do not decode"),
        (_summary({"T": 1, "R": 5, "other": 1}), 0, (), "row types other than upserts: other"),
        (_summary({"R": 5}, truncates=()), 0, (), None),  # upserts into the empty table
        (_summary({"I": 5}, truncates=()), 0, (Truncate(T0 + 1),), "rows older than a TRUNCATE"),
        (
            _summary({"T": 1, "R": 5}, truncates=(Truncate(T0, {"REGION": "A"}),)),
            0,
            (),
            "a scoped TRUNCATE",
        ),
        (_summary({"T": 1, "R": 5}, oldest=T0 - 1), 0, (), "rows older than a TRUNCATE"),
        (_summary({"T": 1, "R": 5}), 0, (Truncate(T0 + 1),), "rows older than a TRUNCATE"),
    ],
    ids=[
        "reload",
        "all upsert types",
        "no rows",
        "undecoded",
        "other types",
        "no truncate",
        "no truncate, older than an applied one",
        "scoped",
        "older row",
        "older than an applied truncate",
    ],
)
def test_refusal_names_what_is_not_a_reload(summary, undecoded, applied, reason):
    assert refusal(summary, undecoded, applied) == reason


def _parquet(path: Path, ids: list[int], lines: list[int]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"col-1": ids, "col-2": lines, "other": ["x"] * len(ids)}), path)
    return f"file:{path}"


def test_unique_in_files_finds_a_key_repeated_across_files(tmp_path):
    a = _parquet(tmp_path / "a.parquet", [1, 1, 2], [1, 2, 1])
    b = _parquet(tmp_path / "b.parquet", [3, 2], [1, 2])
    assert unique_in_files([a, b], ["col-1", "col-2"], 5) is True
    again = _parquet(tmp_path / "c.parquet", [2], [2])  # (2, 2) is in b already
    assert unique_in_files([a, b, again], ["col-1", "col-2"], 6) is False
    assert unique_in_files([a, b], ["col-1"], 5) is False  # 1 and 2 repeat in the first column
    assert unique_in_files([], ["col-1"], 0) is True


def test_unique_in_files_leaves_remote_files_and_large_loads_to_spark(tmp_path):
    a = _parquet(tmp_path / "a.parquet", [1], [1])
    assert (
        unique_in_files([a, "abfss://c@acct.dfs.core.windows.net/t/b.parquet"], ["col-1"], 2)
        is None
    )
    assert unique_in_files([a], ["col-1"], reload.DRIVER_CHECK_MAX_ROWS + 1) is None
