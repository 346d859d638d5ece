"""Benchmark: Delta auto-compaction or a maintenance pass, for a streaming writer's table.

Run: ``.venv/bin/python bench/compaction.py [--batches N] [--rows R] [--variants a,b,c]``

One table per variant, created by :class:`lakehouse_writer.tables.manager.TableManager` as the
writer makes it (the ``bench/layout.py`` shape: key ``ID`` and three payload columns; Change Data
Feed, deletion vectors), takes N micro-batches (default 500) of R rows (default 100: R/5
updates of the previous batch's keys, the rest new keys) through the writer's own path,
:func:`lakehouse_writer.route.router.Router.apply`, in one ``local[2]`` session:

- ``spark_auto``: Spark MERGEs, the table with ``delta.autoOptimize.autoCompact = true``
  (Delta's auto-compaction: after a commit that leaves enough small files, a compaction runs
  inside the same write, synchronously);
- ``spark_off``: Spark MERGEs, no auto-compaction (the writer's default);
- ``deltars``: the writer's small-batch path, delta-rs in the driver
  (the delta-rs engine); Spark's auto-compaction cannot
  run there.

Per variant: ``write_s`` (the N batches), batch seconds p50/p99/max, the compactions
auto-compaction committed, data files and bytes of the latest version, a full scan (count,
sum, max; best of 3), then one :func:`lakehouse_writer.tables.maintain.maintain_tables` pass
(``maintain_s``) and the files and scan after it. Figures go to ``docs/PERFORMANCE.md``.
Last line: ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from layout import T0, decoded, schema  # noqa: E402  (bench/ is this script's directory)

from bench.maintenance import scan_s  # noqa: E402
from lakehouse_writer.engines.delta_rs.writes import DeltaRsWrites  # noqa: E402
from lakehouse_writer.route.router import Router, TableRows  # noqa: E402
from lakehouse_writer.runtime.session import build_spark_session  # noqa: E402
from lakehouse_writer.tables.maintain import maintain_tables  # noqa: E402
from lakehouse_writer.tables.manager import TableInfo, TableManager  # noqa: E402
from lakehouse_writer.tables.retention import MaintainSettings  # noqa: E402

AUTO_COMPACT = "delta.autoOptimize.autoCompact"  # the table property; Delta 4.x reads it
VARIANTS = ("spark_auto", "spark_off", "deltars")


def batch_rows(spark: Any, n: int, rows: int) -> Any:
    """Batch ``n``: R/5 updates of batch n-1's newest keys, then new keys."""
    from pyspark.sql import functions as F

    updates = rows // 5 if n else 0
    stored = rows + (n - 1) * (rows - updates) if n else 0  # keys batches 0..n-1 stored
    first = stored - updates
    ids = spark.range(first, first + rows)
    when = T0 + 1_000_000 * n
    old = decoded(ids.filter(F.col("id") < first + updates), "U", when)
    new = decoded(ids.filter(F.col("id") >= first + updates), "I", when)
    return old.unionByName(new).coalesce(1)


def write(spark: Any, table: TableInfo, batches: int, rows: int, small: bool) -> list[float]:
    """N batches through the router (Spark's engine, or delta-rs's); each batch's seconds."""
    router = Router(DeltaRsWrites() if small else DeltaRsWrites(0), table.path, 0, "bench")
    times = []
    for n in range(batches):
        started = time.perf_counter()
        data = TableRows(table, batch_rows(spark, n, rows))
        result = router.apply(data, n, (), spark, "delta-rs" if small else "spark")
        times.append(time.perf_counter() - started)
        if small and result.engine != "delta-rs":
            raise SystemExit(f"batch {n} did not take the delta-rs path")
        if n % 50 == 49:
            print(f"{table.ref.name}: {n + 1} batches", file=sys.stderr, flush=True)
    return times


def layout(spark: Any, path: str) -> tuple[int, int, int]:
    """Data files and bytes of the latest version; OPTIMIZE commits in the history."""
    from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, path)
    detail = table.detail().collect()[0]
    optimizes = table.history().filter("operation = 'OPTIMIZE'").count()
    return int(detail["numFiles"]), int(detail["sizeInBytes"]), int(optimizes)


def variant(spark: Any, lake: str, name: str, batches: int, rows: int) -> dict[str, Any]:
    """One variant's table: write, look, maintain, look again."""
    table = TableManager(spark, lake).ensure(schema(name.upper(), clustered=False))
    if name == "spark_auto":
        spark.sql(f"ALTER TABLE delta.`{table.path}` SET TBLPROPERTIES ('{AUTO_COMPACT}' = 'true')")
    times = write(spark, table, batches, rows, small=name == "deltars")
    expected = batches * (rows - rows // 5) + rows // 5
    files, size, compactions = layout(spark, table.path)
    scan_before, counted = scan_s(spark, table.path, 3)
    started = time.perf_counter()
    [report] = maintain_tables(spark, lake, [table.ref.qualified], MaintainSettings())
    maintain_s = time.perf_counter() - started
    if report.error:
        raise SystemExit(f"maintenance failed: {report.error}")
    scan_after, counted_after = scan_s(spark, table.path, 3)
    assert counted == counted_after == expected, (counted, counted_after, expected)
    ordered = sorted(times)
    return {
        "write_s": round(sum(times), 1),
        "batch_p50_s": round(statistics.median(times), 2),
        "batch_p99_s": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
        "batch_max_s": round(ordered[-1], 2),
        "auto_compactions": compactions,
        "files": files,
        "bytes": size,
        "scan_s": round(scan_before, 3),
        "maintain_s": round(maintain_s, 1),
        "files_after_maintain": report.files_after,
        "scan_after_maintain_s": round(scan_after, 3),
    }


def run(batches: int, rows: int, variants: list[str]) -> dict[str, Any]:
    """Every variant in one session; the figures."""
    spark = build_spark_session(app_name="bench-compaction")
    spark.sparkContext.setLogLevel("ERROR")
    result: dict[str, Any] = {"batches": batches, "rows_per_batch": rows}
    try:
        with tempfile.TemporaryDirectory(prefix="bench_compaction_") as lake:
            for name in variants:
                result[name] = variant(spark, lake, name, batches, rows)
                print(f"{name}: {result[name]}", file=sys.stderr, flush=True)
    finally:
        spark.stop()
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return result


def main() -> None:
    """Parse arguments, run, print the result as the last line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--batches", type=int, default=500)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    result = run(args.batches, args.rows, args.variants.split(","))
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
