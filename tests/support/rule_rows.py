"""Batches of change rows as the writer's rules read them (DuckDB rule tests).

A table ``ID`` (key), ``NAME``; rows given as (ID, change type, seconds after :data:`T0`,
NAME), at offsets 0, 1, ... of partition 0 of topic ``t``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pyarrow as pa

T0 = datetime(2024, 1, 1, tzinfo=UTC)

Row = tuple[int | None, str, int, str]


def batch_rows(rows: Sequence[Row]) -> pa.Table:
    """The rows in the layout of a decoded batch (technical fields, topic, partition, offset)."""
    return pa.table(
        {
            "ID": pa.array([r[0] for r in rows], pa.int64()),
            "NAME": [r[3] for r in rows],
            "__change_type": [r[1] for r in rows],
            "__change_time": pa.array(
                [T0 + timedelta(seconds=r[2]) for r in rows], pa.timestamp("us", "UTC")
            ),
            "__source_rowid": pa.array([None] * len(rows), pa.string()),
            "topic": ["t"] * len(rows),
            "partition": pa.array([0] * len(rows), pa.int32()),
            "offset": pa.array(range(len(rows)), pa.int64()),
        }
    )
