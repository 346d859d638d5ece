"""Azure storage paths in a flow's SQL (``az://``), read through Azurite, the Azure emulator.

What Azurite cannot show, and only a real account can: ``abfss://`` through the Data Lake
(DFS) endpoint, OneLake's workspace/item paths, and Entra ID tokens (service principal,
managed identity). Those paths share the code tested here (the secret, the extension, the
reader), but not the server; docs/OPERATIONS.md says so too.
"""

from __future__ import annotations

import asyncio
import io
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from azure.storage.blob import BlobServiceClient, ContainerClient
from deltalake import write_deltalake

from devstack.azurite import Azurite
from producer_lib.errors import SourceError
from producer_lib.sources import DuckDBReader
from producer_lib.staging.azure_storage import AzureStorageSettings, azure_secret_sql
from tests.support.ports import free_port_pair

log = logging.getLogger(__name__)


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """A blob service of this module's own, on a free port."""
    service = Azurite(tmp_path_factory.mktemp("azurite"), free_port_pair())
    service.start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture
def container(azurite: Azurite, monkeypatch: pytest.MonkeyPatch) -> Iterator[ContainerClient]:
    """A new container; the flow's environment points at the emulator as users' at Azure.

    The client is closed after the test: Azurite's shutdown waits for open connections.
    """
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string())
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", azurite.blob_url)  # for delta-rs only
    with BlobServiceClient.from_connection_string(azurite.connection_string()) as client:
        yield client.create_container(f"lake{uuid.uuid4().hex[:8]}")


def _upload_folder(container: ContainerClient, folder: Path, prefix: str) -> None:
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            container.upload_blob(f"{prefix}/{path.relative_to(folder)}", path.read_bytes())


async def _load(sql: str, **reader_args) -> list[tuple]:
    async with DuckDBReader(log, **reader_args) as reader:
        await reader.load("T", sql, "AZ")
        return reader.connection.execute("SELECT * FROM T ORDER BY 1").fetchall()


@pytest.mark.slow
def test_a_parquet_file_on_azure_loads_like_a_local_one(container: ContainerClient):
    data = io.BytesIO()
    pq.write_table(pa.table({"ID": [1, 2, 3], "NAME": ["a", "b", "c"]}), data)
    container.upload_blob("files/orders.parquet", data.getvalue())

    url = f"az://{container.container_name}/files/orders.parquet"
    rows = asyncio.run(_load(f"SELECT * FROM read_parquet('{url}')"))

    assert rows == [(1, "a"), (2, "b"), (3, "c")]


@pytest.mark.slow
def test_a_delta_table_on_azure_reads_as_of_its_latest_version(
    container: ContainerClient, tmp_path: Path
):
    local = tmp_path / "orders"
    write_deltalake(str(local), pa.table({"ID": [1, 2], "AMOUNT": [10.5, 11.5]}))
    write_deltalake(str(local), pa.table({"ID": [3], "AMOUNT": [12.5]}), mode="append")
    _upload_folder(container, local, "tables/orders")

    url = f"az://{container.container_name}/tables/orders"
    rows = asyncio.run(_load(f"SELECT * FROM delta_scan('{url}')"))

    assert rows == [(1, 10.5), (2, 11.5), (3, 12.5)]


@pytest.mark.slow
def test_a_wrong_account_key_fails_naming_the_path_and_never_the_key(
    azurite: Azurite, container: ContainerClient
):
    data = io.BytesIO()
    pq.write_table(pa.table({"ID": [1]}), data)
    container.upload_blob("files/one.parquet", data.getvalue())
    wrong_key = "V3Jvbmcga2V5IGZvciB0aGUgdGVzdCBvbmx5IQ=="
    wrong = azurite.connection_string().replace(
        azurite.connection_string().split("AccountKey=")[1].split(";")[0], wrong_key
    )
    url = f"az://{container.container_name}/files/one.parquet"

    with pytest.raises(SourceError) as failed:
        asyncio.run(
            _load(
                f"SELECT * FROM read_parquet('{url}')",
                azure=AzureStorageSettings(connection_string=wrong),
            )
        )

    assert url in str(failed.value)
    assert wrong_key not in str(failed.value) and wrong_key not in repr(failed.value)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            {"connection_string": "AccountName=a;AccountKey=k"},
            "CREATE OR REPLACE SECRET flow_azure_storage (TYPE azure, PROVIDER config, "
            "CONNECTION_STRING 'AccountName=a;AccountKey=k')",
        ),
        (
            {
                "tenant_id": "t",
                "client_id": "c",
                "client_secret": "it's",
                "account_name": "onelake",
            },
            "CREATE OR REPLACE SECRET flow_azure_storage (TYPE azure, PROVIDER service_principal, "
            "TENANT_ID 't', CLIENT_ID 'c', CLIENT_SECRET 'it''s', ACCOUNT_NAME 'onelake')",
        ),
        (
            {"account_name": "onelake"},
            "CREATE OR REPLACE SECRET flow_azure_storage (TYPE azure, PROVIDER credential_chain, "
            "CHAIN 'managed_identity;workload_identity;env;cli', ACCOUNT_NAME 'onelake')",
        ),
    ],
    ids=["connection-string", "service-principal", "managed-identity"],
)
def test_the_credential_follows_the_settings(values, expected, monkeypatch):
    for name in ("CONNECTION_STRING", "CLIENT_SECRET", "TENANT_ID", "CLIENT_ID", "ACCOUNT_NAME"):
        monkeypatch.delenv(f"AZURE_STORAGE_{name}", raising=False)
    settings = AzureStorageSettings(**values)
    assert azure_secret_sql(settings) == expected
    for secret in ("AccountKey=k", "it's"):
        assert secret not in repr(settings)


def test_a_service_principal_without_its_ids_is_named(monkeypatch):
    monkeypatch.delenv("AZURE_STORAGE_TENANT_ID", raising=False)
    monkeypatch.delenv("AZURE_STORAGE_CLIENT_ID", raising=False)
    with pytest.raises(SourceError, match="AZURE_STORAGE_TENANT_ID and AZURE_STORAGE_CLIENT_ID"):
        azure_secret_sql(AzureStorageSettings(client_secret="s"))
