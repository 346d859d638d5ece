"""The MERGE that applies a batch's last row per key to a table, as SQL for either engine.

:func:`lakehouse_writer.rules.sql.merge_source` leaves one source row per key with an
``__action`` (``upsert``, ``delete``, ``archive`` or an archive folded with the upsert or
delete before it, whose ``__change_time`` it keeps in ``__base_time``). The MERGE then, over
the stored row of the same key:

1. deletes it for ``delete``, when the source row is not older;
2. replaces every column for ``upsert`` when not older, and for a fold when the stored row is
   not newer than the change folded;
3. takes only the technical fields for an archive (the stored payload is kept), when not
   older;

and inserts the source row when no row of the key is stored, unless it deletes.

Spark (Delta's MERGE) and delta-rs (DataFusion) take the same clauses; only the quoting of
names and the null-safe equality differ (:mod:`~lakehouse_writer.rules.dialect`). The clauses
are built once, here, so both engines apply the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lakehouse_writer.rules.dialect import DATAFUSION, SPARK, Dialect, sql_literal
from lakehouse_writer.rules.row_types import ACTION, ACTION_DELETE, BASE_TIME

__all__ = ["DATAFUSION", "SPARK", "Dialect", "MergeClauses", "key_range_condition", "merge_clauses"]

_FOLDS = "('upsert_archive', 'delete_archive')"
_ARCHIVES = "('archive', 'upsert_archive', 'delete_archive')"


@dataclass(frozen=True)
class MergeClauses:
    """The conditions and assignments of the MERGE, target aliased ``t``, source ``s``.

    Attributes:
        on: The match condition: every key column equal, nulls equal.
        delete: When a matched row is deleted.
        replace: When every column of a matched row takes the source's (``every``).
        archive: When a matched row takes only the technical fields (``technical``).
        insert: When a source row without a match is inserted (``every``).
        every: Target column -> source expression, for every column of the table.
        technical: The same for the technical columns only.
    """

    on: str
    delete: str
    replace: str
    archive: str
    insert: str
    every: dict[str, str]
    technical: dict[str, str]


def merge_clauses(
    columns: Sequence[str],
    keys: Sequence[str],
    technical: Iterable[str],
    dialect: Dialect,
    key_range: tuple[object, object] | None = None,
) -> MergeClauses:
    """The clauses of the MERGE into a table of ``columns`` keyed by ``keys``.

    ``key_range`` (lowest and highest value of the first key column in the source) joins
    the match condition when :func:`key_range_condition` can write it.
    """
    q = dialect.quote
    matches = [dialect.null_safe_equal.format(a=f"t.{q(k)}", b=f"s.{q(k)}") for k in keys]
    if key_range is not None:
        within = key_range_condition(keys[0], *key_range, dialect)
        matches += [within] if within is not None else []
    on = " AND ".join(matches)
    action, time = f"s.{q(ACTION)}", q("__change_time")
    newer = f"s.{time} >= t.{time}"
    base_newer = f"s.{q(BASE_TIME)} >= t.{time}"
    every = {q(c): f"s.{q(c)}" for c in columns}
    fixed = set(technical)
    return MergeClauses(
        on=on,
        delete=f"{action} = '{ACTION_DELETE}' AND {newer}",
        replace=f"({action} = 'upsert' AND {newer}) OR ({action} IN {_FOLDS} AND {base_newer})",
        archive=f"{action} IN {_ARCHIVES} AND {newer}",
        insert=f"{action} != '{ACTION_DELETE}'",
        every=every,
        technical={q(c): f"s.{q(c)}" for c in columns if c in fixed},
    )


def key_range_condition(column: str, low: object, high: object, dialect: Dialect) -> str | None:
    """``t.column BETWEEN low AND high`` as SQL, or None for values without a plain literal.

    A target-only condition: the engine skips the data files whose statistics lie outside
    the range. Integers and text only (their literals read the same in both dialects).
    """
    literals = [_literal(v) for v in (low, high)]
    if None in literals:
        return None
    return f"t.{dialect.quote(column)} BETWEEN {literals[0]} AND {literals[1]}"


def _literal(value: object) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return sql_literal(value)
    return None
