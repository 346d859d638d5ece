"""``run --once`` with nothing new: Kafka answers, Spark is not started, nothing is skipped."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from lakehouse_writer.cli import main
from lakehouse_writer.read.caught_up import checkpoint_offsets, portable_pattern
from tests.support.writer import T0, once_argv, produce_transaction, published_topic, sample_schema

STARTED = "spark session master="
NOTHING_NEW = "nothing new since batch"


def _status(checkpoint: Path) -> dict:
    return json.loads((checkpoint / "writer_status.json").read_text())


def _ids(spark, lake: Path) -> list[int]:
    table = spark.read.format("delta").load(str(lake / "SHOP" / "ORDERS"))
    return sorted(r.ID for r in table.select("ID").collect())


def _rows(first: int, count: int, time: int) -> list[dict]:
    return [
        {"ID": i, "NAME": f"n{i}", "__change_type": "I", "__change_time": T0 + time}
        for i in range(first, first + count)
    ]


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow  # starts Spark: 6 s of the 5-minute fast suite
def test_a_run_with_nothing_new_starts_no_spark_and_new_rows_start_it_again(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch, caplog
):
    schema = sample_schema()
    topic, schemas = published_topic(new_topic, kafka_bootstrap, schema, partitions=2)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    argv = once_argv(lake, ckpt, topic, kafka_bootstrap)

    def drain() -> str:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="lakehouse_writer"):
            assert main(argv) == 0
        return caplog.text

    produce_transaction(kafka_bootstrap, topic, schema, _rows(1, 3, 1))
    first = drain()
    assert STARTED in first and NOTHING_NEW not in first
    assert _ids(spark, lake) == [1, 2, 3]
    before = _status(ckpt)

    quiet = drain()
    assert NOTHING_NEW in quiet and STARTED not in quiet
    assert "1 topic(s), 2 partition(s)" in quiet
    after = _status(ckpt)
    assert after["state"] == "drained" and after["updated_at"] > before["updated_at"]
    assert after["last_batch_id"] == before["last_batch_id"]

    # An aborted transaction moves the partition's end: Spark reads it (and applies nothing).
    produce_transaction(kafka_bootstrap, topic, schema, _rows(90, 1, 2), commit=False)
    aborted = drain()
    assert STARTED in aborted and NOTHING_NEW not in aborted
    assert _ids(spark, lake) == [1, 2, 3]
    assert NOTHING_NEW in drain()

    produce_transaction(kafka_bootstrap, topic, schema, _rows(4, 2, 3))
    assert STARTED in drain()
    assert _ids(spark, lake) == [1, 2, 3, 4, 5]

    # A regex only Java reads alike is not guessed at: Spark is asked.
    argv[argv.index("--topics") + 1] = rf"(?=t_){topic}"
    assert STARTED in drain()


@pytest.mark.kafka
@pytest.mark.spark
def test_a_batch_planned_but_not_done_is_replayed_by_spark(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch, caplog
):
    schema = sample_schema()
    topic, schemas = published_topic(new_topic, kafka_bootstrap, schema)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    produce_transaction(kafka_bootstrap, topic, schema, _rows(1, 2, 1))
    assert main(once_argv(lake, ckpt, topic, kafka_bootstrap)) == 0
    for name in ("0", ".0.crc"):  # the driver died before Spark recorded the batch
        (ckpt / "commits" / name).unlink(missing_ok=True)

    with caplog.at_level(logging.INFO, logger="lakehouse_writer"):
        assert main(once_argv(lake, ckpt, topic, kafka_bootstrap)) == 0

    assert STARTED in caplog.text and NOTHING_NEW not in caplog.text
    assert (ckpt / "commits" / "0").exists()
    assert _ids(spark, lake) == [1, 2]


# -- the pure parts -------------------------------------------------------------------------

METADATA = '{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}'


def _checkpoint(root: Path, planned: dict[int, list[str]], done: list[int]) -> Path:
    for folder in ("offsets", "commits"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for batch, sources in planned.items():
        (root / "offsets" / str(batch)).write_text("\n".join(["v1", METADATA, *sources]))
    for batch in done:
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    return root


def test_the_last_done_batch_gives_the_offsets_read(tmp_path):
    source = '{"orders":{"0":12,"1":7},"_commits":{"0":3}}'
    root = _checkpoint(tmp_path, {0: ['{"orders":{"0":5}}'], 1: [source]}, [0, 1])
    assert checkpoint_offsets(str(root)) == (
        1,
        {("orders", 0): 12, ("orders", 1): 7, ("_commits", 0): 3},
    )


@pytest.mark.parametrize(
    ("planned", "done"),
    [
        pytest.param({}, [], id="no batch yet"),
        pytest.param({0: ['{"t":{"0":1}}'], 1: ['{"t":{"0":2}}']}, [0], id="last not done"),
        pytest.param({0: ['{"t":{"0":1}}', '{"u":{"0":1}}']}, [0], id="two sources"),
        pytest.param({0: ['{"t":{"0":"latest"}}']}, [0], id="not an offset"),
        pytest.param({0: ["not json"]}, [0], id="not json"),
    ],
)
def test_a_checkpoint_that_spark_must_read_gives_nothing(tmp_path, planned, done):
    assert checkpoint_offsets(str(_checkpoint(tmp_path, planned, done))) is None


@pytest.mark.parametrize(
    ("regex", "portable"),
    [
        ("orders|_commits", True),
        (r"shop\..*", True),
        ("t_[a-z0-9_-]+", True),
        (r"(?:a|b)_\d{2,3}", True),
        ("[^_].*", True),
        (r"\p{Alpha}+", False),  # Java's class syntax; Python refuses it
        ("[[a]]", False),  # a union in Java, a '[' in Python
        ("a(?=b)", False),
        ("a|(b", False),
    ],
)
def test_only_regexes_both_engines_read_alike_are_matched_here(regex, portable):
    assert (portable_pattern(regex) is not None) is portable
