"""The ``_execution_log`` topic: one record per run state, and the delta pointer read back.

Layout (``docs/WIRE.md``): compacted, key ``"<function>|<dataflow>|<partition>"``, value UTF-8
JSON. Every record carries the delta pointer that holds *after* it: STARTED and FAILED carry
the pointer the run started from, COMPLETED the new one. So the latest committed record of a
key always holds the current pointer, and compaction (which keeps only that record) loses
nothing. COMPLETED is produced inside the data transaction, so the pointer moves exactly when
the data becomes visible.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from producer_lib.errors import ProduceError
from producer_lib.kafka.topic_reader import (
    ReadStalled,
    TopicReadError,
    consumer,
    high_watermarks,
    ranges_to_end,
    read_ranges,
)
from producer_lib.settings import KafkaSettings

__all__ = ["ExecutionRecord", "LoadKind", "RunStatus", "log_key", "read_latest"]

LoadKind = Literal["initial", "delta"]
RunStatus = Literal["STARTED", "COMPLETED", "FAILED"]


def log_key(function_name: str, dataflow: str, partition: str) -> str:
    """The ``_execution_log`` key of one (function, dataflow, partition)."""
    return f"{function_name}|{dataflow}|{partition}"


@dataclass(frozen=True)
class ExecutionRecord:
    """One ``_execution_log`` value (see ``docs/WIRE.md``)."""

    run_id: str
    function_name: str
    dataflow: str
    partition: str
    status: RunStatus
    load: LoadKind
    started_at: str
    finished_at: str | None = None
    rows: dict[str, int] = field(default_factory=dict)
    delta_pointer: Any = None
    commit_id: str | None = None
    error: str | None = None
    expectations: dict[str, Any] = field(default_factory=dict)
    """Per table: rows checked and rows failed per expectation (schema/expectations.py)."""

    @property
    def key(self) -> str:
        """The record's key."""
        return log_key(self.function_name, self.dataflow, self.partition)

    def encode(self) -> tuple[bytes, bytes]:
        """Key and value bytes.

        Raises:
            ProduceError: The delta pointer is not JSON-serialisable.
        """
        try:
            value = json.dumps(asdict(self), separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise ProduceError(
                f"the delta pointer must be JSON-serialisable (str, int, float, bool, None, "
                f"list, dict): {exc}",
                flow=self.function_name,
                dataflow=self.dataflow,
            ) from exc
        return self.key.encode(), value.encode()


def read_latest(
    settings: KafkaSettings,
    topic: str,
    key: str,
    timeout_s: float = 30.0,
    where: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any] | None:
    """The latest committed value of ``key`` on ``topic`` (``read_committed``), or None.

    ``where`` narrows it to the latest value it accepts (e.g. the records of one run).

    Reads every partition from its start up to the high watermark taken before reading. A
    ``read_committed`` reader stops at the last stable offset, which lags behind the high
    watermark while a transaction is open there (another run's) and, for a moment, after
    one was committed (the broker writes the commit markers after ``commit_transaction``
    returns): that end is waited for, up to ``timeout_s`` without progress, then an error:
    a stale pointer must never be used.

    Raises:
        ProduceError: The topic cannot be read, or stays behind an open transaction.
    """
    wanted = key.encode()
    latest: dict[str, Any] | None = None
    try:
        ends = high_watermarks(settings, topic, timeout_s=settings.connect_timeout_s)
        with consumer(settings, purpose="producer-lib-pointer") as client:
            ranges = ranges_to_end(client, topic, timeout_s=settings.connect_timeout_s, ends=ends)
            for messages in read_ranges(client, ranges or {}, stall_s=timeout_s):
                for msg in messages:
                    value = msg.value()
                    if msg.key() != wanted or value is None:
                        continue
                    record = json.loads(value)
                    if where is None or where(record):
                        latest = record
    except ReadStalled as exc:
        raise ProduceError(
            f"{topic} could not be read to its end within {timeout_s:g} s (a transaction "
            "is still open there); retry the run",
            topic=topic,
            partitions=exc.context.get("left"),
        ) from exc
    except TopicReadError as exc:
        raise ProduceError(exc.message, topic=topic, key=key) from exc
    return latest
