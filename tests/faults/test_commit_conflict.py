"""A writer that loses a Delta commit race tries the write again instead of stopping.

Another writer (``lakehouse-writer maintain``, a property change by hand) can commit to a table
while the lakehouse writer applies a batch to it; Delta then fails the later commit. The test
makes that happen for real: while the writer MERGEs 10,000 updates into a table, this process
commits a property change to the same table every few milliseconds with delta-rs (a metadata
change overlaps every concurrent commit). The writer must log the conflict, apply the batch
again on the new version, and end with every row exactly once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

from lakehouse_writer.cli import main
from lakehouse_writer.engines.spark.conflicts import is_conflict, retry_on_conflict
from tests.support.writer import (
    T0,
    WriterProcess,
    once_argv,
    produce_transaction,
    published_topic,
    sample_schema,
)

ROWS = 10_000  # a MERGE of seconds on two cores: a wide window for the race


def _poke_until(table: Path, started: Path, stop: threading.Event, pokes: list[int]) -> None:
    """Once the writer's batch has begun (``started`` exists), commit a property change to
    ``table`` (delta-rs) every quarter second until ``stop`` is set.

    A quarter second is well inside the MERGE's seconds, so some poke overlaps it; poking
    faster, and from before the batch, only grew the log the writer must read again on every
    try (904 versions, 209 s for the test).
    """
    while not started.exists() and not stop.is_set():
        time.sleep(0.05)
    while not stop.is_set():
        try:
            days = 30 + len(pokes) % 2  # a real change each time (delta-rs takes delta.* keys)
            retention = {"delta.logRetentionDuration": f"interval {days} days"}
            DeltaTable(str(table)).alter.set_table_properties(retention)
            pokes.append(1)
        except Exception:  # noqa: BLE001 - losing the race ourselves is fine: poke again
            pass
        time.sleep(0.25)


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_a_merge_that_loses_a_commit_race_is_applied_again(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch
):
    schema = sample_schema()
    topic, schemas = published_topic(new_topic, kafka_bootstrap, schema)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    rows = [
        {"ID": i, "NAME": f"n{i}", "__change_type": "R", "__change_time": T0 + 1}
        for i in range(ROWS)
    ]
    produce_transaction(kafka_bootstrap, topic, schema, rows)
    lake, ckpt, log = tmp_path / "lake", tmp_path / "ckpt", tmp_path / "writer.log"
    argv = once_argv(lake, ckpt, topic, kafka_bootstrap)
    assert main(argv) == 0
    updates = [
        {**r, "NAME": f"v2 {r['ID']}", "__change_type": "U", "__change_time": T0 + 2} for r in rows
    ]
    produce_transaction(kafka_bootstrap, topic, schema, updates)
    env = {"LAKEHOUSE_SCHEMAS_TOPIC": schemas, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    writer = WriterProcess(argv[1:], env, log, str(ckpt))
    stop, pokes = threading.Event(), list[int]()
    batch_started = ckpt / "offsets" / "1"  # Spark writes a batch's offsets before it runs
    poker = threading.Thread(
        target=_poke_until, args=(lake / "SHOP" / "ORDERS", batch_started, stop, pokes)
    )
    poker.start()
    try:
        deadline = time.monotonic() + 300
        while "commit conflict" not in log.read_text() and writer.proc.poll() is None:
            assert time.monotonic() < deadline, writer.tail()
            time.sleep(0.01)
    finally:
        stop.set()  # the retry must be able to win
        poker.join()
    assert writer.wait(300) == 0, writer.tail()

    text = log.read_text()
    assert "commit conflict table=SHOP.ORDERS" in text, "no race was lost: the test proved nothing"
    table = spark.read.format("delta").load(str(lake / "SHOP" / "ORDERS"))
    names = {r.ID: r.NAME for r in table.select("ID", "NAME").collect()}
    assert len(names) == ROWS == table.count()  # no row lost, none doubled
    assert Counter(n.startswith("v2 ") for n in names.values()) == Counter({True: ROWS})
    assert pokes, "the other writer never committed"


# -- the pure parts -------------------------------------------------------------------------


def test_delta_rs_and_spark_conflicts_are_recognised_and_other_errors_are_not():
    from deltalake.exceptions import CommitFailedError

    assert is_conflict(CommitFailedError("Transaction failed: version already exists"))
    assert is_conflict(RuntimeError("[DELTA_CONCURRENT_APPEND] Files were added ..."))
    wrapped = RuntimeError("batch failed")
    wrapped.__cause__ = CommitFailedError("metadata changed")
    assert is_conflict(wrapped)
    assert not is_conflict(ValueError("[DELTA_MISSING_COLUMN] no column NAME"))


def test_a_write_is_tried_again_while_it_conflicts_and_not_after_another_error(caplog):
    from deltalake.exceptions import CommitFailedError

    calls = []

    def write() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise CommitFailedError("a concurrent transaction changed the metadata")
        return "done"

    assert retry_on_conflict(write, "table=SHOP.ORDERS batch=1") == "done"
    assert len(calls) == 3
    assert sum("commit conflict table=SHOP.ORDERS" in r.getMessage() for r in caplog.records) == 2

    def broken() -> None:
        calls.append(1)
        raise ValueError("not a conflict")

    calls.clear()
    with pytest.raises(ValueError, match="not a conflict"):
        retry_on_conflict(broken, "table=SHOP.ORDERS batch=2")
    assert len(calls) == 1

    def always() -> None:
        raise CommitFailedError("lost again")

    with pytest.raises(CommitFailedError):
        retry_on_conflict(always, "table=SHOP.ORDERS batch=3", attempts=2)
