"""JSON events into DuckDB: from a real Kafka topic (read_committed, bounded) and from files."""

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import duckdb
import pytest
from confluent_kafka import Producer

from producer_lib.errors import ConfigError, SourceError
from producer_lib.settings import KafkaSettings
from producer_lib.sources.json_events import JsonColumns, JsonLinesReader, KafkaJsonReader

COLUMNS = {
    "order_id": "BIGINT",
    "status": "VARCHAR",
    "amount": "DECIMAL(12,2)",
    "changed_at": "TIMESTAMPTZ",
    "tags": "VARCHAR[]",
    "item": "STRUCT(sku VARCHAR, qty INTEGER)",
}
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def event(n, **fields):
    base = {
        "order_id": n,
        "status": "placed",
        "amount": f"{n}.25",
        "changed_at": (T0 + timedelta(minutes=n)).isoformat(),
        "tags": ["a", f"t{n}"],
        "item": {"sku": f"s{n}", "qty": n},
        "ignored": {"nested": True},
    }
    return {**base, **fields}


def produce(bootstrap, topic, events, *, partition=None, abort=False, raw=False):
    """Produce ``events`` in one transaction (committed unless ``abort``)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"test-json-{uuid.uuid4().hex}"}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i, item in enumerate(events):
        value = item if raw else json.dumps(item).encode()
        p = partition if partition is not None else i % 2
        producer.produce(topic, value=value, key=str(i).encode(), partition=p)
    producer.flush(30)
    if abort:
        producer.abort_transaction(30)
    else:
        producer.commit_transaction(30)


def load(bootstrap, topic, conn=None, **options):
    conn = conn or duckdb.connect()
    settings = KafkaSettings(bootstrap_servers=bootstrap)

    async def run():
        async with KafkaJsonReader(COLUMNS, settings, connection=conn, **options) as reader:
            await reader.load("EVENTS", topic, "SHOP", "SHOP")
            if options.get("group_id"):
                reader.commit_offsets()
            return reader

    return asyncio.run(run()), conn


def rows(conn):
    table = conn.sql(
        'SELECT order_id, status, amount, changed_at, tags FROM "EVENTS" ORDER BY order_id'
    ).to_arrow_table()  # Arrow: DuckDB's own datetime conversion needs pytz
    return [tuple(row.values()) for row in table.to_pylist()]


@pytest.mark.kafka
def test_committed_events_load_typed_and_aborted_ones_never(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=2)
    produce(
        kafka_bootstrap,
        topic,
        [event(1), event(2), event(3, status=None, tags=None), {"order_id": 4}],
    )
    produce(kafka_bootstrap, topic, [event(90), event(91)], abort=True)
    reader, conn = load(kafka_bootstrap, topic)
    got = rows(conn)
    assert [r[0] for r in got] == [1, 2, 3, 4]
    assert got[0][1:3] == ("placed", Decimal("1.25"))
    assert got[0][3] == T0 + timedelta(minutes=1)
    assert got[1][4] == ["a", "t2"]
    assert got[2][1] is None and got[2][4] is None  # JSON null -> NULL
    assert got[3][1:] == (None, None, None, None)  # missing fields -> NULL
    types = dict(
        conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = 'EVENTS'"
        ).fetchall()
    )
    assert types["amount"] == "DECIMAL(12,2)"
    assert types["changed_at"] == "TIMESTAMP WITH TIME ZONE"
    assert sum(reader.topic_range.ends.values()) == 6 + 4  # 2 markers, 2 aborted + 1 marker


@pytest.mark.kafka
@pytest.mark.slow
def test_the_group_continues_after_its_committed_offsets(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    produce(kafka_bootstrap, topic, [event(n) for n in range(1, 6)])
    _, first = load(kafka_bootstrap, topic, group_id=group)
    produce(kafka_bootstrap, topic, [event(n) for n in range(6, 9)])
    _, second = load(kafka_bootstrap, topic, group_id=group)
    _, third = load(kafka_bootstrap, topic, group_id=group)
    assert [r[0] for r in rows(first)] == [1, 2, 3, 4, 5]
    assert [r[0] for r in rows(second)] == [6, 7, 8]
    assert rows(third) == []


@pytest.mark.kafka
@pytest.mark.slow
def test_reads_from_given_offsets_or_from_a_timestamp(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    produce(kafka_bootstrap, topic, [event(n) for n in range(1, 4)], partition=0)
    cut = datetime.now(UTC)
    produce(kafka_bootstrap, topic, [event(n) for n in range(4, 6)], partition=0)
    _, by_offset = load(kafka_bootstrap, topic, start_offsets={0: 2})
    _, by_time = load(kafka_bootstrap, topic, start_time=cut)
    assert [r[0] for r in rows(by_offset)] == [3, 4, 5]
    assert [r[0] for r in rows(by_time)] == [4, 5]
    with pytest.raises(ConfigError):
        load(kafka_bootstrap, topic, start_offsets={0: 0}, start_time=cut)


@pytest.mark.kafka
def test_a_start_offset_outside_the_partition_names_it(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    produce(kafka_bootstrap, topic, [event(1)], partition=0)
    with pytest.raises(SourceError, match="outside the partition") as info:
        load(kafka_bootstrap, topic, start_offsets={0: 99})
    assert (info.value.topic, info.value.partition, info.value.offset) == (topic, 0, 99)


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("bad", "column", "json_type"),
    [
        ({"order_id": "seven"}, "order_id", "VARCHAR"),
        ({"order_id": 7.5}, "order_id", "DOUBLE"),
        ({"order_id": True}, "order_id", "BOOLEAN"),
        ({"amount": "1.255"}, "amount", "VARCHAR"),
        ({"changed_at": "yesterday"}, "changed_at", "VARCHAR"),
        ({"tags": "a,b"}, "tags", "VARCHAR"),
        ({"tags": {"a": 1}}, "tags", "OBJECT"),
        ({"item": {"sku": "s", "qty": "many"}}, "item", "OBJECT"),
        ({"item": {"sku": "s"}}, "item", "OBJECT"),
    ],
    ids=[
        "text-for-int",
        "fraction-for-int",
        "bool-for-int",
        "too-many-decimals",
        "bad-time",
        "text-for-list",
        "object-for-list",
        "bad-struct-field",
        "missing-struct-field",
    ],
)
def test_a_value_that_does_not_fit_names_topic_partition_offset_column(
    kafka_bootstrap, new_topic, bad, column, json_type
):
    topic = new_topic(partitions=1)
    produce(kafka_bootstrap, topic, [event(1), event(2), event(3, **bad), event(4)], partition=0)
    with pytest.raises(SourceError, match="does not fit") as info:
        load(kafka_bootstrap, topic)
    error = info.value
    assert (error.topic, error.partition, error.offset) == (topic, 0, 2)
    assert (error.column, error.duckdb_type, error.json_type) == (
        column,
        JsonColumns.declare(COLUMNS).columns[list(COLUMNS).index(column)][1],
        json_type,
    )


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("value", "message"),
    [
        (b"not json", "is not a JSON object"),
        (b"[1, 2]", "is not a JSON object"),
        (b"\xff\xfe{}", "is not a JSON object"),
        (None, "has no value"),
    ],
    ids=["not-json", "array", "not-utf8", "tombstone"],
)
def test_a_message_that_is_no_json_object_is_an_error(kafka_bootstrap, new_topic, value, message):
    topic = new_topic(partitions=1)
    values = [json.dumps(event(1)).encode(), value, json.dumps(event(3)).encode()]
    produce(kafka_bootstrap, topic, values, partition=0, raw=True)
    with pytest.raises(SourceError, match=message) as info:
        load(kafka_bootstrap, topic)
    assert (info.value.topic, info.value.partition, info.value.offset) == (topic, 0, 1)


@pytest.mark.kafka
def test_a_missing_topic_is_a_source_error(kafka_bootstrap):
    with pytest.raises(SourceError, match="does not exist"):
        load(kafka_bootstrap, f"t_missing_{uuid.uuid4().hex[:8]}", idle_timeout_s=5)


@pytest.mark.kafka
@pytest.mark.slow
def test_primary_key_is_checked_and_large_loads_arrive_in_batches(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=2)
    produce(kafka_bootstrap, topic, [event(n) for n in range(1, 2_001)])
    reader, conn = load(kafka_bootstrap, topic, primary_key=["order_id"], batch_size=300)
    assert conn.execute('SELECT count(*), count(DISTINCT order_id) FROM "EVENTS"').fetchone() == (
        2_000,
        2_000,
    )
    assert reader.table_schema.pks == ("order_id",)
    produce(kafka_bootstrap, topic, [event(5)])
    with pytest.raises(SourceError, match="uplicate"):
        load(kafka_bootstrap, topic, primary_key=["order_id"])


# -- JSON-lines files ---------------------------------------------------------------------


def write_lines(path, items):
    path.write_text(
        "".join((item if isinstance(item, str) else json.dumps(item)) + "\n" for item in items)
    )
    return path


def load_files(pattern, **options):
    conn = duckdb.connect()

    async def run():
        async with JsonLinesReader(COLUMNS, connection=conn, **options) as reader:
            await reader.load("EVENTS", str(pattern), "SHOP", "SHOP")
            return reader

    return asyncio.run(run()), conn


def test_json_lines_files_load_with_the_declared_types(tmp_path):
    write_lines(tmp_path / "a.jsonl", [event(1), event(2, amount=None)])
    write_lines(tmp_path / "b.jsonl", [{"order_id": 3}, "", event(4)])
    reader, conn = load_files(tmp_path / "*.jsonl", primary_key=["order_id"])
    got = rows(conn)
    assert [r[0] for r in got] == [1, 2, 3, 4]
    assert got[0][2:4] == (Decimal("1.25"), T0 + timedelta(minutes=1))
    assert got[1][2] is None
    assert got[2][1:] == (None, None, None, None)
    assert reader.table_schema.pks == ("order_id",)


@pytest.mark.parametrize(
    ("lines", "line", "column"),
    [
        ([event(1), "", event(2), event(3, amount="12.345")], 4, "amount"),
        ([event(1), event(2, order_id="x")], 2, "order_id"),
        ([event(1), event(2), event(3, order_id=3.5)], 3, "order_id"),
    ],
    ids=["decimal-after-blank-line", "text-for-int", "fraction-for-int"],
)
def test_a_misfit_in_a_file_names_file_line_and_column(tmp_path, lines, line, column):
    write_lines(tmp_path / "a.jsonl", [event(10)])
    bad = write_lines(tmp_path / "b.jsonl", lines)
    with pytest.raises(SourceError, match="does not fit") as info:
        load_files(tmp_path / "*.jsonl")
    assert (info.value.file, info.value.line, info.value.column) == (str(bad), line, column)


@pytest.mark.parametrize("bad_line", ["not json", "[1, 2]", '{"order_id": 1'])
def test_a_line_that_is_no_json_object_names_file_and_line(tmp_path, bad_line):
    bad = write_lines(tmp_path / "a.jsonl", [event(1), "", event(2), bad_line, event(3)])
    with pytest.raises(SourceError, match="not a JSON object") as info:
        load_files(bad)
    assert (info.value.file, info.value.line) == (str(bad), 4)


def test_an_unknown_type_or_key_column_is_named():
    with pytest.raises(SourceError, match="Not a DuckDB type") as info:
        JsonColumns.declare({"a": "BIGINT", "b": "NOPE"})
    assert (info.value.column, info.value.duckdb_type) == ("b", "NOPE")
    with pytest.raises(SourceError, match="not declared") as info:
        JsonColumns.declare({"a": "BIGINT"}, primary_key=["id"])
    assert info.value.column == "id"


@pytest.mark.kafka
def test_an_open_transaction_bounds_the_read_without_blocking_it(kafka_bootstrap, new_topic):
    topic = new_topic(partitions=1)
    produce(kafka_bootstrap, topic, [event(1), event(2)], partition=0)
    pending = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": f"test-json-{uuid.uuid4().hex}"}
    )
    pending.init_transactions(30)
    pending.begin_transaction()
    pending.produce(topic, value=json.dumps(event(3)).encode(), partition=0)
    pending.flush(30)
    try:
        reader, conn = load(kafka_bootstrap, topic, idle_timeout_s=10)
    finally:
        pending.abort_transaction(30)
    assert [r[0] for r in rows(conn)] == [1, 2]
    assert reader.topic_range.ends == {0: 3}  # the last stable offset: before the open one
