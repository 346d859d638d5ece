"""Tombstones: a delete outlives the rows older than it that arrive after it.

Without them a delete removes the stored row and forgets the key: an older upsert of the same
key applied later (another producer's, a second topic's, a late partition's) finds no row and
is inserted — the deleted key is back. So every delete that wins its key in a batch leaves a
tombstone: the key and the delete's change time, in a Delta table of the table's own
(:attr:`~lakehouse_writer.tables.manager.TableInfo.tombstones`: the key columns in the
table's types, named ``k0``, ``k1``, ... in key order — a key column's own name may need column
mapping — then ``__change_time``; appended, a key may have several, the latest counts).

Against a tombstone a later row follows the rule it follows against a stored row
(:mod:`lakehouse_writer.rules.merge`): an upsert (I/U/A/R) or archive (P) older than the
tombstone loses (:func:`outlived`, before the rows' MERGE or append); one of the same time or
newer wins, as it would replace a stored row. Deletes and BEFORE images pass; an UPDATE that
moved its key and lost still moved it: its BEFORE image deletes the old key. A
TRUNCATE needs none: the writer keeps the TRUNCATEs it applied (``TruncateLog``). So only the
tombstones newer than a batch's oldest row can outlive one of its rows: the engines read those
alone, and a batch newer than all of them (a table's usual batch) is applied without a join.

Tombstones are bounded: ``lakehouse-writer maintain`` deletes those older than
``LAKEHOUSE_TOMBSTONE_RETENTION_HOURS`` (a row older than that, arriving later, is applied as
any row is). A tombstone holds the key, no payload; a GDPR delete's key is kept as long.
"""

from __future__ import annotations

from collections.abc import Sequence

from lakehouse_writer.rules.dialect import Dialect
from lakehouse_writer.rules.row_types import (
    ACTION,
    ACTION_DELETE,
    ARCHIVE,
    OUTLIVED_UPDATE,
    UPDATE,
    UPSERTS,
)
from lakehouse_writer.rules.sql import TableShape

__all__ = ["TIME", "outlived", "tombstone_columns", "tombstones_of"]

TIME = "__change_time"  # the tombstone's: the delete's change time


def tombstone_columns(shape: TableShape) -> dict[str, str]:
    """The tombstone table's columns: ``k<i>`` for the i-th key column (its type), the time."""
    return {**{_slot(i): shape.columns[k] for i, k in enumerate(shape.keys)}, TIME: "timestamp"}


def _slot(index: int) -> str:
    return f"k{index}"


def outlived(
    relation: str,
    tombstones: str,
    shape: TableShape,
    columns: Sequence[str],
    dialect: Dialect,
    *,
    before: bool = True,
) -> str:
    """The rows of ``relation`` no tombstone of ``tombstones`` outlives, in ``columns``.

    A row is outlived when it upserts or archives and its key has a tombstone newer than it.
    An outlived UPDATE still moved its key: with ``before`` (the rows hold BEFORE images) it
    stays, as ``u`` (:data:`~lakehouse_writer.rules.row_types.OUTLIVED_UPDATE`): it writes
    nothing, and its BEFORE image still deletes the old key
    (:func:`~lakehouse_writer.rules.sql.moving_pair`).
    """
    q = dialect.quote
    slots = ", ".join(q(_slot(i)) for i in range(len(shape.keys)))
    latest = f"SELECT {slots}, max({q(TIME)}) AS __tombstone FROM {tombstones} GROUP BY {slots}"
    on = " AND ".join(
        dialect.null_safe_equal.format(a=f"r.{q(k)}", b=f"d.{q(_slot(i))}")
        for i, k in enumerate(shape.keys)
    )
    kind = q("__change_type")
    acting = ", ".join(f"'{c}'" for c in (*UPSERTS, ARCHIVE))
    lost = f"(d.__tombstone IS NOT NULL AND r.{kind} IN ({acting}) AND r.{q(TIME)} < d.__tombstone)"
    kept_update = f"r.{kind} = '{UPDATE}'" if before else "FALSE"
    listed = ", ".join(
        f"CASE WHEN {lost} THEN '{OUTLIVED_UPDATE}' ELSE r.{kind} END AS {kind}"
        if c == "__change_type"
        else f"r.{q(c)}"
        for c in columns
    )
    return (
        f"SELECT {listed} FROM {relation} r LEFT JOIN ({latest}) d ON {on} "
        f"WHERE NOT {lost} OR {kept_update}"
    )


def tombstones_of(source: str, shape: TableShape, dialect: Dialect) -> str:
    """The tombstones a batch leaves: its MERGE source's deletes (``source``: that SQL).

    :func:`~lakehouse_writer.rules.sql.merge_source` gives each key's winning action, so a key
    deleted and then upserted in the batch leaves none, and a key an UPDATE moved away (its
    BEFORE image) leaves one.
    """
    q = dialect.quote
    slots = [f"{q(k)} AS {q(_slot(i))}" for i, k in enumerate(shape.keys)]
    deletes = f"{q(ACTION)} = '{ACTION_DELETE}'"
    return f"SELECT {', '.join(slots)}, {q(TIME)} FROM ({source}) s WHERE {deletes}"
