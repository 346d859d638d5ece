"""Disk full on the lakehouse path: a small tmpfs mounted there, filled to the last byte.

Mounting needs root (CAP_SYS_ADMIN); where the machine does not allow it the test is
skipped with the reason. The checkpoint stays on the ordinary disk, as it would when only
the lakehouse's storage fills up. The batch must fail with "No space left on device", leave
no new table version, and once space is freed a restart must apply every row exactly once.
"""

from __future__ import annotations

import errno
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakehouse_writer.cli import main
from lakehouse_writer.runtime.status import read_status
from tests.support.writer import T0, once_argv, produce_transaction, publish_schemas, sample_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

SIZE = "32m"  # room for a few small Delta tables and their logs


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 32 MiB tmpfs mounted at ``tmp_path/lake``, unmounted after the test."""
    mount_point = tmp_path / "lake"
    mount_point.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command on this machine")
    done = subprocess.run(  # noqa: S603
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount_point)],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)  # noqa: S603, S607


def fill(folder: Path) -> Path:
    """Write a file into ``folder`` until its file system has not one byte left."""
    filler = folder / "filler.bin"
    with filler.open("wb", buffering=0) as out:
        for chunk in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    out.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return filler


def _rows(first: int, last: int, t: int) -> list[dict]:
    return [
        {"ID": i, "NAME": f"n{i}", "__change_type": "I", "__change_time": T0 + t}
        for i in range(first, last + 1)
    ]


def test_a_full_lakehouse_disk_fails_the_batch_and_a_restart_applies_every_row_once(
    spark, kafka_bootstrap, new_topic, small_disk, tmp_path, monkeypatch
):
    topic, schemas = new_topic(), new_topic(suffix="_schemas")
    schema = sample_schema(keyed=False)  # appends: a second application shows as duplicates
    publish_schemas(kafka_bootstrap, topic, schemas, schema)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    lake, ckpt = small_disk, tmp_path / "ckpt"
    argv = once_argv(lake, ckpt, topic, kafka_bootstrap)
    table = lake / "SHOP" / "ORDERS"

    produce_transaction(kafka_bootstrap, topic, schema, _rows(1, 3, 1))
    assert main(argv) == 0
    versions = sorted(p.name for p in (table / "_delta_log").glob("*.json"))
    produce_transaction(kafka_bootstrap, topic, schema, _rows(4, 6, 2))

    filler = fill(lake)
    assert main(argv) == 1, "the batch went through on a full disk"
    assert sorted(p.name for p in (table / "_delta_log").glob("*.json")) == versions
    status = read_status(str(ckpt)) or {}
    assert status.get("state") == "failed", status
    assert "No space left on device" in status["error"], status["error"]

    filler.unlink()
    assert main(argv) == 0, "the restart did not apply the failed batch"
    frame = spark.read.format("delta").load(str(table))
    assert Counter(r.ID for r in frame.select("ID").collect()) == Counter(range(1, 7))
