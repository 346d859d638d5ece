"""Small files the writer keeps beside its checkpoint, on the checkpoint's own file system.

The instance id, the status file and the error trace live in the checkpoint directory, which
may be a local folder or any URI Hadoop can open (``abfss://``, ``s3a://``, ``gs://``,
``dbfs:/``, ``hdfs://``, ``viewfs://``). A local path (no scheme, or ``file:``) is read and
written with Python's own file functions, so ``lakehouse-writer status`` and the tests need no
JVM; any other scheme goes through ``org.apache.hadoop.fs.FileSystem`` of the Spark session,
with the session's Hadoop configuration (``spark.hadoop.*`` and session-level ``fs.*``
settings such as a storage account key), exactly as Spark's checkpoint and Delta reach it.

:meth:`CheckpointFiles.replace` writes a file whole (a reader sees the old or the new text);
:meth:`CheckpointFiles.create` writes one only if it does not exist yet, and returns what is
there (the first writer's text) when it does.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from lakehouse_writer.errors import LakehouseWriterError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "CheckpointFiles",
    "DeltaRsPath",
    "StorageError",
    "delta_rs_path",
    "is_local",
    "local_path",
]

log = logging.getLogger(__name__)

# A file another writer has just created may still be empty until it closes it: re-read for
# this long before calling it broken (object stores make a file visible only on close).
_CREATED_WAIT_S = 10.0


class StorageError(LakehouseWriterError):
    """A file of the checkpoint directory cannot be read or written."""


def is_local(path: str) -> bool:
    """True for a local path: no URI scheme, ``file:``, or a drive letter (``C:``)."""
    scheme = urlsplit(path).scheme
    return scheme in ("", "file") or len(scheme) == 1


def local_path(path: str) -> Path:
    """``file:/x``, ``file:///x`` or ``/x`` as a :class:`~pathlib.Path`."""
    parts = urlsplit(path)
    return Path(parts.path) if parts.scheme == "file" else Path(path)


@dataclass(frozen=True)
class DeltaRsPath:
    """Where delta-rs opens a table: its URI and object-store options (secrets: never log)."""

    uri: str
    options: dict[str, str] = field(default_factory=dict, repr=False)

    def open(self) -> Any:
        """The table's ``deltalake.DeltaTable`` at its latest version."""
        from deltalake import DeltaTable

        return DeltaTable(self.uri, storage_options=self.options or None)

    def open_existing(self) -> Any | None:
        """The table's ``deltalake.DeltaTable``, or None when there is no table there."""
        from deltalake.exceptions import TableNotFoundError

        try:
            return self.open()
        except TableNotFoundError:
            return None


def delta_rs_path(path: str) -> DeltaRsPath | None:
    """Where delta-rs reaches the table at ``path``; None where it cannot (Spark's alone).

    A local path, and an Azure URI (``abfss://`` for ADLS Gen2 and OneLake, ``wasbs://``,
    with the ``AZURE_STORAGE_*`` credential the session's Hadoop settings use,
    :mod:`lakehouse_writer.runtime.azure`). Other schemes (``s3a://``, ``gs://``, ``dbfs:/``)
    are Hadoop's: the writer's delta-rs paths decline them, and the router says so once per
    table (``table left the fast path``) and counts it.
    """
    if is_local(path):
        return DeltaRsPath(str(local_path(path)))
    from lakehouse_writer.runtime.azure import AzurePath, delta_rs_options, delta_rs_uri

    if AzurePath.parse(path) is None:
        return None
    from producer_lib.settings import AzureStorageSettings

    return DeltaRsPath(delta_rs_uri(path), delta_rs_options(AzureStorageSettings(), path))


class _Backend(Protocol):
    def read(self, name: str) -> str | None: ...
    def replace(self, name: str, text: str) -> None: ...
    def create(self, name: str, text: str) -> bool: ...
    def where(self, name: str) -> str: ...


class CheckpointFiles:
    """The files of one directory (the checkpoint), local or on any Hadoop file system.

    Args:
        directory: A local path or a URI Hadoop can open.
        spark: The session whose Hadoop configuration opens a URI; None takes the active
            one. Local paths need none.

    Raises:
        StorageError: ``directory`` is a URI and there is no classic Spark session, or
            Hadoop has no file system for its scheme (the message says so).
    """

    def __init__(self, directory: str, spark: SparkSession | None = None) -> None:
        self.directory = directory
        self._backend: _Backend
        if is_local(directory):
            self._backend = _LocalFiles(local_path(directory))
            return
        session = spark or _active_session(directory)
        try:
            self._backend = _HadoopFiles(directory, session)
        except Exception as exc:
            cause = getattr(exc, "java_exception", None)  # e.g. no FileSystem for the scheme
            if cause is None:
                raise
            raise StorageError(
                f"cannot open the directory: {_describe(cause)}", checkpoint=directory
            ) from exc

    def where(self, name: str) -> str:
        """The path or URI of file ``name`` in the directory."""
        return self._backend.where(name)

    def read(self, name: str) -> str | None:
        """The text of file ``name``, or None when it does not exist."""
        return self._guard("read", name, lambda: self._backend.read(name))

    def replace(self, name: str, text: str) -> None:
        """Write file ``name`` whole: through a temporary file renamed over it."""
        self._guard("write", name, lambda: self._backend.replace(name, text))

    def create(self, name: str, text: str) -> str:
        """Write file ``name`` unless it exists; return its text (the first writer's).

        Raises:
            StorageError: The file exists but stays empty (a writer died while creating it).
        """
        if self._guard("create", name, lambda: self._backend.create(name, text)):
            return text
        deadline = time.monotonic() + _CREATED_WAIT_S
        while True:
            found = (self.read(name) or "").strip()
            if found or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if not found:
            raise StorageError(
                "the file exists but is empty; delete it if no writer is starting",
                file=self.where(name),
            )
        return found

    def _guard(self, action: str, name: str, call: Any) -> Any:
        """Run ``call``; an I/O error becomes a :class:`StorageError` naming the file."""
        try:
            return call()
        except StorageError:
            raise
        except Exception as exc:
            cause = getattr(exc, "java_exception", None)  # py4j's error of a JVM call
            if cause is None and not isinstance(exc, OSError):
                raise
            raise StorageError(
                f"cannot {action} the file: {_describe(cause or exc)}", file=self.where(name)
            ) from exc


class _LocalFiles:
    """A local folder, through Python's file functions."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory

    def where(self, name: str) -> str:
        return str(self._dir / name)

    def read(self, name: str) -> str | None:
        path = self._dir / name
        return path.read_text() if path.exists() else None

    def replace(self, name: str, text: str) -> None:
        tmp = self._temporary(name, text)
        tmp.replace(self._dir / name)  # atomic on one file system

    def create(self, name: str, text: str) -> bool:
        tmp = self._temporary(name, text)
        try:
            os.link(tmp, self._dir / name)  # fails if it exists: atomic, and never half written
        except FileExistsError:
            return False
        finally:
            tmp.unlink()
        return True

    def _temporary(self, name: str, text: str) -> Path:
        self._dir.mkdir(parents=True, exist_ok=True)
        tmp = self._dir / f".{name}.{uuid.uuid4().hex[:8]}.tmp"
        tmp.write_text(text)
        return tmp


class _HadoopFiles:
    """A directory on the file system Hadoop opens for its URI, with the session's settings."""

    def __init__(self, directory: str, spark: SparkSession) -> None:
        jvm: Any = spark._jvm
        self._jvm = jvm
        self._dir = jvm.org.apache.hadoop.fs.Path(directory)
        # The session's Hadoop configuration: spark.hadoop.* plus session-level fs.* settings
        # (Databricks users set storage keys with spark.conf.set), as Delta and Spark use.
        conf = spark._jsparkSession.sessionState().newHadoopConf()
        self._fs = self._dir.getFileSystem(conf)

    def where(self, name: str) -> str:
        return str(self._path(name).toString())

    def read(self, name: str) -> str | None:
        path = self._path(name)
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            return bytes(stream.readAllBytes()).decode()
        finally:
            stream.close()

    def replace(self, name: str, text: str) -> None:
        tmp = self._path(f".{name}.{uuid.uuid4().hex[:8]}.tmp")
        self._write(tmp, text, overwrite=True)
        target = self._path(name)
        # FileSystem.rename does not overwrite on every store (HDFS returns False): delete
        # first. A reader in between sees no file, never half of one.
        if not self._fs.rename(tmp, target):
            self._fs.delete(target, False)
            if not self._fs.rename(tmp, target):
                self._fs.delete(tmp, False)
                raise StorageError("rename refused by the file system", file=self.where(name))

    def create(self, name: str, text: str) -> bool:
        path = self._path(name)
        if self._fs.exists(path):
            return False
        try:
            self._write(path, text, overwrite=False)  # create-if-absent on the store
        except Exception as exc:  # noqa: BLE001 - a py4j error whose Java class tells
            if "FileAlreadyExistsException" in _java_class(exc):
                return False
            raise
        return True

    def _write(self, path: Any, text: str, overwrite: bool) -> None:
        self._fs.mkdirs(self._dir)
        stream = self._fs.create(path, overwrite)
        try:
            stream.write(bytearray(text.encode()))
        finally:
            stream.close()

    def _path(self, name: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self._dir, name)


def _active_session(directory: str) -> SparkSession:
    """The process's classic Spark session, needed to open ``directory``."""
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if spark is None or getattr(spark, "_jvm", None) is None:
        raise StorageError(
            "a checkpoint on a Hadoop file system is opened through a classic Spark session; "
            "none is running",
            checkpoint=directory,
        )
    return spark


def _java_class(exc: BaseException) -> str:
    """The Java class name behind a py4j error, else ``""``."""
    java = getattr(exc, "java_exception", None)
    return str(java.getClass().getName()) if java is not None else ""


def _describe(cause: Any) -> str:
    """``Class: message`` of a Python or Java exception."""
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    return f"{cause.getClass().getSimpleName()}: {cause.getMessage()}"
