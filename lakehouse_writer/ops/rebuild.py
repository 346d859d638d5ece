"""``rebuild --table NS.T``: recreate one table from its topics' retained offsets, exactly once.

The rebuilt table is what the writer had made of the same rows: the rows are read again
from Kafka (:func:`~lakehouse_writer.read.ranges.range_read`, ``read_committed``), decoded
by the writer's decode (:func:`~lakehouse_writer.read.decode.decode_batch`) and applied by
its router (:meth:`~lakehouse_writer.route.router.Router.apply`: the row-type rules, the
change-time guard, the TRUNCATEs the writer logged), all in one write as one batch's rows.

Its steps:

1. **plan**: the table's topics are those whose latest value schema in the catalog names
   it; per partition the rows read are ``[earliest retained offset, end)``, where ``end``
   is where the writer stands (``_writer_state``: the highest offset processed + 1, or the
   first offset it holds back). Reading to the writer's position, not to the topic's end,
   keeps a row from being applied by the rebuild and again by the next writer run.
2. **check**: the retained rows must hold the table's whole history since its last reset
   (a TRUNCATE without scope, the head of a TRUNCATE/REPLACE reload): a partition whose
   early offsets are gone is covered only when the reset is on it, or its first retained
   row is older than the reset (all deleted rows were older still, since a partition's
   change times rise with its offsets). Otherwise the rebuild refuses, naming topic,
   partition, the first retained offset and the offset it needs (0 without a reset).
3. **apply** into a side table, ``<lakehouse>/_rebuild/<NS.T>/<NS>/<T>``, made fresh by
   every attempt (a side table left by a killed run is deleted first: no reader uses it).
4. **swap**: the side table's rows replace the table's in one Delta commit (an overwrite
   with ``txnAppId`` ``lakehouse-writer:rebuild:<NS.T>`` and ``txnVersion`` N, one more
   than the last rebuild of the table), so readers see the old rows or the rebuilt ones,
   never a half-built table. The table keeps its location, properties, features and
   history (time travel to before the rebuild works; the Change Data Feed shows the swap
   as deletes and inserts). Delta skips a second commit of the same N.
5. **clean**: the side table is deleted.

Killed anywhere before the swap, the table is untouched and a rerun starts over; killed
after it, the table is rebuilt and a rerun rebuilds it again to the same rows (a new N).
The writer must be stopped (as for ``replay-rejected``): its position is the rebuild's end,
and a write of a running writer to the table during the rebuild would be lost in the swap.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakehouse_writer.commit.state import STATE, StateStore
from lakehouse_writer.commit.stopped import instance_of
from lakehouse_writer.commit.truncate_log import TruncateLog
from lakehouse_writer.engines import ids
from lakehouse_writer.engines.delta_rs.writes import DeltaRsWrites
from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.ops.replay import check_table_name, refuse_if_running
from lakehouse_writer.read.catalog import SchemaCatalog
from lakehouse_writer.read.decode import decode_batch, source_options
from lakehouse_writer.read.framing import HEADER, header_column
from lakehouse_writer.read.ranges import OffsetRanges, range_read
from lakehouse_writer.route.router import Router, TableRows
from lakehouse_writer.runtime.storage import delta_rs_path
from lakehouse_writer.tables.catalog import register_tables
from lakehouse_writer.tables.files import delete_tree
from lakehouse_writer.tables.manager import TableManager, TableRef
from producer_lib.kafka.topic_reader import consumer_config

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pyspark.sql import DataFrame, SparkSession

    from lakehouse_writer.settings import LakehouseSettings

__all__ = [
    "REBUILD_INSTANCE",
    "SIDE",
    "RebuildPlan",
    "RebuildRefused",
    "rebuild_command",
    "rebuild_table",
]

log = logging.getLogger(__name__)

REBUILD_INSTANCE = "rebuild"  # the txnAppId's instance part of the swap
SIDE = "_rebuild"  # below the lakehouse: the side tables being built
_WHERE = ("topic", "partition", "offset")


class RebuildRefused(LakehouseWriterError):
    """The rebuild cannot run: a bad table, missing offsets, or a running writer."""


@dataclass
class RebuildPlan:
    """What a rebuild reads (and, unless dry, did).

    Attributes:
        table: ``NAMESPACE.NAME``.
        ranges: Per (topic, partition): the offsets read, ``[from, until)``.
        rows: The table's rows among them.
        reset: (topic, partition, offset) of the last TRUNCATE without scope, if retained.
        number: The rebuild's number (its swap's txnVersion).
        dry_run: Nothing was changed.
        rejected: Rows the decode or the rules refused (the writer refused them too).
    """

    table: str
    ranges: OffsetRanges = field(default_factory=dict)
    rows: int = 0
    reset: tuple[str, int, int] | None = None
    number: int = 0
    dry_run: bool = False
    rejected: int = 0

    def lines(self) -> list[str]:
        """The lines the command prints."""
        head = f"rebuild {self.number} of {self.table}" + (" (dry run)" if self.dry_run else "")
        lines = [head]
        for (topic, partition), (first, until) in sorted(self.ranges.items()):
            lines.append(f"  {topic} partition {partition}: offsets {first}..{until}")
        if self.reset is not None:
            lines.append(
                "  history from the TRUNCATE at {} partition {} offset {}".format(*self.reset)
            )
        verb = "would apply" if self.dry_run else "rebuilt from"
        lines.append(
            f"  {verb} {self.rows} rows" + (f", {self.rejected} refused" if self.rejected else "")
        )
        return lines


def rebuild_table(
    spark: SparkSession, settings: LakehouseSettings, table: str, dry_run: bool = False
) -> RebuildPlan:
    """Rebuild ``table`` (see the module docstring); the plan it followed.

    Raises:
        RebuildRefused: No such table, no topic feeds it, offsets missing, a writer runs.
    """
    check_table_name(table)
    lake = settings.lakehouse_path.rstrip("/")
    refuse_if_running(settings.checkpoint_path, spark, "rebuild", RebuildRefused)
    namespace, name = table.split(".")
    ref = TableRef(namespace, name)
    _check_exists(spark, lake, ref)
    catalog = SchemaCatalog(settings.kafka_client_conf(), settings.schemas_topic, settings.registry)
    plan = RebuildPlan(table, dry_run=dry_run, number=_last_rebuild(ref.path(lake), table) + 1)
    plan.ranges = _ranges(spark, settings, lake, _topics_of(catalog, table))
    side = tempfile.mkdtemp(prefix="rebuild-") if dry_run else f"{lake}/{SIDE}/{table}"
    delete_tree(spark, side)
    rows = _read(spark, settings, plan.ranges)
    try:
        _build(spark, settings, lake, side, ref, rows, catalog, plan)
        if not dry_run:
            _swap(spark, ref.path(side), ref.path(lake), table, plan.number)
            names = settings.catalog, settings.catalog_system_namespace
            register_tables(spark, *names, lake, [ref])  # a table dropped by hand: found again
    finally:
        if rows is not None:
            rows.unpersist()
        delete_tree(spark, side)
    return plan


# -- 1. plan ------------------------------------------------------------------------------------


def _check_exists(spark: SparkSession, lake: str, ref: TableRef) -> None:
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, ref.path(lake)):
        raise RebuildRefused("no such table in the lakehouse", table=ref.qualified, lakehouse=lake)


def _topics_of(catalog: SchemaCatalog, table: str) -> set[str]:
    """The topics whose latest value schema in the catalog writes ``table``."""
    from producer_lib.errors import SchemaError
    from producer_lib.schema import ValueSchema

    found = set()
    for _, entry in catalog.latest_value_schemas():
        try:
            schema = ValueSchema.from_avro_json(entry.schema_json)
        except SchemaError:
            continue
        if f"{schema.namespace}.{schema.name}" == table and entry.topic:
            found.add(entry.topic)
    if not found:
        raise RebuildRefused(
            "no topic's value schema in the catalog writes this table", table=table
        )
    return found


def _ranges(
    spark: SparkSession, settings: LakehouseSettings, lake: str, topics: set[str]
) -> OffsetRanges:
    """Per partition of ``topics`` the writer applied: [earliest retained, writer's position)."""
    instance = instance_of(settings.checkpoint_path, spark)
    if instance is None:
        raise RebuildRefused(
            "the checkpoint has no writer instance: nothing was applied from it",
            checkpoint=settings.checkpoint_path,
        )
    state = StateStore(spark, f"{lake}/{STATE}", instance).load()
    ends = {k: o + 1 for k, o in state.offsets.items() if k[0] in topics}
    ends.update({k: first for k, (first, _) in state.held.items() if k[0] in topics})
    starts = _earliest(settings.kafka_client_conf(), list(ends))
    return {k: (starts[k], max(starts[k], end)) for k, end in ends.items()}


def _earliest(conf: Mapping[str, Any], partitions: list[tuple[str, int]]) -> dict[Any, int]:
    """The first offset each partition still holds (its low watermark)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(consumer_config(conf, purpose="lakehouse-writer-rebuild"))
    try:
        return {
            (t, p): int(consumer.get_watermark_offsets(TopicPartition(t, p), timeout=30)[0])
            for t, p in partitions
        }
    finally:
        consumer.close()


def _last_rebuild(path: str, table: str) -> int:
    """The txnVersion of the table's last rebuild swap (-1: none).

    Raises:
        RebuildRefused: delta-rs cannot reach the lakehouse's storage (not local, not Azure).
    """
    where = delta_rs_path(path)
    if where is None:
        raise RebuildRefused(
            "rebuild reads the table's transaction ids with delta-rs, which cannot reach "
            "this storage (a local path or Azure's abfss:// and wasbs:// can be rebuilt)",
            table=table,
            path=path,
        )
    done = where.open().transaction_version(ids.app_id_for(REBUILD_INSTANCE, table))
    return -1 if done is None else int(done)


# -- 2. read, check, 3. apply -------------------------------------------------------------------


def _read(
    spark: SparkSession, settings: LakehouseSettings, ranges: OffsetRanges
) -> DataFrame | None:
    """The committed rows of ``ranges`` with their header, cached (None: no offsets)."""
    rows = range_read(spark, source_options(settings), ranges)
    if rows is None:
        return None
    return rows.select(*_WHERE, "key", "value").withColumn(HEADER, header_column("value")).persist()


def _build(
    spark: SparkSession,
    settings: LakehouseSettings,
    lake: str,
    side: str,
    ref: TableRef,
    rows: DataFrame | None,
    catalog: SchemaCatalog,
    plan: RebuildPlan,
) -> None:
    """Decode ``rows`` into the side lake, check the history, apply (dry: count only)."""
    tables = TableManager(spark, side, settings.reader_policy)
    headers = set() if rows is None else _headers(rows)
    decoded = None if rows is None else decode_batch(rows, catalog, tables, {}, headers)
    try:
        mine = None if decoded is None else decoded.tables.get(ref)
        plan.rejected = 0 if decoded is None else sum(f.count() for f in decoded.rejected)
        if mine is None:
            _check_history(plan, {})
            return
        info, frame = mine
        plan.rows = frame.count()
        _check_history(plan, _firsts(frame), _reset(frame))
        if plan.dry_run:
            return
        router = Router(DeltaRsWrites(settings.small_merge_rows), side, 0, REBUILD_INSTANCE)
        truncates = TruncateLog(spark, f"{lake}/{STATE}", f"{lake}/_truncates")
        assert decoded is not None
        rows_ = TableRows(info, frame, decoded.summaries.get(ref))
        result = router.apply(rows_, plan.number, truncates.of(ref.qualified), spark, "spark")
        plan.rejected += sum(f.count() for f in result.rejected)
        log.info("rebuild applied table=%s rows=%d side=%s", ref, plan.rows, side)
    finally:
        for cached in [] if decoded is None else decoded.cached:
            cached.unpersist()


def _headers(rows: DataFrame) -> set[bytes | None]:
    return {None if r[0] is None else bytes(r[0]) for r in rows.select(HEADER).distinct().collect()}


Reset = tuple[str, int, int, Any]  # topic, partition, offset, change time (a timestamp)


def _reset(frame: DataFrame) -> Reset | None:
    """The last TRUNCATE without scope among the table's rows (by change time, offset)."""
    from pyspark.sql import functions as F

    unscoped = F.col("__truncate").isNull() | (F.size("__truncate") == 0)
    last = (
        frame.filter((F.col("__change_type") == "T") & unscoped)
        .orderBy(F.col("__change_time").desc(), F.col("offset").desc())
        .select(*_WHERE, "__change_time")
        .first()
    )
    return None if last is None else (last[0], int(last[1]), int(last[2]), last[3])


def _firsts(frame: DataFrame) -> dict[tuple[str, int], Any]:
    """Per partition: the change time of the table's first retained row."""
    from pyspark.sql import functions as F

    first = F.min(F.struct("offset", "__change_time")).alias("first")
    got = frame.groupBy("topic", "partition").agg(first).collect()
    return {(r["topic"], int(r["partition"])): r["first"][1] for r in got}


def _check_history(
    plan: RebuildPlan, firsts: dict[tuple[str, int], Any], reset: Reset | None = None
) -> None:
    """Refuse when a partition lost offsets the table's history since its reset needs."""
    plan.reset = None if reset is None else reset[:3]
    missing = []
    for (topic, partition), (first, _) in sorted(plan.ranges.items()):
        if first == 0:
            continue  # nothing deleted
        if reset is not None and (reset[0], reset[1]) == (topic, partition) and reset[2] >= first:
            continue  # the history starts at a retained offset
        older = firsts.get((topic, partition))
        if reset is not None and older is not None and older < reset[3]:
            continue  # what is gone is older than the reset still
        missing.append(f"{topic} partition {partition}: first retained offset {first}, needs 0")
    if missing:
        raise RebuildRefused(
            "the topics no longer hold the table's history since its last TRUNCATE: "
            + "; ".join(missing),
            table=plan.table,
        )


# -- 4. swap, 5. clean --------------------------------------------------------------------------


def _swap(spark: SparkSession, side: str, target: str, table: str, number: int) -> None:
    """Replace the table's rows by the side table's in one commit, once as rebuild ``number``."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    if not DeltaTable.isDeltaTable(spark, side):
        return  # no row of the table is retained: nothing to build (the check allowed it)
    built = spark.read.format("delta").load(side)
    have = set(built.columns)
    columns = [
        (F.col(f"`{c.name}`") if c.name in have else F.lit(None)).cast(c.dataType).alias(c.name)
        for c in spark.read.format("delta").load(target).schema
    ]
    app_id = ids.app_id_for(REBUILD_INSTANCE, table)
    (
        built.select(*columns)
        .write.format("delta")
        .mode("overwrite")
        .option("txnAppId", app_id)
        .option("txnVersion", number)
        .save(target)
    )
    log.warning("rebuild swapped table=%s rebuild=%d", table, number)


# -- the command --------------------------------------------------------------------------------


def rebuild_command(
    settings: LakehouseSettings,
    session: Callable[[], SparkSession],
    table: str,
    dry_run: bool,
) -> int:
    """``rebuild``: rebuild (or plan), print the plan; exit code 0.

    Raises:
        RebuildRefused: see :func:`rebuild_table` (the CLI exits 1).
    """
    import sys

    check_table_name(table)
    plan = rebuild_table(session(), settings, table, dry_run)
    print("\n".join(plan.lines()), file=sys.stdout)
    log.warning(
        "rebuild done table=%s rebuild=%d dry_run=%s rows=%d",
        table,
        plan.number,
        dry_run,
        plan.rows,
    )
    return 0
