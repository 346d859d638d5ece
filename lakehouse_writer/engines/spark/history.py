"""A small history MERGE's source computed in the driver: the rules in DuckDB, not Spark.

:func:`~lakehouse_writer.rules.history.history_source` is a row of window functions over a
few rows; Spark plans, compiles and runs each as a job, about 8 s for a batch of three rows
here, more than the MERGE itself (docs/PERFORMANCE.md, "History tables"). For a batch of at
most :attr:`DriverHistory.max_rows` rows, the rows and the stored versions they touch are
collected to the driver and the same text runs in DuckDB's dialect; the source goes back to
Spark as a local relation for Delta's MERGE. Larger batches stay in Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakehouse_writer.rules.dialect import DUCKDB
from lakehouse_writer.rules.history import history_source, stored_versions
from lakehouse_writer.runtime import duck
from lakehouse_writer.runtime.lines import dataframe_from_arrow
from lakehouse_writer.tables.history import HISTORY_COLUMNS

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse_writer.rules.sql import TableShape

__all__ = ["DriverHistory"]


class DriverHistory:
    """Computes a history MERGE's source in DuckDB when the batch is small.

    Args:
        max_rows: The most rows of a table's batch whose source is computed in the driver
            (0: none, Spark computes every one).
    """

    def __init__(self, max_rows: int = 10_000) -> None:
        self.max_rows = max_rows

    def takes(self, rows: int, shape: TableShape, present: Sequence[str]) -> bool:
        """True when a batch of ``rows`` rows has its source computed here.

        That is: few rows, and every column they lack has a type DuckDB's dialect spells (it
        is cast NULL).
        """
        if rows > self.max_rows:
            return False
        try:
            for column, kind in shape.columns.items():
                if column not in present and column not in HISTORY_COLUMNS:
                    DUCKDB.types(kind)
        except ValueError:
            return False
        return True

    def source(
        self,
        spark: SparkSession,
        rows: pa.Table,
        candidates: pa.Table,
        shape: TableShape,
        present: Sequence[str],
        before: bool,
    ) -> DataFrame | None:
        """The MERGE's source of ``rows`` in Spark; None: no version to write (nor to drop).

        ``candidates``: stored versions, among them every one of the keys of ``rows`` (those of
        their first key column's values, say); the versions of their keys are picked here.
        """
        con = duck.cursor()
        try:
            for name, table in (("history_rows", rows), ("history_candidates", candidates)):
                con.register(f"{name}_arrow", table)  # as tables: scans of them are plain
                con.execute(f'CREATE TEMP TABLE "{name}" AS SELECT * FROM "{name}_arrow"')
                con.unregister(f"{name}_arrow")
            touched = stored_versions('"history_candidates"', '"history_rows"', shape, DUCKDB)
            con.execute(f'CREATE TEMP TABLE "history_stored" AS {touched}')
            sql = history_source(
                '"history_rows"',
                '"history_stored"',
                shape,
                present,
                DUCKDB,
                before=before,
                cast=False,
            )
            found = con.execute(sql).to_arrow_table()
        finally:
            con.close()
        return dataframe_from_arrow(spark, found) if found.num_rows else None
