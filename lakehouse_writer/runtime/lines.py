"""The Spark lines the writer runs on, and the one place that knows how they differ.

One writer for three lines (``docs/INSTALLING.md``): Spark 3.5 / Delta 3.2 / Scala 2.12
(Microsoft Fabric runtime 1.3), Spark 4.0 / Delta 4.0 / Scala 2.13 (Fabric runtime 2.0) and
Spark 4.1 / Delta 4.4 / Scala 2.13 (Databricks Runtime 18; the default here). The running line
is read from ``pyspark.__version__`` (:func:`current_line`); its :class:`SparkLine` says which
connector jars match it (:mod:`lakehouse_writer.runtime.jars`), which Delta table feature and
which type changes a widened column gets, and which Python and JVM calls it has. Code elsewhere
calls the functions here instead of testing versions itself:

- Python API: :func:`to_arrow` (``toArrow`` is 4.0+), :func:`struct_from_ddl`
  (``StructType.fromDDL`` is 4.0+), :func:`inheritable` (3.5's ``inheritable_thread_target``
  takes no session).
- Scala collections (Scala 2.12 has no ``scala.jdk.javaapi.CollectionConverters``, nor
  ``Seq.appended``/``addOne``): :func:`seq_as_java`, :func:`seq_appended`, :func:`buffer_add`.
- Spark internals (``org.apache.spark.sql.classic`` is 4.0+): :func:`dataset_of_rows`.
- Delta internals (their signatures differ between Delta 3.2, 4.0 and 4.4):
  :func:`latest_snapshot`, :func:`checkpoint_and_clean_up`, :func:`write_operation`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from lakehouse_writer.errors import LakehouseWriterError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "DEFAULT_LINE",
    "LINES",
    "Coordinate",
    "SparkLine",
    "UnsupportedSparkLine",
    "buffer_add",
    "checkpoint_and_clean_up",
    "current_line",
    "dataframe_from_arrow",
    "dataset_of_rows",
    "hadoop_version",
    "inheritable",
    "latest_snapshot",
    "line_of",
    "progress_dict",
    "seq_appended",
    "seq_as_java",
    "spark_jar_folders",
    "struct_from_ddl",
    "to_arrow",
    "type_widening_feature",
    "widens",
    "write_operation",
]

log = logging.getLogger(__name__)

Coordinate = tuple[str, str, str]  # (group, artifact, version) on Maven Central
T = TypeVar("T")


class UnsupportedSparkLine(LakehouseWriterError):
    """The running pyspark is of no line the writer supports."""


@dataclass(frozen=True)
class SparkLine:
    """One Spark line: what runs it, the jars that match it, and what it can do.

    Attributes:
        spark: ``major.minor`` of Spark (``"3.5"``).
        scala: Scala binary version of its jars (``"2.12"``).
        delta: Delta Lake version of its jars and of ``delta-spark`` on PyPI.
        hadoop: The Hadoop pyspark's wheel ships (``hadoop-client-api-<v>.jar``); the one
            actually found in the running pyspark wins (:func:`hadoop_version`).
        python: Python versions it supports, ``(min, max)`` as ``(major, minor)``.
        java: Java major versions it runs on.
        platforms: Managed runtimes that run this line.
        connectors: The Kafka source, Avro functions and Delta jars, each without
            transitive dependencies (pyspark ships the rest).
        type_widening: The Delta table feature a widened column needs on this line:
            ``typeWidening-preview`` on Delta 3.2, ``typeWidening`` from 4.0 on (a table
            with the stable feature is unreadable for Delta 3.2).
        widenings: The column type changes Delta's type widening makes on this line, as
            (from, to) of Spark's simple type names; a decimal's precision is ``decimal``.
        has_to_arrow: ``DataFrame.toArrow()`` exists (pyspark 4.0+).
    """

    spark: str
    scala: str
    delta: str
    hadoop: str
    python: tuple[tuple[int, int], tuple[int, int]]
    java: tuple[int, ...]
    platforms: tuple[str, ...]
    connectors: tuple[Coordinate, ...]
    type_widening: str
    widenings: frozenset[tuple[str, str]]
    has_to_arrow: bool

    @property
    def delta_artifact(self) -> str:
        """The artifact name of Delta's Spark jar (``delta-spark_2.12``)."""
        return next(a for g, a, _ in self.connectors if g == "io.delta" and "spark" in a)

    @property
    def connector_artifacts(self) -> tuple[str, ...]:
        """Artifact names (as a jar file's name starts) a driver needs for the writer."""
        return (
            "spark-sql-kafka",
            f"spark-avro_{self.scala}",
            self.delta_artifact,
        )


def _connectors(
    scala: str,
    kafka: tuple[str, str, str, str],
    avro: str,
    delta: tuple[str, str],
) -> tuple[Coordinate, ...]:
    """The connector coordinates of one line.

    Args:
        scala: The Scala binary version.
        kafka: Versions of spark-sql-kafka-0-10, spark-token-provider-kafka-0-10, and of the
            kafka-clients and commons-pool2 it was built with (Spark's parent pom of that
            version: ``kafka.version``, ``commons-pool2.version``).
        avro: Version of spark-avro.
        delta: Artifact and version of Delta's Spark jar (delta-storage has the version).
    """
    source, token, clients, pool = kafka
    return (
        ("org.apache.spark", f"spark-sql-kafka-0-10_{scala}", source),
        ("org.apache.spark", f"spark-token-provider-kafka-0-10_{scala}", token),
        ("org.apache.kafka", "kafka-clients", clients),
        ("org.apache.commons", "commons-pool2", pool),
        ("org.apache.spark", f"spark-avro_{scala}", avro),
        ("io.delta", delta[0], delta[1]),
        ("io.delta", "delta-storage", delta[1]),
    )


# Delta 3.2's typeWidening-preview widens byte<short<int only (ALTER COLUMN ... TYPE refuses
# int to bigint, float to double and decimals there: DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP).
_PREVIEW_WIDENINGS = frozenset({("tinyint", "smallint"), ("tinyint", "int"), ("smallint", "int")})
# Delta 4.0+: integers up to bigint, float to double, integers and decimals to wider decimals
# (date to timestamp_ntz too, but only on a table with the timestampNtz feature: not taken).
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
_STABLE_WIDENINGS = frozenset(
    {(a, b) for i, a in enumerate(_INTEGRAL) for b in _INTEGRAL[i + 1 :]}
    | {("float", "double"), ("decimal", "decimal")}
    | {(a, "decimal") for a in _INTEGRAL}
)

# Each line's jars are the newest of its Spark patch version or below that Maven Central (as
# reached from here) serves: it lacks spark-sql-kafka-0-10_2.12 3.5.4-3.5.6 and
# spark-token-provider-kafka-0-10_2.13 4.0.1, say. Connectors of an older patch of the same
# line run on a newer Spark.
LINES: dict[str, SparkLine] = {
    # Fabric runtime 1.3 runs Spark 3.5.5, Delta 3.2, Scala 2.12.17, Java 11, Python 3.11.
    "3.5": SparkLine(
        spark="3.5",
        scala="2.12",
        delta="3.2.1",
        hadoop="3.3.4",
        python=((3, 8), (3, 11)),
        java=(8, 11, 17),
        platforms=("Microsoft Fabric runtime 1.3",),
        connectors=_connectors(
            "2.12", ("3.5.3", "3.5.5", "3.4.1", "2.11.1"), "3.5.5", ("delta-spark_2.12", "3.2.1")
        ),
        type_widening="typeWidening-preview",
        widenings=_PREVIEW_WIDENINGS,
        has_to_arrow=False,
    ),
    # Fabric runtime 2.0 runs Spark 4.0.0, Delta 4.0, Scala 2.13, Java 21, Python 3.12.
    "4.0": SparkLine(
        spark="4.0",
        scala="2.13",
        delta="4.0.1",
        hadoop="3.4.1",
        python=((3, 9), (3, 13)),
        java=(17, 21),
        platforms=("Microsoft Fabric runtime 2.0",),
        connectors=_connectors(
            "2.13", ("4.0.1", "4.0.0", "3.9.1", "2.12.0"), "4.0.1", ("delta-spark_2.13", "4.0.1")
        ),
        type_widening="typeWidening",
        widenings=_STABLE_WIDENINGS,
        has_to_arrow=True,
    ),
    # Databricks Runtime 18. The Kafka source is 4.1.3, as pyspark: 4.1.1's fails a query
    # restarted on a batch it had planned but not committed (KafkaMicroBatchStream.metrics:
    # Some(null), a NullPointerException). spark-avro and spark-token-provider-kafka stop at
    # 4.1.1 on Maven Central: same 4.1 line. Delta's artifact carries the Spark line.
    "4.1": SparkLine(
        spark="4.1",
        scala="2.13",
        delta="4.4.0",
        hadoop="3.4.2",
        python=((3, 10), (3, 14)),
        java=(17, 21),
        platforms=("Databricks Runtime 18",),
        connectors=_connectors(
            "2.13",
            ("4.1.3", "4.1.1", "3.9.1", "2.12.1"),
            "4.1.1",
            ("delta-spark_4.1_2.13", "4.4.0"),
        ),
        type_widening="typeWidening",
        widenings=_STABLE_WIDENINGS,
        has_to_arrow=True,
    ),
}
DEFAULT_LINE = "4.1"


def line_of(pyspark_version: str) -> SparkLine:
    """The line of a pyspark version (``"3.5.5"`` -> the 3.5 line).

    Raises:
        UnsupportedSparkLine: No supported line has that ``major.minor``.
    """
    found = re.match(r"(\d+)\.(\d+)", pyspark_version)
    key = f"{found.group(1)}.{found.group(2)}" if found else pyspark_version
    if key not in LINES:
        raise UnsupportedSparkLine(
            f"pyspark {pyspark_version} is of no Spark line the lakehouse writer supports "
            f"({', '.join(sorted(LINES))}); install one of them (docs/INSTALLING.md)",
            pyspark=pyspark_version,
        )
    return LINES[key]


@functools.cache
def current_line() -> SparkLine:
    """The line of the installed pyspark; the default line when pyspark is not installed.

    Raises:
        UnsupportedSparkLine: The installed pyspark is of no supported line.
    """
    try:
        import pyspark
    except ImportError:  # the producer side has no Spark; its jars follow the default line
        return LINES[DEFAULT_LINE]
    return line_of(pyspark.__version__)


def hadoop_version(line: SparkLine | None = None, jar_folders: list[Path] | None = None) -> str:
    """The Hadoop of the running Spark: the version of its ``hadoop-client-api`` jar.

    Args:
        line: The line whose Hadoop to assume when no jar tells; None: :func:`current_line`.
        jar_folders: Spark's ``jars/`` folders; None: ``SPARK_HOME``'s and pyspark's.
    """
    folders = spark_jar_folders() if jar_folders is None else jar_folders
    for folder in folders:
        for jar in sorted(folder.glob("hadoop-client-api-*.jar")):
            return jar.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    return (line or current_line()).hadoop


def spark_jar_folders() -> list[Path]:
    """The Spark distribution's ``jars/`` folders: ``SPARK_HOME``'s, then pyspark's."""
    folders = []
    home = os.environ.get("SPARK_HOME")
    if home:
        folders.append(Path(home) / "jars")
    try:
        import pyspark

        folders.append(Path(pyspark.__file__).parent / "jars")
    except ImportError:
        pass
    return [f for f in folders if f.is_dir()]


def type_widening_feature(line: SparkLine | None = None) -> str:
    """The Delta table feature a widened column needs on ``line`` (None: the running one)."""
    return (line or current_line()).type_widening


def to_arrow(df: DataFrame) -> pa.Table:
    """``df``'s rows as one Arrow table, collected to the driver.

    ``DataFrame.toArrow()`` where pyspark has it (4.0+); on 3.5 the same through the batches
    Spark's Arrow collection returns (``_collect_as_arrow``, what 4.0's ``toArrow`` calls),
    cast to the schema ``to_arrow_schema`` gives (an empty result has no batches).
    """
    if hasattr(df, "toArrow"):
        return df.toArrow()
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(df.schema)
    batches: list[Any] = df._collect_as_arrow()  # type: ignore[operator]
    if not batches:
        return schema.empty_table()
    return pa.Table.from_batches(batches).cast(schema)


def widens(old: str, new: str, line: SparkLine | None = None) -> bool:
    """True when Delta's type widening on ``line`` changes a column of ``old`` to ``new``.

    Args:
        old: Spark's simple type name of the column (``int``, ``decimal(10,2)``).
        new: The type it would become.
        line: None: the running line.
    """
    kind = (old.split("(")[0], new.split("(")[0])
    return kind in (line or current_line()).widenings


def progress_dict(progress: Any) -> dict[str, Any]:
    """A streaming query's progress report as the JSON Spark wrote, parsed.

    pyspark 4's ``StreamingQueryProgress`` keeps that JSON in ``json`` (its Kafka offsets
    otherwise are a Python repr); 3.5's ``recentProgress`` already gives the parsed dicts.
    """
    if current_line().spark == "3.5":  # 4's report is a dict too, with offsets as a repr
        return dict(progress)
    parsed: dict[str, Any] = json.loads(progress.json)
    return parsed


def struct_from_ddl(ddl: str) -> StructType:
    """``StructType.fromDDL(ddl)`` (pyspark 4.0+); on 3.5 Spark's DDL parser, as it does.

    Needs a running SparkContext on 3.5 (the parser is the JVM's).
    """
    from pyspark.sql.types import StructType, _parse_datatype_string

    parse = getattr(StructType, "fromDDL", _parse_datatype_string)
    parsed = parse(ddl)
    assert isinstance(parsed, StructType), ddl
    return parsed


def inheritable(spark: SparkSession, target: Callable[..., T]) -> Callable[..., T]:
    """``target`` wrapped to run with this thread's Spark job properties in another thread.

    pyspark 4's ``inheritable_thread_target(session)`` takes the session's tags too; 3.5's
    takes the function itself.
    """
    from pyspark import inheritable_thread_target

    if current_line().spark == "3.5":
        return inheritable_thread_target(target)  # type: ignore[no-any-return]
    return inheritable_thread_target(spark)(target)  # type: ignore[no-any-return]


# -- Scala collections --------------------------------------------------------------------


def seq_as_java(spark: SparkSession, seq: Any) -> Any:
    """A Scala ``Seq`` as a ``java.util.List`` py4j iterates (Scala 2.12 and 2.13)."""
    jvm = _jvm(spark)
    if current_line().scala == "2.12":
        return jvm.scala.collection.JavaConverters.seqAsJavaList(seq)
    return jvm.scala.jdk.javaapi.CollectionConverters.asJava(seq)


def seq_appended(spark: SparkSession, seq: Any, item: Any) -> Any:
    """A Scala ``Seq`` of ``seq``'s elements and then ``item`` (2.13's ``seq.appended``)."""
    if current_line().scala != "2.12":
        return seq.appended(item)
    jvm = _jvm(spark)
    items = jvm.java.util.ArrayList(jvm.scala.collection.JavaConverters.seqAsJavaList(seq))
    items.add(item)
    return jvm.scala.collection.JavaConverters.asScalaBuffer(items).toList()


def buffer_add(buffer: Any, item: Any) -> None:
    """Add ``item`` to a Scala ``mutable.Buffer`` (``+=``: 2.13 calls it ``addOne`` too)."""
    getattr(buffer, "$plus$eq")(item)


# -- Spark and Delta internals ------------------------------------------------------------


def dataset_of_rows(spark: SparkSession, plan: Any) -> Any:
    """The JVM ``Dataset`` of a logical ``plan`` in ``spark`` (``Dataset.ofRows``).

    Spark 4 moved the classic ``Dataset`` to ``org.apache.spark.sql.classic``.
    """
    jvm = _jvm(spark)
    package = (
        jvm.org.apache.spark.sql
        if current_line().spark == "3.5"
        else jvm.org.apache.spark.sql.classic
    )
    return package.Dataset.ofRows(spark._jsparkSession, plan)  # type: ignore[attr-defined]


def latest_snapshot(spark: SparkSession, delta_log: Any) -> Any:
    """``delta_log``'s snapshot of the table's latest version (``DeltaLog.update``).

    Delta 3.2: ``update(stalenessAcceptable, catalogTableOpt)``; 4.x adds the commit
    coordinator's ``tableIdentifierOpt``.
    """
    empty = _jvm(spark).scala.Option.empty()
    if current_line().spark == "3.5":
        return delta_log.update(False, empty)
    return delta_log.update(False, empty, empty)


def checkpoint_and_clean_up(spark: SparkSession, delta_log: Any, snapshot: Any) -> None:
    """Write a checkpoint of ``snapshot`` and clean up expired log files.

    Delta 4.x takes the catalog table too (``Option.empty()`` here); 3.2 does not.
    """
    if current_line().spark == "3.5":
        delta_log.checkpointAndCleanUpDeltaLog(snapshot)
    else:
        delta_log.checkpointAndCleanUpDeltaLog(snapshot, _jvm(spark).scala.Option.empty())


def write_operation(spark: SparkSession, partition_columns: Any) -> Any:
    """Delta's ``DeltaOperations.Write`` of an append, partitioned by ``partition_columns``.

    Its constructor has 4 parameters in Delta 3.2 and 4.0 (mode, partitionBy, predicate,
    userMetadata), 9 in 4.4; the optional ones are left empty. The count is read from the
    class, so a Delta of another patch level works too.
    """
    jvm = _jvm(spark)
    write = getattr(jvm.org.apache.spark.sql.delta, "DeltaOperations$Write")
    empty = jvm.scala.Option.empty()
    optional = [empty] * (_write_parameters(spark) - 2)
    return write(
        jvm.org.apache.spark.sql.SaveMode.Append, jvm.scala.Some(partition_columns), *optional
    )


def _write_parameters(spark: SparkSession) -> int:
    """The parameter count of ``DeltaOperations.Write``'s constructor in this JVM."""
    utils = _jvm(spark).org.apache.spark.util.Utils
    found = utils.classForName("org.apache.spark.sql.delta.DeltaOperations$Write", True, False)
    return max(int(c.getParameterCount()) for c in found.getConstructors())


def _jvm(spark: SparkSession) -> Any:
    return spark._jvm  # type: ignore[attr-defined]  # None only on Spark Connect: refused


def dataframe_from_arrow(
    spark: SparkSession, table: pa.Table, schema: StructType | None = None
) -> DataFrame:
    """A DataFrame of ``table``'s rows (``schema``, else the table's own as Spark types).

    ``createDataFrame`` takes an Arrow table from pyspark 4.0 on. On 3.5 the batches go to the
    JVM the way 3.5's ``createDataFrame`` of pandas with Arrow does (an Arrow stream through
    ``PythonSQLUtils.toDataFrame``), without pandas and without a Python row per row.
    """
    if current_line().has_to_arrow:
        return spark.createDataFrame(table, schema)  # type: ignore[arg-type]
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql.pandas.serializers import ArrowStreamSerializer
    from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

    schema = schema or from_arrow_schema(table.schema)
    wanted = to_arrow_schema(schema)
    columns = [column.cast(f.type) for column, f in zip(table.columns, wanted, strict=True)]
    batches = pa.Table.from_arrays(columns, schema=wanted).to_batches()
    jvm = _jvm(spark)
    stream = spark.sparkContext._serialize_to_jvm(  # type: ignore[attr-defined]
        batches,
        ArrowStreamSerializer(),
        jvm.PythonSQLUtils.readArrowStreamFromFile,
        jvm.ArrowIteratorServer,
    )
    jdf = jvm.PythonSQLUtils.toDataFrame(stream, schema.json(), spark._jsparkSession)  # type: ignore[attr-defined]
    return DataFrame(jdf, spark)
