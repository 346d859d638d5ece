"""The local file system of ``lakehouse_writer.runtime.local_fs`` answers as Hadoop's own (real
Spark).

Every Spark test of the suite runs on it (``build_spark_session`` gives it to a local master);
these tests compare its two calls of its own with Hadoop's ``RawLocalFileSystem`` on the same
paths. That it starts no process is measured, not tested: docs/PERFORMANCE.md.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from lakehouse_writer.runtime.local_fs import FILE_CONTEXT_CLASS, FILE_SYSTEM_CLASS

pytestmark = pytest.mark.spark


def _file_systems(spark: Any) -> tuple[Any, Any]:
    """(ours, Hadoop's) raw local file systems, initialized with the session's settings."""
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    ours = getattr(jvm.lakehouse.hadoop, "NioLocalFileSystem$Raw")()
    hadoop = jvm.org.apache.hadoop.fs.RawLocalFileSystem()
    for fs in (ours, hadoop):
        fs.initialize(jvm.java.net.URI("file:///"), conf)
    return ours, hadoop


def test_the_session_reads_and_renames_local_files_through_it(spark):
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    assert jvm.org.apache.hadoop.fs.FileSystem.getLocal(conf).getClass().getName() == (
        FILE_SYSTEM_CLASS
    )
    context = jvm.org.apache.hadoop.fs.FileContext.getLocalFSFileContext(conf)
    assert context.getDefaultFileSystem().getClass().getName() == FILE_CONTEXT_CLASS


@pytest.mark.parametrize(
    "mode",
    ["-rw-r--r--", "-rwxr-x---", "-rw-------", "-r--r--r--", "drwxrwxrwt"],  # t: sticky bit
)
def test_permissions_are_set_as_hadoop_sets_them(spark, tmp_path, mode):
    ours, hadoop = _file_systems(spark)
    jvm = spark._jvm
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission.valueOf(mode)
    modes = []
    for name, fs in (("ours", ours), ("hadoop", hadoop)):
        target = tmp_path / name
        target.mkdir() if mode.startswith("d") else target.write_text("x")
        fs.setPermission(jvm.org.apache.hadoop.fs.Path(str(target)), permission)
        modes.append(stat.S_IMODE(os.stat(target).st_mode))
    assert modes[0] == modes[1]
    assert stat.filemode(os.stat(tmp_path / "ours").st_mode) == mode


def _link_status(spark: Any, fs: Any, path: str) -> tuple[Any, ...]:
    try:
        status = fs.getFileLinkStatus(spark._jvm.org.apache.hadoop.fs.Path(path))
    except Exception as exc:  # py4j wraps the Java exception
        return ("error", "FileNotFoundException" in str(exc))
    target = str(status.getSymlink()) if status.isSymlink() else None
    return (
        str(status.getPath()),
        status.isDirectory(),
        status.isSymlink(),
        target,
        status.getLen(),
        status.getModificationTime(),
    )


def test_link_status_is_hadoop_s_for_files_folders_links_and_missing_paths(spark, tmp_path):
    ours, hadoop = _file_systems(spark)
    (tmp_path / "file").write_text("twelve bytes")
    (tmp_path / "folder").mkdir()
    (tmp_path / "to_file").symlink_to(tmp_path / "file")
    (tmp_path / "to_folder").symlink_to(tmp_path / "folder")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    names = ["file", "folder", "to_file", "to_folder", "dangling", "missing"]
    for name in names:
        for path in (str(tmp_path / name), Path(tmp_path / name).as_uri()):
            assert _link_status(spark, ours, path) == _link_status(spark, hadoop, path), path
    file_status = _link_status(spark, ours, str(tmp_path / "file"))
    assert file_status[1:5] == (False, False, None, 12)
    assert _link_status(spark, ours, str(tmp_path / "to_file"))[2] is True
    assert _link_status(spark, ours, str(tmp_path / "missing")) == ("error", True)
