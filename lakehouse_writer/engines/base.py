"""What every engine answers to: one interface, one result, one way to say "not mine".

An engine applies one table's decoded rows of a batch to its Delta table. The steps and the
rules are the same for all (:func:`lakehouse_writer.engines.table.apply_table`, with the SQL of
:mod:`lakehouse_writer.rules.sql`); an engine holds the rows in its own form (a Spark
DataFrame, or Arrow in the driver) and does the primitive operations on them and on the
table: filter rows by a SQL condition, compute the MERGE's source, MERGE, DELETE, append,
purge. Every write carries the batch's transaction id (``app_id``, ``version``), so a table
one engine began and another finishes is written once (Delta and delta-rs both skip a
version the table holds).

An engine that cannot do a step (a table feature it cannot write, a row type it does not
take, a file system it cannot reach) raises :class:`Declined` before it writes; the router
gives the table to the next engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from lakehouse_writer.errors import LakehouseWriterError

if TYPE_CHECKING:
    import pyarrow as pa

    from lakehouse_writer.read.summary import RowSummary
    from lakehouse_writer.rules.dialect import Dialect
    from lakehouse_writer.rules.sql import TableShape
    from lakehouse_writer.rules.truncate import Truncate
    from lakehouse_writer.tables.manager import TableInfo

__all__ = ["ApplyResult", "Declined", "Engine", "Rows", "TombstoneStore", "Write"]

Rows = TypeVar("Rows")


class Declined(LakehouseWriterError):
    """An engine does not apply this table's batch; the message says why (nothing written)."""


@dataclass(frozen=True)
class Write:
    """One write of a table in a batch: its transaction id, as Delta's ``SetTransaction``.

    Attributes:
        app_id: The writer instance's id for the table (``txnAppId``).
        version: The batch's number for this write (``txnVersion``).
    """

    app_id: str
    version: int


@dataclass(frozen=True)
class ApplyResult:
    """What one batch did to one table.

    Attributes:
        table: ``namespace.name``.
        rows: Decoded rows given, per change type.
        truncates: TRUNCATEs applied (distinct time and scope).
        fast_path: True when the rows were appended instead of merged.
        gdpr_purged: True when the table was purged for GDPR deletes.
        version: The table's Delta version afterwards.
        rejected: Rows that could not be applied: the engine's ``_rejected`` rows, one item
            per reason found (none: empty).
        engine: The engine that applied it (``spark``, ``delta-rs``).
    """

    table: str
    rows: dict[str | None, int]
    truncates: tuple[Truncate, ...]
    fast_path: bool
    gdpr_purged: bool
    version: int
    rejected: tuple[Any, ...] = ()
    engine: str = "spark"


class Engine(Protocol, Generic[Rows]):
    """The primitive operations an engine does; conditions are SQL text in its dialect.

    Attributes:
        name: ``spark`` or ``delta-rs``, for logs and results.
        dialect: The SQL the engine reads the rules in.
    """

    name: str
    dialect: Dialect

    def declines(self, table: TableInfo) -> str | None:
        """Why the engine writes no batch of ``table`` at all; None: it writes them."""
        ...

    def shape(self, table: TableInfo) -> TableShape:
        """The table as the rules see it."""
        ...

    def summarize(self, rows: Rows, table: TableInfo) -> RowSummary:
        """Counts per change type, key range, oldest row and TRUNCATEs of ``rows``."""
        ...

    def filter(self, rows: Rows, condition: str) -> Rows:
        """The rows for which ``condition`` (SQL) holds."""
        ...

    def rejected(self, rows: Rows, condition: str, reason: str, table: TableInfo) -> Any:
        """The rows for which ``condition`` holds as ``_rejected`` rows, ``reason`` (SQL)."""
        ...

    def change_times(self, rows: Rows, below_us: int) -> list[int]:
        """The distinct change times (µs) of ``rows`` older than ``below_us``, ascending."""
        ...

    def is_empty(self, table: TableInfo) -> bool:
        """True when the table holds no rows."""
        ...

    def delete(self, table: TableInfo, truncates: Sequence[Truncate], write: Write) -> None:
        """DELETE the table's rows ``truncates`` cover, once as ``write``."""
        ...

    def outlive(self, rows: Rows, table: TableInfo, summary: RowSummary) -> Rows:
        """The rows no tombstone of the table outlives (:func:`~.rules.tombstones.outlived`)."""
        ...

    def bury(self, rows: Rows, table: TableInfo, summary: RowSummary, write: Write) -> None:
        """Append the tombstones of the rows' winning deletes, once as ``write``."""
        ...

    def merge(self, rows: Rows, table: TableInfo, summary: RowSummary, write: Write) -> None:
        """MERGE the rows' last row per key (:func:`~lakehouse_writer.rules.sql.merge_source`)."""
        ...

    def append(self, rows: Rows, table: TableInfo, write: Write, *, unique: bool) -> bool:
        """Append the rows' upserts in the table's columns, once as ``write``.

        With ``unique``, nothing is written when a key repeats (False is returned).
        """
        ...

    def append_latest(self, rows: Rows, table: TableInfo, write: Write) -> None:
        """Append the last row per key of the rows' upserts, once as ``write``."""
        ...

    def purge(self, table: TableInfo, batch_id: int) -> bool:
        """Leave no current data file holding a row the batch's GDPR deletes removed."""
        ...

    def version(self, table: TableInfo) -> int:
        """The table's latest Delta version."""
        ...


class TombstoneStore(Protocol):
    """A table's tombstones read and appended as Arrow in the driver (delta-rs's writes).

    A batch's tombstones are a few keys; an engine whose own reads and appends are jobs (Spark's)
    hands them to a store where it reaches the table, and does them itself where it does not.
    """

    def read(self, path: str, table: TableInfo, newer_than: int | None) -> pa.Table | None:
        """The tombstones at ``path`` newer than ``newer_than`` (µs; None: all of them).

        None: no table there yet.

        Raises:
            Declined: The store cannot reach or read them.
        """
        ...

    def bury(self, path: str, rows: pa.Table, table: TableInfo, write: Write) -> bool:
        """Append ``rows`` to the tombstones at ``path`` once as ``write``; False: not done."""
        ...
