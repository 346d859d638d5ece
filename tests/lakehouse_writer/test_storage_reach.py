"""Which storage the writer's delta-rs paths reach, and what a user sees when they cannot.

Pure functions and the metrics endpoint, no Spark: the end-to-end run on Azure storage is
``test_lakehouse_on_azurite.py``.
"""

from __future__ import annotations

import json

import pytest

from lakehouse_writer.cli import azure_hadoop_settings
from lakehouse_writer.engines.delta_rs.writes import DeltaRsWrites
from lakehouse_writer.ops.metrics import WriterMetrics
from lakehouse_writer.route.router import Router
from lakehouse_writer.runtime.azure import AzureStorageUnusable
from lakehouse_writer.runtime.status import BatchStats, observed, write_status
from lakehouse_writer.runtime.storage import delta_rs_path
from lakehouse_writer.settings import LakehouseSettings
from tests.support.metrics import samples

ADLS = "abfss://lake@acct.dfs.core.windows.net/tables"
ONELAKE = "abfss://ws@onelake.dfs.fabric.microsoft.com/lh.Lakehouse/Tables"
KEY = "AccountName=acct;AccountKey=s3cr3t;EndpointSuffix=core.windows.net"


@pytest.fixture
def azure_env(monkeypatch):
    for name in ("CONNECTION_STRING", "TENANT_ID", "CLIENT_ID", "CLIENT_SECRET"):
        monkeypatch.delenv(f"AZURE_STORAGE_{name}", raising=False)
    return monkeypatch


def test_local_paths_are_opened_as_files(tmp_path):
    assert delta_rs_path(str(tmp_path)).uri == str(tmp_path)
    assert delta_rs_path(f"file://{tmp_path}").uri == str(tmp_path)
    assert delta_rs_path(f"file:{tmp_path}").options == {}


def test_azure_paths_get_the_writers_credential(azure_env):
    azure_env.setenv("AZURE_STORAGE_CONNECTION_STRING", KEY)
    where = delta_rs_path(f"{ADLS}/SHOP/ORDERS")
    assert where.uri == f"{ADLS}/SHOP/ORDERS"
    assert where.options == {"account_name": "acct", "account_key": "s3cr3t"}
    assert "s3cr3t" not in repr(where)  # a log line of it shows no secret

    azure_env.delenv("AZURE_STORAGE_CONNECTION_STRING")
    azure_env.setenv("AZURE_STORAGE_TENANT_ID", "t")
    azure_env.setenv("AZURE_STORAGE_CLIENT_ID", "c")
    azure_env.setenv("AZURE_STORAGE_CLIENT_SECRET", "p")
    onelake = delta_rs_path(f"{ONELAKE}/dbo/orders")
    assert onelake.options["use_fabric_endpoint"] == "true"
    assert (onelake.options["tenant_id"], onelake.options["client_id"]) == ("t", "c")


@pytest.mark.parametrize("path", ["s3a://bucket/lake/T", "gs://b/lake", "dbfs:/lake/T"])
def test_other_object_stores_are_sparks_alone(path):
    assert delta_rs_path(path) is None
    assert not DeltaRsWrites().writes(path)


def test_a_lakehouse_delta_rs_cannot_reach_names_its_scheme_as_the_reason():
    router = Router(DeltaRsWrites(), "s3a://bucket/lake", 1000, "i")
    assert router.max_rows == 0  # nothing is read or applied in the driver
    assert router._unreached == "delta-rs cannot reach s3a:// storage"
    assert Router(DeltaRsWrites(), ADLS, 1000, "i")._unreached is None


def test_the_session_gets_hadoop_azures_settings_for_an_azure_lakehouse(azure_env, tmp_path):
    azure_env.setenv("AZURE_STORAGE_CONNECTION_STRING", KEY)
    on_azure = LakehouseSettings(LAKEHOUSE_PATH=ADLS, LAKEHOUSE_CHECKPOINT_PATH=str(tmp_path))
    conf = azure_hadoop_settings(on_azure)
    host = "acct.dfs.core.windows.net"
    assert conf[f"spark.hadoop.fs.azure.account.key.{host}"] == "s3cr3t"
    assert conf[f"spark.hadoop.fs.azure.account.auth.type.{host}"] == "SharedKey"
    local = LakehouseSettings(LAKEHOUSE_PATH=str(tmp_path), LAKEHOUSE_CHECKPOINT_PATH="/c")
    assert azure_hadoop_settings(local) == {}

    onelake = LakehouseSettings(LAKEHOUSE_PATH=ONELAKE, LAKEHOUSE_CHECKPOINT_PATH="/c")
    with pytest.raises(AzureStorageUnusable, match="OneLake takes Entra ID tokens") as caught:
        azure_hadoop_settings(onelake)
    assert "s3cr3t" not in str(caught.value)


def test_tables_off_the_fast_path_are_in_the_status_and_the_metrics(tmp_path):
    metrics = WriterMetrics()
    checkpoint = str(tmp_path / "ckpt")
    reason = "delta-rs cannot reach s3a:// storage"
    with observed(metrics):
        write_status(checkpoint, BatchStats(batch_id=0, off_fast_path={"SHOP.ORDERS": reason}))
        first = samples(metrics.render())
        write_status(checkpoint, BatchStats(batch_id=1))
        second = samples(metrics.render())

    name = "lakehouse_writer_tables_off_fast_path"
    assert first[f'{name}{{table="SHOP.ORDERS",reason="{reason}"}}'] == 1
    assert not [k for k in second if k.startswith(name)]  # gone once no table left
    status = json.loads((tmp_path / "ckpt" / "writer_status.json").read_text())
    assert status["off_fast_path"] == {}


def test_a_credential_that_cannot_open_the_lakehouse_is_a_bad_setting(azure_env, capsys):
    from lakehouse_writer.cli import main

    azure_env.setenv("AZURE_STORAGE_CONNECTION_STRING", KEY)
    code = main(["status", "--lakehouse", ONELAKE, "--checkpoint", f"{ONELAKE}/../Files/ckpt"])
    err = capsys.readouterr().err
    assert code == 2  # a wrong setting, before any JVM starts
    assert "OneLake takes Entra ID tokens only" in err and "s3cr3t" not in err
