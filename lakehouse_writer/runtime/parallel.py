"""Apply the independent tables of one micro-batch at the same time.

Most of what a small table's apply costs does not depend on its size: planning a MERGE,
rebuilding the table's state from its log, committing. Spark runs jobs from several threads
of one driver, so :class:`TableApplier` runs the tables of a batch on a few worker threads,
and one table's driver work overlaps another's tasks.

Exactly once stays as it is, per table: appends carry their (``txnAppId``, ``txnVersion``) as
options, but a MERGE, DELETE or UPDATE takes them from the *session's* SQL conf
(:func:`~lakehouse_writer.engines.spark.txn.delta_txn`), which every thread of one session shares.
So each worker thread applies its tables on a session of its own — a clone of the batch's session:
the same SparkContext, cached frames and settings, its own SQL conf — and a table's rows
are handed to it rebound to that session (:func:`on_session`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from types import TracebackType

    from pyspark.sql import DataFrame, SparkSession

__all__ = ["DEFAULT_WORKERS", "Outcome", "TableApplier", "on_session"]

log = logging.getLogger(__name__)

# Tables applied at once. On two cores 4 keeps both busy while the driver plans and commits
# (the figures are in docs/PERFORMANCE.md); more only queue behind them.
DEFAULT_WORKERS = 4

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(frozen=True)
class Outcome(Generic[Item, Result]):
    """What applying one item gave: its result, or the exception it raised."""

    item: Item
    result: Result | None = None
    error: BaseException | None = None


class TableApplier:
    """Runs one function over the tables of a batch on a few threads (a context manager).

    Args:
        session: The batch's session; each worker clones it once.
        workers: Threads; 1 runs everything on the calling thread and ``session``, as the
            writer did before.

    Example::

        with TableApplier(df.sparkSession, workers=4) as applier:
            outcomes = applier.map(lambda table, session: apply(table, session), tables)
    """

    def __init__(self, session: SparkSession, workers: int = DEFAULT_WORKERS) -> None:
        self._session = session
        self._workers = max(1, workers)
        self._pool: ThreadPoolExecutor | None = None
        self._local = threading.local()  # each worker thread's clone of the session

    @property
    def session(self) -> SparkSession:
        """The batch's session."""
        return self._session

    def __enter__(self) -> TableApplier:
        """Start the worker threads (none when there is one worker)."""
        if self._workers > 1:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="writer-apply")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Wait for the running tables, cancel those not begun (their sessions go with them)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def map(
        self, apply: Callable[[Item, SparkSession], Result], items: Sequence[Item]
    ) -> list[Outcome[Item, Result]]:
        """``apply(item, session)`` for every item; outcomes in the order of ``items``.

        Every item is run whatever the others raise (an item's error is its outcome's);
        ``session`` is the one to run the item's Spark work on.
        """
        if self._pool is None or len(items) < 2:
            return [_outcome(apply, item, self._session) for item in items]
        from lakehouse_writer.runtime.lines import inheritable

        run = inheritable(  # the stream's job properties
            self._session, lambda item: _outcome(apply, item, self._worker_session())
        )
        futures: list[Future[Outcome[Item, Result]]] = [self._pool.submit(run, i) for i in items]
        return [f.result() for f in futures]

    def _worker_session(self) -> SparkSession:
        """This thread's clone of the batch's session."""
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = clone_session(self._session)
        return session


def _outcome(
    apply: Callable[[Item, SparkSession], Result], item: Item, session: SparkSession
) -> Outcome[Item, Result]:
    try:
        return Outcome(item, result=apply(item, session))
    except Exception as exc:  # noqa: BLE001 - the caller decides, in table order
        return Outcome(item, error=exc)


def clone_session(session: SparkSession) -> SparkSession:
    """A session with ``session``'s SparkContext, cache and settings, and its own SQL conf."""
    from pyspark.sql import SparkSession

    clone = session._jsparkSession.cloneSession()  # type: ignore[attr-defined]
    return SparkSession(session.sparkContext, clone)


def on_session(df: DataFrame, session: SparkSession) -> DataFrame:
    """``df``'s query as a DataFrame of ``session`` (it reads the same cached frames)."""
    if df.sparkSession is session:
        return df
    from lakehouse_writer.runtime.lines import dataset_of_rows

    jdf = dataset_of_rows(session, df._jdf.logicalPlan())  # type: ignore[attr-defined]
    return type(df)(jdf, session)  # type: ignore[call-arg]
