"""The one place that decides, per batch and per table, which read path and engine serve it.

From named capabilities, not from where a table happens to be handled:

- **read path of a batch**: a batch of at most ``driver_read_rows`` messages, none of whose
  topics has more than ``small_merge_rows``, is read into the driver whole
  (:meth:`Router.reads_whole`); otherwise Spark scans it, decoding the expected schemas of
  its large topics in the pass that reads it (:meth:`Router.scanned`); the small topics'
  rows stay raw for the driver.
- **where a table is decoded**: in the driver (:mod:`lakehouse_writer.read.driver_decode`)
  when its rows are raw in the batch and few, one writer schema gives them all, it has a key
  and plain columns, and delta-rs writes it; else by Spark (:mod:`lakehouse_writer.read.decode`).
- **which engine applies it** (:meth:`Router.engine_for`): delta-rs in the driver for a
  batch of at most ``small_merge_rows`` rows of a table delta-rs writes (its storage and its
  table features: :class:`~lakehouse_writer.engines.delta_rs.writes.DeltaRsWrites`), with no
  GDPR delete (Spark purges), no row to reject, and not a history table (SCD type 2: Spark
  keeps its versions); Spark otherwise.

An engine that declines a table (:class:`~lakehouse_writer.engines.base.Declined`) has
written nothing or only writes Spark skips by their transaction ids; Spark then applies the
table. Every decision that sends a table off the fast path is logged once per table and
reason, and counted (:attr:`Router.left`; :attr:`Router.off_fast_path` names the tables, for the
status file and the ``tables_off_fast_path`` metric).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from lakehouse_writer.engines.base import ApplyResult, Declined
from lakehouse_writer.engines.delta_rs.engine import ArrowRows, DeltaRsEngine, arrow_schema
from lakehouse_writer.engines.delta_rs.writes import DeltaRsWrites
from lakehouse_writer.engines.spark.conflicts import retry_on_conflict
from lakehouse_writer.engines.spark.engine import SparkEngine
from lakehouse_writer.engines.table import apply_table
from lakehouse_writer.read.ranges import OffsetRanges, messages_per_topic
from lakehouse_writer.rules.row_types import GDPR, KNOWN, UPSERTS
from lakehouse_writer.runtime.lines import to_arrow
from lakehouse_writer.runtime.parallel import on_session
from lakehouse_writer.runtime.storage import delta_rs_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse_writer.read.scan import Expected
    from lakehouse_writer.read.summary import RowSummary
    from lakehouse_writer.rules.truncate import Truncate
    from lakehouse_writer.tables.manager import TableInfo

__all__ = ["Router", "TableRows"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableRows:
    """One table's decoded rows of a batch, wherever they were decoded.

    Attributes:
        info: The table (created or evolved for the rows).
        rows: A Spark DataFrame (Spark's decode) or Arrow (the driver's).
        summary: The rows' summary when the decode made it (None: the engine makes it).
    """

    info: TableInfo
    rows: Any
    summary: RowSummary | None = None


class Router:
    """Read paths and engines, chosen from capabilities (see the module docstring).

    Args:
        writes: delta-rs's writes (what it can write, and the writes themselves).
        lakehouse: The lakehouse root (its storage says whether delta-rs writes there).
        driver_read_rows: The most messages of a batch read into the driver whole (0: none).
        instance_id: The writer instance (the transaction ids' part).
    """

    def __init__(
        self, writes: DeltaRsWrites, lakehouse: str, driver_read_rows: int, instance_id: str
    ) -> None:
        self._writes = writes
        self._driver = writes.writes(lakehouse)  # delta-rs writes this storage at all
        scheme = urlsplit(lakehouse).scheme
        self._unreached = (  # why no table here is delta-rs'; None: it reaches the storage
            None
            if delta_rs_path(lakehouse) is not None
            else f"delta-rs cannot reach {scheme}:// storage"
        )
        self._read_rows = driver_read_rows
        self._instance = instance_id
        self._delta_rs = DeltaRsEngine(writes)
        self.left: Counter[str] = Counter()  # tables off the fast path, by reason
        self.off_fast_path: dict[str, str] = {}  # table -> the last reason it left
        self._said: set[tuple[str, str]] = set()

    @property
    def max_rows(self) -> int:
        """The most rows of one table applied in the driver; 0: none."""
        return self._writes.max_rows if self._driver else 0

    def reads_whole(self, ranges: OffsetRanges | None, held: OffsetRanges) -> bool:
        """Whether the batch is small enough to read into the driver whole.

        ``ranges``: the batch's offset ranges; ``held``: the ranges of the rows held back
        before, read again in front. At most ``driver_read_rows`` messages in all, and at
        most :attr:`max_rows` in each topic (transaction markers counted): every table of it
        is small enough for the driver.
        """
        if not self.max_rows or not self._read_rows or ranges is None:
            return False
        spans = messages_per_topic(ranges)
        for (topic, _), (first, end) in held.items():  # read again in front of the batch
            spans[topic] = spans.get(topic, 0) + end - first
        if not spans:
            return True
        return sum(spans.values()) <= self._read_rows and max(spans.values()) <= self.max_rows

    def scanned(self, expected: list[Expected], ranges: OffsetRanges | None) -> list[Expected]:
        """The expected schemas the scan decodes: those of the batch's large topics.

        A topic with at most :attr:`max_rows` messages in the batch holds only tables the
        driver decodes; all of ``expected`` when the ranges are not known.
        """
        if not self.max_rows or ranges is None:
            return expected
        spans = messages_per_topic(ranges)
        return [e for e in expected if spans.get(e.entry.topic or "", 0) > self.max_rows]

    def decodes_in_driver(self, info: TableInfo, rows: int) -> bool:
        """Whether a table's raw rows are decoded and applied in the driver."""
        declined = self._delta_rs.declines(info)
        return bool(info.keys) and declined is None and self._writes.takes(info, rows)

    def engine_for(self, table: TableRows, rows: int) -> str:
        """``delta-rs`` or ``spark`` for a table's rows of a batch (see above)."""
        counts = table.summary.counts if table.summary is not None else {}
        if not self._writes.takes(table.info, rows):
            reason = self._unreached or "delta-rs does not write the table here"
            return self._leave(table.info, "spark", reason)
        declined = self._delta_rs.declines(table.info)
        if declined is not None:
            return self._leave(table.info, "spark", declined)
        if counts.get(GDPR):
            return self._leave(table.info, "spark", "a GDPR delete (Spark purges)")
        refused = (*UPSERTS, "T") if table.info.append_only else KNOWN
        if not all(c in refused for c in counts):
            return "spark"  # rows to reject: Spark keeps their bytes and says why
        return "delta-rs"

    def apply(
        self,
        table: TableRows,
        batch_id: int,
        applied: Sequence[Truncate],
        session: SparkSession,
        engine: str = "spark",
    ) -> ApplyResult:
        """Apply the table on ``engine``; a table delta-rs declines goes to Spark.

        Rows decoded in the driver are applied there or not at all: a decline raises
        :class:`~lakehouse_writer.engines.base.Declined` for the caller to give the table's
        rows to Spark's decode. ``session`` is the thread's own (its SQL conf carries the
        table's transaction id).
        """
        info = table.info
        if isinstance(table.rows, ArrowRows):
            summary = table.summary or self._delta_rs.summarize(table.rows, info)
            decided = replace(table, summary=summary)
            if self.engine_for(decided, sum(summary.counts.values())) != "delta-rs":
                raise Declined("its rows are Spark's", table=info.ref.qualified)
            return apply_table(
                self._delta_rs, table.rows, info, batch_id, self._instance, applied, summary
            )
        if engine == "delta-rs":
            rows = _in_driver(table)
            try:
                return apply_table(
                    self._delta_rs, rows, info, batch_id, self._instance, applied, table.summary
                )
            except Declined as exc:
                self._leave(info, "spark", str(exc))
            finally:
                rows.close()
        spark = SparkEngine(session, self._writes if self._driver else None)
        frame = on_session(table.rows, session)
        return retry_on_conflict(
            lambda: apply_table(
                spark, frame, info, batch_id, self._instance, applied, table.summary
            ),
            f"table={info.ref.qualified} batch={batch_id}",
        )

    def _leave(self, info: TableInfo, engine: str, reason: str) -> str:
        """Say once per table and reason that ``info`` takes ``engine``; count it."""
        self.left[reason.split(" [")[0]] += 1
        self.off_fast_path[info.ref.qualified] = reason.split(" [")[0]
        key = (info.ref.qualified, reason)
        if key not in self._said:
            self._said.add(key)
            log.info(
                "table left the fast path table=%s engine=%s reason=%s", key[0], engine, reason
            )
        return engine


def _in_driver(table: TableRows) -> ArrowRows:
    """A table's rows decoded by Spark, in the driver as the delta-rs engine reads them."""
    from pyspark.sql import functions as F

    frame: DataFrame = table.rows
    columns = [
        (F.col(f"`{name}`") if name in frame.columns else F.lit(None)).cast(dtype).alias(name)
        for name, dtype in table.info.columns.items()
    ]
    data = to_arrow(frame.select(*columns, "topic", "partition", "offset"))
    schema = arrow_schema(table.info)
    return ArrowRows.of(data.cast(_with_where_from(schema, data)))


def _with_where_from(schema: Any, data: Any) -> Any:
    import pyarrow as pa

    where = [data.schema.field(c) for c in ("topic", "partition", "offset")]
    return pa.schema([*schema, *where])
