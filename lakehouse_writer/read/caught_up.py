"""A ``run --once`` that finds nothing to read, answered by Kafka before Spark starts.

A scheduled ``lakehouse-writer run --once`` often finds every topic where its last run left
it. Spark's answer to that costs the driver JVM's start and a query (about 9 s on two cores);
Kafka's costs a metadata request and one offset request per partition. So when the writer's
checkpoint is on a local disk, the run asks Kafka first, and does not start Spark when:

- the status file says the last run ``drained``, with no commit waiting for rows;
- Spark's last planned batch (``offsets/<n>``) is also its last done one (``commits/<n>``),
  and it read one Kafka source (the writer's query has exactly one);
- the topics regex matches the same topics Kafka lists as the checkpoint holds, with the same
  partitions (the regex is matched here only when it is made of what Java's and Python's
  regular expressions read alike, for Kafka's topic names: else Spark is asked);
- every partition's end, as a ``read_committed`` consumer sees it, is the checkpoint's offset.

Any other answer, or a question Kafka does not answer, starts Spark as before: this only ever
skips a query that would have read nothing. The status file then says ``drained`` again, with
a new ``updated_at``.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from lakehouse_writer.runtime.status import BatchStats, StatusUnreadable, read_status, write_status
from lakehouse_writer.runtime.storage import is_local, local_path
from lakehouse_writer.settings import LakehouseSettings
from producer_lib.kafka.topic_reader import TopicReadError, consumer, ranges_to_end

__all__ = ["CaughtUp", "caught_up", "checkpoint_offsets", "portable_pattern"]

log = logging.getLogger(__name__)

Offsets = dict[tuple[str, int], int]

# Regex text both engines read alike over Kafka topic names (ASCII letters, digits, . _ -):
# literals, groups, alternation, quantifiers, anchors, a few escapes, and classes of those
# characters (no nested class: Java reads ``[[a]]`` as a union, Python as a ``[`` and more).
_PORTABLE_ESCAPE = r"\\[.\-_dw]"
_PORTABLE = re.compile(
    rf"(?:[A-Za-z0-9._\-|*+?(){{}},:^$]|{_PORTABLE_ESCAPE}"
    rf"|\[\^?(?:[A-Za-z0-9._\-]|{_PORTABLE_ESCAPE})+\])*"
)


@dataclass(frozen=True)
class CaughtUp:
    """Kafka holds nothing after the checkpoint's last batch."""

    batch_id: int
    topics: int
    partitions: int


def caught_up(settings: LakehouseSettings, timeout_s: float) -> CaughtUp | None:
    """The checkpoint's last batch when a ``run --once`` would read nothing, else None.

    None means "start Spark": there is something to read, or this could not be told without
    Spark (a checkpoint not on a local disk, a status other than ``drained``, a regex only
    Java reads, a Kafka error).
    """
    checkpoint = settings.checkpoint_path
    if not is_local(checkpoint):
        return None
    try:
        status = read_status(checkpoint)
    except StatusUnreadable:
        return None
    if status is None or status.get("state") != "drained" or status.get("pending_commits"):
        return None
    planned = checkpoint_offsets(checkpoint)
    pattern = portable_pattern(settings.topics_regex)
    if planned is None or pattern is None:
        return None
    batch_id, offsets = planned
    ends = _ends(settings, pattern, timeout_s)
    if ends is None or ends != offsets:
        return None
    done = CaughtUp(batch_id, len({t for t, _ in offsets}), len(offsets))
    write_status(checkpoint, _drained_again(status))
    log.info(
        "nothing new since batch %d: %d topic(s), %d partition(s) all at the checkpoint's "
        "offsets; Spark not started",
        done.batch_id,
        done.topics,
        done.partitions,
    )
    return done


def checkpoint_offsets(checkpoint: str) -> tuple[int, Offsets] | None:
    """Spark's last batch and the Kafka offsets it read up to, when that batch is done.

    None when the checkpoint has no batch yet, its last planned batch is not done (a replay
    is due), or it read anything but one Kafka source.
    """
    folder = local_path(checkpoint)
    planned = _batch_ids(folder / "offsets")
    if not planned or max(planned) not in _batch_ids(folder / "commits"):
        return None
    last = max(planned)
    lines = (folder / "offsets" / str(last)).read_text().splitlines()
    sources = [line for line in lines[2:] if line.strip()]  # v1, the batch's metadata, sources
    if len(sources) != 1:
        return None
    try:
        return last, _kafka_offsets(json.loads(sources[0]))
    except (ValueError, TypeError, AttributeError):
        return None


def portable_pattern(regex: str) -> re.Pattern[str] | None:
    """``regex`` compiled by Python when it reads it as Java does on topic names, else None."""
    if not _PORTABLE.fullmatch(regex):
        return None
    try:
        return re.compile(regex)
    except re.error:
        return None


def _batch_ids(folder: Path) -> set[int]:
    if not folder.is_dir():
        return set()
    return {int(p.name) for p in folder.iterdir() if p.name.isdigit()}


def _kafka_offsets(source: Mapping[str, Any]) -> Offsets:
    """``{"topic": {"0": 12}}`` (Spark's Kafka source offsets) as ``{(topic, 0): 12}``."""
    offsets = {}
    for topic, partitions in source.items():
        for partition, offset in partitions.items():
            if not isinstance(offset, int):
                raise TypeError(f"offset {offset!r}")
            offsets[(topic, int(partition))] = offset
    return offsets


def _ends(
    settings: LakehouseSettings, pattern: re.Pattern[str], timeout_s: float
) -> Offsets | None:
    """Every matched partition's end for a ``read_committed`` consumer; None on a Kafka error."""
    try:
        with consumer(settings.kafka_client_conf(), purpose="lakehouse-writer-caught-up") as c:
            names = c.list_topics(timeout=timeout_s).topics
            ends: Offsets = {}
            for topic in sorted(t for t in names if pattern.fullmatch(t)):
                ranges = ranges_to_end(c, topic, timeout_s=timeout_s)
                if ranges is None:
                    return None
                ends.update({key: end for key, (_, end) in ranges.items()})
            return ends
    except (KafkaException, TopicReadError) as exc:
        log.info("Kafka did not say whether there is something new (%s); starting Spark", exc)
        return None


def _drained_again(status: Mapping[str, Any]) -> BatchStats:
    """The status file's content, ``drained`` once more (``updated_at`` is written anew)."""
    return BatchStats(
        state="drained",
        batch_id=int(status.get("last_batch_id", -1)),
        rows=dict(status.get("rows_applied") or {}),
        rejected=int(status.get("rows_rejected") or 0),
        lag={topic: 0 for topic in status.get("lag") or {}},
        lag_batch_id=int(status.get("lag_batch_id", -1)),
        finished_at=str(status.get("last_batch_time") or ""),
        stopped_tables=dict(status.get("stopped_tables") or {}),
    )
