"""Idempotent Delta writes: a replayed micro-batch changes nothing.

Delta skips a commit whose (``txnAppId``, ``txnVersion``) it already holds. Appends take them as
writer options; MERGE/DELETE/UPDATE read them from session confs, which stay set until cleared
and would make the next, different write look like a replay — so :func:`delta_txn` always
clears them again.

One batch may write a table more than once (TRUNCATE's delete, then the MERGE; a batch whose
rows are older than its TRUNCATE merges them first), so the Delta version is
``batch_id * STEPS + step``: each write of each batch has its own number, increasing in the
order of the writes.
The app id comes from the writer's instance id (a UUID kept in the checkpoint directory), so a
new checkpoint — whose batch ids restart at 0 — is never taken for a replay.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
STEPS = 1024  # numbers per batch: segments from 0 up, then truncate and rows; system tables
STEP_TRUNCATE, STEP_ROWS, STEP_SYSTEM = STEPS - 2, STEPS - 1, 0
_INSTANCE_FILE = "lakehouse_writer_instance"


def txn_version(batch_id: int, step: int) -> int:
    """The Delta txnVersion of ``step`` within micro-batch ``batch_id``."""
    return batch_id * STEPS + step


def segment_version(batch_id: int, step: int) -> int:
    """The txnVersion of a batch's ``step``-th write before its latest TRUNCATE (from 0)."""
    assert 0 <= step < STEP_TRUNCATE, step
    return txn_version(batch_id, step)


def app_id_for(instance_id: str, table: str) -> str:
    """The Delta txnAppId of one table written by one writer instance."""
    return f"lakehouse-writer:{instance_id}:{table}"


def instance_id(checkpoint: str) -> str:
    """Return this checkpoint's writer instance id, creating it on first use.

    Args:
        checkpoint: The streaming checkpoint directory (local path or ``file:`` URI).
    """
    directory = Path(checkpoint.removeprefix("file:"))
    marker = directory / _INSTANCE_FILE
    if marker.exists():
        return marker.read_text().strip()
    directory.mkdir(parents=True, exist_ok=True)
    value = uuid.uuid4().hex
    tmp = directory / f".{_INSTANCE_FILE}.tmp"
    tmp.write_text(value)
    tmp.replace(marker)  # atomic: a crash leaves no empty marker behind
    return value


@contextmanager
def delta_txn(spark: SparkSession, app_id: str, version: int) -> Iterator[None]:
    """Run MERGE/DELETE/UPDATE statements inside as (app_id, version); clear the confs after."""
    spark.conf.set(TXN_APP_ID, app_id)
    spark.conf.set(TXN_VERSION, str(version))
    try:
        yield
    finally:
        spark.conf.unset(TXN_APP_ID)
        spark.conf.unset(TXN_VERSION)
