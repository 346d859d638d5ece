"""A table whose creation was killed before it committed: its empty log is cleared.

Delta creates a table by writing ``_delta_log/00000000000000000000.json`` through a temporary
file it renames. A writer killed between the two (found by
``tests/faults/test_writer_kill_points.py``) leaves a ``_delta_log`` folder holding only the
temporary file (and an empty ``_staged_commits`` folder). Delta then refuses both to read the
path as a table and to create one there (``DELTA_TABLE_NOT_FOUND``), so every restart of the
writer failed on it. A log without a single commit or checkpoint holds nothing: before it
creates a table, the writer deletes such a log, through the path's own Hadoop file system.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

# What makes a log hold a table: a commit, a checkpoint (classic, multi-part or V2), a
# compacted range of commits, or the pointer to the last checkpoint.
_COMMITTED = re.compile(
    r"\d{20}\.json|\d{20}\.\d{20}\.compacted\.json|\d{20}\.checkpoint.*\.parquet|"
    r"\d{20}\.checkpoint\..*\.json|_last_checkpoint"
)


def clear_unborn_log(spark: SparkSession, table_path: str) -> bool:
    """Delete ``table_path``'s ``_delta_log`` when it holds no commit; True if it did.

    Files outside ``_delta_log`` are never touched; a log with any commit is left as it is.
    """
    jvm: Any = spark._jvm  # type: ignore[attr-defined]
    conf = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    log_dir = jvm.org.apache.hadoop.fs.Path(table_path.rstrip("/") + "/_delta_log")
    fs = log_dir.getFileSystem(conf)
    if not fs.exists(log_dir):
        return False
    names = [str(s.getPath().getName()) for s in fs.listStatus(log_dir)]
    if any(_COMMITTED.fullmatch(name) for name in names):
        return False
    staged = jvm.org.apache.hadoop.fs.Path(log_dir, "_staged_commits")
    if fs.exists(staged) and len(fs.listStatus(staged)):
        return False  # commits a coordinator may still publish: not ours to judge
    fs.delete(log_dir, True)
    log.warning(
        "empty Delta log cleared path=%s files=%s reason=a table creation ended before its "
        "first commit",
        table_path,
        sorted(names),
    )
    return True


def is_committed_log_name(name: str) -> bool:
    """Whether a ``_delta_log`` file name is one that makes the log hold a table."""
    return bool(_COMMITTED.fullmatch(name))
