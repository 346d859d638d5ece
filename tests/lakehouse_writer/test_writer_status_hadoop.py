"""``status`` and ``resume-table`` on a lakehouse and checkpoint Python cannot open (viewfs://).

Hadoop's own ``viewfs://`` (a mount table on a local folder, set at session level) stands for
``abfss://``/``s3a://``/``dbfs:/``: the commands must reach the status file, the instance id
and ``_writer_state`` through the Spark session's file systems, not ``pathlib``.
"""

from __future__ import annotations

import uuid

import pytest

from lakehouse_writer.cli import main
from lakehouse_writer.commit.state import BatchChanges, StateStore
from lakehouse_writer.engines import ids
from lakehouse_writer.runtime.status import BatchStats, read_status, write_status

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def viewfs(spark, tmp_path):
    """``viewfs://<name>/data`` mounted on ``tmp_path / "data"`` (a new name per test)."""
    name = f"t{uuid.uuid4().hex[:8]}"
    (tmp_path / "data").mkdir()
    key = f"fs.viewfs.mounttable.{name}.link./data"
    spark.conf.set(key, f"file://{tmp_path / 'data'}")
    yield f"viewfs://{name}/data"
    spark.conf.unset(key)


def test_status_and_resume_table_reach_a_hadoop_file_system(spark, viewfs, tmp_path, capsys):
    lake, checkpoint = f"{viewfs}/lake", f"{viewfs}/ckpt"
    instance = ids.instance_id(checkpoint, spark)
    stats = BatchStats(state="drained", batch_id=2, stopped_tables={"SHOP.ORDERS": "AMOUNT"})
    write_status(checkpoint, stats, spark)
    store = StateStore(spark, f"{lake}/_writer_state", instance)
    store.append(BatchChanges(stopped={"SHOP.ORDERS": "incompatible column type AMOUNT"}), 2)
    where = ["--lakehouse", lake, "--checkpoint", checkpoint]

    assert main(["status", *where]) == 1
    out = capsys.readouterr().out
    assert "state: drained" in out and "SHOP.ORDERS: incompatible column type AMOUNT" in out
    assert main(["resume-table", "SHOP.ORDERS", *where]) == 0, capsys.readouterr().err
    assert store.load().stopped == {}
    assert (read_status(checkpoint, spark) or {})["stopped_tables"] == {}
    assert main(["status", *where]) == 0
    assert not (tmp_path / "viewfs:").exists()
