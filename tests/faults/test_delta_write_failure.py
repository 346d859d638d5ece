"""A Delta write that fails inside a batch: the table's ``_delta_log`` made unwritable.

Tests run as root here, and root ignores ``chmod``: the folder is made immutable with
``chattr +i`` instead (as root; ``chmod 0555`` otherwise), which refuses every new file in
it, as a read-only mount or a revoked storage permission would. The batch writes two
append-only tables; one of them cannot commit. The writer must fail the batch (status
``failed`` naming the table), leave no new version in that table, and, once the folder is
writable again, a restart must apply every row exactly once: the table that did commit in
the failed batch is not appended to twice.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lakehouse_writer.cli import main
from lakehouse_writer.runtime.status import read_status
from tests.support.writer import T0, once_argv, produce_transaction, publish_schemas, sample_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


@contextmanager
def unwritable(folder: Path) -> Iterator[None]:
    """No new file can be made in ``folder`` inside the block (chattr +i as root)."""
    if os.geteuid() == 0:
        if shutil.which("chattr") is None:
            pytest.skip("running as root without chattr: no way to make a folder unwritable")
        subprocess.run(["chattr", "+i", str(folder)], check=True)  # noqa: S603, S607
        undo = ["chattr", "-i", str(folder)]
    else:
        mode = folder.stat().st_mode
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
        undo = []
    try:
        probe = folder / "probe"
        with pytest.raises(OSError):
            probe.write_text("x")
        yield
    finally:
        if undo:
            subprocess.run(undo, check=True)  # noqa: S603
        else:
            folder.chmod(mode)


def _rows(first: int, last: int, t: int) -> list[dict]:
    return [
        {"ID": i, "NAME": f"n{i}", "__change_type": "I", "__change_time": T0 + t}
        for i in range(first, last + 1)
    ]


def _ids(spark, table: Path) -> Counter:
    frame = spark.read.format("delta").load(str(table))
    return Counter(r.ID for r in frame.select("ID").collect())


def _commits(table: Path) -> list[str]:
    return sorted(p.name for p in (table / "_delta_log").glob("*.json"))


def test_a_table_that_cannot_commit_fails_the_batch_and_a_restart_applies_every_row_once(
    spark, kafka_bootstrap, new_topic, tmp_path, monkeypatch
):
    orders_topic, items_topic = new_topic(), new_topic(suffix="_items")
    schemas = new_topic(suffix="_schemas")
    orders, items = sample_schema("ORDERS", keyed=False), sample_schema("ITEMS", keyed=False)
    publish_schemas(kafka_bootstrap, orders_topic, schemas, orders)
    publish_schemas(kafka_bootstrap, items_topic, schemas, items)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    lake, ckpt = tmp_path / "lake", tmp_path / "ckpt"
    argv = once_argv(lake, ckpt, f"{orders_topic}|{items_topic}", kafka_bootstrap)
    orders_table, items_table = lake / "SHOP" / "ORDERS", lake / "SHOP" / "ITEMS"

    produce_transaction(kafka_bootstrap, orders_topic, orders, _rows(1, 3, 1))
    produce_transaction(kafka_bootstrap, items_topic, items, _rows(1, 3, 1))
    assert main(argv) == 0
    before = _commits(items_table)
    produce_transaction(kafka_bootstrap, orders_topic, orders, _rows(4, 6, 2))
    produce_transaction(kafka_bootstrap, items_topic, items, _rows(4, 6, 2))

    with unwritable(items_table / "_delta_log"):
        assert main(argv) == 1, "the batch went through though ITEMS could not commit"
        assert _commits(items_table) == before, "a partial version of ITEMS"
    status = read_status(str(ckpt)) or {}
    assert status.get("state") == "failed", status
    assert "ITEMS" in status["error"] or "_delta_log" in status["error"], status["error"]

    assert main(argv) == 0, "the restart did not apply the failed batch"
    expected = Counter(range(1, 7))
    assert _ids(spark, items_table) == expected
    assert _ids(spark, orders_table) == expected, "ORDERS got the failed batch's rows twice"
    assert main(argv) == 0  # nothing left, nothing applied again
    assert _ids(spark, orders_table) == _ids(spark, items_table) == expected
