"""Log lines people can ship: ``LOG_FORMAT=text|json`` and ``LOG_LEVEL`` for every command.

Quickstart::

    from producer_lib.logs import configure_logging

    configure_logging()                    # LOG_FORMAT, LOG_LEVEL (default INFO), on stderr
    configure_logging(default_level="WARNING")

``text`` (the default) writes ``2026-11-27 21:19:07,448 INFO producer_lib.runner.runner run
completed flow=… run_id=…``. ``json`` writes one JSON object a line::

    {"timestamp": "2026-11-27T21:19:07.448Z", "level": "INFO",
     "logger": "producer_lib.runner.runner", "message": "run completed flow=cities run_id=…",
     "flow": "cities", "run_id": "…"}

The context fields (:data:`CONTEXT_FIELDS`: flow, table, topic, run id, batch id, …) are
parsed from the ``key=value`` pairs the code already writes into its messages, and from the
``[key='value']`` context of a :class:`~producer_lib.errors.ContextError`; a whole number
becomes a JSON number. An exception adds ``exception`` (type, message, trace). Nothing else of
a log record is copied into the line, so a line holds no more than its text message does, and
no message of the platform holds a secret (``tests/producer_lib/test_secrets_never_shown.py``).

A host that set logging up before (the Azure Functions worker, Databricks, a test runner) keeps
its handlers and level unless ``LOG_FORMAT`` or ``LOG_LEVEL`` is set: then its handlers get the
format and the root logger the level. Chatty libraries (py4j, the Azure SDK's HTTP log, urllib3)
log at WARNING or above whatever the level.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TextIO

from producer_lib.errors import ConfigError
from producer_lib.settings.logs import LogSettings

__all__ = [
    "CONTEXT_FIELDS",
    "TEXT_FORMAT",
    "JsonFormatter",
    "configure_logging",
    "context_of",
    "say_error",
]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
# The keys of a message's key=value pairs that become fields of a JSON line: who and where
# (a log query filters on them), not figures (those stay in the message).
CONTEXT_FIELDS = (
    "flow",
    "function",
    "dataflow",
    "partition",
    "run_id",
    "load",
    "commit_id",
    "producer",
    "table",
    "topic",
    "offset",
    "batch",
    "instance",
    "variable",
)
_PAIR = re.compile(
    r"(?<![\w.])(?P<key>" + "|".join(CONTEXT_FIELDS) + r")=(?:'(?P<quoted>[^']*)'|(?P<bare>\S+))"
)
_TRAILING = ",;:)]"  # punctuation after a bare value belongs to the sentence, not the value
_WHOLE = re.compile(r"-?\d{1,18}")
# Loggers that say too much below WARNING: py4j logs every call to the JVM, the Azure SDK
# every HTTP request and its headers.
_CHATTY = ("py4j", "azure.core.pipeline.policies.http_logging_policy", "azure.identity", "urllib3")
_OURS = "_flow_platform_handler"  # marks the handler configure_logging installed


def context_of(message: str) -> dict[str, str | int]:
    """The context fields of a message: ``"batch done batch=3 table=A.B"`` -> batch, table.

    The first value of a key wins; whole numbers become ints.
    """
    found: dict[str, str | int] = {}
    for match in _PAIR.finditer(message):
        key = match["key"]
        if key in found:
            continue
        value = match["quoted"] if match["quoted"] is not None else match["bare"].rstrip(_TRAILING)
        found[key] = int(value) if _WHOLE.fullmatch(value) else value
    return found


class JsonFormatter(logging.Formatter):
    """One JSON object a line: timestamp (UTC), level, logger, message, context, exception."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON (newlines inside values are escaped)."""
        message = record.getMessage()
        line: dict[str, Any] = {
            "timestamp": _utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        for key, value in context_of(message).items():
            line.setdefault(key, value)
        if record.exc_info and record.exc_info[0] is not None:
            kind, error, _ = record.exc_info
            line["exception"] = {
                "type": kind.__name__,
                "message": str(error),
                "trace": self.formatException(record.exc_info),
            }
        if record.stack_info:
            line["stack"] = record.stack_info
        return json.dumps(line, default=str, ensure_ascii=False)


def _utc(created: float) -> str:
    stamp = datetime.fromtimestamp(created, tz=UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


def configure_logging(
    default_level: str = "INFO",
    *,
    text_format: str = TEXT_FORMAT,
    settings: LogSettings | None = None,
    stream: TextIO | None = None,
) -> LogSettings:
    """Set up the root logger from ``LOG_FORMAT`` and ``LOG_LEVEL``; return what was read.

    Args:
        default_level: The level when ``LOG_LEVEL`` is not set.
        text_format: The ``logging`` format of ``text`` lines.
        settings: Given settings instead of the environment's.
        stream: Where lines go (default: stderr).

    Raises:
        ConfigError: ``LOG_FORMAT`` or ``LOG_LEVEL`` has a value it does not know (named).
    """
    settings = settings or LogSettings()
    level = logging.getLevelNamesMapping()[settings.level or default_level.upper()]
    formatter = JsonFormatter() if settings.format == "json" else logging.Formatter(text_format)
    root = logging.getLogger()
    hosted = [h for h in root.handlers if not getattr(h, _OURS, False)]
    if hosted:  # the host's logging stays, unless the user asked for a format or a level
        if settings.model_fields_set:
            for handler in hosted:
                handler.setFormatter(formatter)
            root.setLevel(level)
    else:
        for handler in list(root.handlers):  # ours, from an earlier call
            root.removeHandler(handler)
        handler = logging.StreamHandler(stream or sys.stderr)
        setattr(handler, _OURS, True)
        handler.setFormatter(formatter)
        root.addHandler(handler)
        root.setLevel(level)
        sys.excepthook = _log_uncaught  # a crash is a log line too, in the same format
    for name in _CHATTY:
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    return settings


def _log_uncaught(
    kind: type[BaseException], error: BaseException, trace: TracebackType | None
) -> None:
    """``sys.excepthook``: an exception nobody caught, logged with its trace (exit code 1)."""
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, error, trace)
        return
    logging.getLogger("uncaught").critical(
        "%s: %s", kind.__name__, error, exc_info=(kind, error, trace)
    )


def say_error(command: str, message: str, stream: TextIO | None = None) -> None:
    """Print a command's error on stderr, whatever a host did with logging.

    ``command: message`` with ``LOG_FORMAT=text`` (or when the log settings are what is wrong),
    else a JSON line as :class:`JsonFormatter` writes it, with ``command`` as its logger.
    """
    try:
        json_lines = LogSettings().format == "json"
    except ConfigError:
        json_lines = False
    if json_lines:
        record = logging.makeLogRecord(
            {"name": command, "levelno": logging.ERROR, "levelname": "ERROR", "msg": message}
        )
        line = JsonFormatter().format(record)
    else:
        line = f"{command}: {message}"
    print(line, file=stream or sys.stderr)
