"""Maintenance inside a running writer, between batches: opt-in, and bounded per pass.

A continuous writer runs for weeks; ``lakehouse-writer maintain`` run beside it would conflict
with its MERGEs (docs/OPERATIONS.md). With ``LAKEHOUSE_MAINTAIN_INTERVAL_S`` set, the writer
runs a maintenance pass itself (:func:`~lakehouse_writer.tables.maintain.maintain_tables`:
compaction, VACUUM by retention and GDPR, log checkpoints) after a batch, at most once per interval,
on its own thread of control, so no batch runs at the same time and nothing conflicts.

A pass starts no table once ``LAKEHOUSE_MAINTAIN_BUDGET_S`` (30 s) has passed, but always one; a
table already started finishes, so the next batch waits at most the budget plus one table's
maintenance.
The next pass goes on from the first table the last one did not reach, so every table gets
its turn however many there are. A table whose maintenance fails is logged and skipped: the
writer's batches go on.

Settings (of :class:`~lakehouse_writer.settings.LakehouseSettings`):
``LAKEHOUSE_MAINTAIN_INTERVAL_S`` (unset: off; seconds between the starts of two passes) and
``LAKEHOUSE_MAINTAIN_BUDGET_S``; the pass's own settings are
:class:`~lakehouse_writer.tables.retention.MaintainSettings`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from lakehouse_writer.tables.retention import MaintainSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["ScheduledMaintenance"]

log = logging.getLogger(__name__)

DEFAULT_BUDGET_S = 30.0


class ScheduledMaintenance:
    """Runs a bounded maintenance pass between batches, at most once per ``interval_s``.

    Args:
        spark: The writer's session.
        lakehouse: The lakehouse root.
        interval_s: Least seconds between the starts of two passes; None: never.
        budget_s: No table is started once a pass has run this long.
        clock: Monotonic seconds (tests pass their own).
        settings: What a pass does to a table (retention, compaction); default: the defaults.
    """

    def __init__(
        self,
        spark: SparkSession,
        lakehouse: str,
        interval_s: float | None,
        budget_s: float = DEFAULT_BUDGET_S,
        clock: Callable[[], float] = time.monotonic,
        settings: MaintainSettings | None = None,
    ) -> None:
        self._spark, self._lake = spark, lakehouse
        self._settings = settings or MaintainSettings()
        self.interval_s, self.budget_s = interval_s, budget_s
        self._clock = clock
        self._last_start: float | None = None
        self._next_table = 0  # where the next pass begins in the sorted table list
        self.passes = 0

    def between_batches(self) -> None:
        """Run a pass if one is due; log its tables' outcomes; never raise."""
        now = self._clock()
        if self.interval_s is None:
            return
        if self._last_start is not None and now - self._last_start < self.interval_s:
            return
        self._last_start = now
        try:
            self._pass()
        except Exception as exc:  # noqa: BLE001 - maintenance must not stop the writer
            log.warning("scheduled maintenance failed error=%s (the writer goes on)", exc)

    def _pass(self) -> None:
        from lakehouse_writer.tables.files import find_tables
        from lakehouse_writer.tables.maintain import TableReport, maintain_tables

        names = sorted(name for name, _path in find_tables(self._spark, self._lake))
        if not names:
            return
        start = self._next_table % len(names)
        order = names[start:] + names[:start]
        began, reports = self._clock(), list[TableReport]()
        for name in order:  # the first table always: every pass moves the rotation on
            if reports and self._clock() - began >= self.budget_s:
                break
            reports.extend(maintain_tables(self._spark, self._lake, [name], self._settings))
        self._next_table = start + len(reports)
        self.passes += 1
        failed = [(r.table, r.error) for r in reports if r.error is not None]
        for table, error in failed:
            log.warning("scheduled maintenance of a table failed table=%s error=%s", table, error)
        log.info(
            "scheduled maintenance pass tables=%d of %d failed=%d seconds=%.1f",
            len(reports),
            len(names),
            len(failed),
            self._clock() - began,
        )
