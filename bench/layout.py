"""Benchmark: a MERGE of 1,000 changed rows into a large table, clustered by its key or not.

Run: ``.venv/bin/python bench/layout.py [--rows N] [--files F] [--max-file-mb M] [--rounds K]``

Two tables of N rows (default 10,000,000; key ``ID``, three payload columns), created by
:class:`lakehouse_writer.tables.manager.TableManager` (Change Data Feed, deletion vectors,
statistics as the writer makes them), in one ``local[2]`` session:

- ``unclustered``: the rows appended in F Spark tasks by a hash of the key (default 64), as
  Kafka partitions by key hash scatter keys, so every file holds keys from the whole range;
- ``clustered``: the same rows into a table created with ``clusterBy`` ``ID``;

then one :func:`lakehouse_writer.tables.maintain.maintain_tables` pass over both (what
``lakehouse-writer maintain`` does): compaction bin-packs the unclustered table and clusters
the clustered one. ``--max-file-mb`` sets OPTIMIZE's largest file
(``spark.databricks.delta.optimize.maxFileSize``; Delta's default 1 GiB leaves 10 M narrow
rows, ~140 MB, in one file, where no layout can skip a file).

Each table then takes K rounds (default 3; best of K is reported) of two batches through the
writer's own path (:func:`lakehouse_writer.engines.spark.engine.apply_batch`: the batch summary, the
key-range condition of :mod:`lakehouse_writer.rules.merge`, Delta's MERGE), fresh rows each round
(a later change time, other keys; the table is not restored, so each round merges into the
previous round's result):

- ``recent``: 900 updates of keys in a window of the newest 4,500 keys and 100 inserts of
  new keys (the ERP pattern: recent orders change);
- ``uniform``: 900 updates of keys spread evenly over the table and 100 inserts; the batch's
  key range is the whole table, so no layout can help.

Figures per table and pattern: the batch's seconds (``*_s``), the files the MERGE marked or
rewrote (``*_files``: deletion vectors added plus files removed), the rows it copied
(``*_copied``: 0 while deletion vectors are on), Delta's ``scanTimeMs``; ``build_s``; data
files after the pass; the machine's load average. Figures go to ``docs/PERFORMANCE.md``.
Last line: ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lakehouse_writer.engines.spark.engine import apply_batch  # noqa: E402
from lakehouse_writer.engines.spark.engine import upserts as conform  # noqa: E402
from lakehouse_writer.runtime.session import build_spark_session  # noqa: E402
from lakehouse_writer.tables.maintain import maintain_tables  # noqa: E402
from lakehouse_writer.tables.manager import TableInfo, TableManager  # noqa: E402
from lakehouse_writer.tables.retention import MaintainSettings  # noqa: E402
from producer_lib.schema import AvroDecimal, AvroLong, AvroNVarchar, ValueSchema  # noqa: E402

T0 = 1_700_000_000_000_000  # µs: the loaded rows' change time; changes come later
MAX_FILE_SIZE = "spark.databricks.delta.optimize.maxFileSize"
UPDATES, INSERTS, WINDOW = 900, 100, 4_500


def schema(name: str, clustered: bool) -> ValueSchema:
    """The table's value schema: ``ID`` (key), ``NAME``, ``REGION``, ``AMOUNT``."""
    value = ValueSchema(name, "BENCH")
    value.add_field("ID", AvroLong(), nullable=False)
    value.add_field("NAME", AvroNVarchar(40))
    value.add_field("REGION", AvroNVarchar(10))
    value.add_field("AMOUNT", AvroDecimal(10, 2))
    value.add_primary_key("ID")
    if clustered:
        value.set_cluster_columns("ID")
    return value


def decoded(ids: Any, change: str, time_us: int) -> Any:
    """Decoded rows as :mod:`lakehouse_writer.read.decode` yields them, one per ``id`` of
    ``ids``."""
    from pyspark.sql import functions as F

    regions = F.array(*[F.lit(r) for r in ("NORTH", "SOUTH", "EAST", "WEST")])
    none = F.lit(None)
    return ids.select(
        F.col("id").alias("ID"),
        F.concat(F.lit("customer "), F.col("id").cast("string")).alias("NAME"),
        F.element_at(regions, (F.col("id") % 4 + 1).cast("int")).alias("REGION"),
        ((F.col("id") % 100_000) / 100).cast("decimal(10,2)").alias("AMOUNT"),
        F.lit(change).alias("__change_type"),
        F.timestamp_micros(F.lit(time_us)).alias("__change_time"),
        F.lit("BENCH").alias("__source_system"),
        none.cast("string").alias("__source_transaction"),
        none.cast("string").alias("__source_rowid"),
        *[
            none.cast("map<string,string>").alias(c)
            for c in ("__truncate", "__audit", "__extension")
        ],
        F.lit("orders").alias("topic"),
        F.lit(0).alias("partition"),
        F.col("id").alias("offset"),
    )


def load(spark: Any, table: TableInfo, rows: int, files: int) -> None:
    """Append ``rows`` rows in ``files`` tasks by a hash of the key (keys scattered)."""
    from pyspark.sql import functions as F

    data = conform(decoded(spark.range(rows), "I", T0), table)
    data.repartition(files, F.xxhash64("ID")).write.format("delta").mode("append").save(table.path)


def changes(spark: Any, rows: int, pattern: str, round_no: int) -> Any:
    """One batch: 900 updates (``recent`` window or ``uniform``) and 100 inserts, cached."""
    from pyspark.sql import functions as F

    if pattern == "recent":
        first = rows - WINDOW - 1_000 * round_no
        updated = spark.range(UPDATES).select((F.col("id") * 5 + first).alias("id"))
    else:
        step = rows // UPDATES
        updated = spark.range(UPDATES).select((F.col("id") * step + round_no + 1).alias("id"))
    fresh = rows + 10_000 * (2 * round_no + (pattern == "uniform"))
    inserted = spark.range(INSERTS).select((F.col("id") + fresh).alias("id"))
    when = T0 + 1_000_000 * (round_no + 1)
    batch = decoded(updated, "U", when).unionByName(decoded(inserted, "I", when)).coalesce(1)
    batch.cache().count()
    return batch


def merge_once(table: TableInfo, batch: Any, batch_id: int) -> dict[str, float]:
    """One batch through the writer's apply path; its seconds and the MERGE's metrics."""
    from delta.tables import DeltaTable

    started = time.perf_counter()
    apply_batch(batch, batch_id, table, "bench")
    seconds = time.perf_counter() - started
    commit = DeltaTable.forPath(batch.sparkSession, table.path).history(1).collect()[0]
    assert commit["operation"] == "MERGE", commit["operation"]
    m = {k: int(v) for k, v in commit["operationMetrics"].items()}
    assert m["numTargetRowsUpdated"] == UPDATES and m["numTargetRowsInserted"] == INSERTS, m
    return {
        "s": seconds,
        "files": m["numTargetDeletionVectorsAdded"] + m["numTargetFilesRemoved"],
        "copied": m["numTargetRowsCopied"],
        "scan_ms": m["scanTimeMs"],
    }


def data_files(spark: Any, path: str) -> int:
    """Data files of the table's latest version."""
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(spark, path).detail().collect()[0]["numFiles"])


def run(rows: int, files: int, max_file_mb: int | None, rounds: int) -> dict[str, Any]:
    """Build both tables, maintain them, merge K rounds of both patterns; the figures."""
    conf = {MAX_FILE_SIZE: str(max_file_mb * 1024 * 1024)} if max_file_mb else {}
    spark = build_spark_session(app_name="bench-layout", conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    result: dict[str, Any] = {"rows": rows, "load_files": files, "max_file_mb": max_file_mb}
    try:
        with tempfile.TemporaryDirectory(prefix="bench_layout_") as lake:
            manager = TableManager(spark, lake)
            tables = {
                kind: manager.ensure(schema(kind.upper(), kind == "clustered"))
                for kind in ("unclustered", "clustered")
            }
            started = time.perf_counter()
            for table in tables.values():
                load(spark, table, rows, files)
            names = [t.ref.qualified for t in tables.values()]
            reports = maintain_tables(spark, lake, names, MaintainSettings())
            result["build_s"] = round(time.perf_counter() - started, 1)
            for report in reports:
                if report.error:
                    raise SystemExit(f"maintenance failed: {report.error}")
            for kind, table in tables.items():
                result[f"{kind}_data_files"] = data_files(spark, table.path)
                result.update(_merges(spark, kind, table, rows, rounds))
    finally:
        spark.stop()
    for pattern in ("recent", "uniform"):
        u, c = result[f"merge_unclustered_{pattern}_s"], result[f"merge_clustered_{pattern}_s"]
        result[f"ratio_{pattern}"] = round(u / c, 2)
    result["merge_unclustered_s"] = result["merge_unclustered_recent_s"]
    result["merge_clustered_s"] = result["merge_clustered_recent_s"]
    result["ratio"] = result["ratio_recent"]
    result["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return result


def _merges(spark: Any, kind: str, table: TableInfo, rows: int, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {"recent": [], "uniform": []}
    batch_id = 1
    for round_no in range(rounds):
        for pattern, done in runs.items():
            batch = changes(spark, rows, pattern, round_no)
            done.append(merge_once(table, batch, batch_id))
            batch.unpersist()
            batch_id += 1
            print(f"{kind} {pattern} round {round_no}: {done[-1]}", file=sys.stderr, flush=True)
    out: dict[str, Any] = {}
    for pattern, done in runs.items():
        best = min(done, key=lambda r: r["s"])
        prefix = f"merge_{kind}_{pattern}"
        out[f"{prefix}_s"] = round(best["s"], 2)
        out[f"{prefix}_all_s"] = [round(r["s"], 2) for r in done]
        out[f"{prefix}_files"] = [int(r["files"]) for r in done]
        out[f"{prefix}_copied"] = [int(r["copied"]) for r in done]
        out[f"{prefix}_scan_ms"] = [int(r["scan_ms"]) for r in done]
    return out


def main() -> None:
    """Parse arguments, run, print the result as the last line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--max-file-mb", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    result = run(args.rows, args.files, args.max_file_mb, args.rounds)
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
