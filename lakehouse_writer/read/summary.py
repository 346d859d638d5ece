"""What a table's rows of one batch hold, from one aggregate pass: :class:`RowSummary`.

The batch's scan (:mod:`lakehouse_writer.read.scan`), its decode
(:mod:`lakehouse_writer.read.decode`) and the reload (:mod:`lakehouse_writer.engines.spark.reload`)
compute it on the way, in the job that reads the rows;
:func:`~lakehouse_writer.engines.table.apply_table` uses it to choose its steps (the TRUNCATEs
to apply, the MERGE's key range, the fast append) without a job of its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse_writer.rules.truncate import Truncate, distinct_truncates
from lakehouse_writer.runtime.session import quote_name

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from lakehouse_writer.tables.manager import TableInfo


@dataclass(frozen=True)
class RowSummary:
    """One aggregate pass over a table's batch rows.

    Attributes:
        counts: Rows per ``__change_type`` (None for a null type).
        key_range: Lowest and highest value of the first key column over the rows that are
            not TRUNCATEs (whose key fields hold placeholders); None when there is no key, no
            such row, or one of them has a NULL there. The MERGE restricts the target to it,
            so Delta skips the data files outside it.
        oldest: The oldest ``__change_time`` (µs) of the rows that are not TRUNCATEs; None
            when there is no such row. A batch whose TRUNCATEs are not newer than it needs no
            MERGE before them (:func:`_segments`).
        truncates: The distinct TRUNCATE rows, oldest first (from the same pass: no job of
            their own).
    """

    counts: dict[str | None, int]
    key_range: tuple[Any, Any] | None
    oldest: int | None
    truncates: tuple[Truncate, ...]

    @classmethod
    def of_groups(cls, groups: Iterable[Any]) -> RowSummary:
        """From the rows of :func:`summary_aggregates` grouped by change type (first)."""
        return cls.of_counts(
            (g[0], g["n"], g["valued"], g["lo"], g["hi"], g["oldest"], g["truncates"])
            for g in groups
        )

    @classmethod
    def of_counts(cls, groups: Iterable[tuple[Any, ...]]) -> RowSummary:
        """From one tuple per group of rows of one change type.

        Each tuple: change type, rows, rows with a first key, lowest key, highest key, oldest,
        and the group's TRUNCATE rows (``t``: time µs, ``s``: scope JSON; or None). A change
        type may come in several tuples (one per partition, say); they add up.
        """
        by_change: dict[str | None, tuple[int, int | None, Any, Any, int | None]] = {}
        found: list[tuple[int, Any]] = []
        for change, n, valued, lo, hi, oldest, truncates in groups:
            found += truncate_records(truncates or ())
            if change in by_change:
                m, v, low, high, old = by_change[change]
                valued = None if v is None or valued is None else v + valued
                lo, hi, oldest = _least(low, lo), _greatest(high, hi), _least(old, oldest)
                n += m
            by_change[change] = (n, valued, lo, hi, oldest)
        counts = {change: n for change, (n, *_) in by_change.items()}
        keyed = [g for change, g in by_change.items() if change != "T"]
        oldest = min((g[4] for g in keyed if g[4] is not None), default=None)
        truncates = tuple(distinct_truncates(found))
        if not keyed or any(valued is None or valued < n for n, valued, *_ in keyed):
            return cls(counts, None, oldest, truncates)  # no key column, or a NULL key
        key_range = (min(g[2] for g in keyed), max(g[3] for g in keyed))
        return cls(counts, key_range, oldest, truncates)

    def merge(self, other: RowSummary) -> RowSummary:
        """The summary of both sets of rows (one table's rows of two writer schemas)."""
        counts = dict(self.counts)
        for change, n in other.counts.items():
            counts[change] = counts.get(change, 0) + n
        oldest = _least(self.oldest, other.oldest)
        both = (*self.truncates, *other.truncates)
        truncates = tuple(distinct_truncates((t.time_us, t.scope) for t in both))
        mine, theirs = (any(c != "T" for c in x.counts) for x in (self, other))
        if not (mine and theirs):
            key_range = self.key_range if mine else other.key_range
        elif self.key_range is None or other.key_range is None:
            key_range = None
        else:
            key_range = (
                min(self.key_range[0], other.key_range[0]),
                max(self.key_range[1], other.key_range[1]),
            )
        return RowSummary(counts, key_range, oldest, truncates)


def summary_aggregates(
    first_key: Column | None, change_time: Column, change: Column, truncate: Column
) -> list[Column]:
    """The aggregates of :class:`RowSummary`, to group by change type (``change``).

    They are: rows (``n``); of the first key column (None: no key) the rows with a value,
    the lowest and the highest; the oldest ``change_time`` in µs (``oldest``); and the
    distinct TRUNCATE rows (``truncates``: their time in µs and their scope ``truncate`` as
    JSON), so the TRUNCATEs need no pass of their own.
    """
    from pyspark.sql import functions as F

    n = F.count(F.lit(1)).alias("n")
    oldest = F.min(F.unix_micros(change_time)).alias("oldest")
    truncates = F.collect_set(F.when(change == "T", truncate_row(change_time, truncate)))
    truncates = truncates.alias("truncates")
    if first_key is None:
        none = F.lit(None)
        return [n, none.alias("valued"), none.alias("lo"), none.alias("hi"), oldest, truncates]
    return [
        n,
        F.count(first_key).alias("valued"),
        F.min(first_key).alias("lo"),
        F.max(first_key).alias("hi"),
        oldest,
        truncates,
    ]


def truncate_row(change_time: Column, truncate: Column) -> Column:
    """A TRUNCATE row as the summaries collect it: its time in µs (``t``), scope JSON (``s``)."""
    from pyspark.sql import functions as F

    return F.struct(F.unix_micros(change_time).alias("t"), F.to_json(truncate).alias("s"))


def truncate_records(rows: Iterable[Any]) -> list[tuple[int, Any]]:
    """(time µs, scope or None) of collected :func:`truncate_row` values (rows or dicts)."""
    return [(r["t"], json.loads(r["s"]) if r["s"] else None) for r in rows]


def summarize_rows(df: DataFrame, table: TableInfo) -> RowSummary:
    """Counts per change type, key range, oldest row and TRUNCATEs, in one job."""
    from pyspark.sql import functions as F

    first = F.col(quote_name(table.keys[0])) if table.keys else None
    change = F.col("__change_type")
    aggregates = summary_aggregates(first, F.col("__change_time"), change, F.col("__truncate"))
    return RowSummary.of_groups(df.groupBy(change).agg(*aggregates).collect())


def _least(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else min(a, b)


def _greatest(a: Any, b: Any) -> Any:
    return b if a is None else a if b is None else max(a, b)
