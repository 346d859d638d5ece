"""TRUNCATE scopes: which rows a TRUNCATE at time t deletes.

``TRUNCATE at time t with scope S deletes every row in S whose __change_time < t``. The scope
is the ``__truncate`` map (column -> text, null value = NULL); null or empty = all rows. The
same condition runs against the stored table (a Delta DELETE) and against the batch's own
rows (dropped before the MERGE), so rows of earlier transactions in the same batch die too,
while rows of the truncate's own and later transactions survive.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
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


def distinct_truncates(
    found: Iterable[tuple[int, Mapping[str, str | None] | None]],
) -> list[Truncate]:
    """The distinct TRUNCATEs of (time µs, scope or None) pairs, oldest first."""
    unique = {(t, tuple(sorted((scope or {}).items()))) for t, scope in found}
    return [Truncate(t, dict(scope)) for t, scope in sorted(unique, key=_order)]


def _order(item: tuple[int, tuple[tuple[str, str | None], ...]]) -> tuple:
    """Oldest first; scopes in a stable order even where a value is NULL (``None``)."""
    time_us, scope = item
    return time_us, tuple((k, v is None, v or "") for k, v in scope)


class AppliedTruncates(Protocol):
    """The TRUNCATEs already applied, per table (kept by the commit step's ``TruncateLog``)."""

    def of(self, table: str) -> Sequence[Truncate]:
        """The TRUNCATEs applied to ``table`` so far, oldest first."""
        ...


def unknown_columns(truncate: Truncate, columns: Mapping[str, DataType]) -> list[str]:
    """Scope columns the table does not have (names match case-insensitively, as Delta's)."""
    folded = {name.casefold() for name in columns}
    return [name for name in truncate.scope if name.casefold() not in folded]


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


def to_record(truncate: Truncate) -> str:
    """A TRUNCATE as the JSON of its ``_writer_state`` row."""
    return json.dumps({"time_us": truncate.time_us, "scope": dict(truncate.scope)}, sort_keys=True)


def from_record(record: str) -> Truncate:
    """The TRUNCATE of a ``_writer_state`` row's JSON (:func:`to_record`)."""
    value = json.loads(record)
    return Truncate(int(value["time_us"]), value["scope"])
