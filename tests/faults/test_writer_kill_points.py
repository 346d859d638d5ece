"""The writer killed at the two points that matter, on purpose rather than by chance.

The crash test (``tests/lakehouse_writer/test_writer_crash.py``) kills the writer at random
moments. These tests kill it (SIGKILL of the process group: driver and JVM) at a chosen
point of the first batch, found by watching the files the writer and Spark write:

- after the batch's Delta commit and before Spark's checkpoint commit (``commits/0``):
  the restart replays batch 0, whose Delta transaction id is already in the table's log,
  so nothing is appended twice;
- after Spark planned the batch (``offsets/0``) and before its Delta commit: the restart
  applies the batch once.

The table is append-only (no key): a second application would show as duplicate rows.
Each test checks that the kill really landed at its point before it checks the outcome.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from lakehouse_writer.cli import main
from lakehouse_writer.tables.manager import GDPR_DELETE_PROPERTY
from tests.support.writer import (
    T0,
    WriterProcess,
    once_argv,
    produce_transaction,
    published_topic,
    sample_schema,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

ROWS = 30_000  # one batch that takes seconds to apply on two cores
_POLL_S = 0.005
_START_TIMEOUT_S = 300.0


def _data_commits(table: Path) -> list[dict]:
    """The commitInfo of each commit of the table that wrote rows."""
    found = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        try:
            actions = [json.loads(line) for line in commit.read_text().splitlines() if line]
        except (OSError, ValueError):  # being written: read again next time
            continue
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if info.get("operation") in {"WRITE", "MERGE", "DELETE"}:
            found.append({**info, "txns": [a["txn"] for a in actions if "txn" in a]})
    return found


def _kill_when(writer: WriterProcess, reached: Callable[[], bool]) -> None:
    """SIGKILL the writer the moment ``reached()`` holds (polled every few ms)."""
    deadline = time.monotonic() + _START_TIMEOUT_S
    while not reached():
        if writer.proc.poll() is not None:
            raise AssertionError(f"the writer ended before the kill point:\n{writer.tail()}")
        if time.monotonic() > deadline:
            writer.kill9()
            raise AssertionError(f"the kill point was not reached:\n{writer.tail()}")
        time.sleep(_POLL_S)
    writer.kill9()


@pytest.fixture
def loaded(spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch):
    """A topic holding one transaction of ROWS appends; the writer's paths and arguments."""
    schema = sample_schema(keyed=False)
    topic, schemas = published_topic(new_topic, kafka_bootstrap, schema)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    rows = [
        {"ID": i, "NAME": f"n{i}", "__change_type": "I", "__change_time": T0 + 1}
        for i in range(ROWS)
    ]
    produce_transaction(kafka_bootstrap, topic, schema, rows)
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    argv = once_argv(lake, ckpt, topic, kafka_bootstrap)
    env = {"LAKEHOUSE_SCHEMAS_TOPIC": schemas, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    return {"lake": lake, "ckpt": ckpt, "argv": argv, "env": env, "log": tmp_path / "w.log"}


def _start(loaded: dict) -> WriterProcess:
    return WriterProcess(loaded["argv"][1:], loaded["env"], loaded["log"], str(loaded["ckpt"]))


def _ids(spark, lake: Path) -> Counter:
    table = spark.read.format("delta").load(str(lake / "SHOP" / "ORDERS"))
    return Counter(r.ID for r in table.select("ID").collect())


def _assert_applied_once(spark, loaded: dict) -> None:
    ids = _ids(spark, loaded["lake"])
    assert len(ids) == ROWS and set(ids.values()) == {1}, "rows lost or applied twice"
    commits = _data_commits(loaded["lake"] / "SHOP" / "ORDERS")
    txns = [(t["appId"], t["version"]) for c in commits for t in c["txns"]]
    assert len(commits) == 1 and len(txns) == len(set(txns)) == 1


def test_killed_after_its_delta_commit_the_replayed_batch_appends_nothing(spark, loaded):
    table, commits = loaded["lake"] / "SHOP" / "ORDERS", loaded["ckpt"] / "commits"

    _kill_when(_start(loaded), lambda: bool(_data_commits(table)))

    assert len(_data_commits(table)) == 1  # the batch's rows are committed to Delta ...
    assert not (commits / "0").exists()  # ... and Spark never recorded the batch as done
    assert main(loaded["argv"]) == 0  # the restart replays batch 0
    _assert_applied_once(spark, loaded)


def test_killed_before_its_delta_commit_the_batch_is_applied_once(spark, loaded):
    table, offsets = loaded["lake"] / "SHOP" / "ORDERS", loaded["ckpt"] / "offsets"

    _kill_when(_start(loaded), lambda: (offsets / "0").exists())

    assert not (table.exists() and _data_commits(table))  # planned, nothing written
    assert main(loaded["argv"]) == 0
    _assert_applied_once(spark, loaded)


def test_the_kill_point_watcher_sees_only_commits_that_wrote_rows(tmp_path):
    log_dir = tmp_path / "t" / "_delta_log"
    log_dir.mkdir(parents=True)
    create = {"commitInfo": {"operation": "CREATE TABLE"}}
    write = [{"txn": {"appId": "a", "version": 3}}, {"commitInfo": {"operation": "WRITE"}}]
    (log_dir / f"{0:020}.json").write_text(json.dumps(create) + "\n")
    assert _data_commits(tmp_path / "t") == []
    (log_dir / f"{1:020}.json").write_text("\n".join(json.dumps(a) for a in write) + "\n")
    (log_dir / f"{2:020}.json").write_text('{"commitInfo": ')  # half written
    found = _data_commits(tmp_path / "t")
    assert [(c["operation"], c["txns"]) for c in found] == [("WRITE", [write[0]["txn"]])]


def _gdpr_marks(table: Path) -> list[int]:
    """Versions of the commits that mark a GDPR delete (``flow.gdpr_delete``)."""
    marks = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        try:
            text = commit.read_text()
        except OSError:
            continue
        if GDPR_DELETE_PROPERTY in text and '"SET TBLPROPERTIES"' in text:
            marks.append(int(commit.stem))
    return marks


def test_killed_between_a_gdpr_delete_and_its_mark_the_replay_marks_it(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch
):
    """Maintenance finds GDPR deletes by their mark; a crash must not leave one unmarked.

    The writer commits the delete (a MERGE), then purges and marks the table in later
    commits. Killed in between, the batch is not recorded as done, so the restart replays
    it: the MERGE is skipped (its transaction id is in the log) and the mark is written.
    """
    schema = sample_schema()
    topic, schemas = published_topic(new_topic, kafka_bootstrap, schema)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    load = [
        {"ID": i, "NAME": f"n{i}", "__change_type": "R", "__change_time": T0 + 1}
        for i in range(2_000)
    ]
    produce_transaction(kafka_bootstrap, topic, schema, load)
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    argv = once_argv(lake, ckpt, topic, kafka_bootstrap)
    assert main(argv) == 0
    table = lake / "SHOP" / "ORDERS"
    loaded_commits = len(_data_commits(table))
    gdpr = [
        {"ID": i, "NAME": f"n{i}", "__change_type": "G", "__change_time": T0 + 2} for i in (7, 8)
    ]
    produce_transaction(kafka_bootstrap, topic, schema, gdpr)
    env = {"LAKEHOUSE_SCHEMAS_TOPIC": schemas, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    writer = WriterProcess(argv[1:], env, tmp_path / "w.log", str(ckpt))

    _kill_when(writer, lambda: len(_data_commits(table)) > loaded_commits)

    assert _gdpr_marks(table) == []  # the delete is committed, its mark is not
    assert main(argv) == 0  # the restart replays the batch
    assert len(_gdpr_marks(table)) == 1
    assert len(_data_commits(table)) == loaded_commits + 1  # the delete was not applied twice
    ids = _ids(spark, lake)
    assert len(ids) == 1_998 and not {7, 8} & set(ids)
