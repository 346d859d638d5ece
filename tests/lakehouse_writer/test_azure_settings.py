"""Azure storage credentials as Hadoop's settings and delta-rs' options (pure)."""

from __future__ import annotations

import pytest

from lakehouse_writer.runtime.azure import (
    AzureStorageUnusable,
    delta_rs_options,
    delta_rs_uri,
    hadoop_settings,
)
from producer_lib.settings import AzureStorageSettings

ADLS = "abfss://lake@acct.dfs.core.windows.net/tables"
ONELAKE = "abfss://ws@onelake.dfs.fabric.microsoft.com/sales.Lakehouse/Tables"
BLOB = "wasbs://lake@acct.blob.core.windows.net/tables"
HOST = "acct.dfs.core.windows.net"


@pytest.fixture(autouse=True)
def _no_azure_environment(monkeypatch):
    for name in ("CONNECTION_STRING", "CLIENT_SECRET", "TENANT_ID", "CLIENT_ID", "ACCOUNT_NAME"):
        monkeypatch.delenv(f"AZURE_STORAGE_{name}", raising=False)


def _settings(**values) -> AzureStorageSettings:
    return AzureStorageSettings(**values)


def test_an_account_key_opens_adls_and_blob_with_the_same_secret():
    azure = _settings(connection_string="AccountName=acct;AccountKey=s3cr3t")

    conf = hadoop_settings(azure, ADLS, BLOB, "/local/checkpoint")

    assert conf == {
        f"spark.hadoop.fs.azure.account.auth.type.{HOST}": "SharedKey",
        f"spark.hadoop.fs.azure.account.key.{HOST}": "s3cr3t",
        "spark.hadoop.fs.azure.account.key.acct.blob.core.windows.net": "s3cr3t",
    }
    assert delta_rs_options(azure, ADLS) == {"account_name": "acct", "account_key": "s3cr3t"}


def test_a_service_principal_gets_the_client_credentials_flow_of_its_tenant():
    azure = _settings(tenant_id="t1", client_id="c1", client_secret="pw")

    conf = hadoop_settings(azure, ONELAKE)

    host = "onelake.dfs.fabric.microsoft.com"
    assert conf[f"spark.hadoop.fs.azure.account.auth.type.{host}"] == "OAuth"
    assert conf[f"spark.hadoop.fs.azure.account.oauth.provider.type.{host}"].endswith(
        "ClientCredsTokenProvider"
    )
    assert conf[f"spark.hadoop.fs.azure.account.oauth2.client.endpoint.{host}"] == (
        "https://login.microsoftonline.com/t1/oauth2/token"
    )
    assert conf[f"spark.hadoop.fs.azure.account.oauth2.client.secret.{host}"] == "pw"
    assert delta_rs_options(azure, ONELAKE) == {
        "account_name": "onelake",
        "use_fabric_endpoint": "true",
        "tenant_id": "t1",
        "client_id": "c1",
        "client_secret": "pw",
    }


def test_without_a_secret_a_managed_identity_is_asked_for_a_token():
    azure = _settings(client_id="user-assigned")

    conf = hadoop_settings(azure, ADLS)

    assert conf[f"spark.hadoop.fs.azure.account.oauth.provider.type.{HOST}"].endswith(
        "MsiTokenProvider"
    )
    assert conf[f"spark.hadoop.fs.azure.account.oauth2.client.id.{HOST}"] == "user-assigned"
    assert delta_rs_options(azure, ADLS)["client_id"] == "user-assigned"


def test_a_sas_opens_adls_through_the_fixed_token_provider_and_blob_per_container():
    azure = _settings(connection_string="AccountName=acct;SharedAccessSignature=sv=1&sig=x")

    conf = hadoop_settings(azure, ADLS, BLOB)

    assert conf[f"spark.hadoop.fs.azure.sas.fixed.token.{HOST}"] == "sv=1&sig=x"
    assert conf["spark.hadoop.fs.azure.sas.lake.acct.blob.core.windows.net"] == "sv=1&sig=x"
    assert delta_rs_options(azure, BLOB)["sas_token"] == "sv=1&sig=x"


def test_the_emulator_is_recognised_by_its_account():
    azure = _settings(connection_string="UseDevelopmentStorage=true")
    path = "wasb://lake@devstoreaccount1/tables"

    assert hadoop_settings(azure, path) == {
        "spark.hadoop.fs.azure.storage.emulator.account.name": "devstoreaccount1"
    }
    assert delta_rs_options(azure, path) == {
        "account_name": "devstoreaccount1",
        "use_emulator": "true",
    }
    assert delta_rs_uri(path) == "az://lake/tables"  # delta-rs knows no wasb://
    assert delta_rs_uri(ADLS) == ADLS


@pytest.mark.parametrize(
    ("values", "uri", "says"),
    [
        ({"connection_string": "AccountName=acct;AccountKey=k"}, ONELAKE, "Entra ID tokens only"),
        ({"client_id": "c", "tenant_id": "t", "client_secret": "s"}, BLOB, "not Entra ID tokens"),
        ({"client_secret": "s"}, ADLS, "AZURE_STORAGE_TENANT_ID and AZURE_STORAGE_CLIENT_ID"),
    ],
    ids=["key-for-onelake", "token-for-wasb", "principal-without-ids"],
)
def test_a_credential_that_cannot_open_the_path_is_refused_without_its_secret(values, uri, says):
    with pytest.raises(AzureStorageUnusable, match=says) as refused:
        hadoop_settings(_settings(**values), uri)

    assert "k" not in getattr(refused.value, "__dict__", {}).values()
    assert "AccountKey=k" not in str(refused.value) and "'s'" not in str(refused.value)
