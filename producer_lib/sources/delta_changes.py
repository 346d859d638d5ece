"""Change streams of Delta tables: the rows a table's commits changed since a saved version.

The lakehouse writer turns the Change Data Feed on for every table it creates. This module
reads that feed with delta-rs (``deltalake``, no Spark) and stages it in the flow's DuckDB,
so a flow can derive its own change rows from the changes of its input tables::

    since = (self.get_delta_pointer() or {})["orders"]        # last version already consumed
    changes = await load_changes(reader, "orders_changes", "/lake/tpch/orders", since)
    ...  # SQL on orders_changes: row images, _change_type, _commit_version, _commit_timestamp
    self.set_delta_pointer({"orders": changes.until})        # moves with the commit only
    producer.commit()

Each staged row is one row image of the table's columns plus:

- ``_change_type``: ``insert``, ``update_preimage``, ``update_postimage`` or ``delete``;
- ``_commit_version``: the Delta version (BIGINT) of the commit that made the change;
- ``_commit_timestamp``: that commit's time (TIMESTAMP WITH TIME ZONE, UTC).

The position is the last Delta version the flow consumed; :func:`load_changes` reads the
versions after it up to the table's latest (or ``until``). It is kept in the flow's delta
pointer, which moves only with the flow's Kafka commit: a run that fails before committing
leaves it where it was, and the next run reads the same changes again.

A position the table no longer holds the history of (its log entries expired, or VACUUM
removed the change data files) raises :class:`ChangesExpiredError`: the flow must run an
initial load, which reads the table as of a version and stores that version as the position.

delta-rs 1.6.6 reads the feed of tables with deletion vectors, but not of tables with column
mapping or a widened column (``typeWidening``): :func:`load_changes` raises a
:class:`~producer_lib.errors.SourceError` naming the table and the refused feature. Its
rows are wrong for commits that change deletion vectors without change data files (a DELETE
with deletion vectors on); the rows of those commits are read with DuckDB's delta extension
instead (see ``_fix_vector_commits``).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from producer_lib.errors import SourceError
from producer_lib.sources.adapter import SourceAdapter
from producer_lib.staging import delta_scan_location, quote_table

__all__ = [
    "CHANGE_COLUMNS",
    "ChangesExpiredError",
    "DeltaChanges",
    "latest_version",
    "load_changes",
    "net_images",
    "read_changes",
]

CHANGE_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")
# delta-rs' words for a version or file that is gone (log expired, files vacuumed).
_GONE = re.compile(
    r"not found|no such file|invalid table version|version \d+ .*not|does not exist", re.I
)
_VIEW_TYPES = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}


class ChangesExpiredError(SourceError):
    """The table no longer holds the changes after the position: run an initial load."""


@dataclass(frozen=True)
class DeltaChanges:
    """What :func:`load_changes` staged.

    Attributes:
        table: The table's name in messages (default: its path).
        path: Where the Delta table is.
        since: The position the changes follow (the last version already consumed).
        until: The last version read: the position to store with the flow's commit.
        rows: Row images staged (an update counts twice: pre and post image).
        duckdb_table: The DuckDB table holding them.
    """

    table: str
    path: str
    since: int
    until: int
    rows: int
    duckdb_table: str


def latest_version(path: str | Path, table: str | None = None) -> int:
    """The latest version of the Delta table at ``path``.

    Raises:
        SourceError: No Delta table there (names the table and path).
    """
    return _open(str(path), table or str(path)).version()


def read_changes(
    path: str | Path, since: int, until: int | None = None, *, table: str | None = None
) -> tuple[pa.Table, int]:
    """The changes of the versions after ``since`` up to ``until`` (default: the latest).

    Args:
        path: The Delta table.
        since: The last version already consumed (the position).
        until: The last version to read; default: the table's latest version.
        table: The table's name in error messages; default: ``path``.

    Returns:
        The row images with :data:`CHANGE_COLUMNS` (an empty table of the table's columns
        when nothing changed), and the version read up to.

    Raises:
        ChangesExpiredError: The table no longer holds the changes after ``since``, or
            ``since`` is newer than the table (a table re-created under the same path).
        SourceError: delta-rs cannot read the table's change feed (column mapping, a
            widened column), or no Delta table is there.
    """
    name, location = table or str(path), str(path)
    delta = _open(location, name)
    latest = delta.version()
    until = latest if until is None else until
    if since < 0 or since > latest or until > latest or until < since:
        raise ChangesExpiredError(
            f"Delta table {name} is at version {latest}, its change position is {since} "
            f"(reading up to {until}): the table was re-created or the position is wrong; "
            "run an initial load",
            table=name,
            version=since,
        )
    if until == since:
        return _empty(delta), until
    _check_log_retained(location, name, since)
    try:
        stream = delta.load_cdf(starting_version=since + 1, ending_version=until)
        changes = pa.table(stream.read_all())
    except Exception as exc:  # delta-rs raises DeltaError / OSError / its kernel's errors
        if _GONE.search(str(exc)):
            raise _expired(name, since, exc) from exc
        raise SourceError(
            f"delta-rs cannot read the change data feed of Delta table {name}: {exc}",
            table=name,
            version=since,
        ) from exc
    changes = _normalise(changes)
    return _fix_vector_commits(location, name, changes, since, until), until


async def load_changes(
    reader: SourceAdapter,
    duckdb_table: str,
    path: str | Path,
    since: int,
    *,
    until: int | None = None,
    table: str | None = None,
) -> DeltaChanges:
    """Stage the changes after ``since`` in ``reader``'s DuckDB as ``duckdb_table``.

    The DuckDB table is created or replaced; it holds the row images with
    :data:`CHANGE_COLUMNS`, in commit order. See :func:`read_changes` for the arguments
    and errors. Store :attr:`DeltaChanges.until` as the new position with the flow's commit.
    """
    name = table or str(path)
    changes, last = await asyncio.to_thread(read_changes, path, since, until, table=name)
    target = quote_table(duckdb_table)

    def stage() -> None:
        reader.connection.register("__delta_changes", changes)
        try:
            reader.connection.execute(
                f"CREATE OR REPLACE TABLE {target} AS SELECT * FROM __delta_changes "
                "ORDER BY _commit_version"
            )
        finally:
            reader.connection.unregister("__delta_changes")

    await reader.run_locked(stage)
    reader.logger.info(
        "delta changes staged table=%s since=%s until=%s rows=%s duckdb_table=%s",
        name,
        since,
        last,
        changes.num_rows,
        duckdb_table,
    )
    return DeltaChanges(name, str(path), since, last, changes.num_rows, duckdb_table)


async def net_images(
    reader: SourceAdapter, changes_table: str, keys: list[str] | tuple[str, ...], target: str
) -> None:
    """Reduce staged changes to one before and one after image per key: the net change.

    Creates (or replaces) ``target`` with the columns of ``changes_table`` and ``_image``:
    ``before`` is the key's row as of the position (its first pre-image or deleted row;
    none when the key was inserted), ``after`` its row as of the last version read (its last
    post-image or inserted row; none when deleted). A key with only an ``after`` image is
    new, with only ``before`` deleted, with both updated (the images may be equal: a row
    deleted and inserted alike, as an overwrite does).

    Args:
        reader: The reader whose DuckDB holds ``changes_table``.
        changes_table: What :func:`load_changes` staged.
        keys: The key columns of the table.
        target: The DuckDB table to create.
    """
    key_list = ", ".join(_ident(k) for k in keys)
    # Within a commit a key's pre-image/delete comes before its post-image/insert.
    step = "CASE WHEN _change_type IN ('update_preimage', 'delete') THEN 0 ELSE 1 END"
    sql = f"""
        CREATE OR REPLACE TABLE {quote_table(target)} AS
        WITH ranked AS (
            SELECT *,
                row_number() OVER (PARTITION BY {key_list}
                                   ORDER BY _commit_version, {step}) AS __first,
                row_number() OVER (PARTITION BY {key_list}
                                   ORDER BY _commit_version DESC, {step} DESC) AS __last
            FROM {quote_table(changes_table)}
        )
        SELECT * EXCLUDE (__first, __last), 'before' AS _image FROM ranked
        WHERE __first = 1 AND _change_type IN ('update_preimage', 'delete')
        UNION ALL BY NAME
        SELECT * EXCLUDE (__first, __last), 'after' AS _image FROM ranked
        WHERE __last = 1 AND _change_type IN ('insert', 'update_postimage')
    """
    await reader.run_locked(reader.connection.execute, sql)


# -- helpers ------------------------------------------------------------------------------


def _open(location: str, name: str) -> Any:
    try:
        from deltalake import DeltaTable
    except ModuleNotFoundError as exc:  # pragma: no cover - an install without delta-rs
        raise SourceError(
            "reading a Delta table's changes needs delta-rs: pip install deltalake", table=name
        ) from exc
    try:
        return DeltaTable(location)
    except Exception as exc:
        raise SourceError(f"Cannot open Delta table {name}: {exc}", table=name) from exc


def _check_log_retained(location: str, name: str, since: int) -> None:
    """Fail when the log entry of the first version to read is gone (local tables).

    Log retention removes old ``_delta_log/<version>.json`` files after a checkpoint; the
    table still opens, but the changes of those versions are gone. Remote tables (a URL)
    are checked by delta-rs itself when it reads.
    """
    if "://" in location:
        return
    entry = Path(location) / "_delta_log" / f"{since + 1:020d}.json"
    if not entry.exists():
        raise _expired(name, since, f"log entry {entry.name} is gone")


def _expired(name: str, since: int, cause: object) -> ChangesExpiredError:
    return ChangesExpiredError(
        f"the changes of Delta table {name} after version {since} are no longer retained "
        f"(log retention or VACUUM removed them: {cause}); run an initial load, which reads "
        "the table whole and stores a new position",
        table=name,
        version=since,
    )


def _empty(delta: Any) -> pa.Table:
    schema = pa.schema(delta.schema().to_arrow())
    schema = schema.append(pa.field("_change_type", pa.string()))
    schema = schema.append(pa.field("_commit_version", pa.int64()))
    schema = schema.append(pa.field("_commit_timestamp", pa.timestamp("us", tz="UTC")))
    return _normalise(schema.empty_table())


def _normalise(changes: pa.Table) -> pa.Table:
    """Plain string types (DuckDB-friendly), BIGINT versions and UTC commit times."""
    fields = []
    for item in changes.schema:
        kind = _VIEW_TYPES.get(item.type, item.type)
        if item.name == "_commit_version":
            kind = pa.int64()
        elif item.name == "_commit_timestamp":
            kind = pa.timestamp("us", tz="UTC")
        fields.append(pa.field(item.name, kind, item.nullable))
    return changes.cast(pa.schema(fields))


def _fix_vector_commits(
    location: str, name: str, changes: pa.Table, since: int, until: int
) -> pa.Table:
    """Replace delta-rs' rows of commits that changed deletion vectors without change files.

    Such a commit (a DELETE with deletion vectors on: a file removed whole, or re-added with a
    larger vector) says what it deleted only through the vectors. delta-rs 1.6.6 gets those
    rows wrong (it reports the rows deleted *before*, and every row of a re-added file). They
    are read here instead with DuckDB's delta extension, which applies deletion vectors: the
    rows of the touched files as of the version before, less those as of the commit, are its
    deletes; the other way round its inserts. Local tables only (the log is read from disk).
    """
    if "://" in location:
        return changes
    commits = {v: c for v in range(since + 1, until + 1) if (c := _vector_commit(location, v))}
    if not commits:
        return changes
    import duckdb
    import pyarrow.compute as pc

    from producer_lib.staging import load_packaged_extension

    data_columns = [c for c in changes.column_names if c not in CHANGE_COLUMNS]
    fixed = pa.array(list(commits), pa.int64())
    parts = [changes.filter(pc.invert(pc.is_in(changes["_commit_version"], fixed)))]
    connection = duckdb.connect()
    try:
        load_packaged_extension(connection, "delta")
        for version, (files, stamp) in commits.items():
            rows = _vector_rows(connection, location, version, files, stamp, data_columns)
            parts.append(rows.select(changes.column_names).cast(changes.schema))
    except Exception as exc:
        if _GONE.search(str(exc)):
            raise _expired(name, since, exc) from exc
        raise SourceError(
            f"cannot read the rows a commit of Delta table {name} deleted: {exc}",
            table=name,
            version=since,
        ) from exc
    finally:
        connection.close()
    return pa.concat_tables(parts).sort_by("_commit_version")


def _vector_commit(location: str, version: int) -> tuple[list[str], int] | None:
    """The files a commit without change data files changed, when a deletion vector is in it.

    Returns:
        (the paths of the files it added or removed, its commit time in ms), or None for
        any other commit (delta-rs reads those right).
    """
    import json

    entry = Path(location) / "_delta_log" / f"{version:020d}.json"
    files: list[str] = []
    stamp, cdc, vectors = 0, False, False
    for line in entry.read_text().splitlines():
        action = json.loads(line) if line.strip() else {}
        info = action.get("commitInfo")
        if info:
            stamp = info.get("inCommitTimestamp") or info.get("timestamp") or 0
        cdc = cdc or "cdc" in action
        for kind in ("add", "remove"):
            change = action.get(kind)
            if change and change.get("dataChange"):
                files.append(change["path"])
                vectors = vectors or bool(change.get("deletionVector"))
    return (sorted(set(files)), stamp) if vectors and not cdc else None


def _vector_rows(
    connection: Any, location: str, version: int, files: list[str], stamp: int, columns: list[str]
) -> pa.Table:
    """Deletes and inserts of a commit: its files' live rows before and after, compared."""
    from urllib.parse import unquote

    wanted = [str(Path(location) / unquote(f)) for f in files]
    projection = ", ".join(_ident(c) for c in columns)

    def rows(at: int) -> str:
        return (
            f"SELECT {projection} FROM delta_scan($location, version := {at}, filename := true) "
            "WHERE filename IN $files"
        )

    sql = f"""
        SELECT *, 'delete' AS _change_type FROM ({rows(version - 1)} EXCEPT ALL {rows(version)})
        UNION ALL
        SELECT *, 'insert' AS _change_type FROM ({rows(version)} EXCEPT ALL {rows(version - 1)})
    """
    sql = (
        f"SELECT *, $version::BIGINT AS _commit_version, "
        f"make_timestamptz($stamp::BIGINT * 1000) AS _commit_timestamp FROM ({sql})"
    )
    params = {
        "location": delta_scan_location(location),
        "files": wanted,
        "version": version,
        "stamp": stamp,
    }
    return connection.execute(sql, params).to_arrow_table()


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
