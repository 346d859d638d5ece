"""``replay-rejected``: apply the ``_rejected`` rows whose cause is fixed, exactly once.

A replay reads the rows of ``_rejected`` not replayed yet and goes through the writer's own
path: the decode (:func:`~lakehouse_writer.read.decode.decode_batch`: the schema catalog,
table creation and evolution, the key check) and the apply of each table
(:meth:`~lakehouse_writer.route.router.Router.apply`: the row-type rules, the change-time
guard, TRUNCATEs of earlier batches). All rows of a table are applied in one write, as a
batch's are, so their order (topic, partition, offset) and change times decide as they would
have.

Its steps, each idempotent:

1. **plan**: the rows to replay are appended to ``<lakehouse>/_replayed`` as ``planned``
   under replay number ``N`` (one more than the last; txn ``(replay:_replayed, 2N)``);
2. **apply**: each table's rows are applied with ``txnAppId`` ``lakehouse-writer:replay:<table>``
   and the versions of batch ``N`` (:mod:`lakehouse_writer.engines.ids`);
3. **reasons**: rows that still fail get their new reason in ``_rejected`` (a MERGE of
   ``error``, txn ``(replay:_rejected, N)``);
4. **mark**: every planned row is appended to ``_replayed`` as ``applied`` or ``failing``
   (txn ``(replay:_replayed, 2N+1)``). A replay without this step is unfinished.

A replay killed anywhere is finished by the next one first: it takes the unfinished plan's
rows (whatever ``--table``/``--since`` say), whose table writes Delta skips where they were
committed, then marks them. A row marked ``applied`` is never selected again.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lakehouse_writer.commit.state import STATE
from lakehouse_writer.commit.stopped import StateTable, instance_of
from lakehouse_writer.commit.truncate_log import TruncateLog
from lakehouse_writer.engines import ids
from lakehouse_writer.engines.delta_rs.writes import DeltaRsWrites
from lakehouse_writer.engines.spark import txn
from lakehouse_writer.errors import LakehouseWriterError
from lakehouse_writer.read.catalog import SchemaCatalog
from lakehouse_writer.read.decode import DecodedBatch, decode_batch, resolve
from lakehouse_writer.read.framing import HEADER, header_column, header_tag
from lakehouse_writer.read.rejected import REJECTED
from lakehouse_writer.route.router import Router, TableRows
from lakehouse_writer.runtime.status import HEARTBEAT_S, read_status, status_age_s
from lakehouse_writer.tables.catalog import register_tables
from lakehouse_writer.tables.manager import TableManager

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import DataFrame, SparkSession

    from lakehouse_writer.engines.base import ApplyResult
    from lakehouse_writer.settings import LakehouseSettings

__all__ = [
    "REPLAYED",
    "ReplayRefused",
    "ReplaySummary",
    "check_table_name",
    "parse_since",
    "replay_command",
    "replay_rejected",
    "summary_lines",
]

log = logging.getLogger(__name__)

REPLAYED = "_replayed"  # what each replay planned, and how each of its rows ended
REPLAY_INSTANCE = "replay"  # the txnAppId's instance part of a replay's writes
PLANNED, APPLIED, FAILING = "planned", "applied", "failing"
REPLAYED_DDL = (
    "replay_id BIGINT, topic STRING, `partition` INT, `offset` BIGINT, `table` STRING, "
    "outcome STRING, error STRING"
)
_WHERE = ("topic", "partition", "offset")
_ALIVE_S = 3 * HEARTBEAT_S


class ReplayRefused(LakehouseWriterError):
    """The replay cannot run: a bad argument, or a writer runs on the checkpoint."""


@dataclass
class ReplaySummary:
    """What a replay did (or, dry, would do).

    Attributes:
        replay_id: Its number (None: nothing to replay).
        dry_run: Nothing was changed.
        resumed: It finished an unfinished replay.
        applied: Rows applied per table.
        failing: Rows still failing, per (table or None, reason).
    """

    replay_id: int | None = None
    dry_run: bool = False
    resumed: bool = False
    applied: dict[str, int] = field(default_factory=dict)
    failing: Counter[tuple[str | None, str]] = field(default_factory=Counter)


def parse_since(text: str) -> datetime:
    """``--since``: an ISO time (``2026-11-28`` or ``2026-11-28T10:00:00+00:00``).

    Raises:
        ValueError: Not an ISO time (the message names ``--since``).
    """
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        message = f"--since takes an ISO time such as 2026-11-28T10:00:00, not {text!r}"
        raise ValueError(message) from None


def check_table_name(table: str | None) -> None:
    """Refuse a ``--table`` that is not ``NAMESPACE.NAME``.

    Raises:
        ReplayRefused: It is not (the message names ``--table`` and the value).
    """
    if table is not None and (table.count(".") != 1 or "" in table.split(".")):
        raise ReplayRefused("--table takes NAMESPACE.NAME, e.g. SHOP.ORDERS", table=table)


def replay_rejected(
    spark: SparkSession,
    settings: LakehouseSettings,
    table: str | None = None,
    since: datetime | None = None,
    dry_run: bool = False,
) -> ReplaySummary:
    """Replay the rows of ``_rejected`` that can be applied now (see the module docstring).

    Raises:
        ReplayRefused: A writer runs on the checkpoint, or ``table`` is no table.
    """
    lake = settings.lakehouse_path.rstrip("/")
    check_table_name(table)
    refuse_if_running(settings.checkpoint_path, spark)
    replay_id, rows, resumed = _select(spark, lake, table, since)
    catalog = SchemaCatalog(settings.kafka_client_conf(), settings.schemas_topic, settings.registry)
    if rows is not None and table is not None and not resumed:
        rows = _of_table(rows, catalog, table)
    _check_table(spark, lake, table, rows)
    summary = ReplaySummary(replay_id=replay_id, dry_run=dry_run, resumed=resumed)
    if rows is None:
        summary.replay_id = None
        return summary
    if dry_run:
        return _dry_run(rows, catalog, summary)
    stopped = _stopped(spark, lake, settings.checkpoint_path)
    tables = TableManager(spark, lake, settings.reader_policy)
    decoded = decode_batch(rows, catalog, tables, stopped, _headers(rows))
    try:
        outcomes = _replay(spark, settings, lake, replay_id, decoded)
    finally:
        for frame in [*decoded.cached, rows]:
            frame.unpersist()
    for table_, outcome, error in outcomes.values():
        if outcome == APPLIED:
            summary.applied[table_ or "?"] = summary.applied.get(table_ or "?", 0) + 1
        else:
            summary.failing[(table_, error or "")] += 1
    return summary


def _replay(
    spark: SparkSession,
    settings: LakehouseSettings,
    lake: str,
    replay_id: int,
    decoded: DecodedBatch,
) -> dict[Where, Outcome]:
    """The steps of replay ``replay_id`` of the ``decoded`` rows; how each row ended."""
    failing = _failing(decoded.rejected)
    planned = _planned(decoded, failing)
    _append_replayed(spark, lake, replay_id, {at: (t, PLANNED, None) for at, t in planned.items()})
    results = _apply(spark, settings, lake, decoded, replay_id)
    failing.update(_rule_failures(results, planned))
    _write_reasons(spark, lake, replay_id, failing, planned)
    outcomes = {at: (t, *failing.get(at, (APPLIED, None))) for at, t in planned.items()}
    _append_replayed(spark, lake, replay_id, outcomes)  # the replay is done
    return outcomes


# -- 0. what is there to replay ------------------------------------------------------------------


def _select(
    spark: SparkSession, lake: str, table: str | None, since: datetime | None
) -> tuple[int, DataFrame | None, bool]:
    """(replay number, rows to replay or None, whether it finishes an unfinished replay).

    The rows of an unfinished replay's plan, whatever ``table`` and ``since`` say; else the
    rows of ``_rejected`` not marked ``applied``, written since ``since``, of ``table`` or of
    no table yet (an unknown schema's: :func:`_of_table` finds theirs).
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    path = f"{lake}/{REJECTED}"
    if not DeltaTable.isDeltaTable(spark, path):
        return 0, None, False
    rejected = spark.read.format("delta").load(path).dropDuplicates(list(_WHERE))
    done = _replayed(spark, lake)
    last, unfinished = _last_replay(done)
    if done is not None and unfinished:
        log.warning("replay unfinished replay=%d; finishing it first", last)
        plan = done.filter(F.col("replay_id") == last).select(*_WHERE)
        return last, _persisted(rejected.join(plan, list(_WHERE), "left_semi")), True
    if done is not None:
        applied = done.filter(F.col("outcome") == APPLIED).select(*_WHERE)
        rejected = rejected.join(applied, list(_WHERE), "left_anti")
    if table is not None:
        rejected = rejected.filter(F.col("table").isNull() | (F.col("table") == table))
    if since is not None and "written_at" in rejected.columns:
        rejected = rejected.filter(F.col("written_at") >= F.lit(since))
    return last + 1, _persisted(rejected), False


def _replayed(spark: SparkSession, lake: str) -> DataFrame | None:
    """``_replayed`` (None before the first replay)."""
    from delta.tables import DeltaTable

    path = f"{lake}/{REPLAYED}"
    if not DeltaTable.isDeltaTable(spark, path):
        return None
    return spark.read.format("delta").load(path)


def _last_replay(done: DataFrame | None) -> tuple[int, bool]:
    """(the last replay's number or -1, whether it planned rows it did not mark)."""
    from pyspark.sql import functions as F

    if done is None:
        return -1, False
    marked = F.max(F.when(F.col("outcome") != PLANNED, 1).otherwise(0)).alias("marked")
    last = done.groupBy("replay_id").agg(marked).orderBy(F.col("replay_id").desc()).first()
    if last is None:
        return -1, False
    return int(last["replay_id"]), not last["marked"]


def _persisted(rows: DataFrame) -> DataFrame | None:
    """The rows with their header, cached; None when there are none."""
    rows = _with_header(rows).persist()
    if rows.isEmpty():
        rows.unpersist()
        return None
    return rows


def _of_table(rows: DataFrame, catalog: SchemaCatalog, table: str) -> DataFrame | None:
    """The rows of ``table``: those whose writer schema names it, or that name it already."""
    from pyspark.sql import functions as F

    tags = {header_tag(h): h for h in _headers(rows) if h is not None}
    ours = [
        tags[tag] for tag, entry in resolve(set(tags), catalog).items() if _table_of(entry) == table
    ]
    keep = F.col("table") == table
    if ours:
        keep = keep | F.col(HEADER).isin(*ours)
    kept = rows.filter(keep).persist()
    rows.unpersist()
    if kept.isEmpty():
        kept.unpersist()
        return None
    return kept


def _table_of(entry: Any) -> str | None:
    """The table a catalog entry's value schema writes (None: not a value schema)."""
    from producer_lib.errors import SchemaError
    from producer_lib.schema import ValueSchema

    try:
        schema = ValueSchema.from_avro_json(entry.schema_json)
    except SchemaError:
        return None
    return f"{schema.namespace}.{schema.name}"


def _with_header(rows: DataFrame) -> DataFrame:
    """The rows as the decode reads a batch: Kafka's columns and the value's header."""
    return rows.select(*_WHERE, "key", "value", "table").withColumn(HEADER, header_column("value"))


def _headers(rows: DataFrame) -> set[bytes | None]:
    return {None if r[0] is None else bytes(r[0]) for r in rows.select(HEADER).distinct().collect()}


def _check_table(spark: SparkSession, lake: str, table: str | None, rows: DataFrame | None) -> None:
    """Refuse a ``--table`` that is neither in the lakehouse nor the target of a row."""
    from delta.tables import DeltaTable

    from lakehouse_writer.tables.manager import TableRef

    if table is None or rows is not None:
        return
    namespace, name = table.split(".")
    if not DeltaTable.isDeltaTable(spark, TableRef(namespace, name).path(lake)):
        raise ReplayRefused(
            "no such table in the lakehouse, and no rejected row is meant for it",
            table=table,
            lakehouse=lake,
        )


def _stopped(spark: SparkSession, lake: str, checkpoint: str) -> dict[str, str]:
    """The tables the writer of ``checkpoint`` stopped: their rows stay rejected."""
    instance = instance_of(checkpoint, spark)
    return {s.table: s.error for s in StateTable(lake, spark).stopped() if s.instance == instance}


def refuse_if_running(
    checkpoint: str,
    spark: SparkSession,
    then: str = "replay",
    refused: type[LakehouseWriterError] = ReplayRefused,
) -> None:
    """Raise ``refused`` while a writer runs on ``checkpoint`` (its status, fresh).

    Raises:
        LakehouseWriterError: ``refused``, saying to stop the writer and then ``then``.
    """
    status = read_status(checkpoint, spark) or {}
    age = status_age_s(status)
    if status.get("state") == "running" and (age is None or age <= _ALIVE_S):
        raise refused(
            "a writer runs on this checkpoint (status 'running'); stop it first "
            f"(SIGTERM: it stops after its batch), then {then}",
            checkpoint=checkpoint,
        )


# -- dry run -------------------------------------------------------------------------------------


def _dry_run(rows: DataFrame, catalog: SchemaCatalog, summary: ReplaySummary) -> ReplaySummary:
    """What a replay would take, by writer schema: known now, or still unknown.

    Only the catalog is asked; nothing is created, evolved or written. The rules (a delete
    on an append-only table, ...) judge the rows in a real replay only.
    """
    from producer_lib.schema import ValueSchema

    counts = rows.groupBy(HEADER).count().collect()
    tags = {header_tag(bytes(r[0])): int(r["count"]) for r in counts if r[0] is not None}
    known = resolve(set(tags), catalog)
    for tag, count in sorted(tags.items()):
        if tag in known:
            schema = ValueSchema.from_avro_json(known[tag].schema_json)
            name = f"{schema.namespace}.{schema.name}"
            summary.applied[name] = summary.applied.get(name, 0) + count
        else:
            summary.failing[(None, f"unknown writer schema: {tag}")] += count
    no_header = sum(int(r["count"]) for r in counts if r[0] is None)
    if no_header:
        summary.failing[(None, "value has no header")] += no_header
    rows.unpersist()
    return summary


# -- 1. plan -------------------------------------------------------------------------------------

Where = tuple[str, int, int]  # topic, partition, offset
Outcome = tuple[str | None, str, str | None]  # table, planned/applied/failing, reason


def _failing(rejected: list[DataFrame]) -> dict[Where, tuple[str, str]]:
    """The rows the decode rejected again: (``failing``, new reason) by where they were read."""
    found: dict[Where, tuple[str, str]] = {}
    for frame in rejected:
        for r in frame.select(*_WHERE, "error").collect():
            found[(r["topic"], r["partition"], r["offset"])] = (FAILING, r["error"])
    return found


def _planned(decoded: DecodedBatch, failing: dict[Where, Any]) -> dict[Where, str | None]:
    """The table of every row this replay takes (those it applies and those that fail)."""
    planned: dict[Where, str | None] = {at: None for at in failing}
    for ref, (_, rows) in decoded.tables.items():
        for r in rows.select(*_WHERE).collect():
            planned[(r["topic"], r["partition"], r["offset"])] = ref.qualified
    return planned


def _append_replayed(
    spark: SparkSession, lake: str, replay_id: int, rows: dict[Where, Outcome]
) -> None:
    """Append rows to ``_replayed`` once: the plan (txn version 2N), the outcomes (2N+1)."""
    from pyspark.sql import functions as F

    data = [(replay_id, *at, *outcome) for at, outcome in sorted(rows.items())]
    frame = spark.createDataFrame(data, REPLAYED_DDL).withColumn("at", F.current_timestamp())
    planning = all(outcome == PLANNED for _, outcome, _ in rows.values())
    version = 2 * replay_id + (0 if planning else 1)
    app_id = ids.app_id_for(REPLAY_INSTANCE, REPLAYED)
    txn.append(frame.coalesce(1), f"{lake}/{REPLAYED}", app_id, version, merge_schema=True)


# -- 2. apply ------------------------------------------------------------------------------------


def _apply(
    spark: SparkSession,
    settings: LakehouseSettings,
    lake: str,
    decoded: DecodedBatch,
    replay_id: int,
) -> list[ApplyResult]:
    """Each table's rows, as batch ``replay_id`` of the replay's own transaction ids."""
    router = Router(DeltaRsWrites(settings.small_merge_rows), lake, 0, REPLAY_INSTANCE)
    truncates = TruncateLog(spark, f"{lake}/{STATE}", f"{lake}/_truncates")
    results = []
    for ref in sorted(decoded.tables, key=lambda r: r.qualified):
        info, rows = decoded.tables[ref]
        table = TableRows(info, rows, decoded.summaries.get(ref))
        result = router.apply(table, replay_id, truncates.of(ref.qualified), spark, "spark")
        log.info("replay applied table=%s replay=%d version=%d", ref, replay_id, result.version)
        results.append(result)
    register_tables(
        spark, settings.catalog, settings.catalog_system_namespace, lake, decoded.tables
    )
    return results


def _rule_failures(
    results: list[ApplyResult], planned: dict[Where, str | None]
) -> dict[Where, Any]:
    """The rows a table's rules refused (a delete on an append-only table, ...), with why."""
    found: dict[Where, tuple[str, str]] = {}
    for result in results:
        for frame in result.rejected:
            for r in frame.select(*_WHERE, "error").collect():
                at = (r["topic"], r["partition"], r["offset"])
                if at in planned:
                    found[at] = (FAILING, r["error"])
    return found


# -- 3. reasons, 4. mark -------------------------------------------------------------------------


def _write_reasons(
    spark: SparkSession,
    lake: str,
    replay_id: int,
    failing: dict[Where, tuple[str, str]],
    planned: dict[Where, str | None],
) -> None:
    """Set the new reason of the rows that still fail in ``_rejected`` (once per replay).

    A row that named no table (its schema was unknown) names the one it is meant for now.
    """
    from delta.tables import DeltaTable

    if not failing:
        return
    data = [(*at, error, planned.get(at)) for at, (_, error) in sorted(failing.items())]
    source = spark.createDataFrame(
        data, "topic STRING, `partition` INT, `offset` BIGINT, error STRING, `table` STRING"
    )
    target = DeltaTable.forPath(spark, f"{lake}/{REJECTED}")
    on = " AND ".join(f"r.`{c}` = s.`{c}`" for c in _WHERE)
    app_id = ids.app_id_for(REPLAY_INSTANCE, REJECTED)
    with txn.delta_txn(spark, app_id, replay_id):
        target.alias("r").merge(source.alias("s"), on).whenMatchedUpdate(
            set={"error": "s.error", "table": "coalesce(r.`table`, s.`table`)"}
        ).execute()


# -- the command ---------------------------------------------------------------------------------


def replay_command(
    settings: LakehouseSettings,
    session: Callable[[], SparkSession],
    table: str | None,
    since: datetime | None,
    dry_run: bool,
) -> int:
    """``replay-rejected``: replay, print the summary, log it as one line; exit code 0.

    Raises:
        ReplayRefused: ``table`` is not ``NAMESPACE.NAME`` (said before Spark starts), ...
    """
    import sys

    check_table_name(table)
    summary = replay_rejected(session(), settings, table, since, dry_run)
    print("\n".join(summary_lines(summary)), file=sys.stdout)
    log.warning(
        "replay done replay=%s dry_run=%s applied=%s failing=%d",
        summary.replay_id,
        dry_run,
        summary.applied,
        sum(summary.failing.values()),
    )
    return 0


def summary_lines(summary: ReplaySummary) -> list[str]:
    """The lines ``replay-rejected`` prints."""
    if summary.replay_id is None:
        return ["nothing to replay: no rejected row can be taken"]
    verb = "would apply" if summary.dry_run else "replayed"
    head = f"replay {summary.replay_id}" + (" (dry run)" if summary.dry_run else "")
    head += " (finishing an unfinished replay)" if summary.resumed else ""
    lines = [head]
    for table, count in sorted(summary.applied.items()):
        lines.append(f"  {verb} {count} rows into {table}")
    for (target, reason), count in sorted(summary.failing.items(), key=lambda i: str(i[0])):
        lines.append(f"  still failing {count} rows ({target or 'no table'}): {reason}")
    return lines
