"""Benchmark: KafkaProducer.produce_from_duckdb against its ceiling and a naive floor.

Run: ``.venv/bin/python bench/produce.py [--rows N] [--naive-rows M] [--compare-rss]``

A child process generates a TPC-H lineitem table of N rows (DuckDB's ``dbgen``, tpch
extension from the duckdb-extension-tpch wheel) into a DuckDB database file in a temporary
directory and exits. The benchmark process opens that file read-only, with DuckDB's memory
bounded (``--duckdb-memory-limit``, two threads), so every phase streams the table from disk.
With the same transactional, idempotent, acks=all producer configuration in every phase:

(a) ``produce_from_duckdb`` + ``commit`` (read, encode, frame, partition, produce), with the
    encoder process already running (its start-up, once per Python process, is reported
    apart as ``encoder_start_s``; docs/OPERATIONS.md, "Where a flow's time goes");
(b) ceiling: a tight ``produce()`` loop over the very same pre-encoded key/value bytes;
(c) floor: DuckDB rows as Python dicts, fastavro ``schemaless_writer`` per row, produce.

Memory. ``rss_before_mb`` is the resident set when (a) starts: interpreter, numpy, pyarrow,
DuckDB, fastavro, and what an untimed warm-up run (200k rows) left behind. ``peak_rss_mb`` is
the peak resident set during (a) alone: the kernel's high-water mark (VmHWM) is reset just
before (a) and read right after its commit, and (a) runs before (b) materialises the encoded
rows (``rss_increase_mb`` = peak - before). It covers the Arrow batches read from DuckDB, the
encoded batches (at most two at a time), librdkafka's queue (bounded by
``queue.buffering.max.kbytes``) and DuckDB's buffer pool, which keeps the table blocks it has
read until it reaches its memory limit (``duckdb_memory_mb``: what DuckDB holds after (a); the
default limit, 32MB, is about the size of the 1M-row table). Table generation is not in it.
The queries stream (``WHERE rowid < n`` rather than ``LIMIT n``, which buffers).

``encoder_peak_rss_mb`` is the encoder process's own peak (its lifetime: start-up and (a)).

``--compare-rss`` also runs warm-up and phase (a) alone on 1M and on 3M rows, each in a
fresh process, and adds to the result ``rss_1m_mb`` and ``rss_3m_mb`` (their
``peak_rss_mb``), ``rss_growth_ratio`` (3M / 1M: close to 1.0 when memory does not grow
with the table), ``rss_growth_mb`` (3M - 1M), and per size the ``rss_before``,
``rss_increase``, ``duckdb_memory``, process-lifetime peak (``max_rss``: start-up, warm-up
and (a)) and rows/s of (a). Peaks are read from /proc (VmHWM), not ru_maxrss: Linux carries
a parent's high-water mark over fork and exec into the child's ru_maxrss, so a child of a
big parent would report the parent's peak.

The broker is ``KAFKA_BOOTSTRAP_SERVERS``, else the devstack broker (started, and stopped
again, when not running). Last line: ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import duckdb
import fastavro
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from producer_lib.kafka import KafkaProducer  # noqa: E402
from producer_lib.kafka._encode_process import EncoderProcess  # noqa: E402
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
DUCKDB_MEMORY_LIMIT = "32MB"  # DuckDB caches the blocks it reads up to its limit: keep it small
DUCKDB_THREADS = 2  # the cores of the machine the figures were taken on
COMPARE_SIZES = (("1m", 1_000_000), ("3m", 3_000_000))
COLUMNS = [
    ("l_orderkey", AvroLong(), False),
    ("l_linenumber", AvroInt(), False),
    ("l_partkey", AvroLong(), True),
    ("l_suppkey", AvroLong(), True),
    ("l_quantity", AvroDecimal(15, 2), True),
    ("l_extendedprice", AvroDecimal(15, 2), True),
    ("l_discount", AvroDecimal(15, 2), True),
    ("l_shipdate", AvroDate(), True),
    ("l_shipmode", AvroVarchar(10), True),
    ("l_comment", AvroNVarchar(44), True),
]


# -- the table: generated in a child process, streamed from disk here ----------------------


def generate_table(path: Path, rows: int) -> None:
    """Child process: write table ``BENCH`` of ``rows`` lineitem rows into database ``path``.

    dbgen builds all eight TPC-H tables in memory; that memory dies with this process.
    """
    import duckdb_extension_tpch

    con = duckdb.connect()
    ext = Path(duckdb_extension_tpch.__file__).parent / "extensions"
    con.execute(f"LOAD '{next(ext.glob('*/tpch.duckdb_extension'))}'")
    scale = max(0.01, math.ceil(rows / LINEITEM_ROWS_PER_SF * 102) / 100)
    con.execute(f"CALL dbgen(sf={scale})")
    names = ", ".join(name for name, _, _ in COLUMNS)
    con.execute(f"ATTACH '{path}' AS out")
    con.execute(f"CREATE TABLE out.BENCH AS SELECT {names} FROM lineitem LIMIT {rows}")
    con.execute("DETACH out")
    con.close()


def make_table(workdir: str, rows: int) -> Path:
    """Generate the table in a child process; the database file it wrote."""
    path = Path(workdir) / "bench.duckdb"
    cmd = [sys.executable, __file__, "--generate", str(path), "--rows", str(rows)]
    subprocess.run(cmd, check=True)
    return path


def open_table(path: Path, memory_limit: str) -> duckdb.DuckDBPyConnection:
    """The generated database, read-only, with DuckDB's memory and threads bounded."""
    config = {"memory_limit": memory_limit, "threads": str(DUCKDB_THREADS)}
    return duckdb.connect(str(path), read_only=True, config=config)


def make_schema() -> ValueSchema:
    schema = ValueSchema("LINEITEM", "TPCH")
    for name, avro_type, nullable in COLUMNS:
        schema.add_field(name, avro_type, nullable=nullable)
    schema.add_primary_key("l_orderkey", "l_linenumber")
    return schema


# -- memory -------------------------------------------------------------------------------


def reset_peak_rss() -> None:
    """Reset the kernel's peak-RSS mark (VmHWM), so the next peak is this phase's own."""
    Path("/proc/self/clear_refs").write_text("5")


def rss_mb(field: str = "VmHWM", pid: int | None = None) -> float:
    """Peak (VmHWM) or current (VmRSS) resident set size of this process (or ``pid``) in MiB."""
    for line in Path(f"/proc/{pid or 'self'}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def duckdb_mb(con: duckdb.DuckDBPyConnection) -> float:
    """Memory DuckDB's buffer manager holds (cached blocks, buffers) in MiB."""
    used = con.sql("SELECT sum(memory_usage_bytes) FROM duckdb_memory()").fetchone()
    return (used[0] or 0) / 2**20 if used else 0.0


# -- phases -------------------------------------------------------------------------------


def start_encoder() -> float:
    """Start the process-wide encoder and wait until it is ready; its start-up seconds."""
    started = time.perf_counter()
    encoder = EncoderProcess.shared()
    while not encoder.ready():
        time.sleep(0.005)
    return time.perf_counter() - started


def warm_up(settings: KafkaSettings, admin: AdminClient, con, schema: ValueSchema) -> None:
    """Untimed: let the broker's JVM warm up so phase (a) is not the one paying for it."""
    topic = f"bench_produce_warm_{uuid.uuid4().hex[:6]}"
    try:
        producer = KafkaProducer(
            "TPCH", "bench_warm", "bench", "bench", settings, duckdb_connection=con
        )
        with producer:
            target = producer.add_target(topic, "LINEITEM", KeySchema(schema), schema)
            query = f"SELECT * FROM BENCH WHERE rowid < {WARM_UP_ROWS}"  # streams; LIMIT buffers
            producer.produce_from_duckdb(query, target, BATCH_SIZE, RowType.REPLACE)
            producer.commit()
    finally:
        admin.delete_topics([topic])


def phase_a(settings: KafkaSettings, con, schema: ValueSchema, topic: str):
    producer = KafkaProducer(
        "TPCH", f"bench_a_{uuid.uuid4().hex[:6]}", "bench", "bench", settings, duckdb_connection=con
    )
    with producer:
        target = producer.add_target(topic, "LINEITEM", KeySchema(schema), schema, PARTITIONS)
        started = time.perf_counter()
        rows = producer.produce_from_duckdb("BENCH", target, BATCH_SIZE, RowType.REPLACE)
        producer.commit()
        elapsed = time.perf_counter() - started
        txn_time = producer._last_time
    return elapsed, target, rows, txn_time


def measure_a(settings: KafkaSettings, con, schema: ValueSchema, topic: str):
    """Phase (a) with its own peak RSS; its figures, target and transaction time."""
    before, earlier_peak = rss_mb("VmRSS"), rss_mb()
    reset_peak_rss()
    secs, target, rows, txn_time = phase_a(settings, con, schema, topic)
    peak = rss_mb()
    figures = {
        "rows": rows,
        "produce_from_duckdb_rows_per_s": round(rows / secs),
        "peak_rss_mb": round(peak, 1),
        "rss_before_mb": round(before, 1),
        "rss_increase_mb": round(peak - before, 1),
        "max_rss_mb": round(max(peak, earlier_peak), 1),
        "duckdb_memory_mb": round(duckdb_mb(con), 1),
    }
    return figures, target, txn_time


def _raw_producer(settings: KafkaSettings, extra: dict | None = None) -> Producer:
    conf = {
        **PRODUCER_DEFAULTS,
        **settings.to_librdkafka(),
        **(extra or {}),
        "transactional.id": f"bench-{uuid.uuid4().hex}",
    }
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
        messages.extend(
            (kb[ko[i] : ko[i + 1]], vb[vo[i] : vo[i + 1]], parts[i]) for i in range(len(parts))
        )
    return messages


def phase_b(settings: KafkaSettings, messages, topic: str) -> float:
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


def phase_c(settings: KafkaSettings, con, schema: ValueSchema, topic: str, rows: int) -> float:
    producer = _raw_producer(settings, {"partitioner": "murmur2_random"})
    key_schema = fastavro.parse_schema(KeySchema(schema).to_avro_json())
    value_schema = fastavro.parse_schema(schema.to_avro_json())
    technical = {
        "__change_type": "R",
        "__change_time": time.time_ns() // 1000,
        "__source_system": "TPCH",
    }
    started = time.perf_counter()
    producer.begin_transaction()
    cursor = con.execute(f"SELECT * FROM BENCH WHERE rowid < {rows}")
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


def ceiling_and_floor(
    settings, admin, con, schema, a: dict, target, txn_time, topics, naive_rows: int
) -> dict:
    """Phases (b) and (c) after (a), and the ratios of (a) to each."""
    messages = pre_encode(con, target, txn_time)
    admin.create_topics([_new_topic(topic) for topic in topics])
    time.sleep(2)
    secs_b = phase_b(settings, messages, topics[0])
    rows_b = len(messages)
    del messages
    naive = min(naive_rows, a["rows"])
    secs_c = phase_c(settings, con, schema, topics[1], naive)
    rate_a, rate_b, rate_c = a["produce_from_duckdb_rows_per_s"], rows_b / secs_b, naive / secs_c
    return {
        "raw_produce_rows_per_s": round(rate_b),
        "naive_rows_per_s": round(rate_c),
        "ratio_raw": round(rate_a / rate_b, 3),
        "ratio_naive": round(rate_a / rate_c, 2),
        "naive_rows_measured": naive,
    }


def run(bootstrap: str, rows: int, naive_rows: int | None, memory_limit: str) -> dict:
    """Generate the table, warm up, then (a) and, unless ``naive_rows`` is None, (b), (c)."""
    settings = KafkaSettings(bootstrap_servers=bootstrap, topic_partitions=PARTITIONS)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [f"bench_produce_{p}_{uuid.uuid4().hex[:6]}" for p in "abc"]
    schema = make_schema()
    with tempfile.TemporaryDirectory(prefix="bench_produce_") as workdir:
        con = open_table(make_table(workdir, rows), memory_limit)
        try:
            warm_up(settings, admin, con, schema)
            encoder_start_s = start_encoder()
            result, target, txn_time = measure_a(settings, con, schema, topics[0])
            result["encoder_start_s"] = round(encoder_start_s, 2)
            result["encoder_peak_rss_mb"] = round(rss_mb(pid=EncoderProcess.shared().pid), 1)
            if naive_rows is not None:
                result |= ceiling_and_floor(
                    settings, admin, con, schema, result, target, txn_time, topics[1:], naive_rows
                )
        finally:
            admin.delete_topics(topics)
            con.close()
    return result | {"duckdb_memory_limit": memory_limit}


# -- RSS at two table sizes, each in a fresh process ---------------------------------------


def phase_a_child(bootstrap: str, rows: int, memory_limit: str) -> dict[str, Any]:
    """Run warm-up and (a) alone on ``rows`` rows in a fresh process; its RESULT."""
    cmd = [
        sys.executable,
        __file__,
        "--phase-a-only",
        "--rows",
        str(rows),
        "--duckdb-memory-limit",
        memory_limit,
    ]
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    last = [line for line in out.splitlines() if line.startswith("RESULT ")][-1]
    return json.loads(last.removeprefix("RESULT "))


def compare_rss(bootstrap: str, memory_limit: str) -> dict[str, Any]:
    """Peak RSS of (a) at 1M and 3M rows, and how much it grew."""
    result: dict[str, Any] = {}
    for label, rows in COMPARE_SIZES:
        child = phase_a_child(bootstrap, rows, memory_limit)
        result |= {
            f"rss_{label}_mb": child["peak_rss_mb"],
            f"rss_before_{label}_mb": child["rss_before_mb"],
            f"rss_increase_{label}_mb": child["rss_increase_mb"],
            f"max_rss_{label}_mb": child["max_rss_mb"],
            f"duckdb_memory_{label}_mb": child["duckdb_memory_mb"],
            f"rows_per_s_{label}": child["produce_from_duckdb_rows_per_s"],
        }
    small, large = (result[f"rss_{label}_mb"] for label, _ in COMPARE_SIZES)
    result["rss_growth_ratio"] = round(large / small, 3)
    result["rss_growth_mb"] = round(large - small, 1)
    return result


# -- command line -------------------------------------------------------------------------


def _new_topic(name: str) -> NewTopic:
    return NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # fmt: off
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--naive-rows", type=int, default=200_000,
                        help="rows timed for the naive floor (it is slow; rate is per row)")
    parser.add_argument("--compare-rss", action="store_true",
                        help="also measure (a)'s peak RSS at 1M and 3M rows, in fresh processes")
    parser.add_argument("--duckdb-memory-limit", default=DUCKDB_MEMORY_LIMIT,
                        help="DuckDB memory_limit of the benchmark process")
    parser.add_argument("--phase-a-only", action="store_true",
                        help="only warm-up and (a) (what --compare-rss runs per size)")
    parser.add_argument("--generate", type=Path, metavar="DB",
                        help="internal: write the table into database file DB and exit")
    # fmt: on
    return parser.parse_args(argv)


def benchmark(bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    limit = args.duckdb_memory_limit
    if args.phase_a_only:
        return run(bootstrap, args.rows, None, limit)
    result = run(bootstrap, args.rows, args.naive_rows, limit)
    return result | (compare_rss(bootstrap, limit) if args.compare_rss else {})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.generate is not None:
        generate_table(args.generate, args.rows)
        return 0
    logging.basicConfig(level=logging.WARNING)
    from devstack import broker

    with broker.bootstrap_servers() as bootstrap:
        result = benchmark(bootstrap, args)
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
