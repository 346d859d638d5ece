"""A checkpoint that does not belong to the lakehouse's progress: stop before reading a row.

The streaming checkpoint holds the offsets Spark reads from next and the writer instance id
(the Delta ``txnAppId`` of every write). ``_writer_state`` in the lakehouse holds, per
instance, the offsets it applied. When the checkpoint is deleted (or pointed elsewhere) while
the lakehouse stays, a start would make a new instance that reads every topic again from the
earliest offset: appends and ``_commits`` rows twice, deletes and TRUNCATEs replayed over
newer rows. Resuming from ``_writer_state`` instead would need the old instance's batch ids
(Delta's replay guard), its pending commits and its stopped tables, which a new checkpoint
cannot take over safely.

So the writer stops, before its query starts, when ``_writer_state`` shows that another
instance applied a topic this writer reads (:func:`check_checkpoint`). Writers on disjoint
topics may share one lakehouse; two writers on the same topic may not. To go on: restore the
checkpoint of that instance, or write to a new lakehouse path.

Two writers started at once on one new checkpoint race to create Spark's ``metadata`` file in
it; the loser stops with :class:`CheckpointInUse` (:func:`concurrent_start`), not with the
file system's ``FileAlreadyExistsException``, and leaves the winner's status file alone.

The reverse of a lost checkpoint stops a start too (:func:`check_lakehouse`): a checkpoint
whose batches Spark has committed, pointed at a lakehouse whose ``_writer_state`` holds no
row of its instance (a new or emptied lakehouse, or a wrong path). Started, it would read on
from the checkpoint's offsets and create the tables without every row those batches read.
Every batch leaves a row in ``_writer_state``
(:meth:`~lakehouse_writer.commit.state.BatchChanges.rows`), so an instance without one has applied
nothing there.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakehouse_writer.errors import CheckpointInUse, CheckpointMismatch
from lakehouse_writer.tables.files import list_names

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ForeignProgress",
    "check_checkpoint",
    "check_lakehouse",
    "committed_batches",
    "concurrent_start",
    "foreign_progress",
]

log = logging.getLogger(__name__)

_STATE = (
    "_writer_state"  # lakehouse_writer.commit.state.STATE; not imported: state.py imports Spark
)
_SHOWN = 2  # topic partitions named in the message
_METADATA_FILE = re.compile(r"/\.?metadata(\.crc)?(?=\s|$)")  # the query's file or its checksum


def concurrent_start(cause: str, checkpoint: str) -> CheckpointInUse | None:
    """The error for a query start that lost the race for the checkpoint; else None.

    Args:
        cause: The root cause of the failed start (``ClassName: message``).
        checkpoint: The checkpoint directory.
    """
    # Hadoop's local file system renames the checksum beside the file too: either rename may
    # be the one that finds the winner's file (``.../metadata`` or ``.../.metadata.crc``).
    lost_metadata = cause.startswith("FileAlreadyExistsException") and bool(
        _METADATA_FILE.search(cause)
    )
    # Two writers in one Spark application: the second query has the first one's name (the
    # instance id, read from the checkpoint the first one made).
    same_name = cause.startswith("IllegalArgumentException") and (
        "as a query with that name is already active" in cause
    )
    if not (lost_metadata or same_name):
        return None
    return CheckpointInUse(
        f"another writer started with the checkpoint {checkpoint} at the same moment and "
        "created its metadata first: run one writer per checkpoint. This one stopped before "
        f"reading a row ({cause})"
    )


@dataclass(frozen=True)
class ForeignProgress:
    """How far another writer instance applied one topic partition into this lakehouse.

    Attributes:
        instance: That writer's instance id (kept in its checkpoint).
        topic: The topic.
        partition: The partition.
        offset: The highest offset it applied.
        batch_id: Its last batch that applied this partition.
    """

    instance: str
    topic: str
    partition: int
    offset: int
    batch_id: int


def foreign_progress(
    spark: SparkSession, lakehouse: str, instance: str, ours: Callable[[str], bool]
) -> list[ForeignProgress]:
    """Offsets applied by instances other than ``instance`` to topics ``ours`` accepts.

    Args:
        spark: The session.
        lakehouse: The lakehouse root (``_writer_state`` is below it).
        instance: This writer's instance id.
        ours: Whether this writer reads a topic (the topics regex as Java reads it).
    """
    from pyspark.sql import functions as F

    path = f"{lakehouse.rstrip('/')}/{_STATE}"
    if not _is_delta_table(spark, path):
        return []
    rows = (
        spark.read.format("delta")
        .load(path)
        .filter((F.col("kind") == "offset") & (F.col("instance") != instance))
        .groupBy("instance", "topic", "partition")
        .agg(F.max("offset").alias("offset"), F.max("batch_id").alias("batch_id"))
        .collect()
    )
    found = [
        ForeignProgress(r.instance, r.topic, int(r.partition), int(r.offset), int(r.batch_id))
        for r in rows
        if ours(r.topic)
    ]
    return sorted(found, key=lambda p: (p.topic, p.partition, p.instance))


def check_checkpoint(
    spark: SparkSession,
    lakehouse: str,
    checkpoint: str,
    instance: str,
    ours: Callable[[str], bool],
) -> None:
    """Raise when another writer instance applied topics this writer reads to ``lakehouse``.

    Call it before the query starts: nothing has been read or written then.

    Raises:
        CheckpointMismatch: Names the checkpoint, the other instance, its topic partitions
            and offsets, and what to do.
    """
    foreign = foreign_progress(spark, lakehouse, instance, ours)
    if not foreign:
        return
    others = sorted({p.instance for p in foreign})
    shown = ", ".join(
        f"{p.topic} partition {p.partition} up to offset {p.offset}" for p in foreign[:_SHOWN]
    )
    more = f" and {len(foreign) - _SHOWN} more" if len(foreign) > _SHOWN else ""
    raise CheckpointMismatch(  # the first 400 characters reach the status file
        f"writer instance {', '.join(others)} already applied {shown}{more} to this lakehouse, "
        "but the checkpoint is not that instance's: starting would apply those rows twice, so "
        "nothing was read or written. Restore that instance's checkpoint, or use a new "
        f"lakehouse path (checkpoint {checkpoint}, lakehouse {lakehouse})"
    )


def committed_batches(spark: SparkSession, checkpoint: str) -> int:
    """How many micro-batches Spark recorded as done in the checkpoint (``commits/<id>``)."""
    names = list_names(spark, f"{checkpoint.rstrip('/')}/commits", dirs=False)
    return sum(1 for name in names if name.isdigit())


def check_lakehouse(
    spark: SparkSession, lakehouse: str, checkpoint: str, instance: str, last_batch: int
) -> None:
    """Raise when the checkpoint applied batches the lakehouse holds nothing of.

    Args:
        spark: The session.
        lakehouse: The lakehouse root.
        checkpoint: The checkpoint directory (Spark used it before).
        instance: The checkpoint's writer instance id.
        last_batch: The instance's last batch in the lakehouse's ``_writer_state`` (-1: none).

    Raises:
        CheckpointMismatch: Names both paths, the instance and what to do.
    """
    if last_batch >= 0:
        return
    batches = committed_batches(spark, checkpoint)
    if not batches:
        return
    raise CheckpointMismatch(  # the first 400 characters reach the status file
        f"the checkpoint {checkpoint} has applied {batches} batch(es), but the lakehouse "
        f"{lakehouse} holds no progress of its writer instance {instance}: started, the "
        "writer would go on from the checkpoint's offsets and the tables would miss every row "
        "those batches read, so nothing was read or written. Point --lakehouse at the "
        "lakehouse this checkpoint wrote to; or, to load this lakehouse from Kafka, use a new "
        "checkpoint (the topics must still hold every row)"
    )


def _is_delta_table(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))
