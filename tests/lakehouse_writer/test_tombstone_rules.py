"""The tombstone rules as SQL (lakehouse_writer.rules.tombstones), run by DuckDB.

Which rows a tombstone outlives, and which tombstones a batch leaves: the SQL text every
engine runs (test_tombstones.py runs it on Spark and delta-rs against Delta tables).
"""

from __future__ import annotations

from datetime import timedelta

import duckdb
import pyarrow as pa

from lakehouse_writer.rules.dialect import DUCKDB
from lakehouse_writer.rules.sql import TableShape, merge_source
from lakehouse_writer.rules.tombstones import outlived, tombstone_columns, tombstones_of
from tests.support.rule_rows import T0, batch_rows

SHAPE = TableShape(
    columns={
        "ID": "bigint",
        "NAME": "string",
        "__change_type": "string",
        "__change_time": "timestamp",
        "__source_rowid": "string",
    },
    keys=("ID",),
    technical=frozenset({"__change_type", "__change_time", "__source_rowid"}),
)


def _rows(*rows: tuple[int | None, str, int]) -> pa.Table:
    """(ID, change type, seconds after T0) rows at offsets 0, 1, ... of one partition."""
    return batch_rows([(i, kind, at, f"n{i}-{at}") for i, kind, at in rows])


def _tombstones(*graves: tuple[int | None, int]) -> pa.Table:
    return pa.table(
        {
            "k0": pa.array([g[0] for g in graves], pa.int64()),
            "__change_time": pa.array(
                [T0 + timedelta(seconds=g[1]) for g in graves], pa.timestamp("us", "UTC")
            ),
        }
    )


def _con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    return con


def _outlived(rows: pa.Table, graves: pa.Table) -> duckdb.DuckDBPyConnection:
    """A connection holding ``rows`` (``r``), ``graves`` (``g``) and what outlived keeps (``k``)."""
    con = _con()
    con.register("r_arrow", rows)
    con.register("g_arrow", graves)
    con.execute("CREATE TABLE r AS SELECT * FROM r_arrow")
    con.execute("CREATE TABLE g AS SELECT * FROM g_arrow")
    kept = outlived("r", "g", SHAPE, rows.column_names, DUCKDB, before=_befores(rows))
    con.execute(f"CREATE TABLE k AS {kept}")
    return con


def _kept(rows: pa.Table, graves: pa.Table) -> list[tuple[int | None, str, int]]:
    found = _outlived(rows, graves).sql("SELECT * FROM k").to_arrow_table()
    assert found.column_names == rows.column_names
    return sorted(
        (f["ID"], f["__change_type"], int((f["__change_time"] - T0).total_seconds()))
        for f in found.to_pylist()
    )


def test_an_upsert_or_archive_older_than_its_keys_tombstone_loses():
    rows = _rows((1, "I", 3), (1, "U", 4), (2, "P", 4), (3, "A", 1), (4, "R", 9))
    graves = _tombstones((1, 5), (2, 5), (4, 5))
    assert _kept(rows, graves) == [(3, "A", 1), (4, "R", 9)]


def test_a_row_of_the_tombstones_time_wins_as_it_would_replace_a_stored_row():
    assert _kept(_rows((1, "U", 5)), _tombstones((1, 5))) == [(1, "U", 5)]


def test_deletes_and_before_images_pass_whatever_their_age():
    rows = _rows((1, "D", 1), (1, "X", 2), (1, "G", 3), (1, "B", 4))
    assert _kept(rows, _tombstones((1, 9))) == sorted(
        [(1, "D", 1), (1, "X", 2), (1, "G", 3), (1, "B", 4)]
    )


def test_an_update_that_moved_its_key_and_lost_still_deletes_the_old_key():
    """B 2 then U 3 (offsets 0, 1: one update moving key 2 to 3), U older than 3's tombstone:
    the new image loses, the old key is deleted all the same (REFERENCE_MODEL_SEED=2342389967
    of the late-producer test kept it)."""
    rows = _rows((2, "I", 1), (2, "B", 4), (3, "U", 4))
    assert _kept(rows, _tombstones((3, 6))) == [(2, "B", 4), (2, "I", 1), (3, "u", 4)]
    source = _merge_source(rows, _tombstones((3, 6)))
    assert source == [(2, "delete", 4)]


def test_an_update_that_lost_but_kept_its_key_leaves_its_before_image_a_before_image():
    rows = _rows((2, "B", 4), (2, "U", 4), (5, "B", 4), (6, "U", 5))
    kept = _kept(rows, _tombstones((2, 6), (6, 9)))
    assert kept == [(2, "B", 4), (2, "u", 4), (5, "B", 4), (6, "u", 5)]  # u: writes nothing
    assert _merge_source(rows, _tombstones((2, 6), (6, 9))) == []


def test_an_update_that_won_over_an_older_tombstone_moves_its_key_as_always():
    rows = _rows((2, "B", 4), (3, "U", 4))
    assert _kept(rows, _tombstones((3, 2))) == [(2, "B", 4), (3, "U", 4)]
    assert _merge_source(rows, _tombstones((3, 2))) == [(2, "delete", 4), (3, "upsert", 4)]


def _befores(rows: pa.Table) -> bool:
    """Whether the rows hold BEFORE images (as the engines pass it, from the batch's counts)."""
    return "B" in rows.column("__change_type").to_pylist()


def _merge_source(rows: pa.Table, graves: pa.Table) -> list[tuple[int, str, int]]:
    """The MERGE's source of the rows no tombstone outlives: (ID, action, seconds)."""
    con = _outlived(rows, graves)
    found = con.sql(merge_source("k", SHAPE, rows.column_names, DUCKDB, cast=False))
    return sorted(
        (f["ID"], f["__action"], int((f["__change_time"] - T0).total_seconds()))
        for f in found.to_arrow_table().to_pylist()
    )


def test_the_latest_of_a_keys_tombstones_counts_and_a_null_key_has_its_own():
    rows = _rows((1, "U", 6), (None, "I", 2), (None, "I", 8))
    graves = _tombstones((1, 2), (1, 7), (None, 5))
    assert _kept(rows, graves) == [(None, "I", 8)]


def test_a_batch_leaves_a_tombstone_per_key_whose_last_row_deletes():
    rows = _rows((1, "I", 1), (1, "D", 2), (2, "D", 1), (2, "U", 3), (3, "X", 4), (4, "G", 5))
    con = _con()
    con.register("r_arrow", rows)
    con.execute("CREATE TABLE r AS SELECT * FROM r_arrow")
    source = merge_source("r", SHAPE, rows.column_names, DUCKDB, before=False, cast=False)
    found = con.sql(tombstones_of(source, SHAPE, DUCKDB)).to_arrow_table().to_pylist()
    assert tombstone_columns(SHAPE) == {"k0": "bigint", "__change_time": "timestamp"}
    graves = sorted((f["k0"], int((f["__change_time"] - T0).total_seconds())) for f in found)
    assert graves == [(1, 2), (3, 4), (4, 5)]


def test_the_tombstones_read_for_a_batch_are_those_newer_than_its_oldest_row(tmp_path):
    """delta-rs reads, from a real tombstone table, only those that can outlive a row of the
    batch; the rule keeps what it keeps against all of them, and a batch newer than every
    tombstone reads none (the engines then apply it without a join)."""
    from types import SimpleNamespace

    from deltalake import write_deltalake

    from lakehouse_writer.engines.delta_rs.writes import DeltaRsWrites

    graves = _tombstones((1, 2), (1, 7), (2, 4), (3, 9))
    write_deltalake(str(tmp_path / "tombstones"), graves)
    store, table = DeltaRsWrites(), SimpleNamespace(ref=SimpleNamespace(qualified="NS.T"))
    rows = _rows((1, "U", 6), (2, "U", 5), (3, "I", 8), (4, "I", 5))
    oldest = int((T0 + timedelta(seconds=5)).timestamp() * 1_000_000)

    read = store.read(str(tmp_path / "tombstones"), table, oldest)
    assert read is not None
    assert sorted(read.column("k0").to_pylist()) == [1, 3]  # (1, 7) and (3, 9)
    assert _kept(rows, read) == _kept(rows, graves) == [(2, "U", 5), (4, "I", 5)]
    later = int((T0 + timedelta(seconds=9)).timestamp() * 1_000_000)
    assert store.read(str(tmp_path / "tombstones"), table, later).num_rows == 0
    assert store.read(str(tmp_path / "tombstones"), table, None).num_rows == 4
    assert store.read(str(tmp_path / "none"), table, None) is None
