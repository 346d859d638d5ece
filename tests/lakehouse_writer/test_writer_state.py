"""Commit records (when a commit is complete) and the writer's state in ``_writer_state``."""

from __future__ import annotations

import json
import re

import pytest

from lakehouse_writer.commit.state import BatchChanges, StateStore, WriterState
from lakehouse_writer.commit.truncate_log import TruncateLog
from lakehouse_writer.read.commits import BadCommitRecord, CommitRecord
from lakehouse_writer.rules.truncate import Truncate
from lakehouse_writer.runtime.frames import local_frame
from producer_lib.kafka._ledger import PartitionStats, TransactionLedger


def _ledger_record() -> str:
    """A commit record as the producer writes it: two partitions of orders, one of items."""
    ledger = TransactionLedger(transaction_time=1_700_000_000_000_000)
    ledger.count("orders", "SHOP.ORDERS", {0: 3, 1: 2})
    ledger.count("items", "SHOP.ITEMS", {0: 1})
    ledger.partitions[("orders", 0)] = PartitionStats(3, 10, 12)
    ledger.partitions[("orders", 1)] = PartitionStats(2, 4, 5)
    ledger.partitions[("items", 0)] = PartitionStats(1, 7, 7)
    record = ledger.commit_record(
        commit_id="c-1", producer="dev.bronze.flow.0", source_system="SHOP", function_name="flow"
    )
    return json.dumps(record)


def topic_filter(regex: str):
    """Python's reading of ``regex``: enough for these patterns (the writer asks Java)."""
    pattern = re.compile(regex)
    return lambda topic: pattern.fullmatch(topic) is not None


ALL = topic_filter(r"(?!__|_schemas$).+")
RECORD = CommitRecord.parse(_ledger_record(), "_commits", 0, 99)


def test_a_producer_commit_record_names_its_partition_ends_and_tables():
    assert RECORD.commit_id == "c-1" and (RECORD.topic, RECORD.offset) == ("_commits", 99)
    assert sorted(RECORD.ends) == [("items", 0, 7), ("orders", 0, 12), ("orders", 1, 5)]
    assert sorted(RECORD.tables) == [("items", "SHOP.ITEMS"), ("orders", "SHOP.ORDERS")]


@pytest.mark.parametrize(
    ("processed", "regex", "complete"),
    [
        ({("orders", 0): 12, ("orders", 1): 5, ("items", 0): 7}, None, True),
        ({("orders", 0): 30, ("orders", 1): 9, ("items", 0): 8}, None, True),
        ({("orders", 0): 11, ("orders", 1): 5, ("items", 0): 7}, None, False),
        ({("orders", 0): 12, ("orders", 1): 5}, None, False),
        ({("orders", 0): 12, ("orders", 1): 5}, "orders|_commits", True),
    ],
    ids=[
        "at-the-ends",
        "past-the-ends",
        "one-row-short",
        "partition-unseen",
        "unread-topic-ignored",
    ],
)
def test_a_commit_is_complete_once_every_partition_read_here_reached_its_end(
    processed, regex, complete
):
    ours = topic_filter(regex) if regex else ALL
    assert RECORD.is_complete(processed, ours) is complete


def test_commits_of_unread_topics_are_not_ours_and_stopped_tables_are_unvouched():
    assert RECORD.concerns(ALL) and not RECORD.concerns(topic_filter("other|_commits"))
    versions = {"SHOP.ORDERS": 4, "SHOP.ITEMS": 2}
    assert RECORD.versions(versions, ALL) == (versions, [])
    assert RECORD.versions({"SHOP.ORDERS": 4}, ALL) == ({"SHOP.ORDERS": 4}, ["SHOP.ITEMS"])
    assert RECORD.versions(versions, ALL, stopped={"SHOP.ORDERS"}) == (
        {"SHOP.ITEMS": 2},
        ["SHOP.ORDERS"],
    )
    assert RECORD.versions(versions, topic_filter("orders")) == ({"SHOP.ORDERS": 4}, [])


@pytest.mark.parametrize(
    "raw",
    ["not json", "[]", '{"partitions": []}', '{"commit_id": "x", "partitions": [{"topic": 1}]}'],
    ids=["text", "array", "no-id", "partition-without-offsets"],
)
def test_a_bad_commit_record_says_what_it_is_not(raw):
    with pytest.raises(BadCommitRecord, match="not a commit record"):
        CommitRecord.parse(raw, "_commits", 0, 1)


@pytest.mark.spark
@pytest.mark.slow
def test_state_survives_replays_restarts_and_compaction(spark, tmp_path):
    path = str(tmp_path / "_writer_state")
    store, other = StateStore(spark, path, "a"), StateStore(spark, path, "b")
    pending = CommitRecord.parse(_ledger_record(), "_commits", 0, 99)
    batches = [
        BatchChanges(
            {("orders", 0): 12, ("_commits", 0): 99},
            {"SHOP.ORDERS": 1},
            [pending],
            [],
            {"SHOP.ITEMS": "incompatible column type"},
        ),
        BatchChanges({("orders", 0): 20, ("items", 0): 7}, {"SHOP.ORDERS": 2}),
        BatchChanges({("orders", 1): 5}, {"SHOP.ORDERS": 3}, [], ["c-1"]),
    ]
    state = WriterState()
    for batch_id, changes in enumerate(batches):
        store.append(changes, batch_id)
        state.apply(changes, batch_id)
        if batch_id == 1:
            assert list(store.load().pending) == ["c-1"]  # a restart here still waits for it
    store.append(batches[2], 2)  # the replay of a batch writes nothing
    other.append(BatchChanges({("orders", 0): 500}), 7)

    loaded = store.load()
    assert loaded == state
    assert (loaded.last_batch, loaded.pending, loaded.versions) == (2, {}, {"SHOP.ORDERS": 3})
    assert loaded.offsets == {
        ("orders", 0): 20,
        ("orders", 1): 5,
        ("items", 0): 7,
        ("_commits", 0): 99,
    }
    assert loaded.stopped == {"SHOP.ITEMS": "incompatible column type"}

    store.compact(loaded)
    assert store.load() == loaded
    rows = spark.read.format("delta").load(path)
    assert rows.filter("instance = 'a'").count() == 6  # 4 offsets, 1 version, 1 stopped
    assert other.load().offsets == {("orders", 0): 500}


@pytest.mark.spark
@pytest.mark.slow
def test_the_state_reads_the_same_when_its_table_needs_spark_to_read_it(spark, tmp_path):
    """delta-rs reads and appends to a plain local state table; with deletion vectors, Spark
    reads it."""
    from deltalake import DeltaTable

    path = str(tmp_path / "_writer_state")
    store = StateStore(spark, path, "a")
    store.append(BatchChanges({("orders", 0): 12}, {"SHOP.ORDERS": 1}), 0)
    store.append(BatchChanges({("orders", 0): 20}, {"SHOP.ORDERS": 2}), 1)
    plain = store.load()
    assert DeltaTable(path).protocol().min_reader_version == 1  # delta-rs read it
    engines = [c.get("engineInfo") or c.get("clientVersion") for c in DeltaTable(path).history()]
    assert engines[0].startswith("delta-rs")  # the second batch's rows: appended by delta-rs
    assert "Apache-Spark" in engines[1]  # the first: Spark made the table
    spark.sql(
        f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    store.compact(plain)  # a DELETE of the old rows: deletion vectors now
    assert DeltaTable(path).protocol().min_reader_version == 3
    assert store.load() == plain
    assert (plain.last_batch, plain.offsets, plain.versions) == (
        1,
        {("orders", 0): 20},
        {"SHOP.ORDERS": 2},
    )


@pytest.mark.spark
@pytest.mark.slow
def test_a_state_table_made_ahead_is_empty_and_takes_the_first_batch(spark, tmp_path):
    from lakehouse_writer.tables.manager import no_data_files

    path = str(tmp_path / "_writer_state")
    store = StateStore(spark, path, "a")
    assert store.create() and not store.create()
    assert no_data_files(spark, path)
    assert store.load() == WriterState()  # read from the log: no rows, no job
    assert TruncateLog(spark, path, str(tmp_path / "_truncates")).of("SHOP.ORDERS") == []
    store.append(BatchChanges({("orders", 0): 3}), 0)
    assert not no_data_files(spark, path)
    assert store.load().offsets == {("orders", 0): 3}
    written = spark.read.format("delta").load(path).collect()
    assert [(r.kind, r.batch_id, r.written_at is not None) for r in written] == [
        ("offset", 0, True)
    ]


@pytest.mark.spark
@pytest.mark.slow
def test_applied_truncates_are_kept_with_the_state_of_every_instance_and_survive_compaction(
    spark, tmp_path
):
    path, legacy = str(tmp_path / "_writer_state"), str(tmp_path / "_truncates")
    store, other = StateStore(spark, path, "a"), StateStore(spark, path, "b")
    log = TruncateLog(spark, path, legacy)
    scoped, whole = Truncate(10, {"region": "EU", "code": None}), Truncate(20)
    first = log.record("SHOP.ORDERS", [scoped])
    assert log.record("SHOP.ORDERS", [scoped]) == []  # known already: no second row
    store.append(BatchChanges({("orders", 0): 3}, truncates=first), 0)
    other.append(BatchChanges({("orders", 1): 4}, truncates=log.record("SHOP.ITEMS", [whole])), 0)
    local_frame(
        spark, [("SHOP.ITEMS", 30, '{"sku": "x"}')], "table STRING, time_us BIGINT, scope STRING"
    ).write.format("delta").save(legacy)

    store.compact(store.load())  # rewrites instance a's facts, keeps its TRUNCATEs
    restarted = TruncateLog(spark, path, legacy)
    assert restarted.of("SHOP.ORDERS") == [scoped]
    assert restarted.of("SHOP.ITEMS") == [whole, Truncate(30, {"sku": "x"})]
    assert restarted.of("SHOP.ORDERS")[0].scope == {"region": "EU", "code": None}
    # A whole-table TRUNCATE makes the older ones moot: only the new one is recorded and kept.
    assert restarted.record("SHOP.ORDERS", [Truncate(40)]) == [
        ("SHOP.ORDERS", '{"scope": {}, "time_us": 40}')
    ]
    assert restarted.of("SHOP.ORDERS") == [Truncate(40)]


@pytest.mark.spark
@pytest.mark.slow
def test_local_frames_keep_every_value_and_type_of_the_system_rows(spark):
    schema = (
        "raw STRING, versions MAP<STRING, BIGINT>, missing ARRAY<STRING>, part INT, "
        "off BIGINT, key BINARY"
    )
    rows = [
        ("{}", {"SHOP.ORDERS": 3}, ["SHOP.ITEMS"], 1, 1 << 40, b"\x00\xff"),
        (None, {}, [], None, None, None),
    ]
    frame = local_frame(spark, rows, schema)
    assert frame.schema.simpleString() == (
        "struct<raw:string,versions:map<string,bigint>,missing:array<string>,part:int,"
        "off:bigint,key:binary>"
    )
    assert [tuple(r) for r in frame.collect()] == [
        ("{}", {"SHOP.ORDERS": 3}, ["SHOP.ITEMS"], 1, 1 << 40, bytearray(b"\x00\xff")),
        (None, {}, [], None, None, None),
    ]
    empty = local_frame(spark, [], schema)
    assert empty.count() == 0 and empty.schema == frame.schema
    with pytest.raises(ValueError):  # a row of the wrong width is an error, not a shifted row
        local_frame(spark, [("{}",)], schema)
