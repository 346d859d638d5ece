"""A table creation killed before its first commit does not block the writer's restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakehouse_writer.tables.manager import TableManager, TableRef
from lakehouse_writer.tables.unborn import clear_unborn_log, is_committed_log_name
from tests.support.writer import sample_schema

_TEMP = ".00000000000000000000.json.7b5bc096-b61b-4b13-bdf5-d933c7aa324e.tmp"


def _killed_creation(table: Path) -> Path:
    """What a writer killed while Delta created the table leaves (seen in a kill test)."""
    log_dir = table / "_delta_log"
    (log_dir / "_staged_commits").mkdir(parents=True)
    (log_dir / _TEMP).write_bytes(b"")
    (log_dir / f".{_TEMP}.crc").write_bytes(b"")
    return log_dir


@pytest.mark.parametrize(
    ("name", "committed"),
    [
        ("00000000000000000000.json", True),
        ("00000000000000000010.checkpoint.parquet", True),
        ("00000000000000000010.checkpoint.0000000001.0000000002.parquet", True),
        ("00000000000000000001.00000000000000000009.compacted.json", True),
        ("_last_checkpoint", True),
        (_TEMP, False),
        ("00000000000000000000.crc", False),
        ("_staged_commits", False),
    ],
)
def test_a_log_holds_a_table_only_with_a_commit_or_a_checkpoint(name, committed):
    assert is_committed_log_name(name) is committed


@pytest.mark.spark
@pytest.mark.slow
def test_a_killed_creation_is_cleared_and_the_table_made(spark, tmp_path):
    lake = tmp_path / "lake"
    schema = sample_schema()
    table = lake / "SHOP" / "ORDERS"
    log_dir = _killed_creation(table)

    info = TableManager(spark, str(lake)).ensure(schema)

    assert info.ref == TableRef.of(schema)
    assert (log_dir / "00000000000000000000.json").exists() and not (log_dir / _TEMP).exists()
    assert spark.read.format("delta").load(str(table)).count() == 0


@pytest.mark.spark
@pytest.mark.slow
def test_only_the_empty_log_is_deleted(spark, tmp_path):
    table = tmp_path / "t"
    log_dir = _killed_creation(table)
    (table / "part-kept.parquet").write_bytes(b"not ours")  # outside the log

    assert clear_unborn_log(spark, str(table)) is True
    assert not log_dir.exists()
    assert (table / "part-kept.parquet").read_bytes() == b"not ours"


@pytest.mark.spark
@pytest.mark.slow
def test_a_log_with_a_commit_is_left_alone(spark, tmp_path):
    lake = tmp_path / "lake"
    schema = sample_schema()
    TableManager(spark, str(lake)).ensure(schema)
    log_dir = lake / "SHOP" / "ORDERS" / "_delta_log"
    before = sorted(p.name for p in log_dir.iterdir())

    assert clear_unborn_log(spark, str(lake / "SHOP" / "ORDERS")) is False
    assert sorted(p.name for p in log_dir.iterdir()) == before
    assert clear_unborn_log(spark, str(tmp_path / "nothing here")) is False
