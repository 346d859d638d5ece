"""TRUNCATE scopes: which rows a TRUNCATE at time t deletes.

``TRUNCATE at time t with scope S deletes every row in S whose __change_time < t``. The scope
is the ``__truncate`` map (column -> text, null value = NULL); null or empty = all rows. The
same condition runs against the stored table (a Delta DELETE) and against the batch's own
rows (dropped before the MERGE), so rows of earlier transactions in the same batch die too,
while rows of the truncate's own and later transactions survive.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType

CHANGE_TIME = "__change_time"


@dataclass(frozen=True, eq=False)
class Truncate:
    """One TRUNCATE row: its transaction time (µs) and scope (empty = whole table)."""

    time_us: int
    scope: Mapping[str, str | None] = field(default_factory=dict, hash=False)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Truncate):
            return NotImplemented
        return (self.time_us, dict(self.scope)) == (other.time_us, dict(other.scope))

    def __hash__(self) -> int:
        return hash((self.time_us, tuple(sorted(self.scope.items()))))

    @property
    def unscoped(self) -> bool:
        """True when it truncates the whole table."""
        return not self.scope


def collect_truncates(df: DataFrame) -> list[Truncate]:
    """The distinct TRUNCATE rows of a batch, oldest first (a filter and a collect: few)."""
    from pyspark.sql import functions as F

    found = (
        df.filter(F.col("__change_type") == "T")
        .select(F.unix_micros(CHANGE_TIME).alias("t"), F.col("__truncate").alias("s"))
        .collect()
    )  # fmt: skip
    unique = {(r.t, tuple(sorted((r.s or {}).items()))) for r in found}
    return [Truncate(t, dict(scope)) for t, scope in sorted(unique, key=_order)]


def _order(item: tuple[int, tuple[tuple[str, str | None], ...]]) -> tuple:
    """Oldest first; scopes in a stable order even where a value is NULL (``None``)."""
    time_us, scope = item
    return time_us, tuple((k, v is None, v or "") for k, v in scope)


def unknown_columns(truncate: Truncate, columns: Mapping[str, DataType]) -> list[str]:
    """Scope columns the table does not have."""
    return [name for name in truncate.scope if name not in columns]


def truncated(truncates: Sequence[Truncate], columns: Mapping[str, DataType]) -> Column:
    """Condition true for rows that one of ``truncates`` deletes (false when none)."""
    from pyspark.sql import functions as F

    conditions = [_one(t, columns) for t in truncates]
    return reduce(lambda a, b: a | b, conditions, F.lit(False))


def _one(truncate: Truncate, columns: Mapping[str, DataType]) -> Column:
    from pyspark.sql import functions as F

    condition = F.col(CHANGE_TIME) < F.timestamp_micros(F.lit(truncate.time_us))
    for name, text in truncate.scope.items():
        column = F.col(f"`{name.replace('`', '``')}`")
        if text is None:
            condition = condition & column.isNull()
        else:
            condition = condition & column.eqNullSafe(F.lit(text).cast(columns[name]))
    return condition


def compact(truncates: Sequence[Truncate]) -> list[Truncate]:
    """Drop the TRUNCATEs that the latest whole-table TRUNCATE already covers, oldest first.

    A whole-table TRUNCATE at time L deletes every row older than L, so every TRUNCATE at a
    time before L (and a scoped one at L) can no longer drop a row it does not drop: the
    per-batch filter stays as short as the table's truncates since its last reload.
    """
    unscoped = [t.time_us for t in truncates if t.unscoped]
    if not unscoped:
        return sorted(set(truncates), key=lambda t: t.time_us)
    latest = max(unscoped)
    kept = {t for t in truncates if t.time_us > latest or (t.time_us == latest and t.unscoped)}
    return sorted(kept, key=lambda t: t.time_us)


class TruncateLog:
    """TRUNCATEs already applied, per table, so late rows of older transactions still die.

    A row of transaction t1 may reach the writer in a later micro-batch than a TRUNCATE at
    t2 > t1 (another partition, a ``maxOffsetsPerTrigger`` split). The log — the Delta table
    ``_truncates`` (table, time_us, scope) — keeps every applied TRUNCATE so such rows are
    dropped too. Loaded once; appended idempotently per batch.

    Args:
        spark: The session.
        path: Location of the ``_truncates`` table.
    """

    def __init__(self, spark: Any, path: str) -> None:
        self._spark = spark
        self._path = path
        self._by_table: dict[str, list[Truncate]] | None = None

    def of(self, table: str) -> list[Truncate]:
        """Applied TRUNCATEs of ``table``."""
        if self._by_table is None:
            self._by_table = self._load()
        return list(self._by_table.get(table, []))

    def record(self, table: str, truncates: Sequence[Truncate]) -> list[tuple[str, int, str]]:
        """Remember ``truncates`` of ``table``; return the rows to append to ``_truncates``."""
        known = self.of(table)
        kept = compact([*known, *(t for t in truncates if t not in known)])
        assert self._by_table is not None
        self._by_table[table] = kept
        new = [t for t in kept if t not in known]
        return [(table, t.time_us, json.dumps(dict(t.scope), sort_keys=True)) for t in new]

    def _load(self) -> dict[str, list[Truncate]]:
        from delta.tables import DeltaTable

        if not DeltaTable.isDeltaTable(self._spark, self._path):
            return {}
        loaded: dict[str, list[Truncate]] = {}
        for row in self._spark.read.format("delta").load(self._path).collect():
            loaded.setdefault(row.table, []).append(Truncate(row.time_us, json.loads(row.scope)))
        return {table: compact(truncates) for table, truncates in loaded.items()}


TRUNCATE_LOG_SCHEMA = "table STRING, time_us BIGINT, scope STRING"
