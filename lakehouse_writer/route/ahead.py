"""Driver work that does not need the batch's rows, done while the driver would wait.

The driver is idle while the query starts, while each batch's scan job runs, and between
batches of a running writer. :class:`Ahead` uses those moments, on threads of its own:

- at start-up it reads the schema catalog: the writer schemas the first batch will likely
  hold (:class:`~lakehouse_writer.read.scan.ExpectedSchemas`), and which of them are the only value
  schema of their topic and table (:func:`sole_schemas`); and it opens what a first batch
  would otherwise open on its path (``warm_ups``: DuckDB's Avro reader);
- at start-up and while each batch's scan job runs, it creates the missing tables of those
  schemas (whatever rows of it a batch holds, the table is the one they would create, so a
  table may appear once its schema is registered, before its first rows), then
  ``_writer_state`` on a fresh lakehouse;
- between the batches of a running writer it builds the Delta state of the tables the last
  batch merged into (:meth:`Ahead.warm`).

None of it is needed for correctness: what fails is only logged, and done again (and
reported) on the batch's path.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING

from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.read.scan import Expected, ExpectedSchemas
from lakehouse_writer.read.topics import TopicPattern
from lakehouse_writer.runtime.failure import root_cause
from lakehouse_writer.tables.manager import TableManager, TableRef, compute_state
from producer_lib.errors import SchemaError
from producer_lib.schema.framing import single_object_header

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakehouse_writer.read.catalog import SchemaCatalog

log = logging.getLogger(__name__)


class Ahead:
    """Catalog reading, table creation and state building off the batch's path.

    Args:
        spark: The session.
        catalog: Where the value schemas of the subscribed topics are.
        tables: Creates the tables.
        expected: The schemas the scan expects; seeded here from the catalog.
        ours: Which topics the writer reads.
        create_state: Creates ``_writer_state`` when missing (after the tables).
        secrets: Texts that never appear in a log line.
        warm: Build the state of merged tables between batches (:meth:`warm`); for a
            writer that waits for its next trigger, not one that drains and exits.
        warm_ups: Called once at start-up, before the first batch may start.
    """

    def __init__(
        self,
        spark: SparkSession,
        catalog: SchemaCatalog,
        tables: TableManager,
        expected: ExpectedSchemas,
        ours: TopicPattern,
        create_state: Callable[[], object],
        secrets: Iterable[str] = (),
        warm: bool = False,
        warm_ups: Iterable[Callable[[], object]] = (),
    ) -> None:
        self._spark = spark
        self._catalog = catalog
        self._tables = tables
        self._expected = expected
        self._ours = ours
        self._create_state = create_state
        self._warm_ups = list(warm_ups)
        self._secrets = list(secrets)
        self._creatable: set[bytes] = set()  # headers whose missing table is made ahead
        self._made: set[bytes] = set()  # headers whose table is known to exist
        self._ready = threading.Event()  # the tables made at start-up are there
        self._batch_started = threading.Event()  # stops the warm-up at its next table
        self._aside = ThreadPoolExecutor(max_workers=1, thread_name_prefix="writer-aside")
        self._warm = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="writer-warm") if warm else None
        )
        self._aside.submit(self._start_up)

    def creatable(self, header: bytes) -> bool:
        """Whether the table of the schema ``header`` is made from that schema alone."""
        return header in self._creatable

    def batch_starts(self) -> list[Expected]:
        """A batch starts: stop the warm-up, wait for start-up; the schemas to expect."""
        self._batch_started.set()
        self._ready.wait()  # set by _start_up, which never fails
        if not self._expected:
            self._expect_from_catalog()
        return self._expected.guess()

    @contextmanager
    def while_scanning(self, expected: list[Expected]) -> Iterator[None]:
        """Make the missing tables of ``expected`` while the block (the batch's scan) runs.

        Stops at the first table after the block ends, and waits for that.
        """
        from lakehouse_writer.runtime.lines import inheritable

        scanned = threading.Event()
        make = inheritable(self._spark, self._make)  # the stream's job properties
        made = self._aside.submit(make, expected, scanned)
        try:
            yield
        finally:
            scanned.set()
            made.result()  # never raises: what failed is done again on the batch's path

    def warm(self, paths: Iterable[str]) -> None:
        """Build the Delta state of the tables at ``paths`` until the next batch starts.

        A MERGE or DELETE reads its table's state first — its files and transaction ids,
        which Spark jobs rebuild from the log after every commit: about 1 s of a 10-row
        MERGE's 2.5 s on two cores (:func:`~lakehouse_writer.tables.manager.compute_state`). A
        running writer is mostly idle until its next trigger; from the moment the batch's
        tables are applied (while it writes the system tables and its state, and after),
        another thread builds them for the tables it will likely merge into again, and the
        next MERGE finds them built (the same snapshot: no one else writes them). Once the
        next batch starts, the tables not yet begun are left to it. A failure is only
        logged: the MERGE builds the state itself.
        """
        paths = list(paths)
        if self._warm is None or not paths:
            return
        self._batch_started.clear()

        def build() -> None:
            for path in paths:
                if self._batch_started.is_set():
                    return
                try:
                    compute_state(self._spark, path)
                except Exception as exc:  # noqa: BLE001 - the MERGE builds it itself
                    log.debug("table state not built ahead path=%s error=%s", path, exc)

        self._warm.submit(build)

    def close(self) -> None:
        """Stop the threads (the work they run ends on its own)."""
        self._aside.shutdown(wait=False)
        if self._warm is not None:
            self._warm.shutdown(wait=False, cancel_futures=True)

    def _start_up(self) -> None:
        """While the query starts: read the catalog, the ``warm_ups``, then :meth:`_make`."""
        try:
            self._expect_from_catalog()
        except Exception as exc:  # noqa: BLE001 - the batch reads it again
            log.warning(
                "schema catalog not read at start-up error=%s", root_cause(exc, self._secrets)
            )
        for warm_up in self._warm_ups:
            try:
                warm_up()
            except Exception as exc:  # noqa: BLE001 - the batch opens it again, and reports it
                log.debug("not opened ahead of the first batch error=%s", exc)
        self._make(self._expected.guess())

    def _make(self, expected: list[Expected], scanned: threading.Event | None = None) -> None:
        """Create the missing tables of ``expected`` that :meth:`creatable`, then the state.

        Stops at the first table once ``scanned`` is set. A table found is not looked up
        again.
        """
        try:
            for e in expected:
                if scanned is not None and scanned.is_set():
                    break
                if e.header in self._creatable - self._made:
                    self._tables.create_missing(e.schema)
                    self._made.add(e.header)
            self._ready.set()  # a batch may start; its state is written last
            self._create_state()
        except Exception as exc:  # noqa: BLE001 - done again, and reported, on the batch's path
            log.warning(
                "creating tables ahead of the batch failed error=%s", root_cause(exc, self._secrets)
            )
        finally:
            self._ready.set()

    def _expect_from_catalog(self) -> None:
        """A cold start expects the latest value schema of every subscribed topic."""
        try:
            latest = self._catalog.latest_value_schemas()
        except LakehouseWriterError as exc:  # the batch decodes what it finds all the same
            log.warning("schema catalog not read; nothing expected error=%s", exc)
            return
        ours = self._ours.select(entry.topic for _, entry in latest if entry.topic)
        candidates = []
        for fingerprint, entry in latest:
            if entry.topic not in ours:
                continue
            try:
                candidates.append((single_object_header(bytes.fromhex(fingerprint)), entry))
            except (ValueError, SchemaError):  # a bad catalog record: its rows decode later
                log.warning("catalog fingerprint not usable fingerprint=%s", fingerprint)
        self._expected.seed(candidates)
        counts = self._catalog.value_schema_counts()
        self._creatable = sole_schemas(self._expected.guess(), counts)


def sole_schemas(expected: list[Expected], counts: dict[str, int]) -> set[bytes]:
    """Headers of the schemas that are the only value schema of their topic and table.

    A table created from another schema than its rows' might take an older schema's rows
    as an incompatible change (a column narrowed back): only these are created ahead.
    """
    tables = [TableRef.of(e.schema) for e in expected]
    return {
        e.header
        for e, ref in zip(expected, tables, strict=True)
        if e.entry.topic and counts.get(e.entry.topic) == 1 and tables.count(ref) == 1
    }
