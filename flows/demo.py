"""``make demo``: the platform end to end on this machine, with a readable printout.

1. Start the devstack Kafka broker (unless ``KAFKA_BOOTSTRAP_SERVERS`` points elsewhere).
2. Generate a TPC-H source system (DuckDB, scale factor ``DEMO_TPCH_SCALE``, default 0.01).
3. ``tpch`` flow, initial load (8 tables); ``lakehouse-writer run --once`` applies it to Delta
   and registers the tables by name in a Hive metastore (embedded Derby, in the work
   directory; ``LAKEHOUSE_CATALOG=spark_catalog``): the names it registered are printed.
4. ``lakehouse`` flow, initial load: revenue per segment computed from those Delta tables.
5. Change the source; ``tpch`` flow, delta load; the writer again.
6. Row counts per table and TPC-H Q1 and Q3 on the Delta tables next to the source: equal.
7. ``lakehouse`` flow, delta load: it reads the changes of ``orders`` and ``customer`` from
   their change streams (the Change Data Feed) since its pointer's versions and publishes the
   segments whose figures moved; the writer again; the Delta table compared with the same
   SQL on the source.

Exits non-zero if anything disagrees. Stops the broker if it started it.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

SCALE = float(os.environ.get("DEMO_TPCH_SCALE", "0.01"))
TPCH_TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
REGISTERED = re.compile(r"table registered table=\S+ name=(\S+)")  # the writer's log line
QUERIES = (1, 3)  # TPC-H Q1 (lineitem) and Q3 (customer, orders, lineitem)
REVENUE = (
    "SELECT c.c_mktsegment AS segment, count(*) AS order_count, "
    "sum(o.o_totalprice) AS revenue FROM orders o JOIN customer c "
    "ON o.o_custkey = c.c_custkey GROUP BY 1 ORDER BY 1"
)


def main() -> int:
    """Run the demo; return the process exit code."""
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="flow-demo-"))
    try:
        with _broker() as bootstrap:
            ok = _pipeline(bootstrap, work)
    finally:
        if os.environ.get("DEMO_KEEP"):
            print(f"-> kept the work directory {work} (DEMO_KEEP)")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{'OK' if ok else 'MISMATCH'}: demo finished in {time.monotonic() - started:.0f} s")
    return 0 if ok else 1


def _pipeline(bootstrap: str, work: Path) -> bool:
    from flows.lakehouse import LakehouseFlow
    from flows.tpch import TpchFlow
    from flows.tpch_source import apply_changes, create_source

    run_id = uuid.uuid4().hex[:8]
    source, lake = work / "source.duckdb", work / "lake"
    os.environ.update(
        {
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "KAFKA_TOPIC_PARTITIONS": "3",
            "TPCH_SOURCE_PATH": str(source),
            "TPCH_TOPIC_PREFIX": f"demo_{run_id}.tpch.",
            "LAKEHOUSE_PATH": str(lake),
            "LAKEHOUSE_FLOW_TOPIC": f"demo_{run_id}.revenue",
            "LAKEHOUSE_CATALOG": "spark_catalog",  # docs/CATALOG.md
        }
    )
    _step(
        f"generate the TPC-H source system (scale factor {SCALE})",
        lambda: create_source(source, SCALE),
    )
    _show_run(_step("tpch flow: initial load", lambda: asyncio.run(TpchFlow().run("initial"))))
    _writer(work, bootstrap, run_id)
    _show_run(
        _step(
            "lakehouse flow: initial load, revenue per segment from the Delta tables",
            lambda: asyncio.run(LakehouseFlow().run("initial")),
        )
    )
    changes = _step(
        "change the source: update, add and delete orders",
        lambda: apply_changes(source, updated=200, added=100, deleted=50),
    )
    print(f"   {changes}")
    _show_run(_step("tpch flow: delta load", lambda: asyncio.run(TpchFlow().run("delta"))))
    _writer(work, bootstrap, run_id)
    ok = _compare_tables(source, lake)
    ok = _compare_queries(source, lake) and ok
    _show_run(
        _step(
            "lakehouse flow: delta load from the tables' change streams",
            lambda: asyncio.run(LakehouseFlow().run("delta")),
        )
    )
    _writer(work, bootstrap, run_id)
    return _compare_revenue(source, lake) and ok


def _step(title: str, action: Callable[[], Any]) -> Any:
    print(f"-> {title} ...", flush=True)
    t0 = time.monotonic()
    result = action()
    print(f"   done in {time.monotonic() - t0:.1f} s", flush=True)
    return result


def _show_run(result: Any) -> None:
    rows = ", ".join(f"{table}={n}" for table, n in sorted(result.rows.items()))
    print(f"   {result.status}: {rows or 'no rows'}; delta pointer {result.delta_pointer}")


@contextmanager
def _broker() -> Iterator[str]:
    from devstack import broker

    configured = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if configured:
        print(f"-> using Kafka at {configured} (KAFKA_BOOTSTRAP_SERVERS)")
    with broker.bootstrap_servers(lambda up: _step("start the local Kafka broker", up)) as kafka:
        yield kafka


def _writer(work: Path, bootstrap: str, run_id: str) -> None:
    command = [
        sys.executable,
        "-m",
        "lakehouse_writer",
        "run",
        "--once",
        "--lakehouse",
        str(work / "lake"),
        "--checkpoint",
        str(work / "checkpoint"),
        "--topics",
        f"demo_{run_id}\\..*",
        "--bootstrap-servers",
        bootstrap,
    ]
    metastore = f"jdbc:derby:;databaseName={work / 'metastore_db'};create=true"
    command += ["--conf", f"spark.hadoop.javax.jdo.option.ConnectionURL={metastore}"]
    command += ["--conf", f"spark.sql.warehouse.dir={work / 'warehouse'}"]
    log = work / "writer.log"
    before = log.read_text() if log.exists() else ""
    with log.open("a") as out:
        code = _step(
            "lakehouse-writer run --once (Spark, local[2])",
            lambda: subprocess.call(command, stdout=out, stderr=subprocess.STDOUT, cwd=work),
        )
    if code != 0:
        print(log.read_text()[-4000:])
        raise SystemExit(f"the lakehouse writer failed (exit code {code}); log above")
    names = sorted(set(REGISTERED.findall(log.read_text()[len(before) :])))
    if names:
        print(f"   registered in the Hive metastore ({work / 'metastore_db'}): {', '.join(names)}")


@contextmanager
def _lakehouse(lake: Path, namespace: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB whose views are the lakehouse tables of ``namespace``.

    DuckDB's delta extension reads them (delta-kernel: column mapping, deletion vectors and
    type widening, which the writer's tables use and delta-rs 1.6 cannot read yet).
    """
    from producer_lib.staging import load_packaged_extension

    con = duckdb.connect()
    load_packaged_extension(con, "delta")
    try:
        for path in sorted((lake / namespace).iterdir()):
            location = str(path).replace("'", "''")
            con.execute(f"CREATE VIEW \"{path.name}\" AS SELECT * FROM delta_scan('{location}')")
        yield con
    finally:
        con.close()


def _compare_tables(source: Path, lake: Path) -> bool:
    print("\n   table        source rows   Delta rows")
    ok = True
    with duckdb.connect(str(source), read_only=True) as src, _lakehouse(lake, "tpch") as delta:
        for table in TPCH_TABLES:
            a = src.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            b = delta.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            ok = ok and a == b
            print(f"   {table:<12} {a:>11,} {b:>12,}   {'equal' if a == b else 'DIFFERENT'}")
    return ok


def _compare_queries(source: Path, lake: Path) -> bool:
    ok = True
    with duckdb.connect(str(source), read_only=True) as src, _lakehouse(lake, "tpch") as delta:
        for number in QUERIES:
            sql = _tpch_query(number)
            a, b = src.execute(sql).fetchall(), delta.execute(sql).fetchall()
            ok = ok and a == b
            print(
                f"\n   TPC-H Q{number}: {len(a)} rows on the source, {len(b)} on Delta: "
                f"{'equal' if a == b else 'DIFFERENT'}"
            )
            for row_a, row_b in list(zip(a, b, strict=False))[:3]:
                print(f"     source {_fmt(row_a)}\n     delta  {_fmt(row_b)}")
    return ok


def _tpch_query(number: int) -> str:
    from producer_lib.staging import load_packaged_extension

    con = duckdb.connect()
    load_packaged_extension(con, "tpch")
    sql = "SELECT query FROM tpch_queries() WHERE query_nr = ?"
    return con.execute(sql, [number]).fetchone()[0]


def _compare_revenue(source: Path, lake: Path) -> bool:
    with duckdb.connect(str(source), read_only=True) as src:
        expected = src.execute(REVENUE).fetchall()
    with _lakehouse(lake, "lakehouse") as delta:
        got = delta.execute(
            "SELECT segment, order_count, revenue FROM revenue_by_segment ORDER BY 1"
        ).fetchall()
    print("\n   revenue_by_segment (Delta)            same SQL on the source")
    for row_a, row_b in zip(got, expected, strict=False):
        print(f"   {_fmt(row_a):<38} {_fmt(row_b)}")
    print(f"   {'equal' if got == expected else 'DIFFERENT'}")
    return got == expected


def _fmt(row: tuple) -> str:
    return " | ".join(str(v) for v in row)


if __name__ == "__main__":
    sys.exit(main())
