"""Benchmark: the lakehouse writer over many small tables (a whole source system).

Run: ``.venv/bin/python bench/tables.py [--tables N] [--rows R] [--partitions P]
[--latency-seconds S] [--event-log DIR] [--conf KEY=VALUE] [--verbose]``

N tables (default 100) of R rows (default 2,000), each with its own value schema and its own
topic (P partitions, default 1), go through the real producer (``KafkaProducer``) to the
broker; then the writer drains them as ``lakehouse-writer run --once`` does
(``job.run(once=True)``, in this process, one ``local[2]`` SparkSession started before the
timing; its start is reported apart as ``spark_start_s``):

(a) one transaction: per table a whole-table TRUNCATE, then its R rows as REPLACE; the writer
    drains it into a fresh lakehouse (``initial_drain_s``: query start to drained);
(b) one transaction: per table 10 UPDATEs of stored keys and 2 DELETEs; the writer drains it
    with the checkpoint of (a) (``delta_drain_s``; ``s_per_table_delta`` = that / N).

After each drain every table's Delta log is checked: (a) wrote R rows into each table, (b)
updated 10 and deleted 2 in each. ``steps_*``: the writer's own seconds per step of a batch
(scan, small, decode, apply, system, state), summed over the batches of the drain.

(c) a steady stream: for S seconds (default 60; 0 skips it) a transaction a second, each
    updating 10 rows in each of 10 tables drawn at random, while a continuous writer (1 s
    trigger, the checkpoint of (b)) runs. ``latency_p50_s``/``latency_p99_s``: from the
    producer's commit to the commit's row in ``_commits`` (written once all its rows are
    applied), polled every 0.2 s or less. A commit still not visible 120 s after the stream
    ends counts with the time it waited (``latency_not_visible`` says how many: the
    percentiles are then lower bounds).

``--storage azurite`` puts the lakehouse on Azurite (the Azure Storage emulator's Blob API,
``wasb://`` through hadoop-azure, ``az://`` through delta-rs; the checkpoint stays local), to see
what object storage costs beside a local disk; (c) is not run there.
``--event-log DIR`` keeps Spark's event log there (which jobs a table's apply runs);
``--conf KEY=VALUE`` sets a Spark setting of the writer's session, to compare settings (the
result names them). The broker is ``KAFKA_BOOTSTRAP_SERVERS``, else the devstack broker.
Figures go to ``docs/PERFORMANCE.md``. Last line: ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import re
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from devstack import broker  # noqa: E402
from lakehouse_writer.read.catalog import SCHEMAS_TOPIC  # noqa: E402
from lakehouse_writer.runtime.session import build_spark_session  # noqa: E402
from lakehouse_writer.runtime.storage import delta_rs_path, is_local  # noqa: E402
from lakehouse_writer.settings import LakehouseSettings  # noqa: E402
from lakehouse_writer.stream import job  # noqa: E402
from lakehouse_writer.tables.manager import TableRef  # noqa: E402
from producer_lib import schema as ps  # noqa: E402
from producer_lib.kafka import KafkaProducer, Target  # noqa: E402
from producer_lib.schema import KeySchema, RowType, ValueSchema  # noqa: E402
from producer_lib.settings import KafkaSettings  # noqa: E402

log = logging.getLogger("bench.tables")

UPDATES, DELETES = 10, 2  # changed rows per table in (b)
AZURITE_PORT = 10000  # hadoop-azure's emulator mode knows no other
LATENCY_TABLES = 10  # tables a transaction of (c) updates (UPDATES rows each)
LATENCY_TIMEOUT_S = 120.0
BATCH_SIZE = 10_000
COLUMNS = [
    ("id", ps.AvroLong(), False),
    ("name", ps.AvroVarchar(40), True),
    ("qty", ps.AvroInt(), True),
    ("price", ps.AvroDecimal(12, 2), True),
    ("day", ps.AvroDate(), True),
    ("note", ps.AvroNVarchar(60), True),
]
SOURCE_SQL = (
    "SELECT i::BIGINT AS id, 'name ' || i AS name, (i % 97)::INT AS qty, "
    "(i * 1.25)::DECIMAL(12, 2) AS price, DATE '2024-01-01' + (i % 365)::INT AS day, "
    "'row ' || i AS note FROM range({rows}) t(i)"
)
HEADLINE = (
    "tables",
    "initial_drain_s",
    "delta_drain_s",
    "s_per_table_delta",
    "latency_p50_s",
    "latency_p99_s",
)
_STEPS = re.compile(r"batch (done|applied) .* steps=(\S+)")


def make_schema(namespace: str, index: int) -> ValueSchema:
    """The value schema of table ``index``: six columns, key ``id``."""
    schema = ValueSchema(f"T{index:04d}", namespace)
    for name, avro_type, nullable in COLUMNS:
        schema.add_field(name, avro_type, nullable=nullable)
    schema.add_primary_key("id")
    return schema


def make_source(rows: int) -> duckdb.DuckDBPyConnection:
    """SRC (``rows`` rows), UPD (10 of its keys, new note) and DEL (2 other keys)."""
    con = duckdb.connect(config={"threads": "2"})
    con.execute("CREATE TABLE SRC AS " + SOURCE_SQL.format(rows=rows))
    con.execute(
        f"CREATE TABLE UPD AS SELECT * REPLACE ('changed ' || id AS note) FROM SRC "
        f"WHERE id % 10 = 7 ORDER BY id LIMIT {UPDATES}"
    )
    con.execute(
        f"CREATE TABLE DEL AS SELECT * FROM SRC WHERE id % 10 = 3 ORDER BY id LIMIT {DELETES}"
    )
    return con


def produce_initial(producer: KafkaProducer, targets: list[Target]) -> float:
    """(a)'s transaction: per table a whole-table TRUNCATE, then every SRC row as REPLACE."""
    started = time.perf_counter()
    for target in targets:
        truncate = ps.create_truncate_row(target.value_schema, None)
        key = ps.create_key_row(truncate, target.key_schema)
        producer.produce_row(target, key, truncate, RowType.TRUNCATE, partition=0)
        producer.produce_from_duckdb("SRC", target, BATCH_SIZE, RowType.REPLACE)
    producer.commit()
    return time.perf_counter() - started


def produce_delta(producer: KafkaProducer, targets: list[Target]) -> float:
    """(b)'s transaction: per table 10 UPDATEs and 2 DELETEs."""
    started = time.perf_counter()
    for target in targets:
        producer.produce_from_duckdb("UPD", target, BATCH_SIZE, RowType.UPDATE)
        producer.produce_from_duckdb("DEL", target, BATCH_SIZE, RowType.DELETE)
    producer.commit()
    return time.perf_counter() - started


class CommitsSeen:
    """When each commit id first appears in the lakehouse's ``_commits`` table.

    ``_commits`` gets a commit's row once every row of it is applied: the moment it is
    visible. Read from the table's log and new Parquet files (it is append-only), no Spark.
    """

    def __init__(self, lakehouse: str) -> None:
        self._table = Path(lakehouse) / "_commits"
        self._next = 0  # the first log version not read yet
        self.seen: dict[str, float] = {}

    def poll(self) -> None:
        """Record the commit ids of the files the versions since the last poll added."""
        now = time.monotonic()
        while (log_file := self._table / "_delta_log" / f"{self._next:020d}.json").exists():
            for line in log_file.read_text().splitlines():
                add = json.loads(line).get("add")
                if add is not None:
                    ids = pq.read_table(self._table / add["path"], columns=["commit_id"])
                    for commit_id in ids.column(0).to_pylist():
                        self.seen.setdefault(commit_id, now)
            self._next += 1


def phase_latency(
    spark: Any,
    producer: KafkaProducer,
    targets: list[Target],
    settings: LakehouseSettings,
    seconds: float,
) -> dict[str, Any]:
    """(c): a transaction a second, each updating rows of 10 random tables, against a running
    writer (1 s trigger); commit-to-visible per transaction."""
    stop, failure = threading.Event(), []
    running = settings.model_copy(update={"trigger_interval_s": 1})

    def writer() -> None:
        try:
            job.run(spark, running, once=False, stop=stop)
        except Exception as exc:  # reported below
            failure.append(exc)

    thread = threading.Thread(target=writer, name="bench-writer", daemon=True)
    thread.start()
    seen, committed = CommitsSeen(settings.lakehouse_path), {}
    chooser = random.Random(7)
    try:
        ends = time.monotonic() + seconds
        while time.monotonic() < ends and thread.is_alive():
            started = time.monotonic()
            for target in chooser.sample(targets, min(LATENCY_TABLES, len(targets))):
                producer.produce_from_duckdb("UPD", target, BATCH_SIZE, RowType.UPDATE)
            commit_id = producer.commit()
            committed[commit_id] = time.monotonic()
            seen.poll()
            time.sleep(max(0.0, 1.0 - (time.monotonic() - started)))
        deadline = time.monotonic() + LATENCY_TIMEOUT_S
        while set(committed) - set(seen.seen) and time.monotonic() < deadline:
            seen.poll()
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(LATENCY_TIMEOUT_S)
    if failure:
        raise RuntimeError("phase latency: the writer failed") from failure[0]
    # A commit not visible by the end counts with the time it had waited: a lower bound.
    ended = time.monotonic()
    latency = sorted(seen.seen.get(c, ended) - t for c, t in committed.items())
    p50, p99 = (latency[min(len(latency) - 1, int(q * len(latency)))] for q in (0.5, 0.99))
    return {
        "latency_p50_s": round(p50, 2),
        "latency_p99_s": round(p99, 2),
        "latency_max_s": round(latency[-1], 2),
        "latency_commits": len(latency),
        "latency_not_visible": len(set(committed) - set(seen.seen)),
    }


def last_commits(table: str, after: int) -> list[dict[str, Any]]:
    """The ``commitInfo`` of the versions of ``table`` after ``after``, oldest first."""
    if not is_local(table):  # object storage: delta-rs reads the log
        where = delta_rs_path(table)
        assert where is not None, table
        history = where.open().history()
        return sorted((h for h in history if h["version"] > after), key=lambda h: h["version"])
    infos = []
    for path in sorted((Path(table) / "_delta_log").glob("[0-9]*.json")):
        if path.stem.isdigit() and int(path.stem) > after:
            for line in path.read_text().splitlines():
                entry = json.loads(line)
                if "commitInfo" in entry:
                    infos.append({"version": int(path.stem), **entry["commitInfo"]})
    return infos


def _camel(name: str) -> str:
    """Spark's name of a delta-rs operation metric (``num_added_rows`` -> ``numOutputRows``)."""
    first, *rest = name.split("_")
    camel = first + "".join(part.capitalize() for part in rest)
    return {"numAddedRows": "numOutputRows"}.get(camel, camel)


def check_tables(
    paths: list[str], after: dict[str, int], phase: str, expect: dict[str, int]
) -> dict[str, int]:
    """Check the metrics each table's new commits add up to; return each table's version."""
    versions = {}
    for path in paths:
        infos = last_commits(path, after.get(path, -1))
        found: dict[str, int] = {}
        for info in infos:
            for name, value in info.get("operationMetrics", {}).items():
                name = _camel(name)  # delta-rs names them num_target_rows_updated, ...
                found[name] = found.get(name, 0) + int(value)
        for name, value in expect.items():
            if found.get(name, 0) != value:
                raise RuntimeError(
                    f"phase {phase}: table {path}: {name}={found.get(name, 0)}, "
                    f"expected {value} (commits {infos})"
                )
        versions[path] = max((i["version"] for i in infos), default=after.get(path, -1))
    return versions


def checked(
    spark: Any,
    settings: LakehouseSettings,
    paths: list[str],
    after: dict[str, int],
    phase: str,
    expect: dict[str, int],
) -> dict[str, int]:
    """:func:`check_tables`; on a failure, with the first ``_rejected`` reasons in the error."""
    try:
        return check_tables(paths, after, phase, expect)
    except RuntimeError as exc:
        rejected = f"{settings.lakehouse_path}/_rejected"
        if is_local(rejected) and not Path(rejected).exists():
            raise
        reasons = spark.read.format("delta").load(rejected).select("error").distinct().take(3)
        raise RuntimeError(f"{exc}; rejected: {[r.error for r in reasons]}") from exc


class StepTimes(logging.Handler):
    """Adds up the writer's ``steps=`` figures over the batches of a drain.

    Those of ``batch done`` lines (a batch's steps) by their name, those of ``batch applied``
    lines (one table's apply) as ``table.<name>``.
    """

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.batches = 0
        self.steps: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        match = _STEPS.search(record.getMessage())
        if match is None:
            return
        done = match.group(1) == "done"
        self.batches += done
        for item in match.group(2).split(","):
            name, _, secs = item.partition(":")
            if secs:
                name = name if done else f"table.{name}"
                self.steps[name] = round(self.steps.get(name, 0.0) + float(secs), 2)

    def take(self) -> dict[str, Any]:
        """The sums since the last take, and the number of batches."""
        taken = {"batches": self.batches, **self.steps}
        self.batches, self.steps = 0, {}
        return taken


def drain(spark: Any, settings: LakehouseSettings) -> float:
    """``lakehouse-writer run --once`` in this session; seconds from start to drained."""
    started = time.perf_counter()
    job.run(spark, settings, once=True)
    return time.perf_counter() - started


def run(bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    """Produce, drain, produce the changes, drain again; the figures."""
    tag = uuid.uuid4().hex[:8]
    prefix = f"bench_tables_{tag}_"
    namespace = f"B{tag}"
    topics = [f"{prefix}{i:04d}" for i in range(args.tables)]
    kafka = KafkaSettings(bootstrap_servers=bootstrap, topic_partitions=args.partitions)
    load_before = os.getloadavg()[0]
    settings_given = dict(item.split("=", 1) for item in args.conf)  # --conf
    steps = StepTimes()
    logging.getLogger("lakehouse_writer").addHandler(steps)
    with tempfile.TemporaryDirectory(prefix="bench_tables_") as work, storage(args, work) as lake:
        con = make_source(args.rows)
        producer = KafkaProducer(
            "BENCH", f"bench_tables_{tag}", "bench", "bench", kafka, duckdb_connection=con
        )
        conf = dict(settings_given) | lake.conf
        if args.event_log:
            conf |= {"spark.eventLog.enabled": "true", "spark.eventLog.dir": args.event_log}
        started = time.perf_counter()
        spark = build_spark_session(app_name="bench-tables", conf=conf)
        spark.sparkContext.setLogLevel("ERROR")
        result: dict[str, Any] = {"spark_start_s": round(time.perf_counter() - started, 2)}
        settings = LakehouseSettings(
            **{
                "LAKEHOUSE_PATH": lake.path,
                "LAKEHOUSE_CHECKPOINT_PATH": f"{work}/checkpoint",
                "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
                "LAKEHOUSE_TOPICS_REGEX": f"{prefix}.*|_commits",
                # where the producer's catalog is (the writer's default may still name the old one)
                "LAKEHOUSE_SCHEMAS_TOPIC": SCHEMAS_TOPIC,
            }
        )
        try:
            with producer:
                started = time.perf_counter()
                targets = [
                    producer.add_target(topic, f"T{i:04d}", KeySchema(s), s)
                    for i, (topic, s) in enumerate(
                        (t, make_schema(namespace, i)) for i, t in enumerate(topics)
                    )
                ]
                result["add_targets_s"] = round(time.perf_counter() - started, 2)
                result["produce_initial_s"] = round(produce_initial(producer, targets), 2)
                paths = [TableRef.of(t.value_schema).path(settings.lakehouse_path) for t in targets]
                secs = drain(spark, settings)
                result["initial_drain_s"] = round(secs, 2)
                result["steps_initial"] = steps.take()
                versions = checked(
                    spark, settings, paths, {}, "initial", {"numOutputRows": args.rows}
                )
                log.info("initial drain: %d tables in %.1f s", args.tables, secs)
                result["produce_delta_s"] = round(produce_delta(producer, targets), 2)
                secs = drain(spark, settings)
                result["delta_drain_s"] = round(secs, 2)
                result["steps_delta"] = steps.take()
                checked(
                    spark,
                    settings,
                    paths,
                    versions,
                    "delta",
                    {"numTargetRowsUpdated": UPDATES, "numTargetRowsDeleted": DELETES},
                )
                log.info("delta drain: %d tables in %.1f s", args.tables, secs)
                if args.latency_seconds:
                    result |= phase_latency(
                        spark, producer, targets, settings, args.latency_seconds
                    )
                    result["steps_latency"] = steps.take()
        finally:
            logging.getLogger("lakehouse_writer").removeHandler(steps)
            delete_topics(bootstrap, topics)
            spark.stop()
            con.close()
    result.setdefault("latency_p50_s", None)  # --latency-seconds 0: not measured
    result.setdefault("latency_p99_s", None)
    result |= {
        "tables": args.tables,
        "rows_per_table": args.rows,
        "partitions": args.partitions,
        "conf": settings_given,
        "storage": args.storage,
        "s_per_table_initial": round(result["initial_drain_s"] / args.tables, 3),
        "s_per_table_delta": round(result["delta_drain_s"] / args.tables, 3),
        "load_avg_1m_before": round(load_before, 2),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
    }
    return {key: result[key] for key in HEADLINE} | result


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    """Delete the benchmark's topics (best effort: a warning for those that stay)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for topic, future in admin.delete_topics(topics).items():
        try:
            future.result(30)
        except (KafkaException, TimeoutError) as exc:
            log.warning("topic %s not deleted: %s", topic, exc)


@dataclass
class Lake:
    """Where the bench's lakehouse is, and the session settings that reach it."""

    path: str
    conf: dict[str, str]


@contextlib.contextmanager
def storage(args: argparse.Namespace, work: str) -> Iterator[Lake]:
    """A local lakehouse in ``work``, or one on an Azurite started for the run."""
    if args.storage == "local":
        yield Lake(f"{work}/lake", {})
        return
    from azure.storage.blob import BlobServiceClient

    from devstack.azurite import ACCOUNT, Azurite
    from lakehouse_writer.runtime.azure import hadoop_settings
    from producer_lib.settings import AzureStorageSettings

    service = Azurite(Path(work) / "azurite", AZURITE_PORT)
    service.start()
    try:
        client = BlobServiceClient.from_connection_string(service.connection_string())
        client.create_container("lake")
        os.environ["AZURITE_BLOB_STORAGE_URL"] = service.blob_url  # delta-rs' emulator
        os.environ["AZURE_STORAGE_CONNECTION_STRING"] = "UseDevelopmentStorage=true"
        path = f"wasb://lake@{ACCOUNT}/lake"
        credential = AzureStorageSettings(connection_string="UseDevelopmentStorage=true")
        yield Lake(path, hadoop_settings(credential, path))
    finally:
        service.stop()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=100, help="tables (one topic each)")
    parser.add_argument("--rows", type=int, default=2_000, help="rows per table in (a)")
    parser.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    parser.add_argument(
        "--latency-seconds",
        type=float,
        default=60,
        help="seconds of the steady stream in (c); 0: skip it",
    )
    parser.add_argument(
        "--storage",
        choices=("local", "azurite"),
        default="local",
        help="where the lakehouse is: a temp folder, or Azurite (Azure Blob through wasb://)",
    )
    parser.add_argument("--event-log", default=None, help="keep Spark's event log in this dir")
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the writer's session (repeatable), to compare settings",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="log the writer's own lines (per batch and table, with times)",
    )
    args = parser.parse_args(argv)
    if args.tables < 1 or args.rows < 100:
        parser.error("--tables must be at least 1 and --rows at least 100")
    if args.storage == "azurite" and args.latency_seconds:
        parser.error("--storage azurite takes --latency-seconds 0 ((c) reads _commits locally)")
    if any("=" not in item for item in args.conf):
        parser.error("--conf takes KEY=VALUE")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)
    writer_log = logging.getLogger("lakehouse_writer")
    writer_log.setLevel(logging.INFO)  # the step times come from its lines
    writer_log.propagate = args.verbose
    if not args.verbose:  # its warnings and errors all the same
        shown = logging.StreamHandler()
        shown.setLevel(logging.WARNING)
        writer_log.addHandler(shown)
    with broker.bootstrap_servers() as bootstrap:
        result = run(bootstrap, args)
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
