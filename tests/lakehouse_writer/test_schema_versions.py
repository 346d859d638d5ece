"""A table loaded twice with one column or its key changed: exact values, or a stopped table.

The probes of a hostile new user (issue "silent damage", items 1-3), through the public API:
the real :class:`KafkaProducer` publishes version 1 of each table and ``lakehouse-writer run
--once`` applies it; then version 2, with one thing changed, and another run. Before the
schema's identity told those versions apart, every one of them came out wrong without an
error: version 2's bytes were decoded with version 1's schema (``1.2345`` stored as ``123.45``,
a date stored as the day number, a changed key rejected row by row with the table running on).

Now a change the table can take (a narrower decimal, a timestamp's unit) stores exactly what was
sent; one it cannot (a scale that loses integer digits, ``int`` to ``date``, another key)
stops that table with an error naming the column or both keys, and ``status`` says so; a column
renamed only in case (``abc`` to ``ABC``) keeps its values in the table's column.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest

from lakehouse_writer.cli import main
from producer_lib.kafka import KafkaProducer
from producer_lib.schema import (
    AvroDate,
    AvroDecimal,
    AvroInt,
    AvroLong,
    AvroTimestamp,
    AvroTimestampMicros,
    AvroType,
    KeySchema,
    RowType,
    ValueSchema,
    create_key_row,
)
from producer_lib.settings import KafkaSettings
from tests.support.writer import once_argv

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

NAMESPACE = "PROBE"
NOON = datetime(2021, 6, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Change:
    """One table of the probe: its version 1 and 2, a row of each, and what must follow."""

    name: str
    v1: Callable[[], ValueSchema]
    v2: Callable[[], ValueSchema]
    row1: dict[str, Any]
    row2: dict[str, Any]
    stored: dict[str, Any] | None  # the second row as the table must hold it; None: stopped
    error: tuple[str, ...] = ()  # what the stop's error must name


def _table(
    name: str, column: tuple[str, AvroType] | None = None, keys: tuple[str, ...] = ("ID",)
) -> Callable[[], ValueSchema]:
    def make() -> ValueSchema:
        schema = ValueSchema(name, NAMESPACE)
        schema.add_field("ID", AvroLong(), nullable=False)
        schema.add_field("K", AvroLong(), nullable=False)
        if column is not None:
            schema.add_field(column[0], column[1])
        if keys:
            schema.add_primary_key(*keys)
        return schema

    return make


def _value(name: str, first: AvroType, second: AvroType, sent1: Any, sent2: Any, **more: Any):
    return Change(
        name,
        _table(name, ("V", first)),
        _table(name, ("V", second)),
        {"ID": 1, "K": 1, "V": sent1},
        {"ID": 2, "K": 2, "V": sent2},
        **more,
    )


def _key(name: str, new_keys: tuple[str, ...], shown: str) -> Change:
    return Change(
        name,
        _table(name),
        _table(name, keys=new_keys),
        {"ID": 1, "K": 1},
        {"ID": 2, "K": 2},
        None,
        ("primary key changed", "['ID']", shown),
    )


CHANGES = [
    _value(  # scale 2 -> 4 at precision 10 would lose two integer digits: not a widening
        "DEC_SCALE",
        AvroDecimal(10, 2),
        AvroDecimal(10, 4),
        Decimal("1.23"),
        Decimal("1.2345"),
        stored=None,
        error=("V", "decimal(10,2)", "decimal(10,4)"),
    ),
    _value(  # the table's decimal(10,4) holds every decimal(6,1)
        "DEC_NARROW",
        AvroDecimal(10, 4),
        AvroDecimal(6, 1),
        Decimal("1.2345"),
        Decimal("12345.6"),
        stored={"V": Decimal("12345.6000")},
    ),
    _value(
        "TS_UNIT",
        AvroTimestamp(),
        AvroTimestampMicros(),
        NOON,
        NOON,
        stored={"V": NOON.replace(tzinfo=None)},  # Spark gives UTC (the session's zone) naive
    ),
    _value(
        "INT_TO_DATE",
        AvroInt(),
        AvroDate(),
        7,
        date(2021, 2, 3),
        stored=None,
        error=("V", "int", "date"),
    ),
    _key("KEY_WIDER", ("ID", "K"), "['ID', 'K']"),
    _key("KEY_OTHER", ("K",), "['K']"),
    _key("KEY_NONE", (), "[]"),
    Change(
        "CASE_ONLY",
        _table("CASE_ONLY", ("abc", AvroLong())),
        _table("CASE_ONLY", ("ABC", AvroLong())),
        {"ID": 1, "K": 1, "abc": 10},
        {"ID": 2, "K": 2, "ABC": 20},
        stored={"abc": 20},
    ),
]


def _publish(settings: KafkaSettings, topics: dict[str, str], version: int, run: str) -> None:
    """Version ``version`` of every table, one row each, in one transaction."""
    with KafkaProducer("PROBE", f"probe_{run}", "test", "dev", settings) as producer:
        for change in CHANGES:
            schema = change.v1() if version == 1 else change.v2()
            row = change.row1 if version == 1 else change.row2
            topic = topics[change.name]
            target = producer.add_target(topic, change.name, KeySchema(schema), schema)
            key = create_key_row(row, target.key_schema)
            producer.produce_row(target, key, row, RowType.UPSERT)
        producer.commit()


def _stored(spark: Any, lake: Any, change: Change) -> dict[str, Any] | None:
    """The table's row of ID 2, by the columns ``change.stored`` names; None: no such row."""
    frame = spark.read.format("delta").load(str(lake / NAMESPACE / change.name))
    assert change.stored is not None
    found = frame.filter("ID = 2").select(*change.stored).collect()
    return found[0].asDict() if found else None


@pytest.mark.parametrize("small_merge_rows", [0, 100], ids=["spark", "driver"])
def test_a_changed_schema_stores_what_was_sent_or_stops_the_table(
    spark, kafka_bootstrap, kafka_admin, tmp_path, monkeypatch, capsys, small_merge_rows
):
    # both engines: Spark's MERGE (0), and the driver's small-table path (delta-rs)
    monkeypatch.setenv("LAKEHOUSE_SMALL_MERGE_ROWS", str(small_merge_rows))
    monkeypatch.delenv("LAKEHOUSE_SCHEMAS_TOPIC", raising=False)
    run = uuid.uuid4().hex[:8]
    topics = {c.name: f"t_probe_{run}_{c.name}" for c in CHANGES}
    settings = KafkaSettings(bootstrap_servers=kafka_bootstrap)
    lake, checkpoint = tmp_path / "lake", tmp_path / "ckpt"
    argv = once_argv(lake, checkpoint, f"t_probe_{run}_.*", kafka_bootstrap)
    try:
        _publish(settings, topics, 1, run)
        assert main(argv) == 0
        _publish(settings, topics, 2, run)
        assert main(argv) == 0
        capsys.readouterr()
        status = main(["status", "--lakehouse", str(lake), "--checkpoint", str(checkpoint)])
        report = capsys.readouterr().out
    finally:
        for future in kafka_admin.delete_topics(list(topics.values())).values():
            future.result(timeout=60)

    stopped = [c for c in CHANGES if c.stored is None]
    assert status == 1  # a stopped table is a problem the scheduler sees
    for change in stopped:
        line = next((x for x in report.splitlines() if f"{NAMESPACE}.{change.name}:" in x), "")
        assert all(part in line for part in change.error), (change.name, report)
    for change in CHANGES:
        if change.stored is not None:
            assert _stored(spark, lake, change) == change.stored, change.name
    for change in stopped:  # nothing of version 2 reached a stopped table
        rows = spark.read.format("delta").load(str(lake / NAMESPACE / change.name)).count()
        assert rows == 1, change.name
