"""The row-type rules as SQL, written once: every engine runs this text in its own dialect.

A table's decoded rows of one batch (a relation with the payload columns as the table names
them, the technical fields, ``topic``, ``partition`` and ``offset``) become:

- :func:`merge_source`: one row per key for the MERGE (:mod:`lakehouse_writer.rules.merge`),
  with its ``__action``:

  1. upserts (I/U/A/R) ``upsert``, deletes (D/X/G) ``delete``, archives (P) ``archive``; a
     BEFORE image (B) whose UPDATE moved the key is a ``delete`` of its old key (its UPDATE
     has the same ``__change_time`` and ``__source_rowid``, or without a row id is the next
     message of its topic partition); other BEFORE images do nothing;
  2. the last row per key by (``__change_time``, partition, offset) wins; within one
     transaction the last row wins outright;
  3. an archive that wins over earlier transactions of its key in the batch is folded with
     the latest of them that does not archive (N): N upserts → ``upsert_archive`` with N's
     payload; N deletes → ``delete_archive`` with the payload of the first archive after N;
     no N → ``archive`` with the first archive's payload; ``__base_time`` is N's change
     time. So the result does not depend on where micro-batches end.

- :func:`truncated`: the rows a TRUNCATE at time t with scope S deletes: every row in S whose
  ``__change_time`` < t (scope values are text, compared as the column's type, NULL as NULL).
- :func:`conformed`: the rows in the table's columns and types (an upsert's append).
- :func:`repeated_keys`: whether a key occurs twice (a reload appended as it is must not).
- :func:`summary_query`: per change type the rows, the first key column's range, the oldest
  change time and the TRUNCATEs (:class:`~lakehouse_writer.read.summary.RowSummary`).

The SQL names the relation of the rows; the engine binds it (a temp view in Spark, an Arrow
table in DuckDB). Spark and DuckDB read the same text but for :class:`~.dialect.Dialect`'s
differences; ``tests/lakehouse_writer/test_rules_sql.py`` runs both on the same rows.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from lakehouse_writer.rules.dialect import Dialect, sql_literal
from lakehouse_writer.rules.row_types import (
    ACTION,
    ACTION_DELETE,
    ARCHIVE,
    BASE_TIME,
    BEFORE,
    DELETES,
    OUTLIVED_UPDATE,
    UPDATE,
    UPSERTS,
)
from lakehouse_writer.rules.truncate import Truncate

__all__ = [
    "TableShape",
    "acting",
    "conformed",
    "latest_rows",
    "merge_source",
    "moving_pair",
    "repeated_keys",
    "summary_query",
    "truncated",
]

_ORDER = ("__change_time", "partition", "offset")
_WHERE_FROM = ("topic", "partition", "offset")


@dataclass(frozen=True)
class TableShape:
    """What the rules need to know of a table.

    Attributes:
        columns: Column name -> Spark type (``simpleString``), in table order.
        keys: Primary key columns; empty for an append-only table.
        technical: The technical columns (``__change_type`` ...), the rest is payload.
    """

    columns: Mapping[str, str]
    keys: tuple[str, ...]
    technical: frozenset[str]

    @property
    def payload(self) -> list[str]:
        """The columns that are not technical, in table order."""
        return [c for c in self.columns if c not in self.technical]


def _codes(codes: Sequence[str]) -> str:
    return ", ".join(f"'{c}'" for c in codes)


def merge_source(
    relation: str,
    shape: TableShape,
    present: Sequence[str],
    dialect: Dialect,
    *,
    before: bool = True,
    archives: bool = True,
    cast: bool = True,
) -> str:
    """The SQL of the MERGE's source: one row per key, its ``__action`` and ``__base_time``.

    Args:
        relation: The name of the rows' relation.
        shape: The table.
        present: The columns the relation has (payload, technical, where from).
        dialect: The engine's SQL.
        before: The rows hold BEFORE images (False spares the join that pairs them).
        archives: The rows hold archives (False spares the fold's windows).
        cast: Cast every column to the table's type (Spark); False where the rows are in
            the table's types already (the driver's Arrow rows).
    """
    q = dialect.quote
    columns = [c for c in present if c != ACTION]
    acted = acting(relation, shape, columns, dialect, before)
    keys = ", ".join(q(k) for k in shape.keys)
    order = ", ".join(f"{q(c)} DESC" for c in _ORDER)
    window = f"PARTITION BY {keys} ORDER BY {order}"
    listed = ", ".join(q(c) for c in columns)
    ranked = (
        f"SELECT {listed}, {q(ACTION)}, row_number() OVER ({window}) AS __rank, "
        f"lag({q('__change_time')}) OVER ({window}) AS __later FROM acted"
    )
    if not archives:
        none = f"CAST(NULL AS {dialect.types('timestamp')})"
        picked = (
            f"SELECT {listed}, {q(ACTION)}, {none} AS {q(BASE_TIME)} FROM ranked WHERE __rank = 1"
        )
        return f"WITH acted AS ({acted}), ranked AS ({ranked}), picked AS ({picked}) " + (
            _select(shape, columns, dialect, cast, "picked")
        )
    folded = _folded(shape, columns, dialect, window)
    return f"WITH acted AS ({acted}), ranked AS ({ranked}), {folded} " + _select(
        shape, columns, dialect, cast, "picked"
    )


def acting(
    relation: str, shape: TableShape, columns: list[str], dialect: Dialect, before: bool
) -> str:
    """The rows that act: ``columns`` and their ``__action`` (rule 1 of :func:`merge_source`).

    The old key of a BEFORE image whose UPDATE moved it is a delete.
    """
    q = dialect.quote
    kind = q("__change_type")
    listed = ", ".join(q(c) for c in columns)
    action = (
        f"CASE WHEN {kind} IN ({_codes(UPSERTS)}) THEN 'upsert' "
        f"WHEN {kind} IN ({_codes(DELETES)}) THEN '{ACTION_DELETE}' ELSE 'archive' END"
    )
    acting = _codes((*UPSERTS, *DELETES, ARCHIVE))
    rows = f"SELECT {listed}, {action} AS {q(ACTION)} FROM {relation} WHERE {kind} IN ({acting})"
    if not before:
        return rows
    b = ", ".join(f"b.{q(c)}" for c in columns)
    where = ", ".join(f"b.{q(c)}" for c in _WHERE_FROM)
    pairs = (  # a BEFORE image may meet more than one UPDATE: it deletes once
        f"SELECT {b}, row_number() OVER (PARTITION BY {where} ORDER BY u.{q('offset')}) "
        f"AS __pick FROM {relation} b JOIN {relation} u ON {moving_pair(shape, dialect)}"
    )
    moved = f"SELECT {listed}, '{ACTION_DELETE}' AS {q(ACTION)} FROM ({pairs}) m WHERE __pick = 1"
    return f"{rows} UNION ALL {moved}"


def moving_pair(shape: TableShape, dialect: Dialect) -> str:
    """The join condition of a BEFORE image ``b`` and its UPDATE ``u`` that moved the key.

    They are one update when they share ``__change_time`` and ``__source_rowid``, or, without
    a row id, ``u`` is the next message of ``b``'s topic partition; the key moved when ``u``'s
    key is another than ``b``'s. An UPDATE a tombstone outlived (``u``,
    :func:`~lakehouse_writer.rules.tombstones.outlived`) writes nothing but still moved its key.
    """
    q = dialect.quote
    same_time = f"b.{q('__change_time')} = u.{q('__change_time')}"
    same_rowid = f"b.{q('__source_rowid')} = u.{q('__source_rowid')}"
    next_message = (
        f"(b.{q('__source_rowid')} IS NULL AND b.{q('topic')} = u.{q('topic')} "
        f"AND b.{q('partition')} = u.{q('partition')} "
        f"AND u.{q('offset')} = b.{q('offset')} + 1)"
    )
    kept = " AND ".join(
        dialect.null_safe_equal.format(a=f"b.{q(k)}", b=f"u.{q(k)}") for k in shape.keys
    )
    return (
        f"b.{q('__change_type')} = '{BEFORE}' AND "
        f"u.{q('__change_type')} IN ('{UPDATE}', '{OUTLIVED_UPDATE}') AND "
        f"{same_time} AND ({same_rowid} OR {next_message}) AND NOT ({kept})"
    )


def _folded(shape: TableShape, columns: list[str], dialect: Dialect, window: str) -> str:
    """CTEs ``txns``, ``based``, ``firsts`` and ``picked``: the fold of a winning archive."""
    q = dialect.quote
    payload = [c for c in shape.payload if c in columns]
    whole = f"{window} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING"
    listed = ", ".join(q(c) for c in columns)
    archive = f"{q(ACTION)} = 'archive'"
    base_struct = dialect.struct(
        [*((c, q(c)) for c in payload), ("__change_time", q("__change_time")), (ACTION, q(ACTION))]
    )
    base = dialect.first_non_null.format(x=f"CASE WHEN NOT {archive} THEN {base_struct} END")
    after_base = f"(__base IS NULL OR {q('__change_time')} > __base.{q('__change_time')})"
    first_struct = dialect.struct([(c, q(c)) for c in payload])
    first = dialect.last_non_null.format(
        x=f"CASE WHEN {archive} AND {after_base} THEN {first_struct} END"
    )
    folded = f"({archive} AND __base IS NOT NULL)"
    take_base = f"({folded} AND __base.{q(ACTION)} = 'upsert')"

    def column(c: str) -> str:
        if c not in payload:
            return q(c)
        return (
            f"CASE WHEN {take_base} THEN __base.{q(c)} WHEN {archive} THEN __first_p.{q(c)} "
            f"ELSE {q(c)} END AS {q(c)}"
        )

    picked = (
        f"SELECT {', '.join(column(c) for c in columns)}, "
        f"CASE WHEN {folded} THEN concat(__base.{q(ACTION)}, '_archive') "
        f"ELSE {q(ACTION)} END AS {q(ACTION)}, "
        f"CASE WHEN {folded} THEN __base.{q('__change_time')} END AS {q(BASE_TIME)} "
        "FROM firsts WHERE __rank = 1"
    )
    return (
        f"txns AS (SELECT {listed}, {q(ACTION)}, __rank FROM ranked "
        f"WHERE __later IS NULL OR __later <> {q('__change_time')}), "
        f"based AS (SELECT *, {base} OVER ({whole}) AS __base FROM txns), "
        f"firsts AS (SELECT *, {first} OVER ({whole}) AS __first_p FROM based), "
        f"picked AS ({picked})"
    )


def _select(
    shape: TableShape, present: Collection[str], dialect: Dialect, cast: bool, source: str
) -> str:
    """The table's columns from ``source`` (NULL where it has none), then action and base time."""
    q = dialect.quote
    return (
        f"SELECT {', '.join(table_columns(shape, present, dialect, cast))}, {q(ACTION)}, "
        f"{q(BASE_TIME)} FROM {source}"
    )


def table_columns(
    shape: TableShape, present: Collection[str], dialect: Dialect, cast: bool
) -> list[str]:
    """The select list of the table's columns: each cast to its type, NULL where absent."""
    q = dialect.quote

    def one(name: str, kind: str) -> str:
        value = q(name) if name in present else "NULL"
        if cast or name not in present:
            value = f"CAST({value} AS {dialect.types(kind)})"
        return f"{value} AS {q(name)}"

    return [one(name, kind) for name, kind in shape.columns.items()]


def is_upsert(dialect: Dialect) -> str:
    """The condition true for an upsert row (the types :data:`UPSERTS`)."""
    return f"{dialect.quote('__change_type')} IN ({_codes(UPSERTS)})"


def conformed(
    relation: str, shape: TableShape, present: Collection[str], dialect: Dialect, cast: bool
) -> str:
    """The upserts of the relation in the table's columns and types (NULL where absent)."""
    listed = ", ".join(table_columns(shape, present, dialect, cast))
    return f"SELECT {listed} FROM {relation} WHERE {is_upsert(dialect)}"


def latest_rows(relation: str, shape: TableShape, present: Sequence[str], dialect: Dialect) -> str:
    """The last row per key by (change time, partition, offset), all of its columns."""
    q = dialect.quote
    listed = ", ".join(q(c) for c in present)
    keys = ", ".join(q(k) for k in shape.keys)
    order = ", ".join(f"{q(c)} DESC" for c in _ORDER)
    return (
        f"SELECT {listed} FROM (SELECT {listed}, row_number() OVER (PARTITION BY {keys} "
        f"ORDER BY {order}) AS __rank FROM {relation}) r WHERE __rank = 1"
    )


def repeated_keys(relation: str, keys: Sequence[str], dialect: Dialect) -> str:
    """A query of one row when a key may occur twice in the relation, none when none does.

    Grouped by a hash of the key: two keys that share a hash count as a repeat, so the answer
    may be a needless repeat (the caller then takes the last row per key), never a miss.
    """
    hashed = dialect.hash.format(x=", ".join(dialect.quote(k) for k in keys))
    return f"SELECT 1 FROM {relation} GROUP BY {hashed} HAVING count(*) > 1 LIMIT 1"


def truncated(truncates: Sequence[Truncate], shape: TableShape, dialect: Dialect) -> str:
    """The condition true for rows one of ``truncates`` deletes (``FALSE`` when none).

    A scope column is matched case-insensitively to the table's (as Delta names columns); a
    scope value is text, cast to the column's type; a NULL value matches NULL.
    """
    if not truncates:
        return "FALSE"
    return " OR ".join(f"({_one(t, shape, dialect)})" for t in truncates)


def _one(truncate: Truncate, shape: TableShape, dialect: Dialect) -> str:
    q = dialect.quote
    folded = {name.casefold(): name for name in shape.columns}
    at = dialect.at_micros.format(n=truncate.time_us)
    parts = [f"{q('__change_time')} < {at}"]
    for name, text in sorted(truncate.scope.items()):
        column = folded[name.casefold()]
        if text is None:
            parts.append(f"{q(column)} IS NULL")
        else:
            typed = f"CAST({sql_literal(text)} AS {dialect.types(shape.columns[column])})"
            parts.append(dialect.null_safe_equal.format(a=q(column), b=typed))
    return " AND ".join(parts)


def summary_query(relation: str, shape: TableShape, dialect: Dialect) -> str:
    """Per change type: rows, first key's rows/lowest/highest, oldest change (µs), TRUNCATEs.

    In the order :meth:`~lakehouse_writer.read.summary.RowSummary.of_counts` reads them; a
    TRUNCATE is its time in µs (``t``) and its scope as JSON (``s``).
    """
    q = dialect.quote
    kind, time = q("__change_type"), q("__change_time")
    micros = dialect.micros_of.format(x=time)
    truncate = dialect.struct([("t", micros), ("s", f"to_json({q('__truncate')})")])
    truncates = f"{dialect.collect_set.format(x=truncate)} FILTER (WHERE {kind} = 'T')"
    if shape.keys:
        first = q(shape.keys[0])
        keyed = f"count({first}), min({first}), max({first})"
    else:
        keyed = "CAST(NULL AS BIGINT), NULL, NULL"
    return (
        f"SELECT {kind}, count(*), {keyed}, min({micros}), {truncates} "
        f"FROM {relation} GROUP BY {kind}"
    )
