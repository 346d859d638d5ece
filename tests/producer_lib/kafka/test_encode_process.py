"""The encoder process: the same bytes as the flow's own thread, errors named, never stuck.

A large export encodes in a second Python process beside its send loop
(``producer_lib/kafka/_encode_process.py``). These tests run the real worker process on real
Arrow batches; what reaches Kafka through it is tested in ``test_kafka_producer.py`` and
``test_truncation_counts.py`` against the broker.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator

import duckdb
import pyarrow as pa
import pytest

from producer_lib.errors import EncodeError, ProduceError
from producer_lib.kafka import _encode_process as encode_process
from producer_lib.kafka._encode import encode_batch
from producer_lib.kafka._encode_process import EncoderProcess, ExportEncoding
from producer_lib.kafka._send import EncodedBatch
from producer_lib.kafka._target import Target, build_target
from producer_lib.schema import (
    AvroDate,
    AvroDecimal,
    AvroLong,
    AvroNVarchar,
    AvroVarchar,
    KeySchema,
    ValueSchema,
)

CONSTANTS = (
    {},
    {"__change_type": "R", "__change_time": 1_700_000_000_000_000, "__source_system": "SHOPDB"},
)


class _Headers:
    """A schema catalog that hands out fixed framing headers (no broker in these tests)."""

    def register(self, topic: str, kind: str, schema_json: object) -> bytes:
        return b"\xc3\x01" + (b"K" if kind == "key" else b"V") * 8


def _target(partitions: int = 3, truncate: bool = False) -> Target:
    schema = ValueSchema("ORDERS", "SHOP")
    schema.add_field("ID", AvroLong(), nullable=False)
    schema.add_field("CODE", AvroVarchar(8, truncate=truncate))
    schema.add_field("NAME", AvroNVarchar(20))
    schema.add_field("AMOUNT", AvroDecimal(9, 2))
    schema.add_field("DAY", AvroDate())
    schema.add_primary_key("ID")
    return build_target("orders", "ORDERS", KeySchema(schema), schema, partitions, _Headers())


def _batches(rows: int = 5000, size: int = 1000, code: str = "'C' || (range % 7)") -> list:
    con = duckdb.connect()
    query = f"""select range::bigint as ID, {code} as CODE,
                case when range % 5 = 0 then null else 'näme ' || range end as NAME,
                (range % 1000 / 4)::decimal(9,2) as AMOUNT,
                date '2026-01-01' + (range % 300)::int as DAY
                from range({rows})"""
    return list(con.sql(query).to_arrow_reader(size))


def thread_encoded(target: Target, batch: pa.RecordBatch, partition: int | None) -> EncodedBatch:
    """What the flow's own thread makes of ``batch``."""
    buffers = encode_batch(target.encoding, batch, CONSTANTS, partition)
    return EncodedBatch.from_buffers(buffers, batch)


def _same(a: EncodedBatch, b: EncodedBatch) -> None:
    assert a.keys == b.keys and a.key_offsets == b.key_offsets
    assert a.values == b.values and a.value_offsets == b.value_offsets
    assert a.partitions == b.partitions
    assert a.rows_per_partition == b.rows_per_partition and a.marks == b.marks


@pytest.fixture(scope="module")
def worker() -> Iterator[EncoderProcess]:
    process = EncoderProcess()
    while not process.ready():
        assert process.alive, "the encoder process did not start"
        os.sched_yield()
    yield process
    process.close()


def _nothing(_step: str, _seconds: float) -> None:
    pass


@pytest.mark.parametrize("partition", [None, 2])
def test_the_process_encodes_exactly_what_the_flows_thread_encodes(worker, partition):
    target, batches = _target(), _batches()
    expected = [thread_encoded(target, b, partition) for b in batches]
    got = list(worker.encode(iter(batches), target, CONSTANTS, partition, _nothing))
    assert len(got) == len(expected) == 5
    for a, b in zip(got, expected, strict=True):
        _same(a, b)
        assert a.source is not None and a.source.num_rows == len(b)  # rows stay at hand to name


def test_an_encode_error_is_named_as_the_thread_names_it_and_the_worker_goes_on(worker):
    target = _target()
    bad = _batches(3000, code="case when range = 1500 then 'much too long' else 'ok' end")
    with pytest.raises(EncodeError) as in_thread:
        for batch in bad:
            thread_encoded(target, batch, None)
    with pytest.raises(EncodeError) as in_process:
        for _ in worker.encode(iter(bad), target, CONSTANTS, None, _nothing):
            pass
    assert in_process.value.message == in_thread.value.message
    assert in_process.value.context == in_thread.value.context
    assert in_process.value.context["row"] == 500  # row 1500 is row 500 of the second batch
    assert "CODE" in str(in_process.value) and "SHOP.ORDERS" in str(in_process.value)
    good = _batches(2000)
    assert sum(len(b) for b in worker.encode(iter(good), target, CONSTANTS, None, _nothing)) == 2000


def test_truncations_made_in_the_process_count_on_the_flows_encoder(worker):
    target = _target(truncate=True)
    batches = _batches(3000, code="case when range % 1000 = 0 then 'much too long' else 'ok' end")
    list(worker.encode(iter(batches), target, CONSTANTS, None, _nothing))
    assert target.value_encoder.take_truncations() == {"CODE": 3}


def test_an_export_closed_early_leaves_the_worker_ready_for_the_next(worker):
    target, batches = _target(), _batches()
    export = worker.encode(iter(batches), target, CONSTANTS, None, _nothing)
    next(export)
    export.close()  # the caller failed to send (say): the batches already shipped are drained
    again = list(worker.encode(iter(batches), target, CONSTANTS, None, _nothing))
    for a, b in zip(again, [thread_encoded(target, b, None) for b in batches], strict=True):
        _same(a, b)


def test_a_reading_error_reaches_the_caller_and_the_worker_goes_on(worker):
    target, batches = _target(), _batches()

    def failing() -> Iterator[pa.RecordBatch]:
        yield from batches[:3]
        raise duckdb.ConversionException("Could not convert string 'x' to INT64")

    with pytest.raises(duckdb.ConversionException):
        list(worker.encode(failing(), target, CONSTANTS, None, _nothing))
    assert len(list(worker.encode(iter(batches), target, CONSTANTS, None, _nothing))) == 5


def test_a_killed_worker_fails_the_export_by_name_and_the_shared_one_is_replaced():
    EncoderProcess.close_shared()
    process = EncoderProcess.shared()
    while not process.ready():
        os.sched_yield()
    target, batches = _target(), _batches(20_000)
    export = process.encode(iter(batches), target, CONSTANTS, None, _nothing)
    next(export)
    os.kill(process.pid, signal.SIGKILL)
    with pytest.raises(ProduceError, match="encoder process exited .*transaction was aborted"):
        list(export)
    replaced = EncoderProcess.shared()
    assert replaced is not process and replaced.alive
    EncoderProcess.close_shared()


def test_an_export_moves_to_the_process_past_its_rows_and_keeps_its_order():
    EncoderProcess.close_shared()
    target, batches = _target(), _batches(40_000, 1000)
    steps: dict[str, float] = {}

    def timed(step: str, seconds: float) -> None:
        steps[step] = steps.get(step, 0.0) + seconds

    got = list(ExportEncoding(target, CONSTANTS, None, 2000, timed).batches(iter(batches)))
    expected = [thread_encoded(target, b, None) for b in batches]
    for a, b in zip(got, expected, strict=True):
        _same(a, b)
    assert "encode" in steps  # the first 2,000 rows at least, in this thread
    shared = EncoderProcess.shared()  # started past 2,000 rows: later exports use it at once
    while not shared.ready():
        os.sched_yield()
    steps.clear()
    list(ExportEncoding(target, CONSTANTS, None, 2000, timed).batches(iter(batches)))
    assert "encode_process" in steps and "encode" not in steps, steps
    steps.clear()
    list(ExportEncoding(target, CONSTANTS, None, None, timed).batches(iter(batches)))
    assert "encode" in steps and "encode_process" not in steps, steps  # -1: never
    EncoderProcess.close_shared()


def test_a_worker_that_cannot_start_leaves_exports_in_the_flows_thread(monkeypatch, caplog):
    EncoderProcess.close_shared()
    monkeypatch.setattr(sys, "executable", "/bin/false")  # the worker exits at once
    target, batches = _target(), _batches(3000)
    steps: dict[str, float] = {}

    def timed(step: str, seconds: float) -> None:
        steps[step] = steps.get(step, 0.0) + seconds

    broken = EncoderProcess.shared()
    while broken.alive:
        os.sched_yield()
    for _ in range(2):  # never ready, never started again: the flow's thread encodes
        got = list(ExportEncoding(target, CONSTANTS, None, 0, timed).batches(iter(batches)))
        for a, b in zip(got, [thread_encoded(target, b, None) for b in batches], strict=True):
            _same(a, b)
    assert EncoderProcess.shared() is broken and set(steps) == {"encode"}
    warnings = [r.getMessage() for r in caplog.records if "encoder process" in r.getMessage()]
    assert len(warnings) == 1 and "exited while starting (code 1)" in warnings[0], warnings
    EncoderProcess.close_shared()


def test_where_no_process_can_start_exports_stay_in_the_flows_thread(monkeypatch, caplog):
    EncoderProcess.close_shared()
    monkeypatch.setattr(encode_process, "_UNAVAILABLE", False)  # restored after the test
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")  # Popen cannot start it
    target, batches = _target(), _batches(3000)
    steps: dict[str, float] = {}

    def timed(step: str, seconds: float) -> None:
        steps[step] = steps.get(step, 0.0) + seconds

    for _ in range(2):
        got = list(ExportEncoding(target, CONSTANTS, None, 0, timed).batches(iter(batches)))
        assert sum(len(b) for b in got) == 3000
    assert set(steps) == {"encode"}
    warnings = [r.getMessage() for r in caplog.records if "no encoder process" in r.getMessage()]
    assert len(warnings) == 1 and "/nonexistent/python3" in warnings[0], warnings
