"""The Delta tables of a lakehouse and their files, through the path's own file system.

A local path is read with :mod:`os`; any other scheme (``abfss://``, ``s3a://``, ``hdfs://``)
through Hadoop's ``FileSystem`` of the session, so maintenance lists what the writer wrote
wherever it wrote it. Tables sit at ``<lakehouse>/<namespace>/<name>`` and system tables at
``<lakehouse>/_name``; path segments are escaped by
:func:`producer_lib.schema.names.path_segment`.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Any

from lakehouse_writer.runtime.storage import is_local, local_path
from producer_lib.schema.names import path_segment, unescape_segment

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DELTA_LOG",
    "find_tables",
    "first_log_version",
    "directory_problem",
    "is_table",
    "list_names",
    "stored_files",
    "table_path",
]

DELTA_LOG = "_delta_log"


def find_tables(spark: SparkSession, lakehouse: str) -> list[tuple[str, str]]:
    """``(name, path)`` of every Delta table under ``lakehouse``, sorted by name.

    ``<lakehouse>/<namespace>/<name>`` (``NAMESPACE.NAME``) and the system tables
    ``<lakehouse>/_name`` (``_name``).
    """
    found = []
    for top in _subdirs(spark, lakehouse):
        top_path = f"{lakehouse.rstrip('/')}/{top}"
        if is_table(spark, top_path):
            found.append((unescape_segment(top), top_path))
            continue
        for name in _subdirs(spark, top_path):
            path = f"{top_path}/{name}"
            if is_table(spark, path):
                found.append((f"{unescape_segment(top)}.{unescape_segment(name)}", path))
    return sorted(found)


def table_path(lakehouse: str, name: str) -> str:
    """The location of ``NAMESPACE.NAME`` (the namespace may hold dots: the last one splits)."""
    namespace, dot, table = name.rpartition(".")
    root = lakehouse.rstrip("/")
    if not dot:
        return f"{root}/{path_segment(table)}"
    return f"{root}/{path_segment(namespace)}/{path_segment(table)}"


def first_log_version(spark: SparkSession, path: str) -> int:
    """The oldest commit file's version in ``_delta_log``."""
    return min(_log_versions(spark, path), default=0)


def last_log_version(spark: SparkSession, path: str) -> int:
    """The newest commit file's version in ``_delta_log`` (-1: no table there).

    A commit is the atomic creation of its ``<version>.json``, and log clean-up never removes
    the newest, so this is the table's latest version, whichever engine committed it. The
    JVM's ``DeltaLog.update`` gives the same answer, but after a delta-rs commit (no checksum
    file) it rebuilds the snapshot from the log first.
    """
    return max(_log_versions(spark, path), default=-1)


def _log_versions(spark: SparkSession, path: str) -> list[int]:
    names = list_names(spark, f"{path.rstrip('/')}/{DELTA_LOG}", dirs=False)
    return [int(n[:20]) for n in names if n.endswith(".json") and n[:20].isdigit()]


def stored_files(spark: SparkSession, path: str) -> int:
    """Files under the table directory outside ``_delta_log`` (checksums not counted)."""
    if is_local(path):
        root = local_path(path)
        count = 0
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not (folder == str(root) and d == DELTA_LOG)]
            count += sum(1 for f in files if not f.startswith("."))
        return count
    fs, fs_path = _hadoop(spark, path)
    files, count = fs.listFiles(fs_path, True), 0
    while files.hasNext():
        file = files.next().getPath()
        count += f"/{DELTA_LOG}/" not in file.toString() and not file.getName().startswith(".")
    return count


def directory_problem(spark: SparkSession | None, path: str) -> str | None:
    """Why ``path`` is no directory to look for tables in; None when it is one.

    ``spark`` opens a Hadoop URI; a local path needs none.
    """
    if is_local(path):
        folder = local_path(path)
        if folder.is_dir():
            return None
        return "is a file, not a directory" if folder.exists() else "does not exist"
    assert spark is not None, "a Hadoop URI needs a session"
    fs, fs_path = _hadoop(spark, path)
    if not fs.exists(fs_path):
        return "does not exist"
    return None if fs.getFileStatus(fs_path).isDirectory() else "is a file, not a directory"


def is_table(spark: SparkSession, path: str) -> bool:
    """Whether ``path`` holds a Delta table (a ``_delta_log`` folder)."""
    return DELTA_LOG in list_names(spark, path, dirs=True)


def _subdirs(spark: SparkSession, path: str) -> list[str]:
    return sorted(n for n in list_names(spark, path, dirs=True) if n != DELTA_LOG)


def list_names(spark: SparkSession, path: str, dirs: bool) -> list[str]:
    """Names of the directories (``dirs``) or files directly in ``path`` ([] if none)."""
    if is_local(path):
        folder = local_path(path)
        if not folder.is_dir():
            return []
        return [p.name for p in folder.iterdir() if p.is_dir() == dirs]
    fs, fs_path = _hadoop(spark, path)
    if not fs.exists(fs_path):
        return []
    return [s.getPath().getName() for s in fs.listStatus(fs_path) if s.isDirectory() == dirs]


def delete_tree(spark: SparkSession, path: str) -> None:
    """Delete the folder ``path`` and everything below it (nothing there: nothing done)."""
    if is_local(path):
        shutil.rmtree(local_path(path), ignore_errors=True)
        return
    fs, fs_path = _hadoop(spark, path)
    fs.delete(fs_path, True)


def _hadoop(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """Hadoop's ``FileSystem`` of ``path`` and the path (the JVM's; a classic session)."""
    jvm: Any = spark._jvm  # None only on Spark Connect, which the writer refuses
    fs_path = jvm.org.apache.hadoop.fs.Path(path)
    return fs_path.getFileSystem(spark._jsc.hadoopConfiguration()), fs_path  # type: ignore[attr-defined]
