"""The ids that make every write of the writer exactly once, whichever engine writes.

Delta skips a commit whose (``txnAppId``, ``txnVersion``) it already holds; delta-rs commits
and checks the same ``SetTransaction``. The app id comes from the writer's instance id (a
UUID kept in the checkpoint directory), so a new checkpoint — whose batch ids restart at 0 —
is never taken for a replay. One batch may write a table more than once (a TRUNCATE's
delete, then the MERGE; rows older than a TRUNCATE merged first), so the version is
``batch_id * STEPS + step``: each write of each batch has its own number, increasing in the
order of the writes.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from lakehouse_writer.runtime.storage import CheckpointFiles

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "INSTANCE_FILE",
    "STEPS",
    "STEP_ROWS",
    "STEP_SYSTEM",
    "STEP_TRUNCATE",
    "app_id_for",
    "tombstones_app_id",
    "instance_id",
    "segment_version",
    "txn_version",
]

STEPS = 1024  # numbers per batch: segments from 0 up, then truncate and rows; system tables
STEP_TRUNCATE, STEP_ROWS, STEP_SYSTEM = STEPS - 2, STEPS - 1, 0
INSTANCE_FILE = "lakehouse_writer_instance"  # in the checkpoint: the instance id


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


def tombstones_app_id(instance_id: str, table: str) -> str:
    """The txnAppId of the tombstones of ``table`` (their own Delta table) by one instance."""
    return app_id_for(instance_id, f"{table}#tombstones")


def instance_id(checkpoint: str, spark: SparkSession | None = None) -> str:
    """Return this checkpoint's writer instance id, creating it on first use.

    The id is kept in the checkpoint directory on its own file system
    (:class:`~lakehouse_writer.runtime.storage.CheckpointFiles`: a local folder, or ``abfss://``,
    ``s3a://``, ``dbfs:/`` ... through Hadoop), so a driver restarted anywhere finds it.
    It is created only if absent: of two writers starting together, the second reads the
    first's id (as atomically as the store creates files: HDFS and ABFS do, local folders
    too).

    Args:
        checkpoint: The streaming checkpoint directory (local path or URI).
        spark: The session that opens a URI; None: the active one.
    """
    files = CheckpointFiles(checkpoint, spark)
    return files.create(INSTANCE_FILE, uuid.uuid4().hex).strip()
