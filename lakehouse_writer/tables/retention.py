"""What a maintenance pass does to one table: its settings and the plan it makes.

Pure values, no Spark: :class:`MaintainSettings` (:attr:`LakehouseSettings.maintain
<lakehouse_writer.settings.LakehouseSettings.maintain>` reads them from the environment),
:func:`iso_duration_hours` (a ``flow.retention_period`` such as ``P30D`` in hours) and
:func:`plan_table` (compaction, VACUUM retention, log retention for one table, from what its
log says). :mod:`lakehouse_writer.tables.maintain` carries the plan out.

The VACUUM retention of a table is its history retention: ``LAKEHOUSE_HISTORY_RETENTION_HOURS``
(168), or its ``flow.retention_period`` when that is shorter. While a GDPR purge (the
writer's ``flow.gdpr_delete`` commit, :mod:`lakehouse_writer.engines.spark.gdpr`) lies inside that
history, it is at most ``LAKEHOUSE_GDPR_COMPLETION_HOURS`` (24): the first pass that starts that
many hours after the purge deletes every file that still held the purged rows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["MaintainSettings", "TablePlan", "interval", "iso_duration_hours", "plan_table"]

RETENTION_PROPERTY = "flow.retention_period"
LOG_RETENTION = "delta.logRetentionDuration"
FILE_RETENTION = "delta.deletedFileRetentionDuration"
# An ISO 8601 duration; a year counts 365 days and a month 30 (a retention is a bound, not a
# calendar date).
_DURATION = re.compile(
    r"^P(?:(?P<Y>\d+(?:\.\d+)?)Y)?(?:(?P<M>\d+(?:\.\d+)?)M)?(?:(?P<W>\d+(?:\.\d+)?)W)?"
    r"(?:(?P<D>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)
_HOURS = {"Y": 365 * 24, "M": 30 * 24, "W": 7 * 24, "D": 24, "h": 1, "m": 1 / 60, "s": 1 / 3600}


def iso_duration_hours(text: str) -> float:
    """``"P30D"`` -> 720.0, ``"P1Y"`` -> 8760.0, ``"PT12H"`` -> 12.0.

    Raises:
        ValueError: ``text`` is no ISO 8601 duration (or an empty one, ``"P"``).
    """
    clean = text.strip().upper()  # months and minutes are both "M": their place tells them
    match = _DURATION.match(clean)
    if match is None or not any(match.groupdict().values()) or clean.endswith("T"):
        raise ValueError(f"not an ISO 8601 duration: {text!r}")
    return sum(float(v) * _HOURS[k] for k, v in match.groupdict().items() if v)


def interval(hours: float) -> str:
    """A Delta table property interval: ``interval 168 hours`` (seconds when not whole)."""
    if float(hours).is_integer():
        return f"interval {int(hours)} hours"
    return f"interval {math.ceil(hours * 3600)} seconds"


@dataclass(frozen=True)
class MaintainSettings:
    """How a maintenance pass treats the tables (``LakehouseSettings`` variables in brackets).

    Attributes:
        history_retention_hours: Old versions (time travel, the Change Data Feed) are kept
            this long unless a table's ``flow.retention_period`` is shorter
            (``LAKEHOUSE_HISTORY_RETENTION_HOURS``, 168 = 7 days, Delta's own default).
        gdpr_completion_hours: A GDPR delete is gone from every file of the table (old
            versions and Change Data Feed files) at the first pass this many hours after it
            (``LAKEHOUSE_GDPR_COMPLETION_HOURS``, 24).
        tombstone_retention_hours: A delete's tombstone is removed this long after the
            delete's change time (``LAKEHOUSE_TOMBSTONE_RETENTION_HOURS``, 168).
        small_file_bytes: A data file smaller than this is small; only small files are
            compacted (``LAKEHOUSE_SMALL_FILE_BYTES``, 32 MiB).
        compact_min_files: A table is compacted when it has at least this many small files
            (``LAKEHOUSE_COMPACT_MIN_FILES``, 16; 0: never).
    """

    history_retention_hours: float = 168.0
    gdpr_completion_hours: float = 24.0
    tombstone_retention_hours: float = 168.0
    small_file_bytes: int = 32 << 20
    compact_min_files: int = 16


@dataclass(frozen=True)
class TablePlan:
    """What a pass does to one table.

    Attributes:
        table: ``NAMESPACE.NAME`` (a system table: its name).
        compact: True when it has at least ``compact_min_files`` small files.
        small_files: Its small data files (of the latest version).
        history_hours: Its history retention: the platform's, or its governance one.
        vacuum_hours: The VACUUM retention of this pass (``history_hours``, or the GDPR
            completion time while a purge is inside the history).
        gdpr_purge_ms: When the latest GDPR purge inside the history was committed (epoch ms).
        properties: Table properties to set (log and file retention), only those that differ.
        reason: Why the retention is what it is, for people.
    """

    table: str
    compact: bool
    small_files: int
    history_hours: float
    vacuum_hours: float
    gdpr_purge_ms: int | None
    properties: dict[str, str]
    reason: str

    def describe(self) -> str:
        """One line: what the pass would do."""
        parts = [
            f"compact {self.small_files} small files" if self.compact else "no compaction",
            f"vacuum retain {self.vacuum_hours:g} h ({self.reason})",
        ]
        if self.properties:
            parts.append("set " + ", ".join(f"{k}='{v}'" for k, v in self.properties.items()))
        return f"{self.table}: " + "; ".join(parts) + "; checkpoint the log"


def plan_table(
    table: str,
    properties: Mapping[str, str],
    small_files: int,
    purge_times_ms: list[int],
    now_ms: int,
    settings: MaintainSettings,
) -> TablePlan:
    """The plan for one table, from its properties, small files and GDPR purges.

    Raises:
        ValueError: Its ``flow.retention_period`` is no ISO 8601 duration.
    """
    history, reason = settings.history_retention_hours, "platform history retention"
    governance = properties.get(RETENTION_PROPERTY)
    if governance:
        hours = iso_duration_hours(governance)
        if hours < history:
            history, reason = hours, f"{RETENTION_PROPERTY}={governance}"
    inside = [t for t in purge_times_ms if t > now_ms - history * 3_600_000]
    purge = max(inside) if inside else None
    vacuum = history
    if purge is not None and settings.gdpr_completion_hours < history:
        vacuum, reason = settings.gdpr_completion_hours, "GDPR purge in the history"
    wanted = {LOG_RETENTION: interval(history), FILE_RETENTION: interval(history)}
    changes = {k: v for k, v in wanted.items() if properties.get(k) != v}
    compact = settings.compact_min_files > 0 and small_files >= settings.compact_min_files
    return TablePlan(table, compact, small_files, history, vacuum, purge, changes, reason)
