"""A batch's change rows to its tables: decode, route, apply per table.

:meth:`TablesStep.apply` is the middle of a batch. The tables the router gives the driver are
decoded and applied there first (:class:`~lakehouse_writer.route.driver_tables.DriverTables`);
Spark decodes the rows of the others (:func:`~lakehouse_writer.read.decode.decode_batch`:
tables created or evolved, schema errors stop their table); each of those tables is then
applied by the engine the router chooses (:meth:`~lakehouse_writer.route.router.Router.apply`),
several tables at once (:class:`~lakehouse_writer.runtime.parallel.TableApplier`). A reload
written in the pass that read it (:mod:`lakehouse_writer.engines.spark.reload`) is committed
here, or its rows are applied the normal way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakehouse_writer.engines.base import ApplyResult
from lakehouse_writer.engines.spark.reload import ReloadBet
from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.read.decode import DecodedBatch, decode_batch
from lakehouse_writer.read.rejected import rejected_rows
from lakehouse_writer.route.driver_tables import DriverTables
from lakehouse_writer.route.router import Router, TableRows
from lakehouse_writer.runtime.parallel import Outcome, TableApplier, on_session
from producer_lib.timing import Steps

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse_writer.commit.truncate_log import TruncateLog
    from lakehouse_writer.read.catalog import SchemaCatalog
    from lakehouse_writer.read.reader import ScannedBatch
    from lakehouse_writer.read.reader import Speculation as Placed
    from lakehouse_writer.read.scan import ExpectedSchemas
    from lakehouse_writer.tables.manager import TableManager, TableRef

__all__ = ["Applied", "TablesStep"]

log = logging.getLogger(__name__)


@dataclass
class Applied:
    """What the batch did to its tables.

    Attributes:
        results: One per table applied.
        rejected: ``_rejected`` rows (Spark frames on the batch's session).
        merged: Paths of the tables Spark merged into (their state is built ahead).
        stopped: Tables stopped by this batch, with their error.
        cached: Frames the decode persisted; unpersisted once the batch is written.
    """

    results: list[ApplyResult] = field(default_factory=list)
    rejected: list[DataFrame] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    stopped: dict[str, str] = field(default_factory=dict)
    cached: list[DataFrame] = field(default_factory=list)


class TablesStep:
    """Decodes, routes and applies a batch's rows per table (see the module docstring).

    Args:
        router: Chooses the read path and the engine of each table.
        driver: The tables decoded and applied in the driver.
        tables: Creates and evolves the tables.
        catalog: The writer schemas.
        truncates: The TRUNCATEs of earlier batches.
        expected: The schemas the next batch's scan expects (told what this one held).
        reload: The reload written in the pass that reads it.
        workers: Tables applied at once.
        system_topics: Topics whose rows are not change rows.
    """

    def __init__(
        self,
        router: Router,
        driver: DriverTables,
        tables: TableManager,
        catalog: SchemaCatalog,
        truncates: TruncateLog,
        expected: ExpectedSchemas,
        reload: ReloadBet,
        workers: int,
        system_topics: set[str],
    ) -> None:
        self._router = router
        self._driver = driver
        self._tables = tables
        self._catalog = catalog
        self._truncates = truncates
        self._expected = expected
        self._reload = reload
        self._workers = workers
        self._system = system_topics

    def apply(
        self, batch: ScannedBatch, batch_id: int, stopped: dict[str, str], steps: Steps
    ) -> Applied:
        """Decode, route and apply the batch's data rows; commit its reload.

        ``stopped``: the tables stopped before the batch; those it stops are in the result.
        The reload's rows are not in the batch's frame; should it hold rows of the reload's
        table all the same (from another topic), the reload's files are dropped and its rows
        applied with them (:meth:`~lakehouse_writer.engines.spark.reload.ReloadBet.settle`).
        """
        found, applied = batch.found, Applied()
        data_topics = sorted(found.headers.keys() - self._system)
        if not data_topics and batch.reload is None:
            return applied
        now_stopped = dict(stopped)
        decoded = DecodedBatch()
        with TableApplier(batch.rows.sparkSession, self._workers) as applier:
            if data_topics:
                tags = set().union(*(found.headers[t] for t in data_topics))
                with steps("small"):
                    taken = self._driver.apply(
                        found.rows_of,
                        {h: n for h, n in found.rows.items() if h is not None},
                        found.decoded.keys(),
                        now_stopped,
                        batch_id,
                        applier,
                        busy=_busy(batch.reload),
                        topics_of=found.topics_of,
                    )
                applied.results += taken.results
                tags -= taken.headers
                with steps("decode"):
                    if tags:  # rows the driver did not take: Spark's decode
                        decoded = decode_batch(
                            found.of_topics(data_topics),
                            self._catalog,
                            self._tables,
                            now_stopped,
                            tags,
                            found.decoded,
                            applier,
                            found.topics_of,
                        )
                for header, entry in decoded.schemas.items():
                    self._expected.saw(header, entry, decoded.keys.get(header, ()))
            applied.stopped = {t: e for t, e in now_stopped.items() if t not in stopped}
            with steps("apply"):
                self._apply(batch, decoded, batch_id, applier, applied)
        return applied

    def _apply(
        self,
        batch: ScannedBatch,
        decoded: DecodedBatch,
        batch_id: int,
        applier: TableApplier,
        applied: Applied,
    ) -> None:
        try:
            reload = self._reload.settle(batch.reload, decoded, batch_id)
        finally:
            applied.cached += decoded.cached  # decoded once, read by every step after
        if reload is not None:
            applied.results.append(reload.commit())
            self._expected.saw(reload.expected.header, reload.expected.entry)
        batch.reload = None  # committed, or discarded by settle
        applied.rejected += decoded.rejected
        for outcome in self._apply_tables(decoded, batch_id, applier):
            ref, table = outcome.item
            if isinstance(outcome.error, LakehouseWriterError):
                error = outcome.error
                log.error("apply failed table=%s batch=%d error=%s", ref.qualified, batch_id, error)
                applied.rejected.append(rejected_rows(table.rows, str(error), ref.qualified))
                continue
            if outcome.error is not None:
                raise outcome.error
            result = outcome.result
            assert result is not None
            applied.results.append(result)
            if result.engine == "spark" and not (result.fast_path or table.info.append_only):
                applied.merged.append(table.info.path)
            applied.rejected += [on_session(r, applier.session) for r in result.rejected]

    def _apply_tables(
        self, decoded: DecodedBatch, batch_id: int, applier: TableApplier
    ) -> list[Outcome[tuple[TableRef, TableRows], ApplyResult]]:
        """Each table of ``decoded`` on the engine the router chooses, on ``applier``'s threads."""
        tables = [
            (ref, TableRows(info, rows, decoded.summaries.get(ref)))
            for ref, (info, rows) in decoded.tables.items()
        ]
        earlier = {ref: self._truncates.of(ref.qualified) for ref, _ in tables}

        def one(item: tuple[TableRef, TableRows], session: SparkSession) -> ApplyResult:
            ref, table = item
            counts = table.summary.counts if table.summary is not None else {}
            engine = self._router.engine_for(table, sum(counts.values()))
            return self._router.apply(table, batch_id, earlier[ref], session, engine)

        return applier.map(one, tables)


def _busy(reload: Placed | None) -> TableRef | None:
    """The table the reload writes: the driver leaves it alone."""
    return None if reload is None else reload.info.ref
