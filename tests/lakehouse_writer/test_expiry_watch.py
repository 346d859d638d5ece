"""The writer warns while unread rows near their topic's retention (real broker)."""

from __future__ import annotations

import json
import logging
import time

import pytest
from confluent_kafka import Producer

from lakehouse_writer.ops.expiry import ExpiryWatch
from tests.support.ports import free_port_block

pytestmark = pytest.mark.kafka

HOUR_MS = 3_600_000


def _topic_with_rows(new_topic, bootstrap: str, retention_ms: int, ages_min: list[int]) -> str:
    """A topic keeping rows ``retention_ms``, with one row written ``age`` minutes ago each."""
    topic = new_topic(config={"retention.ms": str(retention_ms)})
    producer = Producer({"bootstrap.servers": bootstrap})
    now_ms = int(time.time() * 1000)
    for age in ages_min:
        producer.produce(topic, b"row", timestamp=now_ms - age * 60_000)
    assert producer.flush(15) == 0
    return topic


@pytest.mark.slow  # 3-10 s: make test-fast stays under 5 minutes
def test_unread_rows_past_half_their_retention_are_named(kafka_bootstrap, new_topic):
    topic = _topic_with_rows(new_topic, kafka_bootstrap, HOUR_MS, [50, 40, 1])  # offsets 0, 1, 2
    watch = ExpiryWatch({"bootstrap.servers": kafka_bootstrap})

    behind = watch.check({(topic, 0): 0})
    assert [(b.topic, b.partition, b.next_offset, b.retention_ms) for b in behind] == [
        (topic, 0, 0, HOUR_MS)
    ]
    assert watch.check({(topic, 0): 1})  # 40 minutes old: still past half an hour
    assert watch.check({(topic, 0): 2}) == []  # its oldest unread row is a minute old
    assert watch.check({(topic, 0): 3}) == []  # caught up


def test_every_row_old_and_unread(kafka_bootstrap, new_topic):
    topic = _topic_with_rows(new_topic, kafka_bootstrap, HOUR_MS, [55, 50])
    watch = ExpiryWatch({"bootstrap.servers": kafka_bootstrap})
    assert [b.next_offset for b in watch.check({(topic, 0): 1})] == [1]
    assert watch.check({(topic, 0): 2}) == []


def test_a_topic_kept_for_ever_is_never_behind(kafka_bootstrap, new_topic):
    topic = _topic_with_rows(new_topic, kafka_bootstrap, -1, [600])
    assert ExpiryWatch({"bootstrap.servers": kafka_bootstrap}).check({(topic, 0): 0}) == []


def test_a_batch_report_leads_to_one_warning_a_minute(kafka_bootstrap, new_topic, caplog):
    topic = _topic_with_rows(new_topic, kafka_bootstrap, HOUR_MS, [50, 1])
    watch = ExpiryWatch({"bootstrap.servers": kafka_bootstrap})
    progress = {"sources": [{"endOffset": json.dumps({topic: {"0": 0}})}]}
    caplog.set_level(logging.WARNING, logger="lakehouse_writer.ops.expiry")

    watch.on_progress(progress)
    watch.on_progress(progress)  # within the minute: not checked again
    watch.close()  # waits for the check, which runs on the watch's own thread

    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert f"topic={topic} partition=0 next_offset=0" in warnings[0]
    assert f"retention.ms={HOUR_MS}" in warnings[0]


@pytest.mark.slow
def test_an_unreachable_broker_does_not_hold_up_the_batch():
    """The lookups time out after seconds; the batch that reported its offsets goes on."""
    watch = ExpiryWatch({"bootstrap.servers": f"127.0.0.1:{free_port_block(1)}"})
    progress = {"sources": [{"endOffset": json.dumps({"orders": {"0": 5}})}]}

    started = time.monotonic()
    watch.on_progress(progress)
    returned = time.monotonic() - started
    watch.close()

    assert returned < 1.0, f"on_progress took {returned:.1f} s"
    assert watch.behind == []
