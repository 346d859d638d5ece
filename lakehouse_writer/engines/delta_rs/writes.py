"""delta-rs's writes of the writer: MERGE, DELETE and append in the driver, exactly once.

A Delta MERGE through Spark runs about 19 jobs whatever its size: a fixed cost (planning, the
target's snapshot state, materializing the source, deletion vectors, the Change Data Feed). A
source system's delta load touches hundreds of tables with a few rows each, so that fixed
cost, not the rows, was the writer's time. delta-rs (``deltalake``) merges the same rows
in-process, orders of magnitude faster (figures: ``docs/PERFORMANCE.md``), with the same
clauses (:mod:`lakehouse_writer.rules.merge`), into the same table: it honours the
table's deletion vectors and column mapping, writes its Change Data Feed, and commits the
``SetTransaction`` of the write's (app id, version) that makes a replay a no-op for either
engine. The rows reach it in one Spark job (``toArrow`` of the last row per key).

:class:`DeltaRsWrites` writes a table when all of these hold, else Spark does it
(:meth:`DeltaRsWrites.takes`, asked by the router):

- the batch gives the table at most ``max_rows`` rows;
- delta-rs reaches the table's storage: a local path, or Azure's with the writer's
  ``AZURE_STORAGE_*`` credential (:func:`~lakehouse_writer.runtime.storage.delta_rs_path`);
- delta-rs writes every table feature the table has (:data:`WRITABLE_FEATURES`; a table
  whose column was widened has ``typeWidening``, which delta-rs 1.6 cannot write).

A MERGE delta-rs fails (1.6 refuses some MERGEs into tables with a Change Data Feed and NOT
NULL columns: it checks an intermediate projection against them) is done by Spark, whether or
not delta-rs committed it: Spark skips an (app id, version) the table holds. A table whose
MERGEs it failed :data:`MAX_FAILURES` times is Spark's for the rest of the run. Files delta-rs
wrote and did not commit are not part of the table (``VACUUM`` removes them).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from lakehouse_writer.engines.base import Declined, Write
from lakehouse_writer.rules.row_types import ACTION, ACTION_DELETE
from lakehouse_writer.rules.tombstones import TIME
from lakehouse_writer.runtime.storage import delta_rs_path

if TYPE_CHECKING:
    from collections.abc import Callable

    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable

    from lakehouse_writer.rules.merge import MergeClauses
    from lakehouse_writer.tables.manager import TableInfo

log = logging.getLogger(__name__)

DEFAULT_MAX_ROWS = 200_000
# Writer features delta-rs 1.6 honours when it writes (checked: deletion vectors of earlier
# Spark MERGEs are applied, column-mapped names resolved, CDF files written).
WRITABLE_FEATURES = frozenset(
    {
        "appendOnly",
        "invariants",
        "checkConstraints",
        "changeDataFeed",
        "generatedColumns",
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
    }
)
MAX_FAILURES = 3  # writes of a table delta-rs may fail before Spark takes them all
_LEGACY_WRITER_VERSION = 5  # protocols up to (2, 5) name no features; 5 is column mapping


class DeltaRsWrites:
    """Writes of few rows, done by delta-rs (see the module docstring).

    Args:
        max_rows: The most rows a table's batch may give to be merged here; 0 turns it off.
    """

    def __init__(self, max_rows: int = DEFAULT_MAX_ROWS) -> None:
        self.max_rows = max_rows
        self._refused: set[str] = set()  # paths delta-rs cannot write
        self._failures: dict[str, int] = {}  # path -> writes delta-rs failed
        self._tables: dict[str, DeltaTable] = {}  # path -> its table, updated on each use
        self._lock = threading.Lock()

    def writes(self, path: str) -> bool:
        """True when tables at or below ``path`` may be written here (delta-rs reaches it)."""
        return bool(self.max_rows) and delta_rs_path(path) is not None

    def takes(self, table: TableInfo, rows: int) -> bool:
        """True when the MERGE of ``rows`` batch rows into ``table`` is done here."""
        if rows > self.max_rows or not self.writes(table.path):
            return False
        with self._lock:
            return table.path not in self._refused

    def merge(
        self,
        source: Callable[[], pa.Table],
        table: TableInfo,
        clauses: MergeClauses,
        write: Write,
    ) -> bool:
        """MERGE the rows ``source`` gives into ``table`` once as ``write``.

        ``source`` is called only when the MERGE is to be done (a replay does not need the
        rows): ``DataFrame.toArrow`` of Spark's rows, say.

        Returns:
            True when the table holds the MERGE (done now, or by an earlier run of the same
            batch); False when delta-rs did not do it (Spark is to).
        """

        def merge(target: DeltaTable, commit: CommitProperties) -> int:
            rows = source()
            if not target.file_uris():
                rows = _insertable(rows)
            (
                target.merge(
                    rows, clauses.on, source_alias="s", target_alias="t", commit_properties=commit
                )
                .when_matched_delete(clauses.delete)
                .when_matched_update(clauses.every, clauses.replace)
                .when_matched_update(clauses.technical, clauses.archive)
                .when_not_matched_insert(clauses.every, clauses.insert)
                .execute()
            )
            return rows.num_rows

        return self._write(table, write, "merge", merge)

    def append(self, rows: Callable[[], pa.Table], table: TableInfo, write: Write) -> bool:
        """Append the rows ``rows`` gives (the table's columns) once as ``write``.

        Returns:
            True when the rows are in the table (appended now, or by an earlier run of the
            same batch); False when delta-rs did not write them.
        """
        from deltalake import write_deltalake

        def append(target: DeltaTable, commit: CommitProperties) -> int:
            data = rows()
            write_deltalake(target, data, mode="append", commit_properties=commit)
            return data.num_rows

        return self._write(table, write, "append", append)

    def delete(self, table: TableInfo, predicate: str, write: Write) -> bool:
        """DELETE the rows for which ``predicate`` (DataFusion SQL) holds, once as ``write``."""

        def delete(target: DeltaTable, commit: CommitProperties) -> int:
            metrics = target.delete(predicate, commit_properties=commit)
            return int(metrics.get("num_deleted_rows", 0))

        return self._write(table, write, "delete", delete)

    def read(self, path: str, table: TableInfo, newer_than: int | None) -> pa.Table | None:
        """The tombstones at ``path`` whose change time is after ``newer_than`` (µs; None: all).

        None: no table there.

        Raises:
            Declined: delta-rs cannot reach or read it (Spark does).
        """
        from deltalake.exceptions import DeltaError

        where = delta_rs_path(path)
        if where is None:
            raise Declined("delta-rs cannot reach the tombstones", table=table.ref.qualified)
        try:
            target = where.open_existing()
            return None if target is None else _newer(target.to_pyarrow_table(), newer_than)
        except DeltaError as exc:
            raise Declined(
                f"delta-rs cannot read the tombstones: {_first_line(exc)}",
                table=table.ref.qualified,
            ) from None

    def bury(self, path: str, rows: pa.Table, table: TableInfo, write: Write) -> bool:
        """Append ``rows`` (a table's tombstones) to the Delta table at ``path`` once as ``write``.

        The first tombstones create the table. Returns False when delta-rs did not write them.
        """
        from deltalake import CommitProperties, Transaction, write_deltalake
        from deltalake.exceptions import DeltaError

        where = delta_rs_path(path)
        if where is None:
            return False
        target = where.open_existing()
        if target is not None:
            done = target.transaction_version(write.app_id)
            if done is not None and done >= write.version:
                return True
        commit = CommitProperties(app_transactions=[Transaction(write.app_id, write.version)])
        try:
            write_deltalake(
                target if target is not None else where.uri,
                rows,
                mode="append",
                storage_options=None if target is not None else (where.options or None),
                commit_properties=commit,
            )
        except DeltaError as exc:  # Spark does it
            log.info(
                "tombstones left to Spark table=%s error=%s", table.ref.qualified, _first_line(exc)
            )
            return False
        return True

    def is_empty(self, table: TableInfo) -> bool:
        """True when the table's latest version has no data file.

        Raises:
            Declined: delta-rs cannot write the table.
        """
        return not self._writable_table(table).file_uris()

    def version(self, table: TableInfo) -> int:
        """The table's latest version (its handle brought up to date)."""
        return int(self._writable_table(table).version())

    def _writable_table(self, table: TableInfo) -> DeltaTable:
        target = self._table(table)
        if target is None:
            raise Declined("delta-rs cannot write the table", table=table.ref.qualified)
        return target

    def _write(
        self,
        table: TableInfo,
        write: Write,
        what: str,
        do: Callable[[DeltaTable, CommitProperties], int],
    ) -> bool:
        """``do`` the write to the table once as ``write``; see :meth:`merge`."""
        from deltalake import CommitProperties, Transaction
        from deltalake.exceptions import DeltaError

        target = self._table(table)
        if target is None:
            return False
        done = target.transaction_version(write.app_id)
        if done is not None and done >= write.version:
            log.info(
                "delta-rs %s skipped table=%s app_id=%s version=%d: already committed (replay)",
                what,
                table.ref.qualified,
                write.app_id,
                write.version,
            )
            return True
        started = time.monotonic()
        commit = CommitProperties(app_transactions=[Transaction(write.app_id, write.version)])
        try:
            rows = do(target, commit)
        except DeltaError as exc:  # Spark does it (see the module docstring)
            self._failed(table, what, _first_line(exc))
            return False
        except OSError as exc:  # the storage refused: the batch fails, naming the table
            with self._lock:
                self._tables.pop(table.path, None)  # loaded afresh next time
            raise OSError(
                f"table {table.ref.qualified}: delta-rs could not {what} the rows at "
                f"{table.path}: {_first_line(exc)}"
            ) from None  # the failure report names the root cause: this one, with the table
        log.info(
            "delta-rs %s table=%s rows=%d seconds=%.3f",
            what,
            table.ref.qualified,
            rows,
            time.monotonic() - started,
        )
        return True

    def _table(self, table: TableInfo) -> DeltaTable | None:
        """The table's delta-rs handle, brought up to its latest version; None: not writable.

        The handle is kept between batches and updated from the commits since (whichever
        engine made them), not loaded again from the whole log.
        """
        with self._lock:
            target = self._tables.get(table.path)
        if target is None:
            where = delta_rs_path(table.path)
            if where is None:
                return None
            target = where.open()
        else:
            target.update_incremental()
        if not self._writable(target, table.path):
            return None
        with self._lock:
            self._tables[table.path] = target
        return target

    def _writable(self, target: DeltaTable, path: str) -> bool:
        protocol = target.protocol()
        features = set(protocol.writer_features or ())
        if protocol.min_writer_version > _LEGACY_WRITER_VERSION and not features:
            self._refuse(path, f"writer version {protocol.min_writer_version}")
            return False
        unsupported = features - WRITABLE_FEATURES
        if unsupported:
            self._refuse(path, f"table features {sorted(unsupported)}")
            return False
        return True

    def _failed(self, table: TableInfo, what: str, error: str) -> None:
        with self._lock:
            self._tables.pop(table.path, None)  # loaded afresh next time
            failures = self._failures[table.path] = self._failures.get(table.path, 0) + 1
        log.info(
            "small %s left to Spark table=%s failures=%d error=%s",
            what,
            table.ref.qualified,
            failures,
            error,
        )
        if failures >= MAX_FAILURES:
            self._refuse(table.path, f"{failures} of its writes")

    def _refuse(self, path: str, reason: str) -> None:
        with self._lock:
            self._refused.add(path)
        log.info("small merges by Spark path=%s reason=delta-rs cannot write %s", path, reason)


def _insertable(rows: pa.Table) -> pa.Table:
    """The MERGE source rows an empty table can take: all but the deletes (they match nothing).

    delta-rs 1.6.6 fails a MERGE into a table with no data files and the change data feed
    on when the source holds a delete that matches nothing beside a row it inserts ("Invalid
    data found: 1 rows failed validation check", an all-null row); without the deletes the
    MERGE is the same and passes, and the table stays on delta-rs.
    """
    import pyarrow.compute as pc

    return rows.filter(pc.field(ACTION) != ACTION_DELETE)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def _newer(tombstones: pa.Table, than_us: int | None) -> pa.Table:
    """The tombstones whose change time is after ``than_us`` (all of them when None)."""
    if than_us is None or tombstones.num_rows == 0:
        return tombstones
    import pyarrow as pa
    import pyarrow.compute as pc

    times = tombstones[TIME]
    than = pa.scalar(than_us, pa.timestamp("us", tz=times.type.tz)).cast(times.type)
    return tombstones.filter(pc.greater(times, than))
