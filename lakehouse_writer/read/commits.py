"""``_commits`` rows held back until every row of their commit is applied.

A producer's commit record (``docs/WIRE.md``) lists every data topic partition its transaction
wrote, with the offset of its last data message there. The record may reach the writer before
those rows do (another partition lags, or ``maxOffsetsPerTrigger`` split the transaction), so
it waits as *pending* until, for every listed partition, the writer has processed rows up to
that offset. Then its ``_commits`` row is written with the Delta version of each table it
touched, read after that batch: a version in which every row of the commit is visible.

Partitions of topics the writer does not subscribe to are not its business: they are left out
of the check, and a commit of only such topics is not written at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse_writer.runtime.frames import local_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TopicFilter = Callable[[str], bool]
COMMIT_JSON_SCHEMA = (
    "commit_id STRING, producer STRING, source_system STRING, function_name STRING, "
    "transaction_time BIGINT, "
    "tables ARRAY<STRUCT<topic: STRING, `table`: STRING, `rows`: BIGINT>>, "
    "partitions ARRAY<STRUCT<topic: STRING, `partition`: INT, min_offset: BIGINT, "
    "max_offset: BIGINT, `rows`: BIGINT>>"
)
_FRAME_SCHEMA = (
    "raw STRING, table_versions MAP<STRING, BIGINT>, unapplied_tables ARRAY<STRING>, "
    "kafka_topic STRING, kafka_partition INT, kafka_offset BIGINT"
)
# The columns of a ``_commits`` row (:func:`commit_frame`), and of what ``append_system`` adds.
COMMIT_ROW_SCHEMA = (
    f"{COMMIT_JSON_SCHEMA}, transaction_ts TIMESTAMP, table_versions MAP<STRING, BIGINT>, "
    "unapplied_tables ARRAY<STRING>, kafka_topic STRING, kafka_partition INT, "
    "kafka_offset BIGINT, raw STRING, batch_id BIGINT, written_at TIMESTAMP"
)
_TEXT = ("commit_id", "producer", "source_system", "function_name")
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
_TEXT_FIELD = None  # a struct field of text; an int: the largest value of an integer field
_TABLE_FIELDS = {"topic": _TEXT_FIELD, "table": _TEXT_FIELD, "rows": _LONG_MAX}
_PARTITION_FIELDS = {
    "topic": _TEXT_FIELD,
    "partition": _INT_MAX,
    "min_offset": _LONG_MAX,
    "max_offset": _LONG_MAX,
    "rows": _LONG_MAX,
}


class BadCommitRecord(ValueError):
    """A ``_commits`` message that is not a commit record of ``docs/WIRE.md``."""


@dataclass(frozen=True)
class CommitRecord:
    """One producer commit, as read from ``_commits``.

    Attributes:
        commit_id: The commit's id.
        raw: The record's JSON text, as received.
        topic: Where the record was read (the commits topic) ...
        partition: ... its partition ...
        offset: ... and offset.
        ends: ``(topic, partition, max_offset)`` of every data partition it wrote.
        starts: ``(topic, partition, min_offset)`` of the same partitions (None: the record
            does not say).
        tables: ``(topic, table)`` of every table it wrote.
    """

    commit_id: str
    raw: str
    topic: str
    partition: int
    offset: int
    ends: tuple[tuple[str, int, int], ...]
    tables: tuple[tuple[str, str], ...]
    starts: tuple[tuple[str, int, int | None], ...] = ()

    @classmethod
    def parse(cls, raw: str, topic: str, partition: int, offset: int) -> CommitRecord:
        """Read a commit record's JSON.

        Raises:
            BadCommitRecord: Not JSON, or a field is missing or of the wrong type.
        """
        try:
            data: dict[str, Any] = json.loads(raw)
            parts = data.get("partitions") or ()
            ends = tuple(
                (str(p["topic"]), int(p["partition"]), int(p["max_offset"])) for p in parts
            )
            starts = tuple(
                (str(p["topic"]), int(p["partition"]), _offset(p.get("min_offset"))) for p in parts
            )
            tables = tuple((str(t["topic"]), str(t["table"])) for t in data.get("tables") or ())
            return cls(str(data["commit_id"]), raw, topic, partition, offset, ends, tables, starts)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BadCommitRecord(
                f"not a commit record (docs/WIRE.md `_commits`): {type(exc).__name__}: {exc}"
            ) from exc

    def concerns(self, ours: TopicFilter) -> bool:
        """True when the commit wrote a topic the writer reads (else it is not written)."""
        return any(ours(topic) for topic, _, _ in self.ends) or not self.ends

    def is_complete(self, processed: Mapping[tuple[str, int], int], ours: TopicFilter) -> bool:
        """True when rows up to ``max_offset`` of every partition of ours are processed."""
        return all(
            processed.get((topic, partition), -1) >= end
            for topic, partition, end in self.ends
            if ours(topic)
        )

    def versions(
        self, versions: Mapping[str, int], ours: TopicFilter, stopped: Collection[str] = ()
    ) -> tuple[dict[str, int], list[str]]:
        """The Delta versions of the tables of ours the commit touched.

        Returns:
            (version per table, tables the writer cannot vouch for: never applied, or stopped).
        """
        touched = sorted({table for topic, table in self.tables if ours(topic)})
        unapplied = [t for t in touched if t not in versions or t in stopped]
        return {t: versions[t] for t in touched if t not in unapplied}, unapplied


def commit_rows(
    completed: Iterable[CommitRecord],
    versions: Mapping[str, int],
    ours: TopicFilter,
    stopped: Collection[str] = (),
) -> list[tuple[Any, ...]] | None:
    """:func:`commit_frame`'s rows, built in Python (no Spark job).

    Each in the columns of :data:`COMMIT_ROW_SCHEMA` but the last two (``batch_id``,
    ``written_at``), ``transaction_ts`` in microseconds. None when a record holds a value
    whose JSON type is not its column's (a number where text is expected, say): Spark's
    ``from_json`` converts or nulls such values, and :func:`commit_frame` is to build those
    rows.
    """
    rows = []
    for record in completed:
        data = json.loads(record.raw)
        fields = _record_fields(data)
        if fields is None:
            return None
        found, missing = record.versions(versions, ours, stopped)
        text, when, tables, partitions = fields
        rows.append(
            (
                *text,
                when,
                tables,
                partitions,
                when,  # transaction_ts: the same microseconds
                found,
                missing,
                record.topic,
                record.partition,
                record.offset,
                record.raw,
            )
        )
    return rows


def _record_fields(data: dict[str, Any]) -> tuple[tuple[Any, ...], Any, Any, Any] | None:
    """One record's fields of :data:`COMMIT_JSON_SCHEMA`; None: a value of another type.

    As (the text fields, the transaction time, the tables, the partitions).
    """
    text = tuple(data.get(name) for name in _TEXT)
    when = data.get("transaction_time")
    tables = _structs(data.get("tables"), _TABLE_FIELDS)
    partitions = _structs(data.get("partitions"), _PARTITION_FIELDS)
    if (
        not all(v is None or isinstance(v, str) for v in text)
        or not _is_int(when, _LONG_MAX)
        or tables is False
        or partitions is False
    ):
        return None
    return text, when, tables, partitions


def _structs(value: Any, kinds: Mapping[str, int | None]) -> list[dict[str, Any]] | None | bool:
    """A JSON array of objects as the column's structs; None for null, False: another type."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        return False
    out = []
    for item in value:
        struct = {name: item.get(name) for name in kinds}
        for name, limit in kinds.items():
            v = struct[name]
            ok = (v is None or isinstance(v, str)) if limit is None else _is_int(v, limit)
            if not ok:
                return False
        out.append(struct)
    return out


def _is_int(value: Any, limit: int) -> bool:
    """None, or a JSON integer (not a boolean) within the column's type."""
    if value is None:
        return True
    return isinstance(value, int) and not isinstance(value, bool) and -limit - 1 <= value <= limit


def _offset(value: Any) -> int | None:
    return None if value is None else int(value)


def commit_frame(
    spark: SparkSession,
    completed: Iterable[CommitRecord],
    versions: Mapping[str, int],
    ours: TopicFilter,
    stopped: Collection[str] = (),
) -> DataFrame:
    """The ``_commits`` rows of ``completed``: the record's fields, versions, where it was read.

    ``unapplied_tables`` names tables of the commit without a version: never applied (all
    their rows were rejected) or stopped by a schema error. A reader's snapshot lacks them.
    """
    from pyspark.sql import functions as F

    rows = []
    for record in completed:
        found, missing = record.versions(versions, ours, stopped)
        rows.append((record.raw, found, missing, record.topic, record.partition, record.offset))
    frame = local_frame(spark, rows, _FRAME_SCHEMA)
    parsed = F.from_json("raw", COMMIT_JSON_SCHEMA)
    return frame.select(parsed.alias("c"), "*").select(
        "c.*",
        F.timestamp_micros("c.transaction_time").alias("transaction_ts"),
        "table_versions",
        "unapplied_tables",
        "kafka_topic",
        "kafka_partition",
        "kafka_offset",
        "raw",
    )
