"""Small frames of Python rows, built through Arrow.

The writer appends a few rows to its own tables every batch (``_writer_state``, ``_commits``);
building them through Arrow, not row by row, keeps that off every batch's time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = ["arrow_rows", "ddl_struct", "local_frame"]


def local_frame(spark: SparkSession, rows: Sequence[tuple[Any, ...]], schema: str) -> DataFrame:
    """A small DataFrame of Python ``rows`` in ``schema`` (a DDL string), built through Arrow.

    ``spark.createDataFrame(rows, schema)`` hands a list of rows to a Python worker process to
    convert: 0.2-0.3 s a call on this machine, even for three rows. From a pyarrow table it
    takes about 0.02 s. Every batch appends a few such rows (``_writer_state``, and
    ``_commits`` when it has some), so that is time off every batch.
    """
    from lakehouse_writer.runtime.lines import dataframe_from_arrow

    return dataframe_from_arrow(spark, arrow_rows(rows, schema), ddl_struct(schema))


def arrow_rows(rows: Sequence[tuple[Any, ...]], schema: str) -> pa.Table:
    """Python ``rows`` as a pyarrow table in ``schema`` (a DDL string), Spark's Arrow types."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow = to_arrow_schema(ddl_struct(schema))
    columns = list(zip(*rows, strict=True)) or [() for _ in arrow]
    return pa.table(
        [pa.array(list(c), type=f.type) for c, f in zip(columns, arrow, strict=True)], schema=arrow
    )


def ddl_struct(schema: str) -> StructType:
    """The struct type of a DDL string (``a INT, b STRING``)."""
    from lakehouse_writer.runtime.lines import struct_from_ddl

    return struct_from_ddl(schema)
