"""Benchmark: the lakehouse writer against a plain Spark append, and its commit latency.

Run: ``.venv/bin/python bench/writer.py [--rows N] [--changes M] [--commits K] [--repeats R]
[--no-merge] [--verbose]``

The real producer (``produce_from_duckdb``) writes TPC-H lineitem rows (DuckDB ``dbgen``) to a
fresh 3-partition topic. One ``local[2]`` SparkSession (the writer's) is started first and
reused; an untimed warm-up runs both Spark paths over the load once (a JVM's first run of a
million rows is up to 1.6x slower than its next ones). Timed, in this order:

(a) one transaction TRUNCATE + N REPLACE rows, applied by ``job.run(once=True)`` on a fresh
    lakehouse and checkpoint (query start to drained);
(b) baseline: the same topic read by Spark (read_committed, availableNow, the writer's
    ``fetch.max.wait.ms``), ``from_avro`` after the single-object header, plain Delta append;
    ``ratio`` = rows/s of (a) / (b). (a) and (b) run R times, alternating (the baseline alone
    moves by 10-25 % from run to run); their figures are the medians, every run is listed in
    ``initial_load_runs_s`` and ``append_baseline_runs_s``;
(m) (a) with the REPLACE fast path off, so the rows go through MERGE (``--no-merge``: skip);
(c) one transaction of M changes (60 % updates, 20 % deletes of random stored keys, 20 %
    inserts), applied by the writer with the checkpoint of (a);
(d) the writer runs continuously (1 s trigger); K transactions of 10 new rows are committed
    one at a time, each once the writer finished the last batch: seconds from ``commit()``
    returning until the table's Delta log holds a version with the rows (p50, p99, max),
    and until the writer's status file shows that batch done (``batch_done_p50_s``).

``*_operations``: the Delta operations of a run, from the table's log (the fast path writes
``WRITE``, not ``MERGE``). Row counts are checked after (a) and (c). The broker is
``KAFKA_BOOTSTRAP_SERVERS``, else the devstack broker (started, and stopped again, when not
running). Last line: ``RESULT {json}``, the HEADLINE figures first.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devstack import broker  # noqa: E402
from lakehouse_writer.engines.spark.engine import SparkEngine  # noqa: E402
from lakehouse_writer.read import decode as read  # noqa: E402
from lakehouse_writer.runtime.session import build_spark_session  # noqa: E402
from lakehouse_writer.runtime.status import read_status  # noqa: E402
from lakehouse_writer.settings import LakehouseSettings  # noqa: E402
from lakehouse_writer.stream import job  # noqa: E402
from lakehouse_writer.tables.manager import TableRef  # noqa: E402
from producer_lib import schema as ps  # noqa: E402
from producer_lib.kafka import KafkaProducer, Target  # noqa: E402
from producer_lib.schema import KeySchema, RowType, ValueSchema  # noqa: E402
from producer_lib.settings import KafkaSettings  # noqa: E402
from producer_lib.staging import load_packaged_extension  # noqa: E402

log = logging.getLogger("bench.writer")

LINEITEM_ROWS_PER_SF = 6_001_215
PARTITIONS = 3
BATCH_SIZE = 50_000
LATENCY_ROWS = 10  # rows per commit of phase (d)
TRIGGER_S = 1.0
POLL_S = 0.02
VISIBLE_TIMEOUT_S = 120.0
INSERT_KEY_OFFSET = 1_000_000_000  # new order keys of (c): above every TPC-H key at these scales
LATENCY_KEY_OFFSET = 2_000_000_000  # new order keys of (d)
SINGLE_OBJECT_HEADER = 10  # 0xC3 0x01 + 8-byte fingerprint
DUCKDB_CONFIG = {"threads": "2"}  # the cores of the machine the figures were taken on
COLUMNS = [
    ("l_orderkey", ps.AvroLong(), False),
    ("l_linenumber", ps.AvroInt(), False),
    ("l_partkey", ps.AvroLong(), True),
    ("l_suppkey", ps.AvroLong(), True),
    ("l_quantity", ps.AvroDecimal(15, 2), True),
    ("l_extendedprice", ps.AvroDecimal(15, 2), True),
    ("l_discount", ps.AvroDecimal(15, 2), True),
    ("l_shipdate", ps.AvroDate(), True),
    ("l_shipmode", ps.AvroVarchar(10), True),
    ("l_comment", ps.AvroNVarchar(44), True),
]
NAMES = ", ".join(name for name, _, _ in COLUMNS)
HEADLINE = (
    "initial_load_rows_per_s",
    "append_baseline_rows_per_s",
    "ratio",
    "changes_rows_per_s",
    "latency_p50_s",
    "latency_p99_s",
)


def make_schema() -> ValueSchema:
    schema = ValueSchema("LINEITEM", "TPCH")
    for name, avro_type, nullable in COLUMNS:
        schema.add_field(name, avro_type, nullable=nullable)
    schema.add_primary_key("l_orderkey", "l_linenumber")
    return schema


def change_counts(changes: int) -> tuple[int, int, int]:
    """(updates, inserts, deletes) of a change set: 60 %, 20 %, the rest."""
    updates, inserts = changes * 6 // 10, changes * 2 // 10
    return updates, inserts, changes - updates - inserts


def make_tables(rows: int, changes: int, commits: int) -> duckdb.DuckDBPyConnection:
    """In memory: BENCH (``rows`` lineitem rows), UPD and DEL (a random sample of its keys:
    new payload / last image), INS and LAT (its rows under new order keys)."""
    con = duckdb.connect(config=DUCKDB_CONFIG)
    load_packaged_extension(con, "tpch")
    con.execute(f"CALL dbgen(sf={max(0.01, math.ceil(rows / LINEITEM_ROWS_PER_SF * 102) / 100)})")
    con.execute(f"CREATE TABLE BENCH AS SELECT {NAMES} FROM lineitem LIMIT {rows}")
    others = [t for (t,) in con.execute("SHOW TABLES").fetchall() if t != "BENCH"]
    con.execute("".join(f"DROP TABLE {t};" for t in others))  # the rest of dbgen's output
    updates, inserts, deletes = change_counts(changes)
    con.execute(
        f"CREATE TABLE PICKED AS SELECT * FROM BENCH "
        f"USING SAMPLE reservoir({updates + deletes} ROWS) REPEATABLE (7)"
    )
    con.execute(
        f"CREATE TABLE UPD AS SELECT * REPLACE (CAST(l_quantity + 1 AS DECIMAL(15, 2)) "
        f"AS l_quantity, 'updated by bench' AS l_comment) FROM PICKED "
        f"WHERE rowid < {updates}"
    )
    con.execute(f"CREATE TABLE DEL AS SELECT * FROM PICKED WHERE rowid >= {updates}")
    latency_rows = (commits + 1) * LATENCY_ROWS
    for table, offset, count in (
        ("INS", INSERT_KEY_OFFSET, inserts),
        ("LAT", LATENCY_KEY_OFFSET, latency_rows),
    ):
        con.execute(
            f"CREATE TABLE {table} AS SELECT * REPLACE (l_orderkey + {offset} "
            f"AS l_orderkey) FROM BENCH WHERE rowid < {count}"
        )
    return con


def produce_load(producer: KafkaProducer, target: Target, table: str) -> float:
    """One transaction: a whole-table TRUNCATE, then every row of ``table`` as REPLACE."""
    started = time.perf_counter()
    truncate = ps.create_truncate_row(target.value_schema, None)
    key = ps.create_key_row(truncate, target.key_schema)
    producer.produce_row(target, key, truncate, RowType.TRUNCATE, partition=0)
    producer.produce_from_duckdb(table, target, BATCH_SIZE, RowType.REPLACE)
    producer.commit()
    return time.perf_counter() - started


def delta_commits(table: str, after: int = -1) -> list[dict[str, Any]]:
    """The ``commitInfo`` of every version of ``table`` after ``after``, oldest first.

    Versions count from 0 without gaps, so ``len(delta_commits(table)) - 1`` is the latest.
    """
    infos = []
    for path in sorted((Path(table) / "_delta_log").glob("[0-9]*.json")):
        if path.stem.isdigit() and int(path.stem) > after:
            for line in path.read_text().splitlines():
                entry = json.loads(line)
                if "commitInfo" in entry:
                    infos.append({"version": int(path.stem), **entry["commitInfo"]})
    return infos


def rows_written(infos: list[dict[str, Any]]) -> int:
    """Rows inserted (MERGE) or appended (WRITE) by these commits (Spark's or delta-rs's)."""
    metrics = [(i.get("operation"), i.get("operationMetrics", {})) for i in infos]
    return sum(
        int(m.get("numTargetRowsInserted", m.get("num_target_rows_inserted", 0)))
        if op == "MERGE"
        else int(m.get("numOutputRows", m.get("num_added_rows", 0)))
        if op == "WRITE"
        else 0
        for op, m in metrics
    )


def writer_settings(bootstrap: str, root: str, topic: str) -> LakehouseSettings:
    return LakehouseSettings(
        **{
            "LAKEHOUSE_PATH": f"{root}/lake",
            "LAKEHOUSE_CHECKPOINT_PATH": f"{root}/checkpoint",
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "LAKEHOUSE_TOPICS_REGEX": topic,
            "LAKEHOUSE_TRIGGER_INTERVAL_S": TRIGGER_S,
        }
    )


def run_writer_once(spark: Any, settings: LakehouseSettings) -> float:
    """``lakehouse-writer run --once`` in this session; seconds from start to drained."""
    started = time.perf_counter()
    job.run(spark, settings, once=True)
    return time.perf_counter() - started


def run_baseline(spark: Any, bootstrap: str, topic: str, schema: ValueSchema, root: str) -> float:
    """Kafka → ``from_avro`` → plain Delta append (availableNow); seconds."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    body = F.expr(f"substring(value, {SINGLE_OBJECT_HEADER + 1})")  # the Avro body
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .option("kafka.isolation.level", "read_committed")
        # the writer's fetch wait too: the ratio is about the writer's work, not a setting
        .option("kafka.fetch.max.wait.ms", read.SOURCE_DEFAULTS["kafka.fetch.max.wait.ms"])
        .load()
    )
    rows = source.select(from_avro(body, json.dumps(schema.to_avro_json())).alias("r"))
    started = time.perf_counter()
    query = (
        rows.select("r.*")
        .writeStream.format("delta")
        .trigger(availableNow=True)
        .option("checkpointLocation", f"{root}/checkpoint")
        .start(f"{root}/table")
    )
    query.awaitTermination()
    return time.perf_counter() - started


def count_rows(spark: Any, path: str, expected: int, phase: str) -> None:
    found = spark.read.format("delta").load(path).count()
    if found != expected:
        raise RuntimeError(f"phase {phase}: table {path} holds {found} rows, expected {expected}")


def warm_up(spark: Any, schema: ValueSchema, bootstrap: str, work: str, topic: str) -> None:
    """Untimed: both Spark paths over the whole load (JIT, heap; a JVM's first run is slow)."""
    run_writer_once(spark, writer_settings(bootstrap, f"{work}/warm", topic))
    run_baseline(spark, bootstrap, topic, schema, f"{work}/warm_baseline")


def phase_load(
    spark: Any, settings: LakehouseSettings, schema: ValueSchema, rows: int, name: str
) -> dict[str, Any]:
    """(a) or (m): the writer applies the initial load on a fresh lakehouse."""
    one_pass = _OnePassSeen()
    logging.getLogger("lakehouse_writer.engines.spark.reload").addHandler(one_pass)
    try:
        secs = run_writer_once(spark, settings)
    finally:
        logging.getLogger("lakehouse_writer.engines.spark.reload").removeHandler(one_pass)
    path = TableRef.of(schema).path(settings.lakehouse_path)
    count_rows(spark, path, rows, name)
    ops = [info.get("operation", "?") for info in delta_commits(path)]
    log.info(
        "%s: %d rows in %.1f s, delta operations %s, written in one pass: %s",
        name,
        rows,
        secs,
        ops,
        one_pass.seen,
    )
    return {
        f"{name}_rows_per_s": round(rows / secs),
        f"{name}_s": round(secs, 2),
        f"{name}_operations": ops,
        f"{name}_one_pass": one_pass.seen,
    }


class _OnePassSeen(logging.Handler):
    """Whether the writer logged a reload written in one pass
    (lakehouse_writer.engines.spark.reload)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen = False

    def emit(self, record: logging.LogRecord) -> None:
        self.seen = self.seen or "one_pass=True" in record.getMessage()


def phase_changes(
    spark: Any,
    producer: KafkaProducer,
    target: Target,
    settings: LakehouseSettings,
    rows: int,
    changes: int,
) -> dict[str, Any]:
    """(c): the change set, applied by the writer with the checkpoint of (a)."""
    path = TableRef.of(target.value_schema).path(settings.lakehouse_path)
    before, started = len(delta_commits(path)) - 1, time.perf_counter()
    for table, row_type in (
        ("UPD", RowType.UPDATE),
        ("INS", RowType.INSERT),
        ("DEL", RowType.DELETE),
    ):
        producer.produce_from_duckdb(table, target, BATCH_SIZE, row_type)
    producer.commit()  # one transaction
    produce_s = time.perf_counter() - started
    secs = run_writer_once(spark, settings)
    _, inserts, deletes = change_counts(changes)
    count_rows(spark, path, rows + inserts - deletes, "changes")
    ops = [info.get("operation", "?") for info in delta_commits(path, before)]
    log.info("changes: %d rows in %.1f s, delta operations %s", changes, secs, ops)
    return {
        "changes_s": round(secs, 2),
        "changes_rows_per_s": round(changes / secs),
        "changes_operations": ops,
        "produce_changes_s": round(produce_s, 2),
    }


def commit_and_wait(
    producer: KafkaProducer,
    target: Target,
    settings: LakehouseSettings,
    n: int,
    writer: threading.Thread,
) -> tuple[float, float]:
    """Commit small transaction ``n``; seconds until in the Delta log, and until batch done."""
    path = TableRef.of(target.value_schema).path(settings.lakehouse_path)
    checkpoint, before = settings.checkpoint_path, len(delta_commits(path)) - 1
    last_batch = (read_status(checkpoint) or {}).get("last_batch_id", -1)
    query = f"SELECT {NAMES} FROM LAT WHERE rowid // {LATENCY_ROWS} = {n}"
    producer.produce_from_duckdb(query, target, LATENCY_ROWS, RowType.INSERT)
    producer.commit()
    committed, visible = time.monotonic(), None
    while time.monotonic() < committed + VISIBLE_TIMEOUT_S and writer.is_alive():
        if visible is None and rows_written(delta_commits(path, before)) >= LATENCY_ROWS:
            visible = time.monotonic() - committed
        batch = (read_status(checkpoint) or {}).get("last_batch_id", -1)
        if visible is not None and batch > last_batch:
            return visible, time.monotonic() - committed
        time.sleep(POLL_S)
    raise RuntimeError(
        f"phase d: commit {n} not applied to {path} (visible after {visible} s)"
        f"; writer running: {writer.is_alive()}"
    )


def phase_latency(
    spark: Any, producer: KafkaProducer, target: Target, settings: LakehouseSettings, commits: int
) -> dict[str, Any]:
    """(d): small commits against the running writer (1 s trigger)."""
    stop, failure = threading.Event(), []

    def writer() -> None:
        try:
            job.run(spark, settings, once=False, stop=stop)
        except Exception as exc:  # reported by the main thread
            failure.append(exc)

    thread = threading.Thread(target=writer, name="bench-writer", daemon=True)
    thread.start()
    try:
        commit_and_wait(producer, target, settings, commits, thread)  # untimed: query start
        times = [commit_and_wait(producer, target, settings, n, thread) for n in range(commits)]
    finally:
        stop.set()
        thread.join(VISIBLE_TIMEOUT_S)
    if failure:
        raise RuntimeError("phase d: the writer failed") from failure[0]
    log.info(
        "latency over %d commits (visible, batch done): %s",
        commits,
        [(round(v, 1), round(d, 1)) for v, d in times],
    )
    visible, done = np.array(times).T
    p50, p99, top = np.percentile(visible, [50, 99, 100]).round(2).tolist()
    return {
        "latency_p50_s": p50,
        "latency_p99_s": p99,
        "latency_max_s": top,
        "batch_done_p50_s": round(float(np.median(done)), 2),
    }


def phases(
    spark: Any,
    producer: KafkaProducer,
    args: argparse.Namespace,
    bootstrap: str,
    work: str,
    topic: str,
) -> dict[str, Any]:
    """Warm-up, then (a), (b), (m), (c), (d) on the same topic."""
    schema = make_schema()
    target = producer.add_target(topic, "LINEITEM", KeySchema(schema), schema, PARTITIONS)
    produce_s = produce_load(producer, target, "BENCH")
    log.info("load produced: %d rows in %.1f s", args.rows, produce_s)
    warm_up(spark, schema, bootstrap, work, topic)
    loads, bases = [], []
    for i in range(args.repeats):  # alternating: a slow spell of the machine hits both
        settings = writer_settings(bootstrap, f"{work}/writer{i}", topic)
        loads.append(phase_load(spark, settings, schema, args.rows, "initial_load"))
        bases.append(run_baseline(spark, bootstrap, topic, schema, f"{work}/baseline{i}"))
        log.info("append_baseline: %d rows in %.1f s", args.rows, bases[-1])
    result = dict(sorted(loads, key=lambda r: r["initial_load_s"])[len(loads) // 2])  # median
    base_s = float(np.median(bases))
    result |= {
        "append_baseline_rows_per_s": round(args.rows / base_s),
        "append_baseline_s": round(base_s, 2),
        "ratio": round(base_s / result["initial_load_s"], 3),
        "initial_load_runs_s": [r["initial_load_s"] for r in loads],
        "append_baseline_runs_s": [round(b, 2) for b in bases],
        "initial_load_fast_path": "MERGE" not in result["initial_load_operations"],
        "rows": args.rows,
        "produce_load_s": round(produce_s, 2),
    }
    if args.merge:
        result |= compare_merge(
            bootstrap, work, topic, spark, schema, args.rows, result["initial_load_s"]
        )
    result |= phase_changes(spark, producer, target, settings, args.rows, args.changes)
    return result | phase_latency(spark, producer, target, settings, args.commits)


def compare_merge(
    bootstrap: str, work: str, topic: str, spark: Any, schema: ValueSchema, rows: int, fast_s: float
) -> dict[str, Any]:
    """(m): (a) on a fresh lakehouse with the Spark engine's ``is_empty`` always False."""
    is_empty = SparkEngine.is_empty
    SparkEngine.is_empty = lambda self, table: False  # type: ignore[method-assign]
    try:
        settings = writer_settings(bootstrap, f"{work}/merged", topic).model_copy(
            update={"reload_one_pass_min_rows": 0}  # the MERGE, not the one-pass append
        )
        merged = phase_load(spark, settings, schema, rows, "merge_forced")
    finally:
        SparkEngine.is_empty = is_empty  # type: ignore[method-assign]
    return merged | {"fast_path_speedup": round(merged["merge_forced_s"] / fast_s, 2)}


def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete the benchmark's topic, waiting for the broker (best effort: a warning if not)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the broker answers
    try:
        admin.delete_topics([topic])[topic].result(30)
    except (KafkaException, TimeoutError) as exc:
        log.warning("topic %s not deleted: %s", topic, exc)


def run(bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    """Generate the tables, start Spark, run every phase; the figures."""
    tag = uuid.uuid4().hex[:8]
    topic = f"bench_writer_{tag}"
    settings = KafkaSettings(bootstrap_servers=bootstrap, topic_partitions=PARTITIONS)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_writer_") as work:
        con = make_tables(args.rows, args.changes, args.commits)
        spark = build_spark_session(app_name="bench-writer")
        spark.sparkContext.setLogLevel("ERROR")
        producer = KafkaProducer(
            "TPCH", f"bench_writer_{tag}", "bench", "bench", settings, duckdb_connection=con
        )
        try:
            with producer:
                result = phases(spark, producer, args, bootstrap, work, topic)
        finally:
            delete_topic(bootstrap, topic)
            spark.stop()
            con.close()
    headline = {key: result[key] for key in HEADLINE}
    return (
        headline
        | result
        | {
            "changes": args.changes,
            "commits": args.commits,
            "load_avg_1m_before": round(load_before, 2),
            "load_avg_1m_after": round(os.getloadavg()[0], 2),
        }
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # fmt: off
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the initial load")
    parser.add_argument("--changes", type=int, default=100_000,
                        help="rows of the change set (60%% U, 20%% I, 20%% D)")
    parser.add_argument("--commits", type=int, default=50, help="small commits timed in (d)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of (a) and of (b), alternating; the medians are reported")
    parser.add_argument("--no-merge", dest="merge", action="store_false",
                        help="skip (m), the initial load with the REPLACE fast path off")
    parser.add_argument("--verbose", action="store_true",
                        help="log the writer's own lines (per batch and table, with times)")
    # fmt: on
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    updates, inserts, deletes = change_counts(args.changes)
    if max(updates + deletes, inserts, (args.commits + 1) * LATENCY_ROWS) > args.rows:
        parser.error("--changes and --commits take their rows from the load: raise --rows")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    log.setLevel(logging.INFO)
    logging.getLogger("lakehouse_writer.engines.spark.reload").setLevel(
        logging.INFO
    )  # one pass or not
    if args.verbose:
        logging.getLogger("lakehouse_writer").setLevel(logging.INFO)
    with broker.bootstrap_servers() as bootstrap:
        result = run(bootstrap, args)
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
