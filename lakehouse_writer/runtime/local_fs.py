"""Hadoop's local file system without a child process per call, for a driver on a local master.

pyspark ships no Hadoop native library, and without it Hadoop's local file system runs
``chmod`` for every file and folder it creates and ``readlink`` for every
``getFileLinkStatus`` (``FileContext.rename`` asks several times a rename): a Delta commit
through Spark on a local path started 23-25 processes, a streaming checkpoint file more.
``java/NioLocalFileSystem.java`` answers those two calls inside the JVM (``java.nio``) and
leaves all else to Hadoop; figures in docs/PERFORMANCE.md.

The classes are compiled by ``javac`` against Spark's Hadoop jars on first use and kept in
a folder of the user's cache named after the source and those jars (:func:`classes_dir`).
Only a local master gets them: a cluster's executors would need them too. Without ``javac``
(an image with a JRE only) or when the compile fails, the session keeps Hadoop's class and
the log says so once. A ``conf`` that names ``spark.hadoop.fs.file.impl`` keeps its own,
which is also how to turn this off:
``--conf spark.hadoop.fs.file.impl=org.apache.hadoop.fs.LocalFileSystem``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from lakehouse_writer.runtime.jars import cache_root, spark_jar_folders

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "java" / "NioLocalFileSystem.java"
FILE_SYSTEM_CLASS = "lakehouse.hadoop.NioLocalFileSystem"  # the FileSystem API
FILE_CONTEXT_CLASS = "lakehouse.hadoop.NioLocalFileSystem$Fs"  # the FileContext API
FILE_SYSTEM_KEY = "spark.hadoop.fs.file.impl"
FILE_CONTEXT_KEY = "spark.hadoop.fs.AbstractFileSystem.file.impl"
CLASS_PATH_KEY = "spark.driver.extraClassPath"
_COMPILE_TIMEOUT_S = 120


def local_fs_settings(settings: Mapping[str, str]) -> dict[str, str]:
    """The Spark settings that give a local driver this file system; {} to keep Hadoop's.

    Args:
        settings: The session's settings so far; a local file system named there wins, and
            their ``spark.driver.extraClassPath`` is kept in front of the classes.
    """
    if FILE_SYSTEM_KEY in settings or FILE_CONTEXT_KEY in settings:
        return {}
    classes = classes_dir()
    if classes is None:
        return {}
    class_path = settings.get(CLASS_PATH_KEY, "")
    return {
        CLASS_PATH_KEY: os.pathsep.join(e for e in (class_path, str(classes)) if e),
        FILE_SYSTEM_KEY: FILE_SYSTEM_CLASS,
        FILE_CONTEXT_KEY: FILE_CONTEXT_CLASS,
    }


@functools.cache
def classes_dir() -> Path | None:
    """The folder of the compiled classes, compiled on first use; None when they cannot be."""
    hadoop_jars = sorted(p for f in spark_jar_folders() for p in f.glob("hadoop-*.jar"))
    javac = _javac()
    if not hadoop_jars or javac is None:
        log.info(
            "Hadoop's local file system kept (%s): each Delta commit on a local path starts "
            "processes for chmod and readlink",
            "no javac" if javac is None else "no Hadoop jars found in Spark's jars folder",
        )
        return None
    names = "\n".join(p.name for p in hadoop_jars).encode()
    target = (
        cache_root() / "local-fs" / hashlib.sha256(SOURCE.read_bytes() + names).hexdigest()[:16]
    )
    if (target / "lakehouse").is_dir():
        return target
    try:
        _compile(javac, hadoop_jars, target)
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("Hadoop's local file system kept: %s did not compile: %s", SOURCE.name, exc)
        return None
    return target


def _compile(javac: str, hadoop_jars: list[Path], target: Path) -> None:
    """Compile :data:`SOURCE` into a staging folder beside ``target``, then rename it there."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        done = subprocess.run(
            [
                javac,
                "--release",
                "17",
                "-nowarn",
                "-cp",
                os.pathsep.join(str(p) for p in hadoop_jars),
                "-d",
                str(staging),
                str(SOURCE),
            ],
            capture_output=True,
            text=True,
            timeout=_COMPILE_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise subprocess.SubprocessError(done.stderr.strip()[-2000:])
        try:
            staging.rename(target)
        except OSError:
            if not (target / "lakehouse").is_dir():  # not another process's copy
                raise
        log.info("local file system classes compiled into %s", target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _javac() -> str | None:
    """``$JAVA_HOME/bin/javac``, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").is_file():
        return str(Path(home) / "bin" / "javac")
    return shutil.which("javac")
