"""A lakehouse and checkpoint on a Hadoop file system other than ``file:``, and a restart on it.

The scheme is Hadoop's own ``viewfs://`` (``ViewFileSystem``, in the Spark distribution's
hadoop-client jars, no network): a mount table maps ``viewfs://<name>/data`` to a local
folder. Python cannot open such a URI (``pathlib`` made a local folder named ``viewfs:``
of it, as it did of ``abfss://``), so everything the writer keeps there must go through
``Path.getFileSystem`` with the session's Hadoop settings — the code path of ``abfss://``,
``s3a://`` and ``dbfs:/``. The mount table is a session-level setting (``spark.conf.set``),
as Databricks users set storage keys, so the test also proves those settings are used.
"""

from __future__ import annotations

import uuid

import pytest

from lakehouse_writer.cli import main
from lakehouse_writer.engines import ids
from lakehouse_writer.runtime.status import read_status
from lakehouse_writer.runtime.storage import CheckpointFiles, StorageError
from lakehouse_writer.settings import LakehouseSettings
from lakehouse_writer.stream import job
from tests.support.writer import T0, produce_transaction, publish_schemas, sample_schema

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

LOG = sample_schema("LOG", keyed=False)  # append-only: a replayed append would double rows


def _mount(tmp_path) -> tuple[str, str, str]:
    """(setting, its value, URI): ``viewfs://<new name>/data`` on ``tmp_path / "data"``."""
    name = f"t{uuid.uuid4().hex[:8]}"
    (tmp_path / "data").mkdir()
    return (
        f"fs.viewfs.mounttable.{name}.link./data",
        f"file://{tmp_path / 'data'}",
        f"viewfs://{name}/data",
    )


@pytest.fixture
def viewfs(spark, tmp_path):
    """``viewfs://<name>/data`` mounted on ``tmp_path / "data"`` (a new name per test)."""
    key, value, uri = _mount(tmp_path)
    spark.conf.set(key, value)
    yield uri
    spark.conf.unset(key)


def test_the_instance_id_and_status_live_on_the_checkpoints_file_system(
    spark, viewfs, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    first = ids.instance_id(f"{viewfs}/ckpt", spark)
    assert ids.instance_id(f"{viewfs}/ckpt", spark) == first
    assert (tmp_path / "data" / "ckpt" / "lakehouse_writer_instance").read_text() == first
    assert not (tmp_path / "viewfs:").exists()


def test_a_scheme_hadoop_cannot_open_is_named(spark):
    with pytest.raises(StorageError, match="No FileSystem for scheme .nosuchfs.*nosuchfs://x/c"):
        CheckpointFiles("nosuchfs://x/c", spark)


def test_a_driver_restart_on_viewfs_replays_a_batch_without_duplicates(
    spark, viewfs, kafka_bootstrap, new_topic, tmp_path, monkeypatch
):
    topic, schemas = new_topic(), new_topic(suffix="_schemas")
    publish_schemas(kafka_bootstrap, topic, schemas, LOG)
    for t in (1, 2):
        rows = [
            {"ID": i, "NAME": f"n{i}", "__change_type": "I", "__change_time": T0 + t}
            for i in range(3 * t - 3, 3 * t)
        ]
        produce_transaction(kafka_bootstrap, topic, LOG, rows)
    settings = LakehouseSettings(
        LAKEHOUSE_PATH=f"{viewfs}/lake",
        LAKEHOUSE_CHECKPOINT_PATH=f"{viewfs}/ckpt",
        KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap,
        LAKEHOUSE_SCHEMAS_TOPIC=schemas,
        LAKEHOUSE_TOPICS_REGEX=topic,
        LAKEHOUSE_MAX_OFFSETS_PER_TRIGGER=4,
    )
    local = tmp_path / "data"
    (tmp_path / "driver1").mkdir(), (tmp_path / "driver2").mkdir()
    monkeypatch.chdir(tmp_path / "driver1")
    job.run(spark, settings, once=True)
    commits = local / "ckpt" / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):  # the driver died before Spark recorded it
        (commits / name).unlink()
    monkeypatch.chdir(tmp_path / "driver2")  # a new driver: another machine, another folder
    job.run(spark, settings, once=True)

    table = spark.read.format("delta").load(f"{viewfs}/lake/SHOP/LOG")
    assert sorted(r.ID for r in table.collect()) == list(range(6))  # each row once
    assert (read_status(f"{viewfs}/ckpt", spark) or {})["state"] == "drained"
    assert not list(tmp_path.glob("driver*/*")), "nothing written beside the driver"


def test_a_failed_start_is_recorded_on_the_checkpoints_file_system(spark, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    key, value, uri = _mount(tmp_path)  # given as users give storage settings: --conf
    argv = [
        "run",
        "--lakehouse",
        f"{uri}/lake",
        "--checkpoint",
        f"{uri}/ckpt",
        "--once",
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--connect-timeout",
        "1",
        "--conf",
        f"{key}={value}",
    ]
    try:
        assert main(argv) == 1
    finally:
        spark.conf.unset(key)
    status = read_status(str(tmp_path / "data" / "ckpt")) or {}
    assert status["state"] == "failed" and status["error"].startswith("KafkaUnreachable")
    assert status["error_trace"] == f"{uri}/ckpt/writer_error.log"
    assert (tmp_path / "data" / "ckpt" / "writer_error.log").is_file()
    assert not (tmp_path / "viewfs:").exists()
