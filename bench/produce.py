"""Benchmark: KafkaProducer.produce_from_duckdb against its ceiling and a naive floor.

Run: ``.venv/bin/python bench/produce.py [--rows N] [--naive-rows M]``

On a TPC-H lineitem table of N rows in DuckDB (tpch extension from the
duckdb-extension-tpch wheel), with the same transactional, idempotent, acks=all producer
configuration in every phase:

(a) ``produce_from_duckdb`` + ``commit`` (read, encode, frame, partition, produce);
(b) ceiling: a tight ``produce()`` loop over the very same pre-encoded key/value bytes;
(c) floor: DuckDB rows as Python dicts, fastavro ``schemaless_writer`` per row, produce.

The broker is ``KAFKA_BOOTSTRAP_SERVERS``, else the devstack broker (started, and stopped
again, when not running). ``peak_rss_mb`` is the peak RSS after phase (a), before (b)
materialises every encoded row (DuckDB keeps the table in a temporary file, so the table
itself is not in RSS; ``rss_before_mb`` is the RSS when (a) starts). Last line: ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path

import duckdb
import fastavro
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from producer_lib.kafka import KafkaProducer  # noqa: E402
from producer_lib.kafka._target import Target  # noqa: E402
from producer_lib.kafka.config import PRODUCER_DEFAULTS  # noqa: E402
from producer_lib.kafka.partitioner import partitions_for_keys  # noqa: E402
from producer_lib.schema import (  # noqa: E402
    AvroDate,
    AvroDecimal,
    AvroInt,
    AvroLong,
    AvroNVarchar,
    AvroVarchar,
    KeySchema,
    RowType,
    ValueSchema,
)
from producer_lib.settings import KafkaSettings  # noqa: E402

LINEITEM_ROWS_PER_SF = 6_001_215
BATCH_SIZE = 50_000
PARTITIONS = 3
WARM_UP_ROWS = 200_000
COLUMNS = [
    ("l_orderkey", AvroLong(), False), ("l_linenumber", AvroInt(), False),
    ("l_partkey", AvroLong(), True), ("l_suppkey", AvroLong(), True),
    ("l_quantity", AvroDecimal(15, 2), True), ("l_extendedprice", AvroDecimal(15, 2), True),
    ("l_discount", AvroDecimal(15, 2), True), ("l_shipdate", AvroDate(), True),
    ("l_shipmode", AvroVarchar(10), True), ("l_comment", AvroNVarchar(44), True),
]  # fmt: skip


def make_table(con: duckdb.DuckDBPyConnection, rows: int) -> None:
    import duckdb_extension_tpch

    ext = Path(duckdb_extension_tpch.__file__).parent / "extensions"
    con.execute(f"LOAD '{next(ext.glob('*/tpch.duckdb_extension'))}'")
    scale = max(0.01, math.ceil(rows / LINEITEM_ROWS_PER_SF * 102) / 100)
    con.execute(f"CALL dbgen(sf={scale})")
    names = ", ".join(name for name, _, _ in COLUMNS)
    con.execute(f"CREATE TABLE BENCH AS SELECT {names} FROM lineitem LIMIT {rows}")
    for table in ("lineitem", "orders", "partsupp", "part", "customer", "supplier"):
        con.execute(f"DROP TABLE {table}")


def make_schema() -> ValueSchema:
    schema = ValueSchema("LINEITEM", "TPCH")
    for name, avro_type, nullable in COLUMNS:
        schema.add_field(name, avro_type, nullable=nullable)
    schema.add_primary_key("l_orderkey", "l_linenumber")
    return schema


def reset_peak_rss() -> None:
    """Reset the kernel's peak-RSS mark (VmHWM), so the next peak is this phase's own."""
    Path("/proc/self/clear_refs").write_text("5")


def rss_mb(field: str = "VmHWM") -> float:
    """Peak (VmHWM) or current (VmRSS) resident set size of this process in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def phase_a(settings, con, schema, topic) -> tuple[float, Target, int, int]:
    producer = KafkaProducer("TPCH", f"bench_a_{uuid.uuid4().hex[:6]}", "bench", "bench",
                             settings, duckdb_connection=con)  # fmt: skip
    with producer:
        target = producer.add_target(topic, "LINEITEM", KeySchema(schema), schema, PARTITIONS)
        started = time.perf_counter()
        rows = producer.produce_from_duckdb("BENCH", target, BATCH_SIZE, RowType.REPLACE)
        producer.commit()
        elapsed = time.perf_counter() - started
        txn_time = producer._last_time
    return elapsed, target, rows, txn_time


def _raw_producer(settings: KafkaSettings, extra: dict | None = None) -> Producer:
    conf = {**PRODUCER_DEFAULTS, **settings.to_librdkafka(), **(extra or {}),
            "transactional.id": f"bench-{uuid.uuid4().hex}"}  # fmt: skip
    producer = Producer(conf)
    producer.init_transactions(30)
    return producer


def pre_encode(con, target: Target, txn_time: int) -> list[tuple[bytes, bytes, int]]:
    messages = []
    values = {"__change_type": "R", "__change_time": txn_time, "__source_system": "TPCH"}
    for batch in con.sql("SELECT * FROM BENCH").to_arrow_reader(BATCH_SIZE):
        kbuf, kofs = target.key_encoder.encode_buffer(batch, {}, target.key_header)
        vbuf, vofs = target.value_encoder.encode_buffer(batch, values, target.value_header)
        parts = partitions_for_keys(kbuf, kofs, PARTITIONS).tolist()
        kb, vb, ko, vo = kbuf.tobytes(), vbuf.tobytes(), kofs.tolist(), vofs.tolist()
        messages.extend((kb[ko[i]:ko[i + 1]], vb[vo[i]:vo[i + 1]], parts[i])
                        for i in range(len(parts)))  # fmt: skip
    return messages


def phase_b(settings, messages, topic) -> float:
    producer = _raw_producer(settings)
    started = time.perf_counter()
    producer.begin_transaction()
    produce, poll = producer.produce, producer.poll
    for key, value, partition in messages:
        while True:
            try:
                produce(topic, value, key, partition)
                break
            except BufferError:
                poll(0.05)
    producer.commit_transaction(120)
    return time.perf_counter() - started


def phase_c(settings, con, schema, topic, rows: int) -> float:
    producer = _raw_producer(settings, {"partitioner": "murmur2_random"})
    key_schema = fastavro.parse_schema(KeySchema(schema).to_avro_json())
    value_schema = fastavro.parse_schema(schema.to_avro_json())
    technical = {"__change_type": "R", "__change_time": time.time_ns() // 1000,
                 "__source_system": "TPCH"}  # fmt: skip
    started = time.perf_counter()
    producer.begin_transaction()
    cursor = con.execute(f"SELECT * FROM BENCH LIMIT {rows}")
    names = [d[0] for d in cursor.description]
    while chunk := cursor.fetchmany(10_000):
        for values in chunk:
            row = dict(zip(names, values, strict=True)) | technical
            key, value = io.BytesIO(), io.BytesIO()
            fastavro.schemaless_writer(key, key_schema, row)
            fastavro.schemaless_writer(value, value_schema, row)
            while True:
                try:
                    producer.produce(topic, value.getvalue(), key.getvalue())
                    break
                except BufferError:
                    producer.poll(0.05)
    producer.commit_transaction(120)
    return time.perf_counter() - started


def run(bootstrap: str, rows: int, naive_rows: int, workdir: str) -> dict:
    settings = KafkaSettings(bootstrap_servers=bootstrap, topic_partitions=PARTITIONS)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [f"bench_produce_{p}_{uuid.uuid4().hex[:6]}" for p in "abc"]
    con = duckdb.connect(str(Path(workdir) / "bench.duckdb"))  # table on disk, not in RSS
    make_table(con, rows)
    schema = make_schema()
    try:
        warm_up(settings, admin, con, schema)
        before = rss_mb("VmRSS")
        reset_peak_rss()
        secs_a, target, produced, txn_time = phase_a(settings, con, schema, topics[0])
        peak = rss_mb()
        messages = pre_encode(con, target, txn_time)
        admin.create_topics([_new_topic(topics[1]), _new_topic(topics[2])])
        time.sleep(2)
        secs_b = phase_b(settings, messages, topics[1])
        del messages
        naive = min(naive_rows, rows)
        secs_c = phase_c(settings, con, schema, topics[2], naive)
    finally:
        admin.delete_topics(topics)
    a, b, c = produced / secs_a, rows / secs_b, naive / secs_c
    return {"rows": produced, "produce_from_duckdb_rows_per_s": round(a),
            "raw_produce_rows_per_s": round(b), "naive_rows_per_s": round(c),
            "ratio_raw": round(a / b, 3), "ratio_naive": round(a / c, 2),
            "peak_rss_mb": round(peak, 1), "rss_before_mb": round(before, 1),
            "naive_rows_measured": naive}  # fmt: skip


def warm_up(settings, admin, con, schema) -> None:
    """Untimed: let the broker's JVM warm up so phase (a) is not the one paying for it."""
    topic = f"bench_produce_warm_{uuid.uuid4().hex[:6]}"
    try:
        con.execute(f"CREATE TABLE WARM AS SELECT * FROM BENCH LIMIT {WARM_UP_ROWS}")
        producer = KafkaProducer("TPCH", "bench_warm", "bench", "bench", settings,
                                 duckdb_connection=con)  # fmt: skip
        with producer:
            target = producer.add_target(topic, "LINEITEM", KeySchema(schema), schema)
            producer.produce_from_duckdb("WARM", target, BATCH_SIZE, RowType.REPLACE)
            producer.commit()
    finally:
        con.execute("DROP TABLE IF EXISTS WARM")
        admin.delete_topics([topic])


def _new_topic(name: str):
    from confluent_kafka.admin import NewTopic

    return NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--naive-rows",
        type=int,
        default=200_000,
        help="rows timed for the naive floor (it is slow; rate is per row)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    layout, started_here = None, False
    if not bootstrap:
        from devstack import broker

        started_here = broker.status() is None
        layout = broker.up()
        bootstrap = layout.bootstrap
    try:
        with tempfile.TemporaryDirectory(prefix="bench_produce_") as workdir:
            result = run(bootstrap, args.rows, args.naive_rows, workdir)
    finally:
        if started_here and layout is not None:
            from devstack import broker

            broker.down(layout)
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
