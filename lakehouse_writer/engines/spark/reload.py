"""A reload written in the pass that reads it.

A reload — an unscoped TRUNCATE, then only upserts, into an empty table; or only upserts into
a table that holds no rows yet, which is the same — is appended as it
is (:func:`lakehouse_writer.engines.table.apply_table`'s fast path). On the normal path its rows
are read twice: the scan reads, decodes, caches and summarizes the batch, and the append then
writes the files from the cache.

When a batch holds many rows of a topic whose only value schema is expected and whose table
is empty, the writer bets on a reload (:func:`speculate`): one Spark job reads that topic's
offset ranges of the batch (in tasks of a third of a Kafka partition, so the cores stay
busy to the end), decodes them, writes the table's files through a Delta transaction
without committing them and collects the batch's summary with ``observe``. If the summary
shows a pure reload (:func:`refusal` finds no reason against it), the rest of the batch —
its other offset ranges, read again by range — takes the normal path while another thread
checks the written files' key columns for a repeated key (on the driver with pyarrow when
the files are local, else with Spark); the files are then committed with
the batch's txnVersion (:meth:`Speculation.commit`). A lost bet deletes the files
uncommitted and applies the rows the normal way, read again: it costs one more pass, never
a row, and the table is not bet on again.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakehouse_writer.engines import ids
from lakehouse_writer.engines.base import ApplyResult
from lakehouse_writer.engines.spark import txn
from lakehouse_writer.engines.spark.engine import no_repeated_keys, upserts
from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.read.decode import DecodedBatch, split_parsed
from lakehouse_writer.read.framing import avro_struct, body_column
from lakehouse_writer.read.keys import with_key_check
from lakehouse_writer.read.ranges import OffsetRanges, messages_per_topic, range_read
from lakehouse_writer.read.summary import RowSummary, truncate_records, truncate_row
from lakehouse_writer.rules.row_types import UPSERTS as UPSERT_TYPES
from lakehouse_writer.rules.truncate import AppliedTruncates, Truncate, distinct_truncates
from lakehouse_writer.runtime import lines
from lakehouse_writer.tables.files import last_log_version
from lakehouse_writer.tables.manager import TableInfo, TableManager, TableRef, no_data_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from lakehouse_writer.read.scan import Expected

log = logging.getLogger(__name__)

_COUNTED = ("T", *UPSERT_TYPES)  # the types of a reload; any other is counted as "other"
DRIVER_CHECK_MAX_ROWS = 10_000_000  # above: the keys are checked by Spark, not on the driver


def refusal(summary: RowSummary, undecoded: int, applied: Sequence[Truncate]) -> str | None:
    """Why the rows summarized are not a reload the fast path appends as they are; None if they are.

    A reload: every row decoded with the one schema, only upserts besides TRUNCATEs, every
    TRUNCATE unscoped, and no row older than one of them or than a TRUNCATE applied earlier
    (``applied``: no row is dropped). The table is known empty, so upserts without a TRUNCATE
    (a REPLACE into a new table) are a reload too: distinct keys are the table's rows, as a
    MERGE into the empty table would make them (a repeated key loses the bet).
    """
    counts = summary.counts
    if undecoded:
        return f"{undecoded} rows of other schemas or that do not decode"
    others = sorted(str(c) for c in counts if c not in ("T", *UPSERT_TYPES) and counts[c])
    if others:
        return f"row types other than upserts: {', '.join(others)}"
    if not all(t.unscoped for t in summary.truncates):
        return "a scoped TRUNCATE"
    times = [t.time_us for t in (*summary.truncates, *applied)]
    if times and summary.oldest is not None and summary.oldest < max(times):
        return "rows older than a TRUNCATE"
    return None


@dataclass
class Speculation:
    """A reload whose files are written and not yet committed.

    Attributes:
        expected: Its writer schema.
        info: Its table.
        summary: The summary of the topic's rows in the batch (no key range).
        offsets: The highest offset read per (topic, partition) of the topic.
        rest: The batch's other offset ranges, read from Kafka (the normal path takes them);
            None when they hold no rows.

    Whether a key repeats is checked on another thread while the rest of the batch is
    read (:meth:`unique`).
    """

    expected: Expected
    info: TableInfo
    summary: RowSummary
    offsets: dict[tuple[str, int], int]
    rest: DataFrame | None
    _pending: txn.PendingAppend
    _parsed: DataFrame
    _unique: Future[bool]

    def rows(self) -> DataFrame:
        """The topic's decoded rows (read again), as the normal path's decode gives them."""
        return split_parsed(self._parsed, self.expected.schema, self.info)[0]

    def unique(self) -> bool:
        """True when no key repeats in the written files (waits for the check)."""
        return self._unique.result()

    def commit(self) -> ApplyResult:
        """Commit the files with the batch's txnVersion (:meth:`unique` must be True)."""
        version = self._pending.commit()
        log.info(
            "batch applied table=%s rows=%s truncates=%d fast_path=True one_pass=True version=%d",
            self.info.ref.qualified,
            self.summary.counts,
            len(self.summary.truncates),
            version,
        )
        return ApplyResult(
            self.info.ref.qualified,
            dict(self.summary.counts),
            self.summary.truncates,
            fast_path=True,
            gdpr_purged=False,
            version=version,
        )

    def discard(self) -> None:
        """Delete the files uncommitted (once the check no longer reads them)."""
        wait([self._unique])
        self._pending.discard()


class ReloadBet:
    """Whether, and on which table, a batch bets on a reload; and how the bet ends.

    The bet is made (:meth:`place`) on the topic with the most offsets in the batch, at
    least ``min_rows``, whose only writer schema is expected and whose table is empty. A
    table found holding rows, or whose bet was lost, is not bet on again, so later batches
    pay nothing.

    Args:
        spark: The session.
        tables: Creates or finds the tables.
        min_rows: The fewest rows of a topic worth a bet (0: never bet).
        options: The Kafka source options (the bet reads its offset ranges again).
        instance_id: The writer instance id (Delta txnAppId).
        truncates: The TRUNCATEs applied so far, per table.
        creatable: Whether a schema's table is made from that schema alone.
    """

    def __init__(
        self,
        spark: SparkSession,
        tables: TableManager,
        min_rows: int,
        options: Mapping[str, str],
        instance_id: str,
        truncates: AppliedTruncates,
        creatable: Callable[[bytes], bool],
    ) -> None:
        self._spark = spark
        self._tables = tables
        self._min_rows = min_rows
        self._options = options
        self._instance = instance_id
        self._truncates = truncates
        self._creatable = creatable
        self._declined: set[bytes] = set()  # headers whose bet was lost or is pointless

    def place(
        self,
        source: DataFrame,
        expected: list[Expected],
        batch_id: int,
        ranges: OffsetRanges | None,
        stopped: Mapping[str, str],
    ) -> Speculation | None:
        """Bet that the batch's rows of one topic are a reload, and write them in one pass.

        ``ranges``: the batch's offset ranges (None: not known, no bet). None: no bet, or
        a lost one (its files are deleted) — the batch takes the normal path.
        """
        if not (self._min_rows and ranges):
            return None
        spans = messages_per_topic(ranges)
        large = [e for e in expected if spans.get(e.entry.topic or "", 0) >= self._min_rows]
        empty = self._candidates(large, stopped)  # only those: it looks at each table
        if not empty:
            return None
        bet, info = max(empty, key=lambda c: spans.get(c[0].entry.topic or "", 0))
        ref = info.ref
        outcome = speculate(
            source,
            self._options,
            ranges,
            bet,
            info,
            ids.app_id_for(self._instance, ref.qualified),
            ids.txn_version(batch_id, ids.STEP_ROWS),
            self._truncates.of(ref.qualified),
        )
        if isinstance(outcome, str):
            self._declined.add(bet.header)
            _not_one_pass(ref.qualified, batch_id, outcome)
            return None
        return outcome

    def settle(
        self, placed: object | None, decoded: DecodedBatch, batch_id: int
    ) -> Speculation | None:
        """The reload ``placed`` when its files are to be committed; else None.

        They are not committed when a key repeats, or when the rest of the batch holds rows
        of its table (from another topic): then its files are deleted and its rows, read
        again, join ``decoded`` and are applied the normal way, with those of the rest
        (cached: in ``decoded.cached``).
        ``placed`` is what :meth:`place` returned (the read side holds it by its protocol).
        """
        if placed is None:
            return None
        assert isinstance(placed, Speculation), placed
        reload = placed
        ref = reload.info.ref
        if ref in decoded.tables:
            reason = "the batch holds rows of its table from another topic"
        elif not reload.unique():
            reason = "a key repeats"
        else:
            return reload
        _not_one_pass(ref.qualified, batch_id, reason)
        reload.discard()
        self._declined.add(reload.expected.header)
        rows = reload.rows().persist()
        decoded.cached.append(rows)
        info = reload.info
        if ref in decoded.tables:
            info, others = decoded.tables[ref]
            rows = others.unionByName(rows, allowMissingColumns=True)
            decoded.summaries.pop(ref, None)  # apply_batch summarizes them all
        decoded.tables[ref] = (info, rows)
        return None

    def _candidates(
        self, expected: list[Expected], stopped: Mapping[str, str]
    ) -> list[tuple[Expected, TableInfo]]:
        """The expected schemas whose table is made from them alone and is empty."""
        empty = []
        for e in expected:
            if not self._creatable(e.header) or e.header in self._declined:
                continue
            if TableRef.of(e.schema).qualified in stopped:
                continue
            try:
                info = self._tables.ensure(e.schema)
            except LakehouseWriterError:
                continue  # the normal path reports it
            if info.append_only or not no_data_files(self._spark, info.path):
                self._declined.add(e.header)  # it holds rows: no bet from now on (no cost)
                continue
            empty.append((e, info))
        return empty


def _not_one_pass(table: str, batch_id: int, reason: str) -> None:
    log.info("reload not written in one pass table=%s batch=%d reason=%s", table, batch_id, reason)


def speculate(
    batch: DataFrame,
    options: Mapping[str, str],
    ranges: OffsetRanges,
    expected: Expected,
    info: TableInfo,
    app_id: str,
    version: int,
    applied: Sequence[Truncate],
) -> Speculation | str:
    """Write the topic's rows of the batch as a reload of ``info``'s empty table (see above).

    Args:
        batch: The ``foreachBatch`` frame (for its session; not read).
        options: The Kafka source's options (connection, isolation level).
        ranges: The batch's offset ranges.
        expected: The topic's only writer schema.
        info: Its (empty) table.
        app_id: The table's txnAppId.
        version: The batch's txnVersion of the rows.
        applied: TRUNCATEs of the table applied by earlier batches.

    Returns:
        The speculation to commit, or why it was not made (its files are deleted, if any).
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    spark = batch.sparkSession
    if info.history:
        return "a history table: its rows become versions"
    if info.tombstones and last_log_version(spark, info.tombstones) >= 0:
        return "the table keeps tombstones: its rows go through them"
    topic = expected.entry.topic
    assert topic is not None  # only a schema with a topic spans rows worth a bet
    mine = {k: v for k, v in ranges.items() if k[0] == topic}
    # Smaller tasks, three per core: three whole Kafka partitions on two cores took two
    # rounds, the second on one core. (Spark splits a range only into whole shares of
    # ``minPartitions``: 4 left three partitions as they were.)
    source = range_read(spark, options, mine, 3 * spark.sparkContext.defaultParallelism)
    assert source is not None, mine  # the topic spans reload_one_pass_min_rows offsets
    decode = avro_struct(body_column(len(expected.header)), expected.entry.schema_json)
    header = F.substring("value", 1, len(expected.header)) == F.lit(expected.header)
    parsed = source.select(
        "topic", "partition", "offset", "key", F.when(header, decode).alias("__r")
    )
    parsed = with_key_check(parsed, "__r", expected.schema, expected.keys).drop("key")
    observation = Observation(f"reload-{uuid.uuid4().hex}")
    observed = parsed.observe(observation, *_metrics(sorted(p for t, p in mine)))
    decoded, _ = split_parsed(observed, expected.schema, info)
    rows = upserts(decoded, info)  # a reload: its TRUNCATEs and upserts (the bet checks)
    pending = txn.PendingAppend.begin(spark, info.path, app_id, version, rows.schema)
    if pending is None or pending.replayed:
        return (
            "the append does not go through Delta's transaction"
            if pending is None
            else "the batch's rows are committed already (replay)"
        )
    pending.write(rows)
    try:
        summary, undecoded, offsets = _observed(observation.get, topic)
        reason = refusal(summary, undecoded, applied)
        if reason is None:
            rest = range_read(spark, options, {k: v for k, v in ranges.items() if k[0] != topic})
            paths = pending.file_paths()
            names = pending.physical_names()
            physical = [names.get(k, k) for k in info.keys]
            written = sum(summary.counts.values())
    except BaseException:
        pending.discard()
        raise
    if reason is not None:
        pending.discard()
        return reason

    def distinct() -> bool:
        found = unique_in_files(paths, physical, written)
        if found is None:
            found = no_repeated_keys(_written(spark, paths, physical, info.keys), info.keys)
        return found

    checker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reload-check")
    check = lines.inheritable(spark, distinct)  # the stream's job properties
    unique = checker.submit(check)
    checker.shutdown(wait=False)  # the check runs on; nothing else is submitted
    return Speculation(expected, info, summary, offsets, rest, pending, parsed, unique)


def _metrics(partitions: list[int]) -> list[Any]:
    """Scalar aggregates of the summary (``observe`` takes no grouping)."""
    from pyspark.sql import functions as F

    change = F.col("__r.__change_type")
    time = F.unix_micros(F.col("__r.__change_time"))
    truncate = truncate_row(F.col("__r.__change_time"), F.col("__r.__truncate"))
    return [
        F.count(F.when(change.isNull(), 1)).alias("undecoded"),
        F.count(F.when(~change.isin(*_COUNTED), 1)).alias("other"),
        *[F.count(F.when(change == c, 1)).alias(f"n_{c}") for c in _COUNTED],
        F.min(F.when(change != "T", time)).alias("oldest"),
        # as JSON: Observation.get hands arrays over as Java objects (null scopes kept)
        F.to_json(
            F.collect_set(F.when(change == "T", truncate)), {"ignoreNullFields": "false"}
        ).alias("truncates"),
        *[
            F.max(F.when(F.col("partition") == p, F.col("offset"))).alias(f"o_{p}")
            for p in partitions
        ],
    ]


def _observed(
    metrics: Mapping[str, Any], topic: str
) -> tuple[RowSummary, int, dict[tuple[str, int], int]]:
    counts: dict[str | None, int] = {c: int(metrics[f"n_{c}"]) for c in _COUNTED}
    counts = {c: n for c, n in counts.items() if n}
    if metrics["other"]:
        counts["other"] = int(metrics["other"])  # deletes, archives, unknown types: no reload
    found = truncate_records(json.loads(metrics["truncates"]))
    summary = RowSummary(counts, None, metrics["oldest"], tuple(distinct_truncates(found)))
    offsets = {
        (topic, int(k[2:])): int(v)
        for k, v in metrics.items()
        if k.startswith("o_") and v is not None
    }
    return summary, int(metrics["undecoded"]), offsets


def _written(
    spark: SparkSession, paths: list[str], physical: list[str], keys: tuple[str, ...]
) -> DataFrame:
    """The key columns (``physical``: their names in the files) of the files, as ``keys``."""
    from pyspark.sql import functions as F

    frame = spark.read.parquet(*paths)
    return frame.select(*[F.col(f"`{p}`").alias(k) for p, k in zip(physical, keys, strict=True)])


def unique_in_files(paths: Sequence[str], columns: Sequence[str], rows: int) -> bool | None:
    """Whether no value of ``columns`` repeats over the local Parquet files ``paths``.

    Read on the driver with pyarrow: a million keys take about 0.1 s, where a Spark job
    took 0.9-1.5 s on two cores (shuffle and all). None when it does not apply — a path
    that is not on the local file system (``file:``), or more than
    :data:`DRIVER_CHECK_MAX_ROWS` rows (``rows``: the count written), whose key columns the
    driver should not hold — and the caller asks Spark. No files: True.
    """
    import pyarrow.dataset as ds

    local = [p.removeprefix("file:") for p in paths if p.startswith("file:/")]
    if len(local) < len(paths) or rows > DRIVER_CHECK_MAX_ROWS:
        return None
    if not local:
        return True
    keys = ds.dataset(local, format="parquet").to_table(columns=list(columns))
    return keys.group_by(list(columns)).aggregate([]).num_rows == keys.num_rows
