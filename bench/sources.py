"""Benchmark: PostgresReader against DuckDB's own postgres_scanner, and a flow end to end.

Run: ``.venv/bin/python bench/sources.py [--sf 0.2] [--rounds 2]``

A PostgreSQL server is started for the run as the tests start it (``tests/support/postgres.py``:
``initdb`` in a temporary directory, 127.0.0.1, ``fsync=off``), or ``POSTGRES_DSN`` names one.
DuckDB's ``dbgen`` (tpch extension from its wheel) makes TPC-H ``lineitem`` at scale ``--sf``
(0.2: 1.2 M rows) and DuckDB copies it into PostgreSQL table ``lineitem`` (``numeric(15,2)``,
``varchar``, ``date``, ``int``/``bigint``; no key yet). One untimed scan sets hint bits and
warms the cache. Then, ``--rounds`` times, alternating, each into a fresh in-memory DuckDB:

- ``scanner``: ``ATTACH … (TYPE postgres, READ_ONLY)`` and ``CREATE TABLE … AS SELECT * FROM
  pg.public.lineitem`` (the attach is timed too);
- ``postgres``: ``PostgresReader.load("li", "select * from lineitem")`` (describe, catalog,
  staging table, copy, key check, lineage: all of ``load``); a whole table, which the reader
  reads as the scanner reads a table (ctid ranges in parallel);
- ``query``: the same rows through a query (``… where l_quantity >= 0``), which the reader
  pushes down with ``postgres_query`` (one stream).

Best round of each; ``ratio_scanner`` = postgres / scanner, ``ratio_scanner_query`` = query /
scanner.

End to end: the primary key (l_orderkey, l_linenumber) is added in PostgreSQL, then a
FunctionRunner flow (``initial`` load) reads the table with PostgresReader and produces every row
as REPLACE to a fresh 3-partition topic on ``KAFKA_BOOTSTRAP_SERVERS`` (default the devstack
broker, 127.0.0.1:19092) in one transaction. Its wall time is split by step, timed by wrapping the
library's own functions for the run: read (``load`` without its key check), PK check (the
reader's, and ``produce_from_duckdb``'s own), encode (in the flow's thread: the first
``KAFKA_ENCODE_PROCESS_AFTER_ROWS`` rows), produce (``send_batch``), wait for encode (the flow's
thread idle, waiting for the encoder process, which encodes the rest beside produce), commit
(flush + commit), other (producer start, transactions, execution log, topics).
Last line: ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import producer_lib.kafka._encode_process as encoding_module  # noqa: E402
import producer_lib.kafka.producer as producer_module  # noqa: E402
from producer_lib import FunctionRunner, KafkaProducer, KeySchema, PostgresReader, RowType  # noqa: E402
from producer_lib.staging import load_packaged_extension  # noqa: E402
from tests.support import postgres as pg_support  # noqa: E402

WHOLE_TABLE = "select * from lineitem"  # read as the scanner reads a table, ctid ranges in parallel
A_QUERY = "select * from lineitem where l_quantity >= 0"  # every row, through postgres_query
TOPIC_PARTITIONS = 3
BATCH_ROWS = 50_000
log = logging.getLogger("bench.sources")


# -- the PostgreSQL server and the table ----------------------------------------------------


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """DSN of ``POSTGRES_DSN``, else of a server started (and stopped) as the tests do."""
    if os.environ.get("POSTGRES_DSN"):
        yield os.environ["POSTGRES_DSN"]
        return
    bin_dir = pg_support._bin_dir()
    if bin_dir is None:
        raise SystemExit("PostgreSQL server binaries not found: run scripts/install-postgres.sh")
    home, port = pg_support._make_home(), pg_support._free_port()
    data, pg_ctl = home / "data", str(bin_dir / "pg_ctl")
    pg_support._run(
        [str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8"]
    )
    options = f"-h 127.0.0.1 -p {port} -k {home} -c fsync=off -c shared_buffers=512MB"
    pg_support._run(
        [pg_ctl, "-D", str(data), "-l", str(home / "server.log"), "-o", options, "-w", "start"]
    )
    try:
        yield pg_support._create_database(port)
    finally:
        pg_support._run([pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"])
        shutil.rmtree(home, ignore_errors=True)


def scanner_connection(dsn: str) -> duckdb.DuckDBPyConnection:
    """A fresh in-memory DuckDB with the postgres database attached as ``pg``."""
    con = duckdb.connect()
    load_packaged_extension(con, "postgres_scanner")
    con.execute(f"ATTACH '{dsn}' AS pg (TYPE postgres, READ_ONLY)")
    return con


def load_lineitem(dsn: str, sf: float) -> int:
    """Generate lineitem at ``sf`` and copy it into PostgreSQL; its row count."""
    con = duckdb.connect()
    load_packaged_extension(con, "tpch")
    load_packaged_extension(con, "postgres_scanner")
    con.execute(f"CALL dbgen(sf={sf})")
    con.execute(f"ATTACH '{dsn}' AS pg (TYPE postgres)")
    con.execute("DROP TABLE IF EXISTS pg.public.lineitem")
    con.execute("CREATE TABLE pg.public.lineitem AS SELECT * FROM lineitem")
    con.close()
    with psycopg.connect(dsn, autocommit=True) as pg:
        pg.execute("VACUUM ANALYZE lineitem")
        rows = pg.execute("SELECT count(*) FROM lineitem").fetchone()
    return int(rows[0]) if rows else 0


def add_primary_key(dsn: str) -> None:
    """The key the flow's reader finds in the catalog (and checks)."""
    with psycopg.connect(dsn, autocommit=True) as pg:
        pg.execute("ALTER TABLE lineitem ADD PRIMARY KEY (l_orderkey, l_linenumber)")


# -- staging: reader against scanner ----------------------------------------------------------


def time_scanner(dsn: str) -> tuple[int, float]:
    """Rows and seconds of the scanner's own copy (attach included)."""
    started = time.perf_counter()
    con = scanner_connection(dsn)
    con.execute("CREATE TABLE li AS SELECT * FROM pg.public.lineitem")
    elapsed = time.perf_counter() - started
    rows = con.execute("SELECT count(*) FROM li").fetchone()
    con.close()
    return (int(rows[0]) if rows else 0), elapsed


def time_reader(dsn: str, sql: str = WHOLE_TABLE) -> tuple[int, float]:
    """Rows and seconds of ``PostgresReader.load(sql)`` (connect and close excluded)."""

    async def run() -> tuple[int, float]:
        con = duckdb.connect()
        async with PostgresReader(dsn, log, connection=con) as reader:
            started = time.perf_counter()
            await reader.load("li", sql)
            elapsed = time.perf_counter() - started
        rows = con.execute("SELECT count(*) FROM li").fetchone()
        con.close()
        return (int(rows[0]) if rows else 0), elapsed

    return asyncio.run(run())


def staging_rounds(dsn: str, rounds: int) -> dict[str, Any]:
    """Best rows/s of each way over ``rounds`` alternating rounds."""
    best: dict[str, float] = defaultdict(float)
    for index in range(rounds):
        for name, timed in (
            ("scanner", time_scanner),
            ("postgres", time_reader),
            ("query", lambda d: time_reader(d, A_QUERY)),
        ):
            rows, seconds = timed(dsn)
            best[name] = max(best[name], rows / seconds)
            print(
                f"round {index + 1} {name:8} rows={rows} seconds={seconds:.2f} "
                f"rows_per_s={rows / seconds:,.0f}",
                flush=True,
            )
    return {
        "postgres_rows_per_s": round(best["postgres"]),
        "scanner_rows_per_s": round(best["scanner"]),
        "ratio_scanner": round(best["postgres"] / best["scanner"], 3),
        "query_rows_per_s": round(best["query"]),
        "ratio_scanner_query": round(best["query"] / best["scanner"], 3),
    }


# -- end to end: a flow from PostgreSQL to Kafka -------------------------------------------------


class LineitemFlow(FunctionRunner):
    """Every lineitem row from PostgreSQL as REPLACE, one commit."""

    function_name = "bench_sources"
    source_system = "TPCH"

    def __init__(self, dsn: str, topic: str) -> None:
        super().__init__()
        self.dsn, self.topic = dsn, topic

    def create_reader(self) -> PostgresReader:
        """A reader of the benchmark's database."""
        return PostgresReader(self.dsn, self.logger)

    async def initial_load(self, producer: KafkaProducer, reader: PostgresReader) -> None:  # type: ignore[override]
        """Stage, produce, commit."""
        schema = await reader.load("pg_lineitem", "select * from lineitem", "tpch", "TPCH")
        target = producer.add_target(
            self.topic, "lineitem", KeySchema(schema), schema, TOPIC_PARTITIONS
        )
        producer.produce_from_duckdb("pg_lineitem", target, BATCH_ROWS, RowType.REPLACE)
        producer.commit()


class StepClock:
    """Wall time spent inside wrapped functions, by step; restores them when done."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._restore: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str, step: str) -> None:
        """Time every call of ``owner.name`` as ``step``."""
        original = getattr(owner, name)
        clock = self.seconds

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                clock[step] += time.perf_counter() - started

        self._restore.append((owner, name, original))
        setattr(owner, name, timed)

    def wrap_async(self, owner: Any, name: str, step: str) -> None:
        """Time every call of the coroutine function ``owner.name`` as ``step``."""
        original: Callable[..., Any] = getattr(owner, name)
        clock = self.seconds

        @functools.wraps(original)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                clock[step] += time.perf_counter() - started

        self._restore.append((owner, name, original))
        setattr(owner, name, timed)

    def restore(self) -> None:
        """Put the original functions back."""
        for owner, name, original in reversed(self._restore):
            setattr(owner, name, original)
        self._restore.clear()


def end_to_end(dsn: str, bootstrap: str) -> dict[str, Any]:
    """Run the flow once; its rows/s and the seconds of each step."""
    topic = f"bench_sources_{uuid.uuid4().hex[:8]}"
    os.environ["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
    clock = StepClock()
    clock.wrap_async(PostgresReader, "load", "load")
    clock.wrap(PostgresReader, "check_primary_key", "pk_check_reader")
    clock.wrap(KafkaProducer, "produce_from_duckdb", "export")
    clock.wrap(KafkaProducer, "_check_keys", "pk_check_producer")
    clock.wrap(encoding_module, "encode_batch", "encode")
    clock.wrap(producer_module, "send_batch", "produce")
    clock.wrap(KafkaProducer, "commit", "commit")
    flow = LineitemFlow(dsn, topic)
    try:
        started = time.perf_counter()
        result = asyncio.run(flow.run("initial", dataflow=f"bench_{uuid.uuid4().hex[:6]}"))
        wall = time.perf_counter() - started
    finally:
        clock.restore()
        _delete_topic(bootstrap, topic)
    rows = sum(result.rows.values())
    steps = _split(clock.seconds, wall)
    print(f"end to end: {rows} rows in {wall:.2f} s = {rows / wall:,.0f} rows/s")
    for step, seconds in steps.items():
        print(f"  {step:18} {seconds:7.2f} s {100 * seconds / wall:5.1f} %")
    return {
        "end_to_end_rows": rows,
        "end_to_end_rows_per_s": round(rows / wall),
        "end_to_end_seconds": {k: round(v, 2) for k, v in steps.items()},
    }


def _split(seconds: dict[str, float], wall: float) -> dict[str, float]:
    """The flow's wall time by step.

    ``wait for encode``: the export's thread blocked on the encoder process (or reading
    DuckDB batches: what is not key check, encode or produce); ``other``: what is neither
    load, export nor commit (producer
    start, transactions, execution log, topic creation, connections).
    """
    export = seconds["export"]
    return {
        "read": seconds["load"] - seconds["pk_check_reader"],
        "pk_check_reader": seconds["pk_check_reader"],
        "pk_check_producer": seconds["pk_check_producer"],
        "encode (flow thread)": seconds["encode"],
        "produce": seconds["produce"],
        "wait for encode": export
        - seconds["pk_check_producer"]
        - seconds["encode"]
        - seconds["produce"],
        "commit": seconds["commit"],
        "other": wall - seconds["load"] - export - seconds["commit"],
        "wall": wall,
    }


def _delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([topic]).values():
        with contextlib.suppress(Exception):
            future.result(timeout=30)


def load_average() -> str:
    """``uptime``'s load averages."""
    out = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout
    return out.split("load average:")[-1].strip()


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the figures and a RESULT line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sf", type=float, default=0.2, help="TPC-H scale (0.2: 1.2 M rows)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating staging rounds")
    parser.add_argument("--no-end-to-end", action="store_true", help="staging rounds only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    with postgres_server() as dsn:
        rows = load_lineitem(dsn, args.sf)
        time_scanner(dsn)  # untimed: hint bits, cache
        print(f"lineitem rows={rows} sf={args.sf} load_average_before={load_average()}")
        result: dict[str, Any] = {"rows": rows, **staging_rounds(dsn, args.rounds)}
        if not args.no_end_to_end:
            add_primary_key(dsn)
            result.update(end_to_end(dsn, bootstrap))
    result["load_average"] = load_average()
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
