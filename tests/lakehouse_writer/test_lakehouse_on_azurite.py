"""The lakehouse and the checkpoint on Azure storage: Azurite through hadoop-azure and delta-rs.

Azurite serves the Blob API only (no ADLS Gen2 ``dfs`` endpoint), so ``abfss://`` cannot be
tried here: Spark reaches it through hadoop-azure's WASB driver (``wasb://``), and delta-rs
through its object store (``az://``, ``use_emulator``), both with the settings
:mod:`lakehouse_writer.runtime.azure` makes. hadoop-azure's emulator mode asks for the
emulator at 127.0.0.1:10000, its well-known port: the Azurite of this module listens there.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest
from azure.storage.blob import BlobServiceClient
from deltalake import DeltaTable, write_deltalake

from devstack.azurite import ACCOUNT, Azurite
from lakehouse_writer.cli import main
from lakehouse_writer.runtime.azure import delta_rs_options, delta_rs_uri, hadoop_settings
from producer_lib.settings import AzureStorageSettings
from tests.support.writer import T0, once_argv, produce_transaction, published_topic, sample_schema

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EMULATOR_PORT = 10000  # hadoop-azure's emulator mode has no other
CONTAINER = "lake"


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    service = Azurite(tmp_path_factory.mktemp("azurite"), EMULATOR_PORT)
    service.start()
    BlobServiceClient.from_connection_string(service.connection_string()).create_container(
        CONTAINER
    )
    yield service
    service.stop()


@pytest.fixture
def on_azurite(spark, azurite, monkeypatch) -> AzureStorageSettings:
    """The emulator's settings, given to the session's Hadoop configuration."""
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azurite.blob_url)  # delta-rs' emulator
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true")
    settings = AzureStorageSettings(connection_string="UseDevelopmentStorage=true")
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in hadoop_settings(settings, f"wasb://{CONTAINER}@{ACCOUNT}/").items():
        conf.set(key.removeprefix("spark.hadoop."), value)
    return settings


def _where() -> str:
    return f"wasb://{CONTAINER}@{ACCOUNT}/{uuid.uuid4().hex[:8]}"


def test_spark_and_delta_rs_read_and_write_one_table_on_azurite(spark, on_azurite):
    from delta.tables import DeltaTable as SparkTable

    path = f"{_where()}/SHOP/ORDERS"
    spark.range(5).selectExpr("id", "'spark' AS by").write.format("delta").save(path)
    source = spark.range(3, 7).selectExpr("id", "'merged' AS by")
    (
        SparkTable.forPath(spark, path)
        .alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    options = delta_rs_options(on_azurite, path)

    table = DeltaTable(delta_rs_uri(path), storage_options=options)
    write_deltalake(
        table,
        pa.table({"id": pa.array([9], pa.int64()), "by": ["delta-rs"]}),
        mode="append",
    )

    rows = sorted(tuple(r) for r in spark.read.format("delta").load(path).collect())
    assert rows == [
        (0, "spark"),
        (1, "spark"),
        (2, "spark"),
        (3, "merged"),
        (4, "merged"),
        (5, "merged"),
        (6, "merged"),
        (9, "delta-rs"),
    ]
    read_by_rs = DeltaTable(delta_rs_uri(path), storage_options=options).to_pyarrow_table()
    assert sorted(read_by_rs.column("id").to_pylist()) == [0, 1, 2, 3, 4, 5, 6, 9]


@pytest.mark.kafka
def test_the_writer_keeps_its_lakehouse_and_checkpoint_on_azurite(
    spark, on_azurite, kafka_bootstrap, new_topic, monkeypatch
):
    schema = sample_schema()
    topic, schemas = published_topic(new_topic, kafka_bootstrap, schema)
    monkeypatch.setenv("LAKEHOUSE_SCHEMAS_TOPIC", schemas)
    monkeypatch.setenv("LAKEHOUSE_MONITOR_GROUP", "off")
    where = _where()
    argv = once_argv(f"{where}/lake", f"{where}/checkpoint", topic, kafka_bootstrap)
    first = [
        {"ID": i, "NAME": f"n{i}", "__change_type": "I", "__change_time": T0 + 1}
        for i in range(1, 6)
    ]
    produce_transaction(kafka_bootstrap, topic, schema, first)
    assert main(argv) == 0

    later = [
        {"ID": 2, "NAME": "two", "__change_type": "U", "__change_time": T0 + 2},
        {"ID": 3, "NAME": "n3", "__change_type": "D", "__change_time": T0 + 2},
        {"ID": 6, "NAME": "n6", "__change_type": "A", "__change_time": T0 + 2},
    ]
    produce_transaction(kafka_bootstrap, topic, schema, later)
    assert main(argv) == 0  # a new driver run: offsets from the checkpoint on Azurite
    assert main(argv) == 0  # nothing new: nothing applied twice

    orders = f"{where}/lake/SHOP/ORDERS"
    by_rs = DeltaTable(delta_rs_uri(orders), storage_options=delta_rs_options(on_azurite, orders))
    merges = [h for h in by_rs.history() if h.get("operation") == "MERGE"]
    # the small MERGEs ran in the driver by delta-rs, on Azure storage as on a local disk
    assert [str(h.get("clientVersion", "")).startswith("delta-rs") for h in merges] == [True] * 2
    table = spark.read.format("delta").load(orders)
    assert sorted((r.ID, r.NAME) for r in table.collect()) == [
        (1, "n1"),
        (2, "two"),
        (4, "n4"),
        (5, "n5"),
        (6, "n6"),
    ]
