"""Benchmark: the whole trip, a PostgreSQL table to a readable Delta table (issue 51).

Run: ``.venv/bin/python bench/pipeline.py [--sf 1] [--cases initial,replace,delta,nothing,
running,small] [--small N] [--work DIR]``

PostgreSQL and TPC-H ``lineitem`` at ``--sf`` (1: 6,001,215 rows) as ``bench/sources.py`` sets
them up (a server started for the run, ``dbgen`` copied in by DuckDB, key ``l_orderkey,
l_linenumber``). A ``FunctionRunner`` flow reads with ``PostgresReader`` and produces to a
3-partition topic in one transaction; the writer is ``lakehouse-writer run`` in its own
process, as a user runs it (``python -m lakehouse_writer``, default settings). Each group of
cases gets a fresh topic and lakehouse:

- ``initial``: the flow (TRUNCATE + every row as REPLACE), then ``run --once``;
- ``delta``: 1 % of the rows changed in PostgreSQL (untimed ``UPDATE … SET l_comment`` of
  every row with ``mod(l_orderkey, 100) = 1``: keys spread over the whole table), the flow's delta
  load produces them as UPSERT, then ``run --once`` (the lakehouse of ``initial``);
- ``nothing``: ``run --once`` again, with nothing new;
- ``replace``: ``initial`` without the TRUNCATE row (REPLACE into a new table);
- ``running``: a writer started first (``--trigger-interval 1``) and warmed up (a 100-row flow
  into another topic it reads, applied), then the initial load, then a 1 % change: seconds
  from the flow's ``commit()`` returning until the commit is visible;
- ``small``: ``--small`` transactions of 10 changed rows each against that running writer, one
  at a time; commit → visible p50 / max.

``<case>_rows``: the rows the flow produced (a TRUNCATE row counts). ``--work DIR`` keeps the
lakehouses and each writer's log (``<group>/once<n>.log``, ``running.log``: the writer's
``batch done … steps=`` lines say where its seconds went).

Visible: the commit's row is in the lakehouse's ``_commits`` table (written once every row of
the commit is applied), polled every 0.05 s in a thread with delta-rs (no JVM). The row counts
are checked with delta-rs after each case (add actions minus deletion vectors). ``delta``,
``nothing`` need ``initial``, ``small`` needs ``running``'s writer: they bring them along.
Flow seconds: ``FunctionRunner.run`` (connect, read, export, commit, execution log). The goals
are issue 51's; ``goals`` says met or not for each. The broker is ``KAFKA_BOOTSTRAP_SERVERS``,
else the devstack broker. Last line: ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from confluent_kafka.admin import AdminClient
from deltalake import DeltaTable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.sources import (  # noqa: E402
    BATCH_ROWS,
    TOPIC_PARTITIONS,
    add_primary_key,
    load_average,
    load_lineitem,
    postgres_server,
)
from bench.tables import CommitsSeen, delete_topics  # noqa: E402
from devstack import broker  # noqa: E402
from lakehouse_writer.tables.manager import TableRef  # noqa: E402
from producer_lib import (  # noqa: E402
    FunctionRunner,
    KafkaProducer,
    KeySchema,
    PostgresReader,
    RowType,
    create_key_row,
    create_truncate_row,
)
from producer_lib.kafka.topics import ensure_topic  # noqa: E402
from tests.support.writer import WriterProcess, once_argv  # noqa: E402

log = logging.getLogger("bench.pipeline")

CASES = ("initial", "delta", "nothing", "replace", "running", "small")
WHOLE_TABLE = "select * from lineitem"
CHANGED = "mod(l_orderkey, 100) = 1"  # ~1 % of the rows, keys over the whole table
SMALL_ROWS = 10
POLL_S = 0.05
VISIBLE_TIMEOUT_S = 900.0
WRITER_TIMEOUT_S = 1800.0
TRIGGER_S = "1"  # the running writer's trigger, as bench/writer.py's latency phase
# issue 51's goals: (figure, at most seconds)
GOALS = {
    "initial_total_s": 40.0,
    "delta_writer_s": 6.0,
    "nothing_writer_s": 2.0,
    "running_initial_visible_s": 15.0,
    "running_delta_visible_s": 3.0,
    "small_visible_p50_s": 0.5,
}


class LineitemFlow(FunctionRunner):
    """``sql``'s rows of PostgreSQL ``lineitem`` as ``row_type``, one commit.

    The initial load starts with a TRUNCATE row when ``truncate``; the delta load is the same
    without it. Records when its commit returned and the commit id.
    """

    function_name = "bench_pipeline"
    source_system = "TPCH"

    def __init__(
        self, dsn: str, topic: str, sql: str, lake: str, *, table: str = "pg_lineitem"
    ) -> None:
        super().__init__()
        self.dsn, self.topic, self.sql, self.lake, self.table = dsn, topic, sql, lake, table
        self.truncate, self.row_type = True, RowType.REPLACE
        self.committed_at, self.commit_id, self.path = 0.0, "", ""

    def create_reader(self) -> PostgresReader:
        """A reader of the benchmark's database."""
        return PostgresReader(self.dsn, self.logger)

    async def initial_load(self, producer: KafkaProducer, reader: PostgresReader) -> None:  # type: ignore[override]
        """Stage, (TRUNCATE), produce, commit."""
        await self._load(producer, reader, self.truncate)

    async def delta_load(self, producer: KafkaProducer, reader: PostgresReader) -> None:  # type: ignore[override]
        """Stage, produce, commit."""
        await self._load(producer, reader, False)

    async def _load(self, producer: KafkaProducer, reader: PostgresReader, truncate: bool) -> None:
        schema = await reader.load(self.table, self.sql, "tpch", "TPCH")
        self.path = TableRef.of(schema).path(self.lake)
        target = producer.add_target(
            self.topic, self.table, KeySchema(schema), schema, TOPIC_PARTITIONS
        )
        if truncate:
            row = create_truncate_row(target.value_schema, None)
            key = create_key_row(row, target.key_schema)
            producer.produce_row(target, key, row, RowType.TRUNCATE, partition=0)
        producer.produce_from_duckdb(self.table, target, BATCH_ROWS, self.row_type)
        self.commit_id = producer.commit() or ""
        self.committed_at = time.monotonic()


def run_flow(flow: LineitemFlow, load: str = "initial") -> tuple[int, float]:
    """Rows produced and seconds of one ``FunctionRunner.run``."""
    started = time.perf_counter()
    result = asyncio.run(flow.run(load, dataflow=flow.topic))
    return sum(result.rows.values()), time.perf_counter() - started


def delta_rows(path: str) -> int:
    """Rows of the Delta table at ``path``: its add actions' counts minus deletion vectors."""
    table = DeltaTable(path)
    actions = pa.table(table.get_add_actions(flatten=True))
    rows = sum(actions.column("num_records").to_pylist()) if actions.num_rows else 0
    if "deletionVectors" in (table.protocol().reader_features or []):
        vectors = pa.table(table.deletion_vectors())
        rows -= sum(v.count(False) for v in vectors.column("selection_vector").to_pylist())
    return int(rows)


def last_operations(path: str, since: int) -> list[dict[str, Any]]:
    """Operation and metrics of the versions of ``path`` after version ``since``."""
    history = DeltaTable(path).history()
    return [
        {"version": h["version"], "operation": h.get("operation"), **_metrics(h)}
        for h in sorted(history, key=lambda h: h["version"])
        if h["version"] > since
    ]


def _metrics(entry: dict[str, Any]) -> dict[str, Any]:
    keep = ("numTargetRowsInserted", "numTargetRowsUpdated", "numOutputRows")
    metrics = entry.get("operationMetrics") or {}
    return {k: metrics[k] for k in keep if k in metrics}


def check_rows(path: str, expected: int, case: str) -> None:
    found = delta_rows(path)
    if found != expected:
        raise RuntimeError(f"{case}: {path} holds {found} rows, expected {expected}")


# -- the writer as a user runs it ---------------------------------------------------------


class Lake:
    """A lakehouse and checkpoint under ``root`` for the writer of one group of cases."""

    def __init__(self, root: Path, bootstrap: str, topics: str) -> None:
        self.root, self.bootstrap = root, bootstrap
        self.topics = f"{topics}|_commits"  # what the default regex reads too: commit rows
        self.lake, self.checkpoint = str(root / "lake"), str(root / "checkpoint")
        self.runs = 0
        root.mkdir(parents=True, exist_ok=True)

    def once(self) -> float:
        """``lakehouse-writer run --once``; seconds from the process's start to its end."""
        self.runs += 1
        argv = once_argv(self.lake, self.checkpoint, self.topics, self.bootstrap)[1:]
        started = time.perf_counter()
        writer = WriterProcess(argv, {}, self.root / f"once{self.runs}.log", self.checkpoint)
        code = writer.wait(WRITER_TIMEOUT_S)
        seconds = time.perf_counter() - started
        if code != 0:
            raise RuntimeError(f"run --once exited {code}:\n{writer.tail()}")
        return seconds

    @contextlib.contextmanager
    def running(self) -> Iterator[WriterProcess]:
        """``lakehouse-writer run`` (1 s trigger) until the block ends, then SIGTERM."""
        argv = once_argv(self.lake, self.checkpoint, self.topics, self.bootstrap)[1:]
        argv.remove("--once")
        writer = WriterProcess(
            [*argv, "--trigger-interval", TRIGGER_S],
            {},
            self.root / "running.log",
            self.checkpoint,
        )
        try:
            yield writer
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(writer.proc.pid, signal.SIGTERM)
            try:
                writer.wait(120)
            except Exception:
                writer.kill9()


class Visibility:
    """When each commit id shows up in ``_commits``, polled every 0.05 s in a thread."""

    def __init__(self, lake: str, writer: WriterProcess) -> None:
        self.seen = CommitsSeen(lake)
        self.writer = writer
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="visibility", daemon=True)

    def __enter__(self) -> Visibility:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _poll(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # the table may not exist yet
                self.seen.poll()
            time.sleep(POLL_S)

    def wait(self, commit_id: str, committed_at: float) -> float:
        """Seconds from ``committed_at`` until ``commit_id`` is visible."""
        deadline = time.monotonic() + VISIBLE_TIMEOUT_S
        while time.monotonic() < deadline and self.writer.proc.poll() is None:
            seen = self.seen.seen.get(commit_id)
            if seen is not None:
                return max(0.0, seen - committed_at)
            time.sleep(POLL_S / 2)
        raise RuntimeError(f"commit {commit_id} not visible:\n{self.writer.tail()}")


# -- the cases ----------------------------------------------------------------------------


def change_rows(dsn: str, where: str, marker: str) -> int:
    """Untimed: set ``l_comment`` of the rows matching ``where`` in PostgreSQL; their count."""
    with psycopg.connect(dsn, autocommit=True) as pg:
        cursor = pg.execute(f"UPDATE lineitem SET l_comment = %s WHERE {where}", (marker,))
        return cursor.rowcount


def initial_group(dsn: str, bootstrap: str, work: Path, rows: int, cases: set[str]) -> dict:
    """``initial``, then ``delta`` and ``nothing`` on its topic and lakehouse."""
    topic = f"bench_pipeline_{uuid.uuid4().hex[:8]}_initial"
    lake = Lake(work / "initial", bootstrap, topic)
    out: dict[str, Any] = {}
    try:
        flow = LineitemFlow(dsn, topic, WHOLE_TABLE, lake.lake)
        produced, flow_s = run_flow(flow)
        writer_s = lake.once()
        check_rows(flow.path, rows, "initial")
        out |= _trip("initial", flow_s, writer_s, produced)
        if "delta" in cases:
            changed = change_rows(dsn, CHANGED, f"changed {topic}")
            before = DeltaTable(flow.path).version()
            flow.sql, flow.row_type = f"{WHOLE_TABLE} where {CHANGED}", RowType.UPSERT
            produced, flow_s = run_flow(flow, "delta")
            writer_s = lake.once()
            check_rows(flow.path, rows, "delta")
            out |= _trip("delta", flow_s, writer_s, produced)
            out["delta_changed_rows"] = changed
            out["delta_operations"] = last_operations(flow.path, before)
        if "nothing" in cases:
            out["nothing_writer_s"] = round(lake.once(), 2)
    finally:
        delete_topics(bootstrap, [topic])
    return out


def replace_case(dsn: str, bootstrap: str, work: Path, rows: int) -> dict:
    """``replace``: the initial load without its TRUNCATE row."""
    topic = f"bench_pipeline_{uuid.uuid4().hex[:8]}_replace"
    lake = Lake(work / "replace", bootstrap, topic)
    try:
        flow = LineitemFlow(dsn, topic, WHOLE_TABLE, lake.lake)
        flow.truncate = False
        produced, flow_s = run_flow(flow)
        writer_s = lake.once()
        check_rows(flow.path, rows, "replace")
        return _trip("replace", flow_s, writer_s, produced) | {
            "replace_operations": last_operations(flow.path, -1)
        }
    finally:
        delete_topics(bootstrap, [topic])


def _trip(case: str, flow_s: float, writer_s: float, produced: int) -> dict[str, Any]:
    print(f"{case}: {produced} rows, flow {flow_s:.2f} s, writer {writer_s:.2f} s", flush=True)
    return {
        f"{case}_rows": produced,
        f"{case}_flow_s": round(flow_s, 2),
        f"{case}_writer_s": round(writer_s, 2),
        f"{case}_total_s": round(flow_s + writer_s, 2),
    }


def running_group(
    dsn: str, bootstrap: str, work: Path, rows: int, cases: set[str], small: int
) -> dict:
    """A running writer: warm-up, then ``running`` (initial load, 1 % change), ``small``."""
    tag = uuid.uuid4().hex[:8]
    topic, warm = f"bench_pipeline_{tag}_running", f"bench_pipeline_{tag}_warm"
    lake = Lake(work / "running", bootstrap, f"bench_pipeline_{tag}_(running|warm)")
    out: dict[str, Any] = {}
    warm_flow = LineitemFlow(
        dsn, warm, f"{WHOLE_TABLE} where l_orderkey < 100", lake.lake, table="pg_warm"
    )
    run_flow(warm_flow)  # creates _commits, the schema topic and the warm topic
    ensure_topic(AdminClient({"bootstrap.servers": bootstrap}), topic, TOPIC_PARTITIONS)
    try:
        with lake.running() as writer, Visibility(lake.lake, writer) as visible:
            started = time.monotonic()
            warm_s = visible.wait(warm_flow.commit_id, started)
            out["running_warm_up_s"] = round(warm_s, 2)
            flow = LineitemFlow(dsn, topic, WHOLE_TABLE, lake.lake)
            if "running" in cases:
                out |= _running_trip(flow, lake, visible, "running_initial", rows)
                changed = change_rows(dsn, CHANGED, f"changed {topic}")
                flow.sql, flow.row_type = f"{WHOLE_TABLE} where {CHANGED}", RowType.UPSERT
                out |= _running_trip(flow, lake, visible, "running_delta", rows, "delta")
                out["running_delta_changed_rows"] = changed
            if "small" in cases:
                out |= small_case(dsn, flow, lake, visible, small)
    finally:
        delete_topics(bootstrap, [topic, warm])
    return out


def _running_trip(
    flow: LineitemFlow, lake: Lake, visible: Visibility, name: str, rows: int, load: str = "initial"
) -> dict[str, Any]:
    started = time.monotonic()
    produced, flow_s = run_flow(flow, load)
    seconds = visible.wait(flow.commit_id, flow.committed_at)
    trip = flow.committed_at + seconds - started
    check_rows(flow.path, rows, name)
    print(f"{name}: {produced} rows, flow {flow_s:.2f} s, visible {seconds:.2f} s", flush=True)
    return {
        f"{name}_rows": produced,
        f"{name}_flow_s": round(flow_s, 2),
        f"{name}_visible_s": round(seconds, 2),
        f"{name}_trip_s": round(trip, 2),  # from the flow's start
    }


def small_case(
    dsn: str, big: LineitemFlow, lake: Lake, visible: Visibility, count: int
) -> dict[str, Any]:
    """``count`` transactions of 10 changed rows (keys spread over the table), one at a time."""
    with psycopg.connect(dsn) as pg:
        top = pg.execute("SELECT max(l_orderkey) FROM lineitem").fetchone()
    latencies = []
    for n in range(count):
        start = (n + 1) * int(top[0] if top else 0) // (count + 1)
        keys = (
            "(l_orderkey, l_linenumber) in (select l_orderkey, l_linenumber from lineitem "
            f"where l_orderkey >= {start} order by 1, 2 limit {SMALL_ROWS})"
        )
        change_rows(dsn, keys, f"small {n} {big.topic}")
        flow = LineitemFlow(dsn, big.topic, f"{WHOLE_TABLE} where {keys}", lake.lake)
        flow.row_type = RowType.UPSERT
        run_flow(flow, "delta")
        latencies.append(visible.wait(flow.commit_id, flow.committed_at))
    return {
        "small_transactions": count,
        "small_visible_p50_s": round(statistics.median(latencies), 2),
        "small_visible_max_s": round(max(latencies), 2),
        "small_visible_s": [round(s, 2) for s in latencies],
    }


# -- the run --------------------------------------------------------------------------------


def run(bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    """Set up PostgreSQL and lineitem, run the cases asked for; the figures."""
    os.environ["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap  # the flows' producers
    cases = set(args.cases)
    if cases & {"delta", "nothing"}:
        cases.add("initial")
    out: dict[str, Any] = {"sf": args.sf}
    with postgres_server() as dsn, _work_dir(args.work) as tmp:
        started = time.perf_counter()
        rows = load_lineitem(dsn, args.sf)
        add_primary_key(dsn)
        out |= {"rows": rows, "setup_s": round(time.perf_counter() - started, 1)}
        out["load_average_before"] = load_average()
        print(f"lineitem rows={rows} sf={args.sf} load average {out['load_average_before']}")
        work = Path(tmp)
        if "initial" in cases:
            out |= initial_group(dsn, bootstrap, work, rows, cases)
        if "replace" in cases:
            out |= replace_case(dsn, bootstrap, work, rows)
        if cases & {"running", "small"}:
            out |= running_group(dsn, bootstrap, work, rows, cases, args.small)
    out["load_average_after"] = load_average()
    out["goals"] = {
        key: {"figure": out[key], "goal_s": goal, "met": out[key] <= goal}
        for key, goal in GOALS.items()
        if key in out
    }
    out["goals_at_issue_scale"] = args.sf == 1.0  # the goals are for 6,001,215 rows
    if "initial_total_s" in out and "replace_total_s" in out:
        out["replace_over_initial"] = round(out["replace_total_s"] / out["initial_total_s"], 2)
    return out


@contextlib.contextmanager
def _work_dir(keep: str | None) -> Iterator[str]:
    """``keep`` (created, left in place: the writers' logs, lakehouses), else a temporary one."""
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix="bench_pipeline_") as tmp:
        yield tmp


def print_table(out: dict[str, Any]) -> None:
    """The issue's table, with this run's figures."""
    print(f"\nlineitem sf={out['sf']} rows={out['rows']:,}")
    print(f"{'work':58} {'flow':>8} {'writer':>8} {'total':>8}")
    for case, what in (
        ("initial", "initial load (TRUNCATE + REPLACE), run --once"),
        ("replace", "the same without the TRUNCATE row"),
        ("delta", "1 % of the rows changed (UPSERT), run --once"),
    ):
        if f"{case}_total_s" in out:
            flow, writer, total = (out[f"{case}_{k}_s"] for k in ("flow", "writer", "total"))
            print(f"{what:58} {flow:8.2f} {writer:8.2f} {total:8.2f}")
    if "nothing_writer_s" in out:
        print(f"{'run --once with nothing new':58} {'':8} {out['nothing_writer_s']:8.2f}")
    for key, what in (
        ("running_initial_visible_s", "running writer: initial load visible after commit"),
        ("running_delta_visible_s", "running writer: 1 % change visible after commit"),
        ("small_visible_p50_s", "running writer: 10-row transactions, p50 visible"),
    ):
        if key in out:
            print(f"{what:58} {'':8} {out[key]:8.2f}")
    if not out["goals_at_issue_scale"]:
        print("(the goals are for --sf 1: at this scale they compare nothing)")
    for key, goal in out["goals"].items():
        print(f"goal {key} <= {goal['goal_s']} s: {goal['figure']} met={goal['met']}")
    print(f"load average before {out['load_average_before']}, after {out['load_average_after']}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale (1: 6,001,215 rows)")
    parser.add_argument(
        "--cases",
        default=",".join(CASES),
        help=f"comma-separated, of {', '.join(CASES)} (default: all)",
    )
    parser.add_argument("--small", type=int, default=20, help="10-row transactions of 'small'")
    parser.add_argument(
        "--work", help="keep the lakehouses and the writers' logs here (default: a temp dir)"
    )
    args = parser.parse_args(argv)
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(args.cases) - set(CASES)
    if unknown:
        parser.error(f"unknown cases: {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the bench; print the table and the RESULT line."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    with broker.bootstrap_servers() as bootstrap:
        out = run(bootstrap, args)
    print_table(out)
    print("RESULT " + json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
