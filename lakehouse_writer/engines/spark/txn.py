"""Idempotent Delta writes: a replayed micro-batch changes nothing.

Delta skips a commit whose (``txnAppId``, ``txnVersion``) it already holds. Appends take them as
writer options; MERGE/DELETE/UPDATE read them from session confs, which stay set until cleared
and would make the next, different write look like a replay — so :func:`delta_txn` always
clears them again.

The ids themselves (app id per table, a version per write of a batch) are
:mod:`lakehouse_writer.engines.ids`.

Appends go through :func:`append`. Delta 4.4 looks a ``txnVersion`` up in the snapshot's
*computed state*: two Spark jobs that rebuild the table's state from its log (checkpoint and
commits) after every commit, although the commit's checksum file (``.crc``) already lists the
table's transaction ids. That doubled the cost of each small append (0.81 s against 0.27 s for
three rows, measured). :func:`append` reads the ids from the checksum, writes the files through
Delta's ``OptimisticTransaction`` and commits them with their ``SetTransaction`` in one commit —
what Delta's own append does, without the lookup.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from lakehouse_writer.runtime import lines

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


@contextmanager
def delta_txn(spark: SparkSession, app_id: str, version: int) -> Iterator[None]:
    """Run MERGE/DELETE/UPDATE statements inside as (app_id, version); clear the confs after."""
    spark.conf.set(TXN_APP_ID, app_id)
    spark.conf.set(TXN_VERSION, str(version))
    try:
        yield
    finally:
        spark.conf.unset(TXN_APP_ID)
        spark.conf.unset(TXN_VERSION)


def append(
    df: DataFrame,
    path: str,
    app_id: str,
    version: int,
    merge_schema: bool = False,
    check: Callable[[], bool] | None = None,
) -> bool:
    """Append ``df`` to the Delta table at ``path`` once as (``app_id``, ``version``).

    A replay (the table already holds ``version`` or a later one of ``app_id``) writes nothing.
    When the table exists and ``df`` has its columns (names and types, in order), the files are
    written and committed through Delta's transaction (see the module docstring). Otherwise —
    the first write creates the table, new columns (``merge_schema``), or a Delta whose
    internal classes differ from delta-spark 4.4's — Delta's own append does it, with the
    ``txnAppId``/``txnVersion`` options.

    ``check``, when given, is a condition of the append: nothing is written unless it
    returns True. It runs before the files are written, not beside them: it reads the same
    rows, and Spark 4.0 cannot plan two queries over one ``from_avro`` at once (the
    expression's options map is built through a builder the copies share; a race failed a
    batch with ``DUPLICATED_MAP_KEY``).

    Returns:
        False when ``check`` returned False (nothing appended), else True.
    """
    done = append_in_transaction(df, path, app_id, version, check)
    if done is not None:
        return done
    if check is not None and not check():
        return False
    writer = (
        df.write.format("delta")
        .mode("append")
        .option("txnAppId", app_id)
        .option("txnVersion", version)
    )
    if merge_schema:
        writer = writer.option("mergeSchema", "true")
    writer.save(path)
    return True


def append_in_transaction(
    df: DataFrame,
    path: str,
    app_id: str,
    version: int,
    check: Callable[[], bool] | None = None,
) -> bool | None:
    """:func:`append` through ``OptimisticTransaction``; None when that does not apply.

    It does not apply (and does nothing) when the table does not exist, ``df``'s columns are
    not the table's, or Delta's internal classes differ. Returns what :func:`append` does.
    """
    pending = PendingAppend.begin(df.sparkSession, path, app_id, version, df.schema)
    if pending is None:
        return None
    if pending.replayed:
        return True
    if check is not None and not check():
        return False
    pending.write(df)
    pending.commit()
    return True


class PendingAppend:
    """An append through Delta's ``OptimisticTransaction``: files written, then committed.

    :meth:`begin` opens it; :meth:`write` writes the files (a Spark job) without committing
    them; :meth:`commit` commits them with the ``SetTransaction`` of (``app_id``,
    ``version``) in one commit, as Delta's own append does; :meth:`discard` deletes them
    instead. Between write and commit the caller may decide on anything it learnt from the
    write (:mod:`lakehouse_writer.engines.spark.reload`).
    """

    def __init__(
        self,
        spark: SparkSession,
        path: str,
        app_id: str,
        version: int,
        delta_log: Any,
        transaction: Any,
        done: int,
    ) -> None:
        self._spark = spark
        self.path = path
        self.app_id = app_id
        self.version = version
        self._log = delta_log
        self._transaction = transaction
        self.replayed = done >= version  # the table holds this version of app_id already
        self._files: Any = None

    @classmethod
    def begin(
        cls, spark: SparkSession, path: str, app_id: str, version: int, schema: StructType
    ) -> PendingAppend | None:
        """Open an append of rows of ``schema``; None when it does not apply.

        It does not apply when the table does not exist, ``schema``'s columns are not the
        table's, or Delta's internal classes differ (then :func:`append` uses Delta's
        writer). A replay (:attr:`replayed`) is logged and writes nothing.
        """
        from py4j.protocol import Py4JError, Py4JJavaError
        from pyspark.sql.types import StructType

        from lakehouse_writer.tables.manager import jvm_delta_log

        try:
            delta_log = jvm_delta_log(spark, path)
            if not delta_log.tableExists():
                return None
            transaction = delta_log.startTransaction()
            snapshot = transaction.snapshot()
            if snapshot.version() < 0:  # deleted since this JVM cached its log (a rebuild's side)
                return None
            table_schema = StructType.fromJson(json.loads(snapshot.metadata().schemaString()))
            if not same_columns(schema, table_schema):
                return None
            done = _txn_version(spark, transaction, snapshot, app_id)
        except Py4JJavaError:
            raise
        except Py4JError as exc:  # another Delta: its internal classes or methods differ
            log.debug("append path=%s through Delta's writer: %s", path, exc)
            return None
        pending = cls(spark, path, app_id, version, delta_log, transaction, done)
        if pending.replayed:
            log.info(
                "append skipped path=%s app_id=%s version=%d: already committed (replay)",
                path,
                app_id,
                version,
            )
        else:
            lines.buffer_add(
                transaction.readTxn(), app_id
            )  # a concurrent commit of the app id conflicts
        return pending

    def write(self, df: DataFrame) -> None:
        """Write ``df``'s rows as the table's data files, not committed (one Spark job)."""
        assert not self.replayed and self._files is None
        self._files = self._transaction.writeFiles(df._jdf)

    def file_paths(self) -> list[str]:
        """The absolute paths of the written files."""
        return [str(p) for p in self._paths()]

    def physical_names(self) -> dict[str, str]:
        """Column name -> its name in the data files (they differ under column mapping)."""
        schema = json.loads(self._transaction.snapshot().metadata().schemaString())
        return {
            f["name"]: f.get("metadata", {}).get("delta.columnMapping.physicalName", f["name"])
            for f in schema["fields"]
        }

    def commit(self) -> int:
        """Commit the written files with the ``SetTransaction``; returns the table version."""
        jvm: Any = self._spark._jvm
        delta = jvm.org.apache.spark.sql.delta
        snapshot = self._transaction.snapshot()
        now = jvm.scala.Some(jvm.java.lang.Long.valueOf(int(time.time() * 1000)))
        set_txn = delta.actions.SetTransaction(self.app_id, self.version, now)
        partitioned_by = snapshot.metadata().partitionColumns()  # as Delta's
        operation = lines.write_operation(self._spark, partitioned_by)
        actions = lines.seq_appended(self._spark, self._files, set_txn)
        version = int(self._transaction.commit(actions, operation))
        self._files = None  # committed: the table's files now, never discarded
        return version

    def discard(self) -> None:
        """Delete the written files (nothing refers to them).

        Best effort: a file left behind is not part of the table, and ``VACUUM`` removes it.
        """
        from py4j.protocol import Py4JError

        if self._files is None:
            return
        conf = self._spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
        try:
            for target in self._paths():
                target.getFileSystem(conf).delete(target, False)
        except Py4JError as exc:
            log.warning(
                "files of an append not committed left for VACUUM path=%s error=%s", self.path, exc
            )
        self._files = None

    def _paths(self) -> list[Any]:
        jvm: Any = self._spark._jvm
        base = self._log.dataPath().toString()
        operations = jvm.org.apache.spark.sql.delta.util.DeltaFileOperations
        added = lines.seq_as_java(self._spark, self._files)
        return [operations.absolutePath(base, action.path()) for action in added]


def _txn_version(spark: SparkSession, transaction: Any, snapshot: Any, app_id: str) -> int:
    """The last committed version of ``app_id`` (-1: none), from the checksum when it has them."""
    checksum = snapshot.checksumOpt()
    known = checksum.get().setTransactions() if checksum.isDefined() else checksum
    if not known.isDefined():  # no checksum, or too many ids for it: Delta's lookup
        return int(transaction.txnVersion(app_id))
    ids = lines.seq_as_java(spark, known.get())
    return int(max((t.version() for t in ids if t.appId() == app_id), default=-1))


def same_columns(a: StructType, b: StructType) -> bool:
    """True when both have the same column names and types, in order (nullability aside)."""
    return [(f.name, f.dataType.simpleString()) for f in a.fields] == [
        (f.name, f.dataType.simpleString()) for f in b.fields
    ]
