"""A Kafka data gap: records deleted (as retention would) before the writer read them.

The writer has applied a first transaction and recorded its offsets in its checkpoint; then
the next records are deleted from the partition (``AdminClient.delete_records``, which moves
the log start offset exactly as retention does). The writer must stop with an error that
names the topic, the partition and the lost offsets, write nothing after the gap, and keep
stopping on every restart: the gap is never skipped silently.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from lakehouse_writer.cli import main
from lakehouse_writer.runtime.data_loss import DataGap, data_gap_cause, find_gap
from lakehouse_writer.runtime.status import read_status
from tests.support.writer import T0, once_argv, produce_transaction, publish_schemas, sample_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _rows(first: int, last: int, t: int) -> list[dict]:
    return [
        {"ID": i, "NAME": f"n{i}", "__change_type": "I", "__change_time": T0 + t}
        for i in range(first, last + 1)
    ]


def _delete_before(admin: AdminClient, topic: str, offset: int) -> int:
    """Delete the records of ``topic``'s partition 0 below ``offset``; the new log start."""
    done = admin.delete_records([TopicPartition(topic, 0, offset)], request_timeout=30)
    return next(iter(done.values())).result(timeout=30).low_watermark


def _end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "gap-probe"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    finally:
        consumer.close()


@dataclass(frozen=True)
class Gap:
    """What the scenario left: the writer's two failed starts and the gap's offsets."""

    topic: str
    first_lost: int  # the first offset the writer had not read
    last_lost: int  # the last offset deleted
    statuses: list[dict]
    trace: str
    table_ids: list[int]


def _gap_scenario(spark, bootstrap, admin, new_topic, tmp_path, monkeypatch) -> Gap:
    """Apply one transaction; lose the next to delete_records; start the writer twice."""
    topic, schemas = new_topic(), new_topic(suffix="_schemas")
    schema = sample_schema()
    publish_schemas(bootstrap, topic, schemas, schema)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    argv = once_argv(lake, ckpt, topic, bootstrap)

    produce_transaction(bootstrap, topic, schema, _rows(1, 3, 1))
    assert main(argv) == 0
    read_up_to = _end_offset(bootstrap, topic)  # 3 rows + the commit marker
    produce_transaction(bootstrap, topic, schema, _rows(4, 6, 2))  # lost to the gap
    gap_end = _end_offset(bootstrap, topic)
    produce_transaction(bootstrap, topic, schema, _rows(7, 9, 3))
    assert _delete_before(admin, topic, gap_end) == gap_end

    statuses = []
    for attempt in (1, 2):  # a restart does not get past it either
        assert main(argv) == 1, f"attempt {attempt}: the writer skipped the gap"
        statuses.append(read_status(str(ckpt)) or {})
    trace = Path(statuses[-1]["error_trace"]).read_text()
    table = spark.read.format("delta").load(str(lake / "SHOP" / "ORDERS"))
    ids = sorted(r.ID for r in table.select("ID").collect())
    return Gap(topic, read_up_to, gap_end - 1, statuses, trace, ids)


def test_records_deleted_before_the_writer_read_them_stop_it_every_time(
    spark, kafka_bootstrap, kafka_admin, new_topic, tmp_path, monkeypatch
):
    gap = _gap_scenario(spark, kafka_bootstrap, kafka_admin, new_topic, tmp_path, monkeypatch)

    assert gap.table_ids == [1, 2, 3], "rows after the gap were applied"
    for status in gap.statuses:
        assert status["state"] == "failed", status
        assert f"topic {gap.topic} partition 0" in status["error"], status  # both starts
        assert f"offsets {gap.first_lost} to {gap.last_lost}" in status["error"], status
    # lakehouse_writer.runtime.data_loss reads it from the real trace, with Kafka and without
    cause = data_gap_cause(gap.trace, {"bootstrap.servers": kafka_bootstrap})
    assert cause is not None
    assert (
        f"topic {gap.topic} partition 0 no longer holds offsets {gap.first_lost} to {gap.last_lost}"
    ) in cause, cause
    assert data_gap_cause(gap.trace) is not None  # without Kafka: the first lost offset


def test_the_status_of_a_writer_stopped_by_a_gap_names_the_lost_offsets(
    spark, kafka_bootstrap, kafka_admin, new_topic, tmp_path, monkeypatch
):
    gap = _gap_scenario(spark, kafka_bootstrap, kafka_admin, new_topic, tmp_path, monkeypatch)

    error = gap.statuses[-1]["error"]
    assert error.startswith(
        f"Kafka data lost: topic {gap.topic} partition 0 no longer holds offsets "
        f"{gap.first_lost} to {gap.last_lost}"
    ), error


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Could not read records in offset [4, 12) for topic partition orders-v2-0 with",
            DataGap("orders-v2", 0, 4),
        ),
        (
            "Cannot fetch offset 7 (GroupId: g-1, TopicPartition: orders-3). Some data",
            DataGap("orders", 3, 7),
        ),
        (
            "Fetch position FetchPosition{offset=4, offsetEpoch=Optional.empty, currentLeader="
            "LeaderAndEpoch{leader=Optional[h:1 (id: 1 rack: null)], epoch=0}} is out of range "
            "for partition a_b-1",
            DataGap("a_b", 1, 4),
        ),
        (
            "Partition orders-0's offset was changed from 12 to 3, some data may have been missed.",
            DataGap("orders", 0, 12, 3, went_back=True),
        ),
        ("ParentNotDirectoryException: Parent path is not a directory", None),
    ],
    ids=["read-range", "cannot-fetch", "out-of-range", "went-back", "not-a-gap"],
)
def test_a_gap_is_found_in_what_spark_and_kafka_say(text, expected):
    assert find_gap(text) == expected
