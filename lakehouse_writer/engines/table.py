"""Apply one table's rows of a batch, on any engine: the steps, written once.

:func:`apply_table` gives an :class:`~lakehouse_writer.engines.base.Engine` a table's decoded
rows (payload columns as the table names them, the technical fields, ``topic``/``partition``/
``offset``) and applies them, idempotently per batch:

1. Rows of unknown change types and TRUNCATEs naming unknown columns are rejected; so are the
   row types an append-only table cannot take (D/X/G/B/P need a key).
2. Rows covered by TRUNCATEs of earlier batches are dropped, and so are the upserts and
   archives older than a tombstone of their key (:mod:`lakehouse_writer.rules.tombstones`);
   the batch's own winning deletes leave their tombstones, before the table is written.
3. TRUNCATE rows (``T``) become one DELETE of the rows in their scope older than them
   (:func:`~lakehouse_writer.rules.sql.truncated`). Rows of the batch older than a TRUNCATE
   are merged before it, so it covers what they left; usually there are none (they share
   the TRUNCATE's transaction). A table known empty needs no DELETE.
4. One MERGE of the last row per key (:func:`~lakehouse_writer.rules.sql.merge_source`) —
   or, when an unscoped TRUNCATE left the table empty and every row is an upsert, an append
   (of the rows as they are when no key repeats, else of the last row per key).
5. GDPR deletes (``G``): the table is purged, so no current data file holds their rows.

An append-only table appends its upserts and applies its TRUNCATEs. A history table (SCD
type 2) takes the same steps: its engine's DELETE closes the versions a TRUNCATE covers and its
MERGE recomputes the versions of the keys the rows touch (:mod:`lakehouse_writer.rules.history`);
a reload into it is merged, never appended. Each write's
``txnVersion`` is the batch's for that step (:mod:`lakehouse_writer.engines.ids`): replaying
the batch, on either engine, writes nothing twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from lakehouse_writer.engines import ids
from lakehouse_writer.engines.base import ApplyResult, Declined, Engine, Write
from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.rules.row_types import ARCHIVE, BEFORE, DELETES, GDPR, KNOWN, UPSERTS
from lakehouse_writer.rules.sql import truncated
from lakehouse_writer.rules.truncate import Truncate, unknown_columns
from producer_lib.timing import Steps

if TYPE_CHECKING:
    from lakehouse_writer.read.summary import RowSummary
    from lakehouse_writer.tables.manager import TableInfo

__all__ = ["apply_table"]

log = logging.getLogger(__name__)

Rows = TypeVar("Rows")


def apply_table(
    engine: Engine[Rows],
    rows: Rows,
    table: TableInfo,
    batch_id: int,
    instance_id: str,
    applied: Sequence[Truncate] = (),
    summary: RowSummary | None = None,
) -> ApplyResult:
    """Apply a table's rows of batch ``batch_id`` on ``engine``; a replay changes nothing.

    Args:
        engine: The engine that holds ``rows`` and writes the table.
        rows: The table's decoded rows of the batch.
        table: The table, created or evolved for these rows.
        batch_id: The micro-batch.
        instance_id: The writer instance (the ``txnAppId``'s part).
        applied: TRUNCATEs of earlier batches; rows they cover are dropped.
        summary: The rows' summary when known (from the pass that decoded them).

    Raises:
        Declined: The engine does not apply this table (before it wrote anything).
        LakehouseWriterError: More writes than a batch's txn versions hold.
    """
    declined = engine.declines(table)
    if declined is not None:
        raise Declined(declined, table=table.ref.qualified)
    steps, shape = Steps(), engine.shape(table)
    app_id = ids.app_id_for(instance_id, table.ref.qualified)
    with steps("summary"):
        summary = summary or engine.summarize(rows, table)
    counts = summary.counts
    truncates = [t for t in summary.truncates if not unknown_columns(t, table.columns)]
    rejected = _rejected(engine, rows, table, summary)
    kind = engine.dialect.quote("__change_type")
    rows = engine.filter(rows, f"{kind} <> 'T'")
    if applied:
        rows = engine.filter(rows, f"NOT ({truncated(applied, shape, engine.dialect)})")
    if table.tombstones:
        buried = Write(
            ids.tombstones_app_id(instance_id, table.ref.qualified),
            ids.txn_version(batch_id, ids.STEP_ROWS),
        )
        with steps("tombstones"):
            rows = _tombstones(engine, rows, table, summary, buried)
    latest = truncates
    if truncates and not table.append_only:
        with steps("truncate"):
            latest = _older_rows_first(engine, rows, truncates, table, summary, app_id, batch_id)
        at = engine.dialect.at_micros.format(n=latest[0].time_us)
        rows = engine.filter(rows, f"{engine.dialect.quote('__change_time')} >= {at}")
    elif truncates:
        rows = engine.filter(rows, f"NOT ({truncated(truncates, shape, engine.dialect)})")
    empty = False
    if latest:
        with steps("truncate"):
            empty = engine.is_empty(table)  # a first load's TRUNCATE deletes nothing
            if not empty:
                version = ids.txn_version(batch_id, ids.STEP_TRUNCATE)
                engine.delete(table, latest, Write(app_id, version))
    write = Write(app_id, ids.txn_version(batch_id, ids.STEP_ROWS))
    with steps("rows"):
        appended = _rows(engine, rows, table, summary, latest, empty, write)
    with steps("purge"):
        purged = bool(counts.get(GDPR)) and not table.append_only and engine.purge(table, batch_id)
    version = engine.version(table)
    log.info(
        "batch applied table=%s batch=%d engine=%s rows=%s truncates=%d fast_path=%s "
        "version=%d steps=%s",
        table.ref.qualified,
        batch_id,
        engine.name,
        counts,
        len(truncates),
        appended,
        version,
        steps,
    )
    return ApplyResult(
        table.ref.qualified,
        counts,
        tuple(truncates),
        appended,
        purged,
        version,
        rejected,
        engine=engine.name,
    )


def _tombstones(
    engine: Engine[Rows], rows: Rows, table: TableInfo, summary: RowSummary, write: Write
) -> Rows:
    """Drop the rows a tombstone outlives; leave the tombstones of the batch's deletes (step 2).

    The tombstones are written before the table: an engine that declines the table's writes
    then has written nothing of it, and the next engine skips the tombstones' append by its
    transaction id.
    """
    counts = summary.counts
    if any(counts.get(c) for c in (*UPSERTS, ARCHIVE)):
        rows = engine.outlive(rows, table, summary)
    if any(counts.get(c) for c in (*DELETES, BEFORE)):
        engine.bury(rows, table, summary, write)
    return rows


def _rows(
    engine: Engine[Rows],
    rows: Rows,
    table: TableInfo,
    summary: RowSummary,
    truncates: Sequence[Truncate],
    empty: bool,
    write: Write,
) -> bool:
    """Append or merge the rows left (step 4); True when they were appended."""
    counts = summary.counts
    if table.append_only:
        if any(counts.get(c) for c in UPSERTS):
            engine.append(rows, table, write, unique=False)
        return False
    only_upserts = not any(counts.get(c) for c in (*DELETES, BEFORE, ARCHIVE))
    reload = only_upserts and not table.history and any(t.unscoped for t in truncates)
    if reload and (empty or engine.is_empty(table)):
        # A reload rarely repeats a key: its rows are appended as they are, on condition
        # that no key repeats (checked first); else the last per key.
        if not engine.append(rows, table, write, unique=True):
            engine.append_latest(rows, table, write)
        return True
    if any(counts.get(c) for c in (*UPSERTS, *DELETES, BEFORE, ARCHIVE)):
        engine.merge(rows, table, summary, write)
    return False


def _older_rows_first(
    engine: Engine[Rows],
    rows: Rows,
    truncates: list[Truncate],
    table: TableInfo,
    summary: RowSummary,
    app_id: str,
    batch_id: int,
) -> list[Truncate]:
    """Merge the rows older than the batch's latest TRUNCATEs, in time order with them.

    A row older than a TRUNCATE of its batch is applied before it, and the TRUNCATE then
    deletes what it covers of the result: the row may supersede an older row of its key
    (which must not win instead), and an ARCHIVE keeps the payload it finds before the
    TRUNCATE. Returns the latest TRUNCATEs, still to apply with the rows not older than them.

    Raises:
        LakehouseWriterError: More writes than a batch's txn versions hold; raised before
            any write, so nothing is half-applied.
    """
    times = sorted({t.time_us for t in truncates})
    if summary.oldest is None or summary.oldest >= times[-1]:
        return truncates  # usually: the rows share the TRUNCATE's transaction
    row_times = engine.change_times(rows, times[-1])
    segments, latest = _segments(times, row_times, truncates)
    writes = sum((start is not None) + bool(group) for start, group in segments)
    if writes >= ids.STEP_TRUNCATE:
        raise LakehouseWriterError(
            "the batch needs too many writes to apply its rows and TRUNCATEs in time order; "
            "lower --max-offsets-per-trigger",
            table=table.ref.qualified,
            batch=batch_id,
            writes=writes,
        )
    dialect = engine.dialect
    step = 0
    for span, group in segments:  # rows older than a TRUNCATE first, then it
        if span is not None:
            low, high = span
            at = dialect.quote("__change_time")
            within = f"{at} < {dialect.at_micros.format(n=high)}"
            if low is not None:
                within = f"{at} >= {dialect.at_micros.format(n=low)} AND {within}"
            older = engine.filter(rows, within)
            engine.merge(older, table, summary, Write(app_id, ids.segment_version(batch_id, step)))
            step += 1
        if group:
            engine.delete(table, group, Write(app_id, ids.segment_version(batch_id, step)))
            step += 1
    return latest


Span = tuple[int | None, int]  # [from, until) of change times (µs); None: from the start


def _segments(
    times: list[int], row_times: list[int], truncates: list[Truncate]
) -> tuple[list[tuple[Span | None, list[Truncate]]], list[Truncate]]:
    """The steps before the latest TRUNCATEs: (rows to merge, or None; then TRUNCATEs).

    ``times``: the TRUNCATEs' distinct times, ascending; ``row_times``: the change times of
    the rows older than the latest TRUNCATE. Returns the steps and the latest TRUNCATEs.
    """
    steps: list[tuple[Span | None, list[Truncate]]] = []
    pending: list[Truncate] = []  # not deleted yet
    start: int | None = None
    for boundary in times:
        if any((start is None or start <= t) and t < boundary for t in row_times):
            if pending:  # deleted before the rows between them and ``boundary``
                if steps and not steps[-1][1]:
                    steps[-1] = (steps[-1][0], pending)
                else:
                    steps.append((None, pending))
                pending = []
            steps.append(((start, boundary), []))
        pending += [t for t in truncates if t.time_us == boundary]
        start = boundary
    return steps, pending


def _rejected(
    engine: Engine[Rows], rows: Rows, table: TableInfo, summary: RowSummary
) -> tuple[Any, ...]:
    """The rows step 1 rejects, as the engine's ``_rejected`` rows: one item per reason.

    Unknown change types, TRUNCATEs naming unknown columns, and what an append-only table
    refuses.
    """
    q, counts = engine.dialect.quote, summary.counts
    kind = q("__change_type")
    known = ", ".join(f"'{c}'" for c in KNOWN)
    conditions = []
    bad = [t for t in summary.truncates if unknown_columns(t, table.columns)]
    if bad or not all(c in KNOWN for c in counts):
        unknown = f"({kind} IS NULL OR {kind} NOT IN ({known}))"
        reason = f"concat('unknown __change_type ', coalesce({kind}, 'null'))"
        for t in bad:
            at = engine.dialect.at_micros.format(n=t.time_us)
            hit = f"({kind} = 'T' AND {q('__change_time')} = {at})"
            cols = ", ".join(unknown_columns(t, table.columns)).replace("'", "''")
            unknown = f"({unknown} OR {hit})"
            reason = (
                f"CASE WHEN {hit} THEN 'TRUNCATE scope names unknown columns: {cols}' "
                f"ELSE {reason} END"
            )
        conditions.append((unknown, reason))
    refused = [c for c in KNOWN if c not in (*UPSERTS, "T") and counts.get(c)]
    if table.append_only and refused:
        codes = ", ".join(f"'{c}'" for c in refused)
        reason = (
            "concat('table has no primary key (append-only): row type ', "
            f"{kind}, ' needs a key; only I/U/A/R/T apply. Add a primary key to the flow''s "
            "schema.')"
        )
        conditions.append((f"{kind} IN ({codes})", reason))
    return tuple(engine.rejected(rows, where, reason, table) for where, reason in conditions)
