"""OpenLineage events of a writer run, through the HTTP transport into a receiver of the test.

Topics in (named as flows name their outputs, so the graph joins), the Delta tables out with
their row counts; START, RUNNING per batch that applied rows, COMPLETE or FAIL.
"""

from __future__ import annotations

import os

import pytest

from lakehouse_writer.cli import main
from producer_lib.runner.openlineage_events import close_senders
from tests.support.openlineage import LineageReceiver, check_run_event
from tests.support.writer import T0, once_argv, produce_transaction, published_topic, sample_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


@pytest.fixture
def receiver(monkeypatch):
    for name in [n for n in os.environ if n.startswith("OPENLINEAGE")]:
        monkeypatch.delenv(name)
    with LineageReceiver().running() as running:
        monkeypatch.setenv("OPENLINEAGE__TRANSPORT__TYPE", "http")
        monkeypatch.setenv("OPENLINEAGE__TRANSPORT__URL", running.url)
        monkeypatch.setenv("OPENLINEAGE_NAMESPACE", "writer-test")
        yield running
        close_senders()


def _rows(first: int, count: int, time: int) -> list[dict]:
    return [
        {"ID": i, "NAME": f"n{i}", "__change_type": "I", "__change_time": T0 + time}
        for i in range(first, first + count)
    ]


def test_a_run_sends_start_running_per_batch_and_complete_with_topics_in_and_tables_out(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch, receiver
):
    schema = sample_schema()
    topic, schemas = published_topic(new_topic, kafka_bootstrap, schema)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    produce_transaction(kafka_bootstrap, topic, schema, _rows(1, 3, 1))
    produce_transaction(kafka_bootstrap, topic, schema, _rows(4, 2, 2))
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    # a transaction of 3 rows and its marker a batch: two batches
    assert (
        main(once_argv(lake, ckpt, topic, kafka_bootstrap, "--max-offsets-per-trigger", "4")) == 0
    )

    instance = (ckpt / "lakehouse_writer_instance").read_text().strip()
    job = ("writer-test", f"lakehouse-writer.{instance}")
    runs = {
        e["run"]["runId"]
        for e in receiver.events
        if (e["job"]["namespace"], e["job"]["name"]) == job
    }
    assert len(runs) == 1
    events = receiver.of_run(runs.pop())
    assert [e["eventType"] for e in events] == ["START", "RUNNING", "RUNNING", "COMPLETE"]
    for event in events:
        check_run_event(event)
    table = ("file", str(lake / "SHOP" / "ORDERS"))
    batches = [
        {
            (o["namespace"], o["name"]): o["outputFacets"]["outputStatistics"]["rowCount"]
            for o in e["outputs"]
        }
        for e in events[1:3]
    ]
    assert batches == [{table: 3}, {table: 2}]
    complete = events[-1]
    assert {(o["namespace"], o["name"]) for o in complete["outputs"]} == {table}
    assert complete["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"] == 5
    kafka = f"kafka://{kafka_bootstrap.split(',')[0]}"
    assert (kafka, topic) in {(i["namespace"], i["name"]) for i in complete["inputs"]}


@pytest.mark.slow  # 3-10 s: make test-fast stays under 5 minutes
def test_a_failed_run_sends_fail_with_its_error(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch, receiver
):
    schema = sample_schema()
    topic, schemas = published_topic(new_topic, kafka_bootstrap, schema)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    produce_transaction(kafka_bootstrap, topic, schema, _rows(1, 1, 1))
    (tmp_path / "a_file").write_text("not a directory")
    lake, ckpt = tmp_path / "a_file" / "lake", tmp_path / "ckpt"

    assert main(once_argv(lake, ckpt, topic, kafka_bootstrap)) != 0

    kinds = [e["eventType"] for e in receiver.events]
    assert kinds[0] == "START" and kinds[-1] == "FAIL", kinds
    for event in receiver.events:
        check_run_event(event)
    error = receiver.events[-1]["run"]["facets"]["errorMessage"]["message"]
    assert "a_file" in error
