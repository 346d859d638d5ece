"""Soak: flows commit small transactions every second while a continuous writer applies them.

Run: ``.venv/bin/python bench/soak.py [--minutes M] [--flows F] [--tables T]`` (``make soak``:
10 minutes).

F flows (default 2), each a ``KafkaProducer`` with its own transactional id on its own
thread, own T tables each (default 3). Every second each flow commits one transaction over
one or two of its tables, drawn at random: a few INSERTs of new keys, UPDATEs and UPSERTs of
stored keys, DELETEs; one transaction in 60 of a flow reloads a table (a whole-table
TRUNCATE, then REPLACE rows). A Python model keeps what each table must hold. The writer
runs as ``lakehouse-writer run`` (continuous, 1 s trigger) in its own process group.

Every 10 s it samples the commits produced and not yet visible (the lag), and the resident
memory of the writer (its Python driver and JVM) and of this process. At the end the flows
stop, the writer catches up, and every table read with delta-rs is compared with the model:
``lost`` (a key missing or holding an older value), ``duplicated`` (a key stored twice) and
``extra`` (a key the model does not hold) must all be 0. ``latency_*``: from a producer's
commit to the commit's row in ``_commits`` (written once every row of it is applied).
``rss_*_mb``: first, last and highest sample; ``rss_growth_mb``: the mean of the last third
of the samples minus that of the middle third (the first third is warm-up).

The broker is ``KAFKA_BOOTSTRAP_SERVERS``, else the devstack broker. Figures go to
``docs/PERFORMANCE.md``. Last line: ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.tables import COLUMNS, CommitsSeen, delete_topics  # noqa: E402
from devstack import broker  # noqa: E402
from lakehouse_writer.read.catalog import SCHEMAS_TOPIC  # noqa: E402
from producer_lib import schema as ps  # noqa: E402
from producer_lib.kafka import KafkaProducer, Target  # noqa: E402
from producer_lib.schema import KeySchema, RowType, ValueSchema  # noqa: E402
from producer_lib.settings import KafkaSettings  # noqa: E402
from producer_lib.staging import load_packaged_extension  # noqa: E402

SAMPLE_S = 10.0
CATCH_UP_S = 300.0
RELOAD_EVERY = 60  # a flow's transactions between two reloads of one of its tables
RELOAD_ROWS = 50
BATCH_SIZE = 1_000


@dataclass
class Table:
    """One table of a flow and what it must hold (``id`` -> ``note``)."""

    target: Target
    rows: dict[int, str] = field(default_factory=dict)
    next_id: int = 0


def make_schema(namespace: str, name: str) -> ValueSchema:
    """Six columns, key ``id`` (those of ``bench/tables.py``)."""
    schema = ValueSchema(name, namespace)
    for column, avro_type, nullable in COLUMNS:
        schema.add_field(column, avro_type, nullable=nullable)
    schema.add_primary_key("id")
    return schema


def _frame(rows: dict[int, str]) -> pa.Table:
    ids = sorted(rows)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": [f"name {i}" for i in ids],
            "qty": pa.array([i % 97 for i in ids], pa.int32()),
            "price": pa.array([None] * len(ids), pa.decimal128(12, 2)),
            "day": pa.array([None] * len(ids), pa.date32()),
            "note": [rows[i] for i in ids],
        }
    )


class Flow:
    """A producer that commits one small transaction a second over its tables."""

    def __init__(self, index: int, settings: KafkaSettings, topics: list[str], tag: str) -> None:
        self.index = index
        self.con = duckdb.connect()
        self.producer = KafkaProducer(
            "SOAK", f"soak_{tag}_{index}", "soak", "soak", settings, duckdb_connection=self.con
        )
        self._topics = topics
        self._namespace = f"S{tag}"
        self.tables: list[Table] = []
        self.committed: dict[str, float] = {}
        self.rows_sent = 0
        self.error: BaseException | None = None
        self._random = random.Random(index)
        self._count = 0

    def open(self) -> None:
        """Open the producer and register the tables."""
        self.producer.__enter__()
        for topic in self._topics:
            schema = make_schema(self._namespace, topic.upper())
            target = self.producer.add_target(topic, topic.upper(), KeySchema(schema), schema)
            self.tables.append(Table(target))

    def run(self, stop: threading.Event) -> None:
        """Commit a transaction a second until ``stop``."""
        try:
            while not stop.is_set():
                started = time.monotonic()
                self._transaction()
                stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def close(self) -> None:
        """Close the producer."""
        self.producer.__exit__(None, None, None)
        self.con.close()

    def _transaction(self) -> None:
        self._count += 1
        chosen = self._random.sample(self.tables, self._random.choice((1, 2)))
        staged = []
        for table in chosen:
            if self._count % RELOAD_EVERY == 0 and table is chosen[0]:
                staged.append((table, self._reload(table)))
            else:
                staged.append((table, self._changes(table)))
        commit_id = self.producer.commit()
        if commit_id is not None:
            self.committed[commit_id] = time.monotonic()
        for table, after in staged:  # the model moves with the commit only
            table.rows, table.next_id = after

    def _send(self, target: Target, rows: dict[int, str], row_type: RowType) -> None:
        if not rows:
            return
        self.con.register("chg_arrow", _frame(rows))
        self.con.execute("CREATE OR REPLACE TABLE CHG AS SELECT * FROM chg_arrow")
        self.con.unregister("chg_arrow")
        self.rows_sent += self.producer.produce_from_duckdb("CHG", target, BATCH_SIZE, row_type)

    def _changes(self, table: Table) -> tuple[dict[int, str], int]:
        rows, next_id, stored = dict(table.rows), table.next_id, sorted(table.rows)
        pick = self._random.sample(stored, min(len(stored), 6))
        updates, upserts, deletes = pick[0:2], pick[2:4], pick[4:6]
        inserts = list(range(next_id, next_id + self._random.randint(1, 5)))
        version = f"v{self._count}"
        self._send(table.target, {i: f"{version} i" for i in inserts}, RowType.INSERT)
        self._send(table.target, {i: f"{version} u" for i in updates}, RowType.UPDATE)
        self._send(table.target, {i: f"{version} s" for i in upserts}, RowType.UPSERT)
        self._send(table.target, {i: rows[i] for i in deletes}, RowType.DELETE)
        rows.update({i: f"{version} i" for i in inserts})
        rows.update({i: f"{version} u" for i in updates})
        rows.update({i: f"{version} s" for i in upserts})
        for i in deletes:
            del rows[i]
        return rows, inserts[-1] + 1

    def _reload(self, table: Table) -> tuple[dict[int, str], int]:
        first = table.next_id
        rows = {i: f"reload {self._count}" for i in range(first, first + RELOAD_ROWS)}
        truncate = ps.create_truncate_row(table.target.value_schema, None)
        key = ps.create_key_row(truncate, table.target.key_schema)
        self.producer.produce_row(table.target, key, truncate, RowType.TRUNCATE)
        self._send(table.target, rows, RowType.REPLACE)
        return rows, first + RELOAD_ROWS


def rss_mb(pids: list[int]) -> float:
    """The resident memory of ``pids``, in MiB (0 for a process that is gone)."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        line = next((x for x in status.splitlines() if x.startswith("VmRSS:")), "VmRSS: 0 kB")
        total += int(line.split()[1])
    return round(total / 1024, 1)


def group_pids(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` (the writer's driver and its JVM)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def start_writer(work: str, bootstrap: str, regex: str) -> subprocess.Popen[bytes]:
    """``lakehouse-writer run`` (continuous, 1 s trigger) in its own process group."""
    env = {
        **os.environ,
        "LAKEHOUSE_TRIGGER_INTERVAL_S": "1",
        "LAKEHOUSE_SCHEMAS_TOPIC": SCHEMAS_TOPIC,
    }
    args = [
        sys.executable,
        "-m",
        "lakehouse_writer",
        "run",
        "--lakehouse",
        f"{work}/lake",
        "--checkpoint",
        f"{work}/checkpoint",
        "--topics",
        regex,
        "--bootstrap-servers",
        bootstrap,
    ]
    log = open(f"{work}/writer.log", "wb")  # noqa: SIM115 - the writer's whole life
    return subprocess.Popen(
        args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )


def compare(lake: str, flows: list[Flow]) -> dict[str, int]:
    """Rows lost, duplicated and extra: every table in Delta against the model."""
    lost = duplicated = extra = 0
    with duckdb.connect() as con:  # delta-rs refuses deletion vectors; DuckDB applies them
        load_packaged_extension(con, "delta")
        for flow in flows:
            for table in flow.tables:
                ref = table.target.value_schema
                path = str(Path(lake) / ref.namespace / ref.name).replace("'", "''")
                stored = con.sql(f"SELECT id, note FROM delta_scan('{path}')").fetchall()
                seen: dict[int, str] = {}
                for key, note in stored:
                    duplicated += key in seen
                    seen[key] = note
                lost += sum(1 for i, note in table.rows.items() if seen.get(i) != note)
                extra += sum(1 for i in seen if i not in table.rows)
    return {"lost": lost, "duplicated": duplicated, "extra": extra}


def _spread(samples: list[float]) -> dict[str, float]:
    third = max(1, len(samples) // 3)
    middle, last = samples[third : 2 * third] or samples, samples[2 * third :] or samples
    return {
        "first": samples[0],
        "last": samples[-1],
        "max": max(samples),
        "growth": round(sum(last) / len(last) - sum(middle) / len(middle), 1),
    }


def _percentile(values: list[float], q: float) -> float:
    return round(values[min(len(values) - 1, int(q * len(values)))], 2)


def run(bootstrap: str, args: argparse.Namespace) -> dict[str, Any]:
    """Produce for ``args.minutes`` against a running writer; the figures."""
    tag = uuid.uuid4().hex[:8]
    prefix = f"soak_{tag}_"
    topic_lists = [[f"{prefix}{f}_{t}" for t in range(args.tables)] for f in range(args.flows)]
    settings = KafkaSettings(bootstrap_servers=bootstrap)
    flows = [Flow(i, settings, topics, tag) for i, topics in enumerate(topic_lists)]
    stop = threading.Event()
    samples: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="soak_") as work:
        for flow in flows:
            flow.open()
        writer = start_writer(work, bootstrap, f"{prefix}.*|_commits")
        seen = CommitsSeen(f"{work}/lake")
        threads = [threading.Thread(target=f.run, args=(stop,), daemon=True) for f in flows]
        started = time.monotonic()
        try:
            for thread in threads:
                thread.start()
            ends = started + args.minutes * 60
            next_sample = started
            while time.monotonic() < ends:
                seen.poll()
                if writer.poll() is not None:
                    raise RuntimeError(
                        f"the writer ended (rc={writer.returncode}); {work}/writer.log"
                    )
                if any(f.error for f in flows):
                    raise RuntimeError("a flow failed") from next(f.error for f in flows if f.error)
                if time.monotonic() >= next_sample:
                    committed = {c for f in flows for c in f.committed}
                    samples.append(
                        {
                            "t": round(time.monotonic() - started),
                            "lag_commits": len(committed - set(seen.seen)),
                            "writer_mb": rss_mb(group_pids(writer.pid)),  # driver + JVM
                            "bench_mb": rss_mb([os.getpid()]),
                        }
                    )
                    print(json.dumps(samples[-1]), flush=True)
                    next_sample += SAMPLE_S
                time.sleep(0.2)
            stop.set()
            for thread in threads:
                thread.join(30)
            committed_at = {c: t for f in flows for c, t in f.committed.items()}
            deadline = time.monotonic() + CATCH_UP_S
            while set(committed_at) - set(seen.seen) and time.monotonic() < deadline:
                seen.poll()
                time.sleep(0.2)
            missing = set(committed_at) - set(seen.seen)
            outcome = compare(f"{work}/lake", flows)
        finally:
            stop.set()
            if writer.poll() is None:
                os.killpg(writer.pid, signal.SIGTERM)
                try:
                    writer.wait(120)
                except subprocess.TimeoutExpired:
                    os.killpg(writer.pid, signal.SIGKILL)
            for flow in flows:
                flow.close()
            delete_topics(bootstrap, [t for topics in topic_lists for t in topics])
    latency = sorted(seen.seen[c] - t for c, t in committed_at.items() if c in seen.seen)
    return {
        "minutes": args.minutes,
        "flows": args.flows,
        "tables": args.flows * args.tables,
        "transactions": len(committed_at),
        "rows": sum(f.rows_sent for f in flows),
        "commits_not_visible": len(missing),
        **outcome,
        "latency_p50_s": _percentile(latency, 0.5) if latency else None,
        "latency_p99_s": _percentile(latency, 0.99) if latency else None,
        "latency_max_s": round(latency[-1], 2) if latency else None,
        "rss_writer_mb": _spread([s["writer_mb"] for s in samples]),
        "rss_bench_mb": _spread([s["bench_mb"] for s in samples]),
        "lag_commits_max": max(s["lag_commits"] for s in samples),
        "load_avg_1m_after": round(os.getloadavg()[0], 2),
        "samples": samples,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the flows produce")
    parser.add_argument("--flows", type=int, default=2, help="flows (producers)")
    parser.add_argument("--tables", type=int, default=3, help="tables per flow")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.flows < 1 or args.tables < 1:
        parser.error("--minutes must be positive, --flows and --tables at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with broker.bootstrap_servers() as bootstrap:
        result = run(bootstrap, args)
    print("RESULT " + json.dumps(result))
    clean = result["lost"] == result["duplicated"] == result["extra"] == 0
    return 0 if clean and not result["commits_not_visible"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
