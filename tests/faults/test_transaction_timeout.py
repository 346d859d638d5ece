"""A load that keeps its transaction open longer than ``transaction.timeout.ms``.

The broker's transaction coordinator aborts such a transaction and bumps the producer's
epoch; librdkafka then reports the producer as fenced "by a newer instance". producer_lib's
choice is a clean failure (docs/OPERATIONS.md): the run fails with an error that says the
transaction timed out and which setting to raise, nothing of the transaction is visible, the
delta pointer does not move, the FAILED record is written (a successor producer writes it:
nobody else fenced this one), and a rerun within the timeout publishes every row once.
Chunked commits would break what one transaction promises (a TRUNCATE and its REPLACE rows
apply together), so they are not done behind the flow's back.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter

import pytest

from producer_lib import FunctionRunner, KafkaProducer, KeySchema, RowType, RunFailed, SourceAdapter
from producer_lib.kafka.topics import EXECUTION_LOG_TOPIC
from tests.support.consume import consume_all
from tests.support.decode import decoded_values

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

TIMEOUT_MS = 2_000
# The coordinator looks for expired transactions every 10 s (the broker's
# transaction.abort.timed.out.transaction.cleanup.interval.ms): stay open past both.
STAY_OPEN_S = TIMEOUT_MS / 1000 + 12


class SlowFlow(FunctionRunner):
    """Publishes ids 0..19 in two halves; ``pause_s`` between them keeps the transaction open."""

    source_system = "TEST"

    def __init__(self, function: str, topic: str) -> None:
        super().__init__(function)
        self.topic = topic
        self.pause_s = 0.0

    async def initial_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        for low in (0, 10):
            schema = await reader.load(
                "N", f"SELECT range::BIGINT AS ID FROM range({low}, {low + 10})", "TEST", "TEST"
            )
            schema.set_primary_keys("ID")
            target = producer.add_target(self.topic, "N", KeySchema(schema), schema)
            producer.produce_from_duckdb("N", target, 100, RowType.UPSERT)
            if low == 0:
                await asyncio.sleep(self.pause_s)
        self.set_delta_pointer(19)
        producer.commit()

    async def delta_load(self, producer: KafkaProducer, reader: SourceAdapter) -> None:
        raise NotImplementedError


def _records(bootstrap: str, flow: SlowFlow) -> list[dict]:
    key = f"{flow.function_name}|default|0".encode()
    return [
        json.loads(m.value()) for m in consume_all(bootstrap, EXECUTION_LOG_TOPIC) if m.key() == key
    ]


def test_a_transaction_open_past_its_timeout_fails_cleanly_and_a_rerun_publishes_once(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("KAFKA_TRANSACTION_TIMEOUT_MS", str(TIMEOUT_MS))
    flow = SlowFlow(f"txn_timeout_{uuid.uuid4().hex[:8]}", f"t_txn_timeout_{uuid.uuid4().hex[:8]}")
    flow.pause_s = STAY_OPEN_S

    started = time.monotonic()
    with pytest.raises(RunFailed) as failed:
        asyncio.run(flow.run("initial"))
    result = failed.value.result

    assert time.monotonic() - started < STAY_OPEN_S + 30
    assert result.status == "FAILED" and result.commit_id is None
    assert "longer than its timeout" in result.error, result.error
    assert f"KAFKA_TRANSACTION_TIMEOUT_MS={TIMEOUT_MS}" in result.error
    assert "newer instance" not in result.error  # librdkafka's words for it mislead
    assert decoded_values(kafka_bootstrap, flow.topic) == []  # nothing of it is visible
    last = _records(kafka_bootstrap, flow)[-1]
    assert (last["status"], last["run_id"], last["delta_pointer"]) == (
        "FAILED",
        result.run_id,
        None,
    )
    assert last["error"] == result.error

    flow.pause_s = 0.0
    rerun = asyncio.run(flow.run("initial"))
    assert (rerun.status, rerun.delta_pointer) == ("COMPLETED", 19)
    ids = Counter(v["ID"] for v in decoded_values(kafka_bootstrap, flow.topic))
    assert ids == Counter(range(20))
