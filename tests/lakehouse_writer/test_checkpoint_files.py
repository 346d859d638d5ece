"""The checkpoint's small files on a local folder: create-if-absent and whole replacement.

The same files on a Hadoop file system (``viewfs://``) are tested with Spark in
``test_hadoop_checkpoint.py``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from lakehouse_writer.engines import ids
from lakehouse_writer.runtime.status import BatchStats, read_status, write_status
from lakehouse_writer.runtime.storage import CheckpointFiles, StorageError, is_local


def test_writers_starting_together_share_the_first_instance_id(tmp_path):
    checkpoint = f"file:{tmp_path / 'ckpt'}"
    with ThreadPoolExecutor(8) as pool:
        found = set(pool.map(lambda _: ids.instance_id(checkpoint), range(16)))
    assert len(found) == 1 and len(found.pop()) == 32
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["lakehouse_writer_instance"]


def test_a_status_replaced_many_times_is_always_whole(tmp_path):
    checkpoint = str(tmp_path / "ckpt")
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: write_status(checkpoint, BatchStats(batch_id=i)), range(40)))
    assert (read_status(checkpoint) or {})["last_batch_id"] in range(40)
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["writer_status.json"]


def test_an_instance_file_left_empty_is_named_in_the_error(tmp_path, monkeypatch):
    monkeypatch.setattr("lakehouse_writer.runtime.storage._CREATED_WAIT_S", 0.3)
    (tmp_path / "lakehouse_writer_instance").write_text("")
    with pytest.raises(StorageError, match="exists but is empty") as raised:
        ids.instance_id(str(tmp_path))
    assert str(tmp_path / "lakehouse_writer_instance") in str(raised.value)


@pytest.mark.parametrize(
    ("path", "local"),
    [
        ("/data/ckpt", True),
        ("file:///data/ckpt", True),
        ("abfss://c@a.dfs.core.windows.net/x", False),
        ("s3a://bucket/x", False),
        ("dbfs:/x", False),
        ("C:\\ckpt", True),
    ],
)
def test_which_paths_are_local(path, local):
    assert is_local(path) is local


def test_a_file_uri_reaches_the_local_folder(tmp_path):
    files = CheckpointFiles(f"file://{tmp_path}")
    assert files.create("x", "first") == "first" and files.create("x", "second") == "first"
    assert (tmp_path / "x").read_text() == "first"
