"""A table's latest version, read from its log listing (the version a batch reports)."""

from __future__ import annotations

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from lakehouse_writer.tables.files import first_log_version, last_log_version

NO_SESSION = None  # local paths are listed without Spark


def _rows(start: int) -> pa.Table:
    return pa.table({"id": pa.array([start, start + 1], pa.int64())})


def test_the_newest_commit_is_the_version_delta_rs_reports(tmp_path):
    path = str(tmp_path / "t")
    for start in range(0, 8, 2):
        write_deltalake(path, _rows(start), mode="append")
    table = DeltaTable(path)
    table.create_checkpoint()  # a checkpoint and its sidecar files are not commits
    assert last_log_version(NO_SESSION, path) == table.version() == 3
    assert last_log_version(NO_SESSION, f"file://{path}") == 3


def test_after_log_clean_up_the_newest_commit_is_still_there(tmp_path):
    path = str(tmp_path / "t")
    for start in range(0, 6, 2):
        write_deltalake(path, _rows(start), mode="append")
    table = DeltaTable(path)
    table.create_checkpoint()  # at version 2: log clean-up may then drop commits 0 and 1
    for old in (tmp_path / "t" / "_delta_log").glob("0000000000000000000[01].json"):
        old.unlink()
    assert first_log_version(NO_SESSION, path) == 2
    assert last_log_version(NO_SESSION, path) == 2


def test_no_table_is_version_minus_one(tmp_path):
    assert last_log_version(NO_SESSION, str(tmp_path / "absent")) == -1
    (tmp_path / "empty" / "_delta_log").mkdir(parents=True)
    assert last_log_version(NO_SESSION, str(tmp_path / "empty")) == -1
