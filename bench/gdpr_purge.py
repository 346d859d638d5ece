"""Benchmark: ways to leave no current file holding a GDPR-deleted row, on a writer's table.

Run: ``.venv/bin/python bench/gdpr_purge.py [--rows N] [--files F] [--master M] [--ways ...]``

For each way, a fresh table of the writer's shape (``tables.create_table_sql``: Change Data
Feed, deletion vectors) gets N rows (default 100,000) in F files (default 4) of disjoint key
ranges; a MERGE with deletion vectors then updates one key and deletes another (their old
images stay in the first file's range, behind a deletion vector), and the timed GDPR batch
deletes four keys, two of them those. Ways:

- ``merge``: the GDPR MERGE alone (deletion vectors: the rows stay in their files);
- ``writer``: the MERGE, then :func:`lakehouse_writer.engines.spark.gdpr.purge_deleted_rows` (its
look
  for deletion vectors before and after, the rewrite, the mark commit);
- ``zorder``: the MERGE, then the rewrite the writer runs: ``OPTIMIZE ... ZORDER BY (ID)``;
- ``reorg``: the MERGE, then ``REORG TABLE ... APPLY (PURGE)`` (fails on a cluster);
- ``dv_off_merge``: the MERGE with ``merge.deletionVectors.persistent=false``;
- ``optimize_ratio0``: the MERGE, then ``OPTIMIZE`` with ``maxDeletedRowsRatio=0``;
- ``overwrite``: the MERGE, then the table read and written back with ``dataChange=false``.

Per way: ``merge_s``, ``purge_s`` (after the MERGE), the files the purge replaced, and
``left``: deleted keys some current data file still holds, read with pyarrow (deletion vectors
ignored); a way with ``left`` > 0 is no purge. Figures go to ``docs/PERFORMANCE.md``, section
"GDPR purge". Last line: ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lakehouse_writer.engines.spark.gdpr import purge_deleted_rows  # noqa: E402
from lakehouse_writer.runtime.failure import root_cause  # noqa: E402
from lakehouse_writer.runtime.session import build_spark_session  # noqa: E402
from lakehouse_writer.tables.manager import TableManager  # noqa: E402
from tests.support.writer import sample_schema  # noqa: E402

WAYS = ("merge", "writer", "zorder", "reorg", "dv_off_merge", "optimize_ratio0", "overwrite")
UPDATED, DELETED = 60_000, 70_001  # changed before the GDPR batch: old images stay behind


def _gdpr_keys(rows: int) -> list[int]:
    return [5, 12_345 % rows, UPDATED % rows, DELETED % rows]


def _load(spark: Any, lake: Path, rows: int, files: int) -> Any:
    """A writer's table of ``rows`` rows in ``files`` files, then a MERGE leaving old images."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    table = TableManager(spark, str(lake)).ensure(sample_schema())
    frame = spark.range(rows).select(
        F.col("id").alias("ID"),
        F.concat(F.lit("name-"), F.col("id")).alias("NAME"),
        F.lit("A").alias("REGION"),
        F.lit("R").alias("__change_type"),
        F.timestamp_micros(F.lit(1)).alias("__change_time"),
        F.lit("BENCH").alias("__source_system"),
    )
    schema = spark.read.format("delta").load(table.path).schema
    frame = frame.select(
        *[
            F.col(f.name) if f.name in frame.columns else F.lit(None).cast(f.dataType).alias(f.name)
            for f in schema
        ]
    )
    frame.repartitionByRange(files, "ID").write.format("delta").mode("append").save(table.path)
    changes = spark.createDataFrame(
        [(UPDATED % rows, "moved", "U"), (DELETED % rows, None, "D")],
        "ID long, NAME string, c string",
    )
    (
        DeltaTable.forPath(spark, table.path)
        .alias("t")
        .merge(changes.alias("s"), "t.ID = s.ID")
        .whenMatchedDelete("s.c = 'D'")
        .whenMatchedUpdate("s.c = 'U'", set={"NAME": "s.NAME"})
        .execute()
    )
    return table


def _gdpr_merge(spark: Any, path: str, keys: list[int]) -> None:
    from delta.tables import DeltaTable

    source = spark.createDataFrame([(k,) for k in keys], "ID long")
    DeltaTable.forPath(spark, path).alias("t").merge(
        source.alias("s"), "t.ID = s.ID"
    ).whenMatchedDelete().execute()


def _with_conf(spark: Any, conf: dict[str, str], run: Callable[[], None]) -> None:
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        run()
    finally:
        for key in conf:
            spark.conf.unset(key)


def _purges(spark: Any, table: Any, keys: list[int]) -> dict[str, Callable[[], None]]:
    path, target = table.path, f"delta.`{table.path}`"
    delta = "spark.databricks.delta."
    return {
        "merge": lambda: None,
        "writer": lambda: purge_deleted_rows(spark, table, 1),
        "zorder": lambda: spark.sql(f"OPTIMIZE {target} ZORDER BY (ID)").collect(),
        "reorg": lambda: spark.sql(f"REORG TABLE {target} APPLY (PURGE)").collect(),
        "optimize_ratio0": lambda: _with_conf(
            spark,
            {f"{delta}optimize.maxDeletedRowsRatio": "0", f"{delta}optimize.minFileSize": "1"},
            lambda: spark.sql(f"OPTIMIZE {target}").collect(),
        ),
        "overwrite": lambda: (
            spark.read.format("delta")
            .load(path)
            .write.format("delta")
            .option("dataChange", "false")
            .mode("overwrite")
            .save(path)
        ),
    }


def _left(spark: Any, path: str, keys: list[int]) -> int:
    """GDPR-deleted keys some current data file holds (deletion vectors ignored)."""
    held: set[int] = set()
    for uri in spark.read.format("delta").load(path).inputFiles():
        ids = pq.read_table(unquote(uri.removeprefix("file:")), columns=["ID"]).column("ID")
        held |= set(ids.to_pylist()) & set(keys)
    return len(held)


def _way(spark: Any, root: Path, way: str, rows: int, files: int) -> dict[str, Any]:
    lake = root / way
    shutil.rmtree(lake, ignore_errors=True)
    table = _load(spark, lake, rows, files)
    keys = _gdpr_keys(rows)
    started = time.monotonic()
    if way == "dv_off_merge":
        conf = {"spark.databricks.delta.merge.deletionVectors.persistent": "false"}
        _with_conf(spark, conf, lambda: _gdpr_merge(spark, table.path, keys))
    else:
        _gdpr_merge(spark, table.path, keys)
    merged = time.monotonic()
    merge_version = _version(spark, table.path)
    purge_start = time.monotonic()
    error = None
    try:
        if way != "dv_off_merge":
            _purges(spark, table, keys)[way]()
    except Exception as exc:  # noqa: BLE001 - a way that fails is a result
        error = root_cause(exc)
    done = time.monotonic()
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, table.path).history().collect()
    after = [h for h in history if h["version"] > merge_version] or [history[0]]
    metrics = [dict(h["operationMetrics"] or {}) for h in after]
    return {
        "way": way,
        "merge_s": round(merged - started, 2),
        "purge_s": round(done - purge_start, 2),
        "operations": [h["operation"] for h in after],
        "files_removed": sum(
            _count(m, "numRemovedFiles", "numTargetFilesRemoved") for m in metrics
        ),
        "files_added": sum(
            _count(m, "numAddedFiles", "numTargetFilesAdded", "numFiles") for m in metrics
        ),
        "left": _left(spark, table.path, keys),
        "error": error,
    }


def _count(metrics: dict[str, str], *names: str) -> int:
    """The first of ``names`` a commit's operation metrics hold, as a number (0: none)."""
    return next((int(metrics[n]) for n in names if n in metrics), 0)


def _version(spark: Any, path: str) -> int:
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(spark, path).history(1).collect()[0]["version"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--ways", default=",".join(WAYS))
    args = parser.parse_args()
    conf = {"spark.sql.shuffle.partitions": "2", "spark.ui.showConsoleProgress": "false"}
    spark = build_spark_session(app_name="bench-gdpr", master=args.master, conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench_gdpr_") as root:
        for way in args.ways.split(","):
            results.append(_way(spark, Path(root), way, args.rows, args.files))
            print(json.dumps(results[-1]), flush=True)
    spark.stop()
    print(
        "RESULT "
        + json.dumps(
            {"rows": args.rows, "files": args.files, "master": args.master, "ways": results}
        )
    )


if __name__ == "__main__":
    main()
