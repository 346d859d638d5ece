"""The TRUNCATEs already applied, per table, kept in the writer's state.

A row of transaction t1 may reach the writer in a later micro-batch than a TRUNCATE at t2 > t1
(another partition, a ``maxOffsetsPerTrigger`` split): :class:`TruncateLog` keeps every
applied TRUNCATE so such rows are dropped too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from lakehouse_writer.commit.state import TRUNCATE
from lakehouse_writer.commit.system_tables import read_rows
from lakehouse_writer.rules.truncate import Truncate, compact, from_record, to_record

__all__ = ["TruncateLog"]


class TruncateLog:
    """TRUNCATEs already applied, per table, so late rows of older transactions still die.

    A row of transaction t1 may reach the writer in a later micro-batch than a TRUNCATE at
    t2 > t1 (another partition, a ``maxOffsetsPerTrigger`` split). The log keeps every applied
    TRUNCATE so such rows are dropped too. It is kept as ``truncate`` rows of ``_writer_state``
    (:mod:`lakehouse_writer.commit.state`; those of every writer instance count), appended with the
    batch's state. Loaded once. A lakehouse of an earlier version kept them in a table
    ``_truncates`` (table, time_us, scope); that table is still read when it exists.

    Args:
        spark: The session.
        state_path: Location of the ``_writer_state`` table.
        legacy_path: Location of the earlier ``_truncates`` table.
    """

    def __init__(self, spark: Any, state_path: str, legacy_path: str) -> None:
        self._spark = spark
        self._state_path = state_path
        self._legacy_path = legacy_path
        self._by_table: dict[str, list[Truncate]] | None = None

    def of(self, table: str) -> list[Truncate]:
        """Applied TRUNCATEs of ``table``."""
        if self._by_table is None:
            self._by_table = self._load()
        return list(self._by_table.get(table, []))

    def record(self, table: str, truncates: Sequence[Truncate]) -> list[tuple[str, str]]:
        """Remember ``truncates`` of ``table``; return the new ones as (table, record JSON)."""
        known = self.of(table)
        kept = compact([*known, *(t for t in truncates if t not in known)])
        assert self._by_table is not None
        self._by_table[table] = kept
        return [(table, to_record(t)) for t in kept if t not in known]

    def _load(self) -> dict[str, list[Truncate]]:
        from delta.tables import DeltaTable

        loaded: dict[str, list[Truncate]] = {}
        for row in read_rows(self._spark, self._state_path, "kind", TRUNCATE):
            loaded.setdefault(row.table, []).append(from_record(row.record))
        if DeltaTable.isDeltaTable(self._spark, self._legacy_path):
            for row in self._spark.read.format("delta").load(self._legacy_path).collect():
                truncate = Truncate(row.time_us, json.loads(row.scope))
                loaded.setdefault(row.table, []).append(truncate)
        return {table: compact(truncates) for table, truncates in loaded.items()}
