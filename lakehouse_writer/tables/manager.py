"""Create and evolve the Delta tables change rows land in.

A table lives at ``<lakehouse>/<namespace>/<name>`` (original names, each one path segment:
:func:`~producer_lib.schema.names.path_segment`); a name the lakehouse cannot hold (a
reserved namespace, a dot in the table name, a segment over 255 bytes:
:func:`~producer_lib.schema.names.table_name_problem`) stops that table only. Columns keep
their original names: ``$``, ``/BIC/`` or umlauts as they are, and a name Parquet cannot hold
(a space, ``,;{}()=``, tab, newline) turns on column mapping mode ``name`` — at creation, or
when such a column is added later. Only then: mapping renames every column of every write
(0.5-0.8 s of a 2.5-3 s append of a million rows, measured here).

Created from the value schema on first sight with column comments, NOT NULL where the schema
says so, the Change Data Feed, deletion vectors (unless the readers cannot apply them or
``LAKEHOUSE_DELETION_VECTORS=false``; a table keeps the features it was created with), and the
governance metadata as ``flow.*`` table properties. A table gains a reader feature (column
mapping, type widening, ``TIMESTAMP_NTZ``) only when the readers of ``LAKEHOUSE_READERS`` read
it (:class:`~lakehouse_writer.tables.features.ReaderPolicy`); otherwise the table stops with
the feature and the readers named. Which features a table can gain, and which readers read
them: ``docs/TABLES.md``.

Delta collects file statistics (data skipping) for the payload columns — the first 32 of a
type that has them, as Delta's default does for the first 32 columns — and
``__change_time``, not for the other technical columns
(``delta.dataSkippingStatsColumns``, :func:`stats_columns`; a column added later is added
to it): their statistics cost 0.3-0.4 s of a 5 s write of a million rows, for columns
queries rarely filter on. Later schemas may add nullable columns and widen types (Delta type
widening, turned on at a table's first widening); anything else raises
:class:`SchemaEvolutionError` for that table only.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakehouse_writer.errors import SchemaEvolutionError, TableNameError
from lakehouse_writer.runtime.lines import current_line, latest_snapshot, widens
from lakehouse_writer.runtime.session import quote_name
from lakehouse_writer.runtime.storage import delta_rs_path
from lakehouse_writer.tables import features
from lakehouse_writer.tables.features import ReaderPolicy, reader_policy
from lakehouse_writer.tables.history import HISTORY_FIELDS, HISTORY_PROPERTY
from producer_lib.schema import TECHNICAL_FIELDS, ValueSchema
from producer_lib.schema.names import path_segment, table_name_problem
from producer_lib.schema.types import AvroField

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType

    from lakehouse_writer.runtime.parallel import TableApplier

log = logging.getLogger(__name__)

# The table features every table starts with, and no others (a table gains column mapping
# when a name needs it and type widening when a column first widens: docs/TABLES.md).
BASE_PROPERTIES: dict[str, str] = {"delta.enableChangeDataFeed": "true"}
# Deletion vectors keep MERGE/DELETE cheap (no file rewrite); on unless the readers cannot
# apply them (LAKEHOUSE_READERS) or the writer is told otherwise. Off is set as "false", not
# left out: Databricks workspaces may turn them on for new tables.
DELETION_VECTORS = "delta.enableDeletionVectors"
EVERY_FEATURE = reader_policy(())  # no LAKEHOUSE_READERS: every feature the writer's Delta has
TYPE_WIDENING = "delta.enableTypeWidening"
# Governance properties of the value schema -> Delta table property keys.
GOVERNANCE_PROPERTIES: dict[str, str] = {
    "dataProductOwnerEmail": "flow.owner_email",
    "repoUrl": "flow.repo_url",
    "sourceSystemUri": "flow.source_system_uri",
    "ticketsUrl": "flow.tickets_url",
    "retentionPeriod": "flow.retention_period",
    "deletionPolicy": "flow.deletion_policy",
    "dataClassification": "flow.data_classification",
}
PRIMARY_KEYS_PROPERTY = "flow.primary_keys"
TOMBSTONES = "_tombstones"  # <lakehouse>/_tombstones/<namespace>/<name>: a table's deletes
GDPR_DELETE_PROPERTY = "flow.gdpr_delete"  # set by a commit after a batch's GDPR deletes
CLUSTER_BY_PROPERTY = "flow.cluster_by"  # the schema's clusterBy the table was last laid out by
STATS_COLUMNS_PROPERTY = "delta.dataSkippingStatsColumns"
MAX_STATS_COLUMNS = 32  # payload columns with statistics: as many as Delta's default columns
_STATS_TYPES = frozenset(
    {
        "tinyint",
        "smallint",
        "int",
        "bigint",
        "float",
        "double",
        "date",
        "timestamp",
        "timestamp_ntz",
        "string",
    }
)  # and decimals
COLUMN_MAPPING_MODE = "delta.columnMapping.mode"
COLUMN_MAPPING = {COLUMN_MAPPING_MODE: "name"}  # for names Parquet cannot hold
_UNFIT_FOR_PARQUET = frozenset(" ,;{}()\n\t=")  # Delta refuses these without column mapping


def needs_column_mapping(names: Iterable[str]) -> bool:
    """True when a column name holds a character Delta allows only with column mapping."""
    return any(not _UNFIT_FOR_PARQUET.isdisjoint(name) for name in names)


@dataclass(frozen=True)
class TableRef:
    """A lakehouse table: original namespace and name of its value schema."""

    namespace: str
    name: str

    @property
    def qualified(self) -> str:
        """``namespace.name``, as ``_commits`` names tables."""
        return f"{self.namespace}.{self.name}"

    def path(self, lakehouse: str) -> str:
        """The table's location below the lakehouse root."""
        return f"{lakehouse.rstrip('/')}/{path_segment(self.namespace)}/{path_segment(self.name)}"

    @classmethod
    def of(cls, schema: ValueSchema) -> TableRef:
        """The table a value schema's rows land in."""
        return cls(schema.namespace, schema.name)

    def check_name(self) -> None:
        """Raise when the lakehouse cannot hold a table of this name.

        Raises:
            TableNameError: The namespace is reserved, the name holds a dot, or a part is
                too long for a path segment (:func:`table_name_problem`).
        """
        problem = table_name_problem(self.namespace, self.name)
        if problem is not None:
            raise TableNameError(problem, table=self.qualified[:300])


@dataclass(frozen=True)
class TableInfo:
    """What the apply step needs to know of a Delta table.

    Attributes:
        ref: The table.
        path: Its location.
        keys: Primary key columns; empty for an append-only table.
        columns: Column name -> Spark type of the table as it now is, in table order.
        created: True when this writer created the table (then its version 0 holds no rows).
        tombstones: The location of its deletes' tombstones
            (:mod:`lakehouse_writer.rules.tombstones`); None: its deletes keep none.
        history: True for a history table (SCD type 2,
            :mod:`lakehouse_writer.tables.history`): a row per version of a key.
    """

    ref: TableRef
    path: str
    keys: tuple[str, ...]
    columns: dict[str, DataType] = field(hash=False)
    created: bool = False
    tombstones: str | None = None
    history: bool = False

    @property
    def append_only(self) -> bool:
        """True when the table has no primary key."""
        return not self.keys

    @functools.cached_property
    def _folded(self) -> dict[str, str]:
        return {name.casefold(): name for name in self.columns}

    def column(self, name: str) -> str:
        """The table's spelling of column ``name``: Delta matches names case-insensitively.

        A later schema may spell a column of the table in another case (``abc``, then
        ``ABC``): its values land in the table's column. ``name`` itself when the table has
        no such column.
        """
        return self._folded.get(name.casefold(), name)


def schema_fields(schema: ValueSchema) -> list[AvroField]:
    """Payload then technical fields (then a history table's): the table's columns."""
    history = HISTORY_FIELDS if schema.history else ()
    return [*schema.fields.values(), *TECHNICAL_FIELDS, *history]


def stats_columns(columns: Iterable[tuple[str, str]]) -> str:
    """The value of ``delta.dataSkippingStatsColumns`` for a table of ``columns``.

    ``columns``: (name, Spark type as ``simpleString``) in the table's order. The first
    :data:`MAX_STATS_COLUMNS` payload columns of a type Delta keeps statistics for (numbers,
    dates, timestamps, strings), then ``__change_time``.
    """
    technical = {f.name for f in TECHNICAL_FIELDS}
    eligible = [
        name
        for name, kind in columns
        if name not in technical and (kind in _STATS_TYPES or kind.startswith("decimal"))
    ]
    return ",".join(quote_name(name) for name in [*eligible[:MAX_STATS_COLUMNS], "__change_time"])


@functools.lru_cache(maxsize=1024)
def spark_type(ddl: str) -> DataType:
    """The Spark type of the DDL type text ``ddl`` (``decimal(15,2)``), parsed once a process.

    Spark parses DDL in the JVM, three py4j round trips a type: most of what checking an
    existing table's columns against its schema cost, for every table a writer's run touches
    (figures in ``docs/PERFORMANCE.md``). Shared between callers: not to be changed.
    """
    from pyspark.sql.types import _parse_datatype_string

    return _parse_datatype_string(ddl)


def table_properties(schema: ValueSchema, policy: ReaderPolicy = EVERY_FEATURE) -> dict[str, str]:
    """Table properties of a new table: the fixed features plus governance metadata.

    Args:
        schema: The table's value schema.
        policy: The features the tables' readers allow (deletion vectors or not).
    """
    props = dict(BASE_PROPERTIES)
    props.update(policy.creation_properties())
    props[STATS_COLUMNS_PROPERTY] = stats_columns(
        (f.name, spark_type(f.type.to_spark()).simpleString()) for f in schema_fields(schema)
    )
    if needs_column_mapping(f.name for f in schema_fields(schema)):
        props.update(COLUMN_MAPPING)
    raw = schema.to_avro_json()
    for key, prop in GOVERNANCE_PROPERTIES.items():
        if raw.get(key):
            props[prop] = str(raw[key])
    props[PRIMARY_KEYS_PROPERTY] = json.dumps(list(schema.pks))
    if schema.cluster_columns:
        props[CLUSTER_BY_PROPERTY] = json.dumps(list(schema.cluster_columns))
    if schema.history:
        props[HISTORY_PROPERTY] = schema.history
    if schema.foreign_keys:
        props["flow.foreign_keys"] = json.dumps([fk.to_json() for fk in schema.foreign_keys])
    if schema.column_classifications:
        props["flow.column_classifications"] = json.dumps(dict(schema.column_classifications))
    props["flow.source_namespace"] = schema.namespace
    props["flow.source_name"] = schema.name
    return props


class TableManager:
    """Creates tables on first sight and evolves them; remembers what it already checked.

    Args:
        spark: The session.
        lakehouse: Root path of the tables.
        policy: The reader features tables may have (``LakehouseSettings.reader_policy``):
            whether new tables get deletion vectors, and which features a table may gain;
            tables that exist keep what they have.
    """

    def __init__(
        self, spark: SparkSession, lakehouse: str, policy: ReaderPolicy = EVERY_FEATURE
    ) -> None:
        self._spark = spark
        self._lakehouse = lakehouse
        self._policy = policy
        self._checked: dict[tuple[TableRef, str], TableInfo] = {}
        self._created: set[TableRef] = set()
        self._lock = threading.Lock()  # guards the lock per table
        self._locks: dict[TableRef, threading.Lock] = {}

    def ensure(self, schema: ValueSchema) -> TableInfo:
        """Create the table of ``schema`` or evolve it to take the schema's rows.

        Raises:
            SchemaEvolutionError: The schema changes the key or a column incompatibly.
        """
        ref = TableRef.of(schema)
        ref.check_name()
        cache_key = (ref, schema.to_json())
        with self._lock_of(ref):  # other threads make tables too (create_missing, ensure_all)
            if cache_key not in self._checked:
                path = ref.path(self._lakehouse)
                if _is_delta(self._spark, path):
                    _evolve(self._spark, path, schema, ref, self._policy)
                else:
                    self._create(ref, path, schema)
                self._checked[cache_key] = self._info(ref, path)
            return self._checked[cache_key]

    def create_missing(self, schema: ValueSchema) -> bool:
        """Create the table of ``schema`` when there is none; an existing one is left as is.

        The writer calls it for the schemas it expects while the batch's scan job runs, so
        the creation (a Delta commit) is not on the batch's path; :meth:`ensure`
        then finds the table. Returns True when it created the table.
        """
        ref = TableRef.of(schema)
        if table_name_problem(ref.namespace, ref.name) is not None:
            return False  # its rows stop the table (ensure)
        try:
            _check_creation(schema, ref, self._policy)
        except SchemaEvolutionError:
            return False  # its rows stop the table (ensure)
        path = ref.path(self._lakehouse)
        with self._lock_of(ref):
            if ref in self._created or _is_delta(self._spark, path):
                return False
            self._create(ref, path, schema)
            self._checked[(ref, schema.to_json())] = self._info(ref, path)
            return True

    def ensure_all(self, schemas: Iterable[ValueSchema], applier: TableApplier) -> None:
        """:meth:`ensure` the tables of ``schemas`` at the same time, on ``applier``'s threads.

        A batch over many tables pays a table's creation (a Delta commit) or check once for
        them all rather than once each. A failure is only logged: the batch's own
        :meth:`ensure` of that table raises it again, and reports it.
        """
        for outcome in applier.map(lambda schema, _: self.ensure(schema), list(schemas)):
            if outcome.error is not None:
                log.debug(
                    "table not made ahead of its rows table=%s error=%s",
                    TableRef.of(outcome.item).qualified,
                    outcome.error,
                )

    def created_tables(self) -> list[TableRef]:
        """The tables this manager created (any thread, any path that asked it to)."""
        with self._lock:
            return list(self._created)

    def _lock_of(self, ref: TableRef) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(ref, threading.Lock())

    def _create(self, ref: TableRef, path: str, schema: ValueSchema) -> None:
        _check_creation(schema, ref, self._policy)
        _create(self._spark, path, schema, self._policy)
        with self._lock:
            self._created.add(ref)

    def _info(self, ref: TableRef, path: str) -> TableInfo:
        properties, struct = table_metadata(self._spark, path)
        keys = tuple(json.loads(properties.get(PRIMARY_KEYS_PROPERTY, "[]")))
        columns = {f.name: f.dataType for f in struct.fields}
        tombstones = ref.path(f"{self._lakehouse.rstrip('/')}/{TOMBSTONES}") if keys else None
        history = HISTORY_PROPERTY in properties
        return TableInfo(ref, path, keys, columns, ref in self._created, tombstones, history)


def jvm_delta_log(spark: SparkSession, path: str) -> Any:
    """The JVM's ``DeltaLog`` of the table at ``path``.

    Every commit of this session updates it; reading it takes milliseconds where Delta's
    Python API runs a Spark job.

    Raises:
        py4j.protocol.Py4JError: The class is not there (another Delta distribution).
    """
    jvm: Any = spark._jvm
    return jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)


def compute_state(spark: SparkSession, path: str) -> None:
    """Build the state of the table's latest snapshot known to this session, if not built.

    That is its files and transaction ids, rebuilt from the log (checkpoint and commits) by
    Spark jobs and cached with the snapshot: what a MERGE or DELETE reads before anything
    else, and what every commit makes stale.

    Raises:
        py4j.protocol.Py4JError: The class is not there (another Delta distribution), or the
            jobs failed.
    """
    jvm_delta_log(spark, path).unsafeVolatileSnapshot().computedState()


def _latest_snapshot(spark: SparkSession, path: str) -> Any:
    """The JVM snapshot of the table's latest version (version -1: no table there)."""
    return latest_snapshot(spark, jvm_delta_log(spark, path))


def no_data_files(spark: SparkSession, path: str) -> bool:
    """True when there is no table at ``path`` or its latest version has no data files.

    Either way it holds no rows. Read from the log and the version's checksum (``.crc``)
    through the JVM's ``DeltaLog``, without a Spark job. False when the table has files or
    no checksum; where that class is not there (another Delta distribution), True only when
    there is no table. On False the caller looks with a job.
    """
    from py4j.protocol import Py4JError

    try:
        snapshot = _latest_snapshot(spark, path)
        if int(snapshot.version()) < 0:
            return True
        checksum = snapshot.checksumOpt()
        return bool(checksum.isDefined()) and int(checksum.get().numFiles()) == 0
    except Py4JError:
        return not _is_delta(spark, path)


def table_metadata(spark: SparkSession, path: str) -> tuple[dict[str, str], StructType]:
    """The table's properties and schema (logical column names), as of its latest version.

    A table delta-rs reaches (local, Azure) is read by it: after a delta-rs commit there is no
    checksum file, and the JVM's ``DeltaLog`` would rebuild the snapshot's metadata from the
    log with a Spark job (figures: ``docs/PERFORMANCE.md``). Other tables, and one delta-rs
    cannot read, are read from the ``DeltaLog``; where that class is not there (another Delta
    distribution), from ``detail()`` and the read schema (a Spark job).
    """
    found = delta_rs_table_metadata(path)
    if found is not None:
        return found
    return jvm_table_metadata(spark, path)


def jvm_table_metadata(spark: SparkSession, path: str) -> tuple[dict[str, str], StructType]:
    """:func:`table_metadata` from the JVM's ``DeltaLog``, else ``detail()``."""
    from delta.tables import DeltaTable
    from py4j.protocol import Py4JError
    from pyspark.sql.types import StructType

    try:
        action = json.loads(_latest_snapshot(spark, path).metadata().json())["metaData"]
        schema = StructType.fromJson(json.loads(action["schemaString"]))
        return dict(action.get("configuration") or {}), schema  # one py4j call, not one a key
    except Py4JError:
        detail = DeltaTable.forPath(spark, path).detail().collect()[0]
        return dict(detail["properties"]), spark.read.format("delta").load(path).schema


def delta_rs_table_metadata(path: str) -> tuple[dict[str, str], StructType] | None:
    """:func:`table_metadata` by delta-rs; None where it cannot reach or read the table."""
    from deltalake.exceptions import DeltaError
    from pyspark.sql.types import StructType

    where = delta_rs_path(path)
    if where is None:
        return None
    try:
        table = where.open()
        configuration = dict(table.metadata().configuration)
        schema = StructType.fromJson(json.loads(table.schema().to_json()))
    except DeltaError as exc:  # a table feature it does not read, say
        log.debug("table metadata not read by delta-rs path=%s error=%s", path, exc)
        return None
    return configuration, schema


def _is_delta(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return bool(DeltaTable.isDeltaTable(spark, path))


def _check_creation(schema: ValueSchema, ref: TableRef, policy: ReaderPolicy) -> None:
    """Raise when a table of ``schema`` needs a reader feature its readers refuse.

    Raises:
        SchemaEvolutionError: A name needs column mapping, or a column is ``TIMESTAMP_NTZ``,
            and a reader of ``LAKEHOUSE_READERS`` cannot read that.
    """
    fields = schema_fields(schema)
    mapped = [f.name for f in fields if needs_column_mapping([f.name])]
    if mapped:
        policy.require(features.COLUMN_MAPPING, ref.qualified, columns=", ".join(mapped))
    _check_ntz(fields, ref, policy)


def _check_ntz(fields: Iterable[AvroField], ref: TableRef, policy: ReaderPolicy) -> None:
    ntz = [
        f.name for f in fields if spark_type(f.type.to_spark()).simpleString() == "timestamp_ntz"
    ]
    if ntz:
        policy.require(features.TIMESTAMP_NTZ, ref.qualified, columns=", ".join(ntz))


def _create(spark: SparkSession, path: str, schema: ValueSchema, policy: ReaderPolicy) -> None:
    from lakehouse_writer.tables.unborn import clear_unborn_log

    clear_unborn_log(spark, path)  # a creation killed before its first commit blocks Delta
    spark.sql(create_table_sql(path, schema, policy))
    log.info(
        "table created table=%s path=%s keys=%s deletion_vectors=%s cluster_by=%s",
        schema.name,
        path,
        list(schema.pks),
        policy.deletion_vectors,
        list(schema.cluster_columns),
    )


def create_table_sql(path: str, schema: ValueSchema, policy: ReaderPolicy = EVERY_FEATURE) -> str:
    """The ``CREATE TABLE IF NOT EXISTS`` of the table of ``schema`` at ``path``.

    The same commit as Delta's ``DeltaTable.createIfNotExists`` builder (schema, comments,
    properties, clustering, protocol), without the builder's closing ``DeltaTable.forPath``
    (docs/PERFORMANCE.md), and clustering columns of any name (the builder cannot parse
    ``REVENUE$``).
    """
    columns = ", ".join(
        f"{quote_name(item.name)} {item.type.to_spark()}"
        + ("" if item.nullable else " NOT NULL")
        + (f" COMMENT '{spark_sql_string(item.doc)}'" if item.doc else "")
        for item in schema_fields(schema)
    )
    cluster = (
        f" CLUSTER BY ({', '.join(quote_name(c) for c in schema.cluster_columns)})"
        if schema.cluster_columns
        else ""
    )
    comment = f" COMMENT '{spark_sql_string(schema.doc)}'" if schema.doc else ""
    properties = ", ".join(
        f"'{spark_sql_string(key)}' = '{spark_sql_string(value)}'"
        for key, value in table_properties(schema, policy).items()
    )
    return (
        f"CREATE TABLE IF NOT EXISTS delta.{quote_name(path)} ({columns}) USING delta"
        f"{cluster}{comment} TBLPROPERTIES ({properties})"
    )


def _evolve(
    spark: SparkSession, path: str, schema: ValueSchema, ref: TableRef, policy: ReaderPolicy
) -> None:
    properties, current = table_metadata(spark, path)
    _check_keys(properties, schema, ref)
    by_name = {f.name.casefold(): f for f in current.fields}
    target = f"delta.{quote_name(path)}"
    new_fields = [f for f in schema_fields(schema) if f.name.casefold() not in by_name]
    added = [f.name for f in new_fields]
    mapped = properties.get(COLUMN_MAPPING_MODE) == COLUMN_MAPPING[COLUMN_MAPPING_MODE]
    _check_ntz(new_fields, ref, policy)
    if needs_column_mapping(added) and not mapped:
        policy.require(features.COLUMN_MAPPING, ref.qualified, columns=", ".join(added))
        props = ", ".join(f"'{k}' = '{v}'" for k, v in COLUMN_MAPPING.items())
        spark.sql(f"ALTER TABLE {target} SET TBLPROPERTIES ({props})")
        log.info("column mapping turned on table=%s columns=%s", ref.qualified, added)
    columns = [(f.name, f.dataType.simpleString()) for f in current.fields]
    for item in schema_fields(schema):
        old = by_name.get(item.name.casefold())
        new_type = spark_type(item.type.to_spark())
        if old is None:
            _add_column(spark, target, item, ref)
            columns.append((item.name, new_type.simpleString()))
        else:
            _change_column(spark, target, old.name, old.dataType, new_type, ref, properties, policy)
            if not old.nullable and item.nullable:
                spark.sql(f"ALTER TABLE {target} ALTER COLUMN {quote_name(old.name)} DROP NOT NULL")
                log.info("column made nullable table=%s column=%s", ref.qualified, old.name)
    stats = stats_columns(columns)
    if added and properties.get(STATS_COLUMNS_PROPERTY, stats) != stats:  # a table of ours
        spark.sql(
            f"ALTER TABLE {target} SET TBLPROPERTIES "
            f"('{STATS_COLUMNS_PROPERTY}' = '{spark_sql_string(stats)}')"
        )
    _recluster(spark, target, properties, schema, ref)


def _recluster(
    spark: SparkSession, target: str, properties: dict[str, str], schema: ValueSchema, ref: TableRef
) -> None:
    """Change the table's clustering columns when the schema's ``clusterBy`` changed.

    Files already written keep their layout until the next OPTIMIZE (``lakehouse-writer
    maintain``) clusters them by the new columns; nothing is rewritten here.
    """
    wanted = list(schema.cluster_columns)
    if json.loads(properties.get(CLUSTER_BY_PROPERTY, "[]")) == wanted:
        return
    columns = f"({', '.join(quote_name(c) for c in wanted)})" if wanted else "NONE"
    spark.sql(f"ALTER TABLE {target} CLUSTER BY {columns}")
    spark.sql(
        f"ALTER TABLE {target} SET TBLPROPERTIES "
        f"('{CLUSTER_BY_PROPERTY}' = '{spark_sql_string(json.dumps(wanted))}')"
    )
    log.info("clustering changed table=%s cluster_by=%s", ref.qualified, wanted)


def _check_keys(properties: dict[str, str], schema: ValueSchema, ref: TableRef) -> None:
    stored = json.loads(properties.get(PRIMARY_KEYS_PROPERTY, "[]"))
    if [k.casefold() for k in stored] != [k.casefold() for k in schema.pks]:  # Delta's names
        raise SchemaEvolutionError(
            "the primary key changed; a Delta table keeps its key: reload into a new table",
            table=ref.qualified,
            stored_keys=stored,
            new_keys=list(schema.pks),
        )
    stored_history = properties.get(HISTORY_PROPERTY)
    if stored_history != schema.history:
        raise SchemaEvolutionError(
            "the table's history changed; a Delta table keeps the history it was created with: "
            "reload into a new table",
            table=ref.qualified,
            stored_history=stored_history,
            new_history=schema.history,
        )


def _add_column(spark: SparkSession, target: str, item: AvroField, ref: TableRef) -> None:
    comment = f" COMMENT '{spark_sql_string(item.doc)}'" if item.doc else ""
    column = f"{quote_name(item.name)} {item.type.to_spark()}{comment}"
    spark.sql(f"ALTER TABLE {target} ADD COLUMNS ({column})")
    log.info(
        "column added table=%s column=%s type=%s", ref.qualified, item.name, item.type.to_spark()
    )


def _change_column(
    spark: SparkSession,
    target: str,
    name: str,
    old: DataType,
    new: DataType,
    ref: TableRef,
    properties: dict[str, str],
    policy: ReaderPolicy,
) -> None:
    if old == new or can_widen(new, old):
        return  # the table already holds every value of the new type
    if not can_widen(old, new):
        raise SchemaEvolutionError(
            "incompatible column type change (only widening is allowed: "
            "byte<short<int<long, float<double, larger decimals)",
            table=ref.qualified,
            column=name,
            table_type=old.simpleString(),
            new_type=new.simpleString(),
        )
    line = current_line()
    if not widens(old.simpleString(), new.simpleString()):
        raise SchemaEvolutionError(
            f"Delta {line.delta} (the Spark {line.spark} line) cannot widen this column: its "
            f"{line.type_widening} feature widens byte<short<int only; reload into a new "
            "table, or run the writer on a newer line",
            table=ref.qualified,
            column=name,
            table_type=old.simpleString(),
            new_type=new.simpleString(),
        )
    if properties.get(TYPE_WIDENING) != "true":  # the table's first widening
        policy.require(
            line.type_widening,
            ref.qualified,
            column=name,
            table_type=old.simpleString(),
            new_type=new.simpleString(),
        )
        spark.sql(f"ALTER TABLE {target} SET TBLPROPERTIES ('{TYPE_WIDENING}' = 'true')")
        properties[TYPE_WIDENING] = "true"
        log.info("type widening turned on table=%s column=%s", ref.qualified, name)
    spark.sql(f"ALTER TABLE {target} ALTER COLUMN {quote_name(name)} TYPE {new.simpleString()}")
    log.info(
        "column widened table=%s column=%s from=%s to=%s",
        ref.qualified,
        name,
        old.simpleString(),
        new.simpleString(),
    )


_INTEGRAL = ["tinyint", "smallint", "int", "bigint"]
_INTEGRAL_DIGITS = {"tinyint": 3, "smallint": 5, "int": 10, "bigint": 20}


def can_widen(old: DataType, new: DataType) -> bool:
    """True when Delta type widening turns ``old`` into ``new`` without losing values."""
    from pyspark.sql.types import DecimalType

    a, b = old.simpleString(), new.simpleString()
    if a in _INTEGRAL and b in _INTEGRAL:
        return _INTEGRAL.index(a) <= _INTEGRAL.index(b)
    if (a, b) in {("float", "double"), ("date", "timestamp_ntz")}:
        return True
    if isinstance(new, DecimalType):
        if isinstance(old, DecimalType):
            return new.scale >= old.scale and (
                new.precision - new.scale >= old.precision - old.scale
            )
        if a in _INTEGRAL:
            return new.scale == 0 and new.precision >= _INTEGRAL_DIGITS[a]
    return a == b


def spark_sql_string(text: str) -> str:
    r"""``text`` as the body of a SQL string literal.

    ``$`` goes as the escape ``\u0024``: Spark substitutes ``${...}`` in a statement's text
    before it parses it, so a comment holding ``${name}`` would be stored with the value of
    the setting ``name``, or with nothing.
    """
    return text.replace("\\", "\\\\").replace("'", "\\'").replace("$", "\\u0024")
