"""History tables (SCD type 2): a batch's rows as versions of their keys, written once.

A history table (:mod:`lakehouse_writer.tables.history`) keeps one row per version of a key,
``__valid_from`` to ``__valid_to``. A key's versions follow from its **events**, each at a
change time: an upsert (I/U/A/R) opens a version with its payload; an archive (P) opens one
with the payload of the key's last upsert since it was last deleted (none: the first
archive's since then, else its own — what the current-row MERGE keeps); a delete (D/X, and
the old key of a BEFORE image whose UPDATE moved it) opens none. A version lasts until the
key's next event. A GDPR delete (G) removes every version of its key that took effect at or
before it. A TRUNCATE at t closes, at t, the versions in its scope valid at t
(:func:`closing_source`); it is applied where the current-row table's DELETE is
(:func:`~lakehouse_writer.engines.table.apply_table`: after the batch's older rows, before
the others), so the versions are the same whatever the batch boundaries.

A batch's rows are applied by recomputing the versions of the keys they touch
(:func:`history_source`) from:

- the batch's rows (:func:`~lakehouse_writer.rules.sql.acting`): of one key and change time,
  the last by (partition, offset) counts, as in the current-row table;
- the stored versions of those keys (:func:`stored_versions`): each the event that opened
  it; a closed one no stored version follows is also an end at its ``__valid_to`` (a delete
  or a TRUNCATE ended it). At one time the batch's event wins over a stored one (the later
  arrival, as a MERGE replaces a stored row of the same time), and an end comes first. A
  stored archive keeps the payload it took unless a row of the batch is older than it.

So a late row takes its place in the history. The rows dropped before any engine sees them
are not in the history either: rows older than a TRUNCATE of an earlier batch, and upserts
older than a tombstone of their key (a deleted key stays deleted, and a late row older than
a GDPR delete does not bring its person back).

The MERGE's source holds every version of the touched keys as it now is (``keep``) and the
stored versions it no longer has (``drop``); :func:`history_clauses` match them on key and
``__valid_from``. One MERGE, one commit, with the batch's transaction id like every write.
A key's version with ``__is_current`` equals the row the current-row table holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lakehouse_writer.rules.dialect import Dialect
from lakehouse_writer.rules.row_types import ACTION, ACTION_DELETE, ARCHIVE, GDPR
from lakehouse_writer.rules.sql import TableShape, acting, table_columns, truncated
from lakehouse_writer.rules.truncate import Truncate
from lakehouse_writer.tables.history import HISTORY_COLUMNS, IS_CURRENT, VALID_FROM, VALID_TO

__all__ = [
    "HISTORY_ACTION",
    "HistoryClauses",
    "closing_source",
    "history_clauses",
    "history_source",
    "stored_versions",
]

HISTORY_ACTION = "__history"  # of a MERGE source row: ``keep`` (update or insert) or ``drop``
_UPSERT, _ARCHIVE, _DELETE = "'upsert'", "'archive'", f"'{ACTION_DELETE}'"
_ERASE, _END = "'erase'", "'end'"  # a GDPR delete; a stored version's close by a delete/TRUNCATE


@dataclass(frozen=True)
class HistoryClauses:
    """The MERGE of :func:`history_source` into a history table, target ``t``, source ``s``.

    Attributes:
        on: Same key (nulls equal) and same ``__valid_from``.
        drop: When a matched version is deleted.
        keep: When a matched version is replaced, or a source row without a match inserted.
        every: Target column -> source expression, for every column of the table.
    """

    on: str
    drop: str
    keep: str
    every: dict[str, str]


def _current(shape: TableShape) -> TableShape:
    """The table without its history columns: the columns an event carries."""
    columns = {c: t for c, t in shape.columns.items() if c not in HISTORY_COLUMNS}
    return TableShape(columns, shape.keys, shape.technical)


def _same_key(a: str, b: str, shape: TableShape, dialect: Dialect) -> str:
    q = dialect.quote
    return " AND ".join(
        dialect.null_safe_equal.format(a=f"{a}.{q(k)}", b=f"{b}.{q(k)}") for k in shape.keys
    )


def stored_versions(table: str, rows: str, shape: TableShape, dialect: Dialect) -> str:
    """The stored versions a batch's rows touch: every version of their keys.

    ``table`` names the history table's rows, ``rows`` the batch's.
    """
    touched = f"SELECT 1 FROM {rows} r WHERE {_same_key('r', 'v', shape, dialect)}"
    return f"SELECT * FROM {table} v WHERE EXISTS ({touched})"


def _nulls(shape: TableShape, dialect: Dialect, alias: str) -> str:
    """An event's columns that carry nothing but its key (``alias``'s).

    NULL takes the type of the column it is unioned with.
    """
    q = dialect.quote
    return ", ".join(
        f"{alias}.{q(c)}" if c in shape.keys else f"NULL AS {q(c)}" for c in shape.columns
    )


def history_source(
    rows: str,
    stored: str,
    shape: TableShape,
    present: Sequence[str],
    dialect: Dialect,
    *,
    before: bool = True,
    cast: bool = True,
) -> str:
    """The SQL of the MERGE's source: the touched keys' versions, each ``keep`` or ``drop``.

    Args:
        rows: The batch's rows (``present`` their columns: payload, technical, where from).
        stored: The stored versions they touch (:func:`stored_versions`).
        shape: The history table.
        present: The columns ``rows`` has.
        dialect: The engine's SQL.
        before: The rows hold BEFORE images (False spares the join that pairs them).
        cast: Cast the rows' columns to the table's types.
    """
    q = dialect.quote
    current = _current(shape)
    keys = ", ".join(q(k) for k in shape.keys)
    carried = list(current.columns)  # keys, payload, technical: what an event carries
    listed = ", ".join(q(c) for c in carried)
    kind = (
        f"CASE WHEN {q(ACTION)} = {_DELETE} AND {q('__change_type')} = '{GDPR}' THEN {_ERASE} "
        f"ELSE {q(ACTION)} END"
    )
    acted = acting(rows, shape, [c for c in present if c != ACTION], dialect, before)
    opens = (  # the batch's events, then the stored versions' openings
        f"SELECT {', '.join(table_columns(current, present, dialect, cast))}, "
        f"{q('__change_time')} AS __at, {kind} AS __kind, 2 AS __prio, {q('partition')} AS __p, "
        f"{q('offset')} AS __o FROM ({acted}) a "
        f"UNION ALL SELECT {listed}, {q(VALID_FROM)}, CASE WHEN {q('__change_type')} = "
        f"'{ARCHIVE}' THEN {_ARCHIVE} ELSE {_UPSERT} END, 1, NULL, NULL FROM {stored}"
    )
    followed = f"{_same_key('w', 'v', shape, dialect)} AND w.{q(VALID_FROM)} = v.{q(VALID_TO)}"
    ended = (  # a stored version no stored version follows was closed by a delete or TRUNCATE
        f"SELECT {_nulls(current, dialect, 'v')}, v.{q(VALID_TO)} AS __at, {_END} AS __kind, "
        f"0 AS __prio, NULL AS __p, NULL AS __o, 1 AS __rank FROM {stored} v "
        f"WHERE v.{q(VALID_TO)} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {stored} w "
        f"WHERE {followed})"
    )
    won = (  # of one key and time one event opens or deletes: the batch's last, else stored
        f"SELECT *, row_number() OVER (PARTITION BY {keys}, __at ORDER BY __prio DESC, "
        "__p DESC NULLS LAST, __o DESC NULLS LAST) AS __rank FROM opens"
    )
    ends = f"__kind IN ({_DELETE}, {_ERASE}, {_END})"
    whole = f"PARTITION BY {keys}"
    erased = (
        f"SELECT *, max(CASE WHEN __kind = {_ERASE} THEN __at END) OVER ({whole}) AS __erased, "
        f"min(CASE WHEN __prio = 2 THEN __at END) OVER ({whole}) AS __first_new "
        f"FROM (SELECT * FROM won WHERE __rank = 1 UNION ALL SELECT * FROM ended) e"
    )
    # a stored archive keeps the payload it took unless a row of the batch is older than it
    role = (
        f"CASE WHEN __kind = {_ARCHIVE} AND __prio = 1 AND (__first_new IS NULL OR "
        f"__at < __first_new) THEN {_UPSERT} ELSE __kind END AS __role"
    )
    kept = f"SELECT *, {role} FROM erased WHERE __erased IS NULL OR __at > __erased OR {ends}"
    so_far = "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"
    order = "__at, __prio"  # a stored end before what opens at its time
    timeline = (
        f"SELECT *, lead(__at) OVER (PARTITION BY {keys} ORDER BY {order}) AS __next, "
        f"sum(CASE WHEN {ends} THEN 1 ELSE 0 END) OVER (PARTITION BY {keys} ORDER BY {order} "
        f"{so_far}) AS __life FROM kept"
    )
    payload = [c for c in current.payload if c not in shape.keys]
    if payload:
        packed = dialect.struct([(c, q(c)) for c in payload])
        life = f"PARTITION BY {keys}, __life ORDER BY {order} {so_far}"
        upserted = dialect.last_non_null.format(x=f"CASE WHEN __role = {_UPSERT} THEN {packed} END")
        archived = dialect.first_non_null.format(
            x=f"CASE WHEN __role = {_ARCHIVE} THEN {packed} END"
        )
        paid = (
            f"SELECT *, {upserted} OVER ({life}) AS __upserted, "
            f"{archived} OVER ({life}) AS __archived FROM timeline"
        )
    else:
        paid = "SELECT * FROM timeline"

    def column(c: str) -> str:
        if c not in payload:
            return q(c)
        return (
            f"CASE WHEN __role <> {_ARCHIVE} THEN {q(c)} WHEN __upserted IS NOT NULL "
            f"THEN __upserted.{q(c)} ELSE __archived.{q(c)} END AS {q(c)}"
        )

    versions = (
        f"SELECT {', '.join(column(c) for c in carried)}, __at AS {q(VALID_FROM)}, "
        f"__next AS {q(VALID_TO)}, __next IS NULL AS {q(IS_CURRENT)} FROM paid "
        f"WHERE __role IN ({_UPSERT}, {_ARCHIVE})"
    )
    return _merged(
        f"WITH opens AS ({opens}), ended AS ({ended}), won AS ({won}), erased AS ({erased}), "
        f"kept AS ({kept}), timeline AS ({timeline}), paid AS ({paid}), versions AS ({versions})",
        stored,
        shape,
        dialect,
    )


def closing_source(
    stored: str, shape: TableShape, truncates: Sequence[Truncate], dialect: Dialect
) -> str:
    """The SQL of the MERGE's source that applies ``truncates`` to a history table.

    A TRUNCATE at t closes, at t, every version in its scope that took effect before t and was
    still valid at t (``stored``: the table's rows). A version is kept, never deleted.
    """
    q = dialect.quote
    ends = [
        f"CASE WHEN ({truncated([t], shape, dialect)}) AND ({q(VALID_TO)} IS NULL OR "
        f"{q(VALID_TO)} > {dialect.at_micros.format(n=t.time_us)}) "
        f"THEN {dialect.at_micros.format(n=t.time_us)} END"
        for t in truncates
    ]
    first = f"least({', '.join(ends)})" if len(ends) > 1 else ends[0]
    timestamp = dialect.types("timestamp")
    others = ", ".join(q(c) for c in shape.columns if c not in (VALID_TO, IS_CURRENT))
    versions = (
        f"SELECT {others}, CAST({first} AS {timestamp}) AS {q(VALID_TO)}, FALSE AS "
        f"{q(IS_CURRENT)} FROM {stored} WHERE {first} IS NOT NULL"
    )
    columns = ", ".join(q(c) for c in shape.columns)
    return f"SELECT {columns}, 'keep' AS {HISTORY_ACTION} FROM ({versions}) c"


def _merged(versions: str, stored: str, shape: TableShape, dialect: Dialect) -> str:
    """``versions`` (a WITH naming them) as ``keep`` rows; stored versions gone as ``drop``."""
    q = dialect.quote
    columns = ", ".join(q(c) for c in shape.columns)
    same = f"{_same_key('n', 'v', shape, dialect)} AND n.{q(VALID_FROM)} = v.{q(VALID_FROM)}"
    dropped = (
        f"SELECT {', '.join(f'v.{q(c)}' for c in shape.columns)}, 'drop' FROM {stored} v "
        f"WHERE NOT EXISTS (SELECT 1 FROM versions n WHERE {same})"
    )
    return (
        f"{versions} SELECT {columns}, {HISTORY_ACTION} FROM (SELECT {columns}, 'keep' AS "
        f"{HISTORY_ACTION} FROM versions UNION ALL {dropped}) h"
    )


def history_clauses(shape: TableShape, dialect: Dialect) -> HistoryClauses:
    """The clauses of the MERGE of :func:`history_source` into the history table."""
    q = dialect.quote
    on = f"{_same_key('t', 's', shape, dialect)} AND t.{q(VALID_FROM)} = s.{q(VALID_FROM)}"
    return HistoryClauses(
        on=on,
        drop=f"s.{HISTORY_ACTION} = 'drop'",
        keep=f"s.{HISTORY_ACTION} = 'keep'",
        every={q(c): f"s.{q(c)}" for c in shape.columns},
    )
