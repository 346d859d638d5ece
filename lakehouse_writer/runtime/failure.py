"""What a failed run leaves behind: status ``failed`` with its root cause, and one short line.

A failure inside the streaming query reaches Python as a ``StreamingQueryException`` whose
text is the whole JVM trace (2,600 lines for a lakehouse path under a regular file), while
the reason fits on one line: the innermost cause, e.g. ``ParentNotDirectoryException:
Parent path is not a directory: file:/data/lake``. :class:`Failure` walks the cause chain
(Python ``__cause__``, pyspark's captured causes, the Java ``getCause()`` chain) down to
that exception; the writer's own errors (:class:`LakehouseWriterError`) are already
written for a reader and are taken as they are. :func:`record_failure` writes it to the
status file and the full trace to ``writer_error.log`` beside it; secrets are replaced by
``***`` in both. :func:`keep_traces_off_stderr` stops Spark and py4j from printing the
same trace to stderr a second and third time.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, SecretStr

from lakehouse_writer.errors import CheckpointInUse, LakehouseWriterError, WriterFailed
from lakehouse_writer.runtime.data_loss import data_gap_cause
from lakehouse_writer.runtime.status import BatchStats, write_status
from lakehouse_writer.runtime.storage import CheckpointFiles, StorageError
from producer_lib.settings import KafkaSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse_writer.settings import LakehouseSettings

__all__ = [
    "TRACE_FILE",
    "Failure",
    "keep_traces_off_stderr",
    "record_failure",
    "report_failure",
    "root_cause",
    "secrets_of",
]

log = logging.getLogger(__name__)

TRACE_FILE = "writer_error.log"
_MAX_CAUSE = 400  # characters of the cause in the status file and the last log line
_MAX_DEPTH = 50  # causes followed; a chain is never this long, a cycle would be endless
# Loggers that print a failed query's whole trace to stderr; the writer reports it once.
# Spark 4.1 moved both classes to the package's ``runtime`` subpackage (their logger names).
_JAVA_LOGGERS = (
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
    "org.apache.spark.sql.execution.streaming.runtime.StreamExecution",
)


@dataclass(frozen=True)
class Failure:
    """Why a run failed.

    Attributes:
        cause: The root cause, ``ClassName: message`` (first line, at most 400 characters).
        trace: Everything Python and the JVM know about it (for the trace file).
    """

    cause: str
    trace: str

    @classmethod
    def of(cls, exc: BaseException, secrets: Iterable[str] = ()) -> Failure:
        """The failure ``exc`` stands for, with every secret in ``secrets`` shown as ``***``."""
        hidden = list(secrets)
        trace = _redact("".join(traceback.format_exception(exc)), hidden)
        return cls(root_cause(exc, hidden), trace)


def report_failure(
    settings: LakehouseSettings,
    exc: BaseException,
    stats: BatchStats | None = None,
    failure: Failure | None = None,
) -> WriterFailed:
    """Record a failed run (:func:`record_failure`), log its cause; the error to raise.

    Args:
        settings: The writer's settings (its checkpoint, its secrets).
        exc: What ended the run.
        stats: What the run did until then; None before it started.
        failure: Why it failed when known better than ``exc`` says (the batch's own error:
            a query that failed in a batch knows it only as a Python proxy's text).
    """
    failure = failure or Failure.of(exc, secrets_of(settings))
    gap = data_gap_cause(failure.trace, settings.kafka_client_conf())
    if gap is not None:  # Spark names only the consumer's OffsetOutOfRangeException
        failure = replace(failure, cause=gap)
    if any(isinstance(e, CheckpointInUse) for e in (exc, exc.__cause__)):  # the other's status
        log.error("writer failed: %s", failure.cause)
        return WriterFailed(failure.cause)
    trace = record_failure(settings.checkpoint_path, stats or BatchStats(), failure)
    error = WriterFailed(failure.cause, trace=trace or None)
    log.debug("writer failed; trace:\n%s", failure.trace)
    log.error("writer failed: %s", error)
    return error


def record_failure(checkpoint: str, stats: BatchStats, failure: Failure) -> str:
    """Write status ``failed`` with ``failure``'s cause, and its trace beside it.

    Args:
        checkpoint: The checkpoint directory (where the status file is).
        stats: What the run did until it failed (its last batch, lag ...).
        failure: Why it failed.

    Returns:
        Where the trace is, or ``""`` when even the checkpoint directory cannot be written
        (or it is a URI and no Spark session runs yet to open it).
    """
    stats.state, stats.error = "failed", failure.cause
    try:
        files = CheckpointFiles(checkpoint)
        files.replace(TRACE_FILE, failure.trace)
        stats.error_trace = files.where(TRACE_FILE)
        write_status(checkpoint, stats)
    except StorageError as exc:
        log.error("status not written checkpoint=%s error=%s", checkpoint, exc)
        return ""
    return stats.error_trace


def secrets_of(settings: BaseModel) -> list[str]:
    """The values of every secret in ``settings``, nested settings (private ones too) included."""
    found: list[str] = []
    values = [getattr(settings, name) for name in type(settings).model_fields]
    values += list((settings.__pydantic_private__ or {}).values())
    for value in values:
        if isinstance(value, SecretStr):
            found.append(value.get_secret_value())
        elif isinstance(value, BaseModel):
            found += secrets_of(value)
    if isinstance(settings, KafkaSettings):  # librdkafka keys such as sasl.password
        found += settings.secret_overrides()
    return found


def keep_traces_off_stderr(spark: SparkSession) -> None:
    """Leave a failed query's trace to :func:`record_failure` (for the writer's CLI only).

    Spark logs it at ERROR when the query ends, py4j logs the Python side when a batch
    raises; both print thousands of lines to stderr, and the writer's own last line (the
    root cause) would scroll out of sight.
    """
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    jvm = spark.sparkContext._jvm
    if jvm is None:
        return
    level = jvm.org.apache.logging.log4j.Level.OFF
    for name in _JAVA_LOGGERS:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)


def root_cause(exc: BaseException, secrets: Iterable[str] = ()) -> str:
    """``ClassName: message`` of the innermost cause, or of the writer's own error.

    One line of at most 400 characters, every secret in ``secrets`` shown as ``***``.
    """
    current: BaseException = exc
    for _ in range(_MAX_DEPTH):
        if isinstance(current, LakehouseWriterError):
            break
        java = _java_throwable(current)
        if java is not None:
            name, message = _java_root(java)
            return _line(name, message, secrets)
        deeper = _python_cause(current)
        if deeper is None:
            break
        current = deeper
    return _line(type(current).__name__, str(current), secrets)


def _python_cause(exc: BaseException) -> BaseException | None:
    """The exception ``exc`` was raised from (pyspark keeps a JVM cause as ``_cause``)."""
    cause = exc.__cause__ or getattr(exc, "_cause", None)
    if cause is None and not exc.__suppress_context__:
        cause = exc.__context__
    return cause if isinstance(cause, BaseException) else None


def _java_throwable(exc: BaseException) -> Any | None:
    """The JVM exception behind ``exc``: py4j's ``java_exception``, pyspark's ``_origin``."""
    java = getattr(exc, "java_exception", None)
    return java if java is not None else getattr(exc, "_origin", None)


def _java_root(throwable: Any) -> tuple[str, str]:
    """Simple class name and message of the innermost ``getCause()`` of a JVM throwable."""
    current = throwable
    for _ in range(_MAX_DEPTH):
        deeper = current.getCause()
        if deeper is None or deeper.equals(current):
            break
        current = deeper
    return str(current.getClass().getSimpleName()), str(current.getMessage() or "")


def _line(name: str, message: str, secrets: Iterable[str]) -> str:
    """``name: message``: secrets hidden, cut to the first non-empty line and 400 characters."""
    message = _redact(message, secrets)
    first = next((line.strip() for line in message.splitlines() if line.strip()), "")
    text = f"{name}: {first}" if first else name
    return text if len(text) <= _MAX_CAUSE else text[: _MAX_CAUSE - 1] + "…"


def _redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret, raw or JAAS-escaped, replaced by ``***``."""
    for secret in filter(None, secrets):
        escaped = secret.replace("\\", "\\\\").replace('"', '\\"')
        text = text.replace(secret, "***").replace(escaped, "***")
    return text
