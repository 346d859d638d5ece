"""Benchmark: a table after many micro-batches, without and with a maintenance pass.

Run: ``.venv/bin/python bench/maintenance.py [--batches N] [--rows R] [--rounds K]``

One Delta table (Change Data Feed on, as the writer makes them) gets N micro-batches
(default 500) of R rows (default 100), written the way the writer's small batches are: by
delta-rs in the driver (``write_deltalake`` appends; every fifth batch a MERGE that updates
R/5 stored keys and inserts the rest). Then, in one ``local[2]`` SparkSession started before
the timing:

- ``files_before``/``bytes_before``: data files of the latest version; ``stored_before``:
  files under the table directory (every version, Change Data Feed files);
- ``scan_before_s``: a full scan (count and sum over every column a query reads), best of K;
- ``maintain_s``: one pass of :func:`lakehouse_writer.tables.maintain.maintain_tables` (compaction,
  VACUUM with the platform history of 168 h, so nothing old goes yet; log checkpoint);
- ``files_after``, ``stored_after``, ``scan_after_s`` the same after it;
- ``write_s``: the N batches' wall time (delta-rs), for scale; ``maintain_steps_s``: the
  pass's seconds per step.

Figures go to ``docs/PERFORMANCE.md``. Last line: ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lakehouse_writer.runtime.session import build_spark_session  # noqa: E402
from lakehouse_writer.tables.maintain import maintain_tables  # noqa: E402
from lakehouse_writer.tables.retention import MaintainSettings  # noqa: E402

MERGE_EVERY = 5  # every fifth batch updates stored keys, as a stream of changes does


def _batch(first: int, rows: int, t: int) -> pa.Table:
    ids = list(range(first, first + rows))
    return pa.table(
        {
            "ID": pa.array(ids, pa.int64()),
            "NAME": pa.array([f"customer {i}" for i in ids], pa.string()),
            "AMOUNT": pa.array([float(i % 1000) / 10 for i in ids], pa.float64()),
            "__change_time": pa.array([t] * rows, pa.int64()),
        }
    )


def write(path: str, batches: int, rows: int) -> int:
    """N micro-batches through delta-rs; returns the rows the table holds."""
    from deltalake import DeltaTable, write_deltalake

    write_deltalake(
        path,
        _batch(0, 0, 0),
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    next_id = 0
    for n in range(batches):
        if n % MERGE_EVERY == MERGE_EVERY - 1 and next_id:
            updated = max(1, rows // 5)
            data = _batch(next_id - updated, rows, n)  # R/5 stored keys, the rest new
            (
                DeltaTable(path)
                .merge(data, "t.ID = s.ID", source_alias="s", target_alias="t")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )
            next_id += rows - updated
        else:
            write_deltalake(path, _batch(next_id, rows, n), mode="append")
            next_id += rows
    return next_id


def scan_s(spark: Any, path: str, rounds: int) -> tuple[float, int]:
    """Best seconds of a full scan, and the rows it counted."""
    from pyspark.sql import functions as F

    times, count = [], 0
    for _ in range(rounds):
        started = time.perf_counter()
        row = (
            spark.read.format("delta")
            .load(path)
            .agg(F.count("*").alias("n"), F.sum("AMOUNT"), F.max("NAME"), F.max("__change_time"))
            .collect()[0]
        )
        times.append(time.perf_counter() - started)
        count = int(row["n"])
    return min(times), count


def run(batches: int, rows: int, rounds: int) -> dict[str, Any]:
    """Write, scan, maintain, scan again; the figures."""
    with tempfile.TemporaryDirectory(prefix="bench_maintain_") as lake:
        path = f"{lake}/SHOP/ORDERS"
        started = time.perf_counter()
        expected = write(path, batches, rows)
        write_s = time.perf_counter() - started
        spark = build_spark_session(app_name="bench-maintenance")
        spark.sparkContext.setLogLevel("ERROR")
        try:
            scan_s(spark, path, 1)  # warm-up: JIT, Delta's classes
            before_s, before_rows = scan_s(spark, path, rounds)
            started = time.perf_counter()
            [report] = maintain_tables(spark, lake, ["SHOP.ORDERS"], MaintainSettings())
            maintain_s = time.perf_counter() - started
            if report.error:
                raise SystemExit(f"maintenance failed: {report.error}")
            after_s, after_rows = scan_s(spark, path, rounds)
        finally:
            spark.stop()
    assert before_rows == after_rows == expected, (before_rows, after_rows, expected)
    return {
        "batches": batches,
        "rows_per_batch": rows,
        "table_rows": expected,
        "write_s": round(write_s, 2),
        "files_before": report.files_before,
        "files_after": report.files_after,
        "bytes_before": report.bytes_before,
        "bytes_after": report.bytes_after,
        "stored_before": report.stored_files_before,
        "stored_after": report.stored_files_after,
        "scan_before_s": round(before_s, 3),
        "scan_after_s": round(after_s, 3),
        "maintain_s": round(maintain_s, 2),
        "scan_speedup": round(before_s / after_s, 2),
        "maintain_steps_s": report.steps,
    }


def main() -> None:
    """Parse arguments, run, print the result as the last line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--batches", type=int, default=500)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    result = run(args.batches, args.rows, args.rounds)
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
