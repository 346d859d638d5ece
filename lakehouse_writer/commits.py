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

from lakehouse_writer.system_tables import local_frame

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
