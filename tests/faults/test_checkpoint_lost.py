"""The writer's checkpoint deleted while the lakehouse (with ``_writer_state``) stays.

Chosen behaviour (lakehouse_writer/commit/checkpoint_guard.py): the writer stops before reading a
row, naming the instance whose progress the lakehouse holds, its topic partitions and
offsets, and what to do (restore that checkpoint, or use a new lakehouse path). Resuming
from ``_writer_state`` with a new checkpoint would need the old instance's batch ids, pending
commits and stopped tables; re-reading from the earliest offset applies rows twice.
"""

from __future__ import annotations

import shutil
from collections import Counter

import pytest

from lakehouse_writer.cli import main
from lakehouse_writer.commit.checkpoint_guard import check_checkpoint
from lakehouse_writer.engines import ids
from lakehouse_writer.errors import CheckpointMismatch
from lakehouse_writer.read.topics import TopicPattern
from lakehouse_writer.runtime.status import read_status
from tests.support.writer import T0, once_argv, produce_transaction, publish_schemas, sample_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _rows(first: int, last: int, t: int) -> list[dict]:
    return [
        {"ID": i, "NAME": f"n{i}", "__change_type": "I", "__change_time": T0 + t}
        for i in range(first, last + 1)
    ]


@pytest.fixture
def applied_then_checkpoint_lost(spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch):
    """An append-only table written by the writer, then its checkpoint deleted."""
    topic, schemas = new_topic(), new_topic(suffix="_schemas")
    schema = sample_schema(keyed=False)  # appends: a second application shows as duplicates
    publish_schemas(kafka_bootstrap, topic, schemas, schema)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    argv = once_argv(lake, ckpt, topic, kafka_bootstrap)
    produce_transaction(kafka_bootstrap, topic, schema, _rows(1, 3, 1))
    assert main(argv) == 0
    old_instance = ids.instance_id(str(ckpt))
    shutil.rmtree(ckpt)
    produce_transaction(kafka_bootstrap, topic, schema, _rows(4, 5, 2))
    return {"topic": topic, "lake": lake, "ckpt": ckpt, "argv": argv, "old": old_instance}


def _ids(spark, lake) -> Counter:
    table = spark.read.format("delta").load(str(lake / "SHOP" / "ORDERS"))
    return Counter(r.ID for r in table.select("ID").collect())


def test_the_guard_names_the_instance_whose_progress_the_lakehouse_holds(
    spark, applied_then_checkpoint_lost
):
    lost = applied_then_checkpoint_lost
    new_instance = ids.instance_id(str(lost["ckpt"]))
    assert new_instance != lost["old"]
    topic, lake = lost["topic"], str(lost["lake"])

    with pytest.raises(CheckpointMismatch) as refused:
        check_checkpoint(spark, lake, str(lost["ckpt"]), new_instance, TopicPattern(spark, topic))
    message = str(refused.value)
    assert f"writer instance {lost['old']} already applied {topic} partition 0 up to " in message
    assert "apply those rows twice" in message and "Restore that instance's checkpoint" in message
    assert str(lost["ckpt"]) in message and len(message) < 400 + len(lake) + len(str(lost["ckpt"]))

    # Its own instance, and writers of other topics, go on.
    check_checkpoint(spark, lake, str(lost["ckpt"]), lost["old"], TopicPattern(spark, topic))
    check_checkpoint(spark, lake, str(lost["ckpt"]), new_instance, TopicPattern(spark, "other"))
    assert _ids(spark, lost["lake"]) == Counter({1: 1, 2: 1, 3: 1})


def test_a_writer_whose_checkpoint_was_deleted_stops_and_applies_nothing_twice(
    spark, applied_then_checkpoint_lost
):
    lost = applied_then_checkpoint_lost

    code = main(lost["argv"])

    ids = _ids(spark, lost["lake"])
    assert [i for i, n in ids.items() if n > 1] == [], "rows applied twice"
    assert code == 1, f"the writer went on with a new checkpoint; rows: {sorted(ids)}"
    status = read_status(str(lost["ckpt"])) or {}
    assert status.get("state") == "failed", status
    assert f"writer instance {lost['old']} already applied {lost['topic']}" in status["error"]


def test_a_used_checkpoint_pointed_at_a_new_lakehouse_refuses_to_start(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch
):
    """The reverse: the checkpoint stays, the lakehouse is new (issue "silent damage", 4).

    Started, the writer would go on from the checkpoint's offsets: the new lakehouse's tables
    would be created without rows 1-3, and the run would say ``drained``.
    """
    topic, schemas = new_topic(), new_topic(suffix="_schemas")
    schema = sample_schema()
    publish_schemas(kafka_bootstrap, topic, schemas, schema)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    lake, new_lake, ckpt = tmp_path / "lake", tmp_path / "new_lake", tmp_path / "ckpt"
    produce_transaction(kafka_bootstrap, topic, schema, _rows(1, 3, 1))
    assert main(once_argv(lake, ckpt, topic, kafka_bootstrap)) == 0
    produce_transaction(kafka_bootstrap, topic, schema, _rows(4, 5, 2))

    code = main(once_argv(new_lake, ckpt, topic, kafka_bootstrap))

    assert code == 1
    status = read_status(str(ckpt)) or {}
    assert status.get("state") == "failed", status
    assert str(ckpt) in status["error"] and str(new_lake) in status["error"]
    assert "holds no progress of its writer instance" in status["error"]
    assert not (new_lake / "SHOP" / "ORDERS").exists()  # no table created without its rows
    assert main(once_argv(lake, ckpt, topic, kafka_bootstrap)) == 0  # its own lakehouse: on
    assert sorted(_ids(spark, lake)) == [1, 2, 3, 4, 5]
