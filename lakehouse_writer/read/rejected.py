"""The ``_rejected`` layout: a row the writer could not decode or apply, and why.

Every step that refuses rows — decoding (:mod:`lakehouse_writer.read.decode`), an engine's
rule (:meth:`~lakehouse_writer.engines.spark.engine.SparkEngine.reject`) — shapes them with
:func:`rejected_rows`; the commit step appends them to ``<lakehouse>/_rejected``
(:mod:`lakehouse_writer.commit.system_tables`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["REJECTED", "REJECTED_COLUMNS", "rejected_rows"]

REJECTED = "_rejected"
REJECTED_COLUMNS = ("topic", "partition", "offset", "key", "value", "table", "error")


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
