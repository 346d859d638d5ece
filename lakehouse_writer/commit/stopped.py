"""Stopped tables: listed by ``lakehouse-writer status``, resumed by ``resume-table``.

A table whose schema changed incompatibly is stopped: the writer records a ``stopped`` row
for it in ``_writer_state`` (:mod:`lakehouse_writer.commit.state`), one per writer instance, and
rejects its rows from then on, across restarts. Resuming it deletes that instance's
``stopped`` rows; the writer's next start applies the table's rows again (and stops it again
if the cause is not fixed). Rows rejected while it was stopped stay in ``_rejected``.

A local lakehouse is read and written with delta-rs (``deltalake``: no JVM, a second or
less); any other is through the Spark session given (Delta's own API), so every Hadoop
scheme works.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse_writer.commit.state import STATE
from lakehouse_writer.commit.system_tables import select_small
from lakehouse_writer.engines.ids import INSTANCE_FILE  # read here, never created
from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.rules.dialect import DATAFUSION, sql_literal
from lakehouse_writer.runtime.status import HEARTBEAT_S, forget_stopped, read_status, status_age_s
from lakehouse_writer.runtime.storage import CheckpointFiles, is_local, local_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ResumeRefused",
    "StateTable",
    "StoppedTable",
    "instance_of",
    "resume_table",
]

log = logging.getLogger(__name__)

_ALIVE_S = 3 * HEARTBEAT_S  # a "running" status younger than this is a live writer's
_COLUMNS = ["instance", "table", "error", "batch_id"]


class ResumeRefused(LakehouseWriterError):
    """A table cannot be resumed: not stopped, unknown, or a writer still runs."""


@dataclass(frozen=True)
class StoppedTable:
    """A ``stopped`` row of ``_writer_state``: which instance stopped which table, and why."""

    instance: str
    table: str
    error: str
    batch_id: int


def instance_of(checkpoint: str, spark: SparkSession | None = None) -> str | None:
    """The writer instance id kept in ``checkpoint``; None when no writer ran with it."""
    text = CheckpointFiles(checkpoint, spark).read(INSTANCE_FILE)
    return text.strip() if text else None


class StateTable:
    """The stopped rows of ``<lakehouse>/_writer_state``.

    Args:
        lakehouse: The lakehouse root (a local path or any Hadoop URI).
        spark: The session that reads and writes it; None: delta-rs (local paths only).

    Raises:
        ResumeRefused: ``lakehouse`` is not local and no session is given.
    """

    def __init__(self, lakehouse: str, spark: SparkSession | None = None) -> None:
        """Find the table; nothing is read yet."""
        self.path = f"{lakehouse.rstrip('/')}/{STATE}"
        if spark is None and not is_local(lakehouse):
            raise ResumeRefused(
                "a lakehouse on a Hadoop file system needs a Spark session", lakehouse=lakehouse
            )
        self._spark = spark

    def exists(self) -> bool:
        """Whether the writer has written its state here yet."""
        if self._spark is None:
            return (local_path(self.path) / "_delta_log").is_dir()
        from delta.tables import DeltaTable

        return bool(DeltaTable.isDeltaTable(self._spark, self.path))

    def stopped(self) -> list[StoppedTable]:
        """Every stopped table of every instance, in the order they stopped."""
        if not self.exists():
            return []
        rows = self._read_spark() if self._spark is not None else self._read_local()
        found = {(r["instance"], r["table"]): r for r in sorted(rows, key=lambda r: r["batch_id"])}
        return [
            StoppedTable(r["instance"], r["table"], r["error"] or "", int(r["batch_id"]))
            for r in found.values()
        ]

    def resume(self, instance: str, table: str) -> None:
        """Delete the ``stopped`` rows of ``table`` written by ``instance``."""
        if self._spark is None:
            from deltalake import DeltaTable

            predicate = (
                f"instance = {sql_literal(instance)} AND kind = 'stopped' AND "
                f'"table" = {sql_literal(table)}'
            )
            DeltaTable(str(local_path(self.path))).delete(predicate)
            return
        from delta.tables import DeltaTable as SparkDelta
        from pyspark.sql import functions as F

        condition = (
            (F.col("instance") == instance)
            & (F.col("kind") == "stopped")
            & (F.col("table") == table)
        )
        SparkDelta.forPath(self._spark, self.path).delete(condition)

    def _read_local(self) -> list[dict[str, Any]]:
        from deltalake import DeltaTable

        columns = ", ".join(DATAFUSION.quote(c) for c in _COLUMNS)
        return select_small(DeltaTable(str(local_path(self.path))), "kind = 'stopped'", columns)

    def _read_spark(self) -> list[dict[str, Any]]:
        assert self._spark is not None
        frame = self._spark.read.format("delta").load(self.path)
        return [r.asDict() for r in frame.filter("kind = 'stopped'").select(*_COLUMNS).collect()]


def resume_table(
    lakehouse: str,
    checkpoint: str,
    table: str,
    spark: SparkSession | None = None,
    force: bool = False,
) -> StoppedTable:
    """Resume ``table`` for the writer of ``checkpoint``: its next run applies the table again.

    Args:
        lakehouse: The lakehouse root.
        checkpoint: The writer's checkpoint (its instance id and status file).
        table: ``NAMESPACE.NAME`` as the writer names it (``SHOP.ORDERS``).
        spark: The session for Hadoop URIs; None: local paths, no JVM.
        force: Resume even though the status file says a writer runs.

    Returns:
        The ``stopped`` row removed (the error that stopped the table).

    Raises:
        ResumeRefused: No writer ran with ``checkpoint``; a writer still runs on it; or
            ``table`` is not stopped for it (the message lists the stopped tables).
    """
    instance = instance_of(checkpoint, spark)
    if instance is None:
        raise ResumeRefused(
            "no writer has run with this checkpoint (no instance id in it)",
            checkpoint=checkpoint,
            table=table,
        )
    if not force:
        _refuse_if_running(checkpoint, table, spark)
    state = StateTable(lakehouse, spark)
    stopped = [s for s in state.stopped() if s.instance == instance]
    match = next((s for s in stopped if s.table == table), None)
    if match is None:
        raise ResumeRefused(_not_stopped(table, stopped, state), table=table, lakehouse=lakehouse)
    state.resume(instance, table)
    forget_stopped(checkpoint, table, spark)
    log.info("table resumed table=%s instance=%s stopped_by=%s", table, instance, match.error)
    return match


def _refuse_if_running(checkpoint: str, table: str, spark: SparkSession | None) -> None:
    status = read_status(checkpoint, spark) or {}
    if status.get("state") != "running":
        return
    age = status_age_s(status)
    if age is not None and age > _ALIVE_S:
        log.warning(
            "status says running but was last written %.0f s ago: taken as a writer "
            "that ended without a word checkpoint=%s",
            age,
            checkpoint,
        )
        return
    since = "at an unknown time" if age is None else f"{age:.0f} s ago"
    raise ResumeRefused(
        f"a writer runs on this checkpoint (status 'running', written {since}); stop it "
        "first (SIGTERM: it stops after its batch), then resume the table; --force if it "
        "is known to be gone",
        checkpoint=checkpoint,
        table=table,
    )


def _not_stopped(table: str, stopped: list[StoppedTable], state: StateTable) -> str:
    if not state.exists():
        return f"table {table} is not stopped: the writer has no state at {state.path} yet"
    names = [s.table for s in stopped]
    same = [n for n in names if n.lower() == table.lower()]
    hint = f" (did you mean {same[0]}?)" if same else ""
    listed = ", ".join(names) if names else "none"
    return f"table {table} is not stopped{hint}; stopped tables of this writer: {listed}"
