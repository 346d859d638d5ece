"""System tables: ``_rejected`` and the tables of the system topics.

``_rejected`` holds every row the writer could not decode or apply, with where it came from
(topic, partition, offset), its raw key and value bytes, the table it was meant for (when
known) and the error. ``_commits``, ``_execution_log`` and ``_lineage`` hold the JSON records
of the system topics of the same names (see ``docs/WIRE.md``), parsed where the layout is fixed.
All are append-only Delta tables at ``<lakehouse>/<name>``, written idempotently per batch.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lakehouse_writer import txn

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

log = logging.getLogger(__name__)

REJECTED = "_rejected"
REJECTED_COLUMNS = ("topic", "partition", "offset", "key", "value", "table", "error")
COMMIT_JSON_SCHEMA = (
    "commit_id STRING, producer STRING, source_system STRING, function_name STRING, "
    "transaction_time BIGINT, "
    "tables ARRAY<STRUCT<topic: STRING, `table`: STRING, `rows`: BIGINT>>, "
    "partitions ARRAY<STRUCT<topic: STRING, `partition`: INT, min_offset: BIGINT, "
    "max_offset: BIGINT, `rows`: BIGINT>>"
)


def rejected_rows(df: DataFrame, error: Column | str, table: str | None) -> DataFrame:
    """Rows of ``df`` in the ``_rejected`` layout, with ``error`` as the reason.

    ``df`` needs ``topic``, ``partition``, ``offset``; raw bytes come from ``__raw_key`` /
    ``__raw_value`` (or ``key``/``value``) when present.
    """
    from pyspark.sql import functions as F

    def raw(*names: str) -> Column:
        for name in names:
            if name in df.columns:
                return F.col(name).cast("binary")
        return F.lit(None).cast("binary")

    return df.select(
        F.col("topic").cast("string").alias("topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        raw("__raw_key", "key").alias("key"),
        raw("__raw_value", "value").alias("value"),
        F.lit(table).cast("string").alias("table"),
        (F.lit(error) if isinstance(error, str) else error).cast("string").alias("error"),
    )


def append_system(df: DataFrame, path: str, instance_id: str, batch_id: int) -> None:
    """Append ``df`` to the system table at ``path``, once per batch (idempotent)."""
    from pyspark.sql import functions as F

    (
        df.withColumn("batch_id", F.lit(batch_id).cast("long"))
        .withColumn("written_at", F.current_timestamp())
        .write.format("delta")
        .mode("append")
        .option("mergeSchema", "true")
        .option("txnAppId", txn.app_id_for(instance_id, path.rsplit("/", 1)[-1]))
        .option("txnVersion", txn.txn_version(batch_id, txn.STEP_SYSTEM))
        .save(path)
    )


def commit_rows(df: DataFrame, table_versions: dict[str, int]) -> DataFrame:
    """Parse ``_commits`` messages; add the Delta version of each table after this batch."""
    from pyspark.sql import functions as F

    versions = F.create_map(*[F.lit(x) for kv in table_versions.items() for x in kv]) if (
        table_versions
    ) else F.lit(None).cast("map<string,bigint>")
    parsed = F.from_json(F.col("value").cast("string"), COMMIT_JSON_SCHEMA)
    raw = F.col("value").cast("string").alias("raw")
    return df.select(parsed.alias("c"), "topic", "partition", "offset", raw).select(
        "c.*",
        F.timestamp_micros("c.transaction_time").alias("transaction_ts"),
        versions.alias("table_versions"),
        "topic", "partition", "offset", "raw",
    )  # fmt: skip


def json_rows(df: DataFrame, fields: tuple[str, ...]) -> DataFrame:
    """``_execution_log`` / ``_lineage`` messages: key, JSON value and the named top fields."""
    from pyspark.sql import functions as F

    value = F.col("value").cast("string")
    picked = [F.get_json_object(value, f"$.{name}").alias(name) for name in fields]
    return df.select(
        F.col("key").cast("string").alias("key"), *picked, value.alias("value"),
        "topic", "partition", "offset",
    )  # fmt: skip
