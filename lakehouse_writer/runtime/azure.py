"""Azure storage for the lakehouse and the checkpoint: Hadoop's settings and delta-rs' options.

The writer reaches ``abfss://`` (ADLS Gen2, OneLake) and ``wasbs://`` (Blob) paths through
``hadoop-azure`` (:mod:`lakehouse_writer.runtime.jars` resolves it at the running line's Hadoop)
and its delta-rs paths through delta-rs' object store, both with one credential: producer_lib's
:class:`~producer_lib.settings.AzureStorageSettings` (``AZURE_STORAGE_*``), as a flow's DuckDB
uses it. In this order:

- ``AZURE_STORAGE_CONNECTION_STRING``: the account key or SAS in it (``AccountKey=``,
  ``SharedAccessSignature=``); ``UseDevelopmentStorage=true`` or an emulator's account: Azurite;
- ``AZURE_STORAGE_CLIENT_SECRET`` with ``AZURE_STORAGE_TENANT_ID`` and
  ``AZURE_STORAGE_CLIENT_ID``: a service principal (OAuth client credentials);
- else a managed identity (``AZURE_STORAGE_CLIENT_ID``, when given, names a user-assigned one).

OneLake (``abfss://<workspace>@onelake.dfs.fabric.microsoft.com/<lakehouse>.Lakehouse/Tables``)
takes Entra ID tokens only: a service principal or a managed identity. WASB takes keys and SAS
only. :func:`hadoop_settings` and :func:`delta_rs_options` hold secrets: never log them.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from lakehouse_writer.errors import LakehouseWriterError
from producer_lib.errors import ConfigError
from producer_lib.settings import AzureStorageSettings

__all__ = [
    "AZURE_SCHEMES",
    "AzurePath",
    "AzureStorageUnusable",
    "delta_rs_options",
    "delta_rs_uri",
    "hadoop_settings",
]

AZURE_SCHEMES = frozenset({"abfs", "abfss", "wasb", "wasbs"})
ONELAKE_HOST = "onelake.dfs.fabric.microsoft.com"
_EMULATOR_ACCOUNT = "devstoreaccount1"  # Azurite's and the storage emulator's account
_OAUTH = "org.apache.hadoop.fs.azurebfs.oauth2"
# Entra ID's token endpoint of a tenant (v1: what hadoop-azure's client-credentials flow asks).
_TOKEN_ENDPOINT = "https://login.microsoftonline.com/{tenant}/oauth2/token"


class AzureStorageUnusable(LakehouseWriterError, ConfigError):
    """The Azure settings cannot reach a path (a key for OneLake, a token for WASB, ...).

    A setting is wrong: the commands exit 2, as for any other bad setting.
    """


@dataclass(frozen=True)
class AzurePath:
    """An Azure storage URI, split: ``abfss://container@account.dfs.core.windows.net/x``."""

    scheme: str
    container: str
    host: str

    @property
    def account(self) -> str:
        """The storage account: the host's first label (``onelake`` for OneLake)."""
        return self.host.split(".", 1)[0]

    @property
    def onelake(self) -> bool:
        """True for a OneLake path (a Fabric workspace as the container)."""
        return self.host == ONELAKE_HOST

    @property
    def blob(self) -> bool:
        """True for ``wasb``/``wasbs`` (the Blob API, legacy WASB driver)."""
        return self.scheme.startswith("wasb")

    @classmethod
    def parse(cls, uri: str) -> AzurePath | None:
        """The parts of ``uri``; None when it is no Azure storage URI."""
        parts = urlsplit(uri)
        if parts.scheme.lower() not in AZURE_SCHEMES or "@" not in parts.netloc:
            return None
        container, host = parts.netloc.split("@", 1)
        return cls(parts.scheme.lower(), container, host.lower())


def hadoop_settings(settings: AzureStorageSettings, *uris: str) -> dict[str, str]:
    """The ``spark.hadoop.fs.azure.*`` settings that open ``uris`` with ``settings``.

    Only the accounts of the Azure URIs among ``uris`` get settings; other URIs none.

    Raises:
        AzureStorageUnusable: The credential cannot open a path (the message says why).
    """
    found: dict[str, str] = {}
    for path in filter(None, map(AzurePath.parse, uris)):
        found.update(_hadoop_for(settings, path))
    return {f"spark.hadoop.{key}": value for key, value in found.items()}


def _hadoop_for(settings: AzureStorageSettings, path: AzurePath) -> dict[str, str]:
    connection = _connection(settings)
    if path.blob:
        return _wasb(connection, path)
    if connection.get("accountkey"):
        if path.onelake:
            raise AzureStorageUnusable(
                "OneLake takes Entra ID tokens only, not an account key: set a service "
                "principal (AZURE_STORAGE_TENANT_ID, _CLIENT_ID, _CLIENT_SECRET) or use a "
                "managed identity",
                path=f"{path.scheme}://{path.container}@{path.host}",
            )
        return {
            f"fs.azure.account.auth.type.{path.host}": "SharedKey",
            f"fs.azure.account.key.{path.host}": connection["accountkey"],
        }
    if connection.get("sharedaccesssignature"):
        # hadoop-azure 3.3.6+/3.4 (Spark 4.x); 3.3.4 (Spark 3.5) has no fixed-token provider.
        return {
            f"fs.azure.account.auth.type.{path.host}": "SAS",
            f"fs.azure.sas.token.provider.type.{path.host}": (
                "org.apache.hadoop.fs.azurebfs.sas.FixedSASTokenProvider"
            ),
            f"fs.azure.sas.fixed.token.{path.host}": connection["sharedaccesssignature"],
        }
    return _oauth(settings, path.host)


def _oauth(settings: AzureStorageSettings, host: str) -> dict[str, str]:
    """A service principal's client credentials, else a managed identity's token."""
    found = {f"fs.azure.account.auth.type.{host}": "OAuth"}
    if settings.client_secret is not None:
        if not (settings.tenant_id and settings.client_id):
            raise AzureStorageUnusable(
                "a service principal needs AZURE_STORAGE_TENANT_ID and AZURE_STORAGE_CLIENT_ID "
                "beside AZURE_STORAGE_CLIENT_SECRET",
                host=host,
            )
        return found | {
            f"fs.azure.account.oauth.provider.type.{host}": f"{_OAUTH}.ClientCredsTokenProvider",
            f"fs.azure.account.oauth2.client.endpoint.{host}": _TOKEN_ENDPOINT.format(
                tenant=settings.tenant_id
            ),
            f"fs.azure.account.oauth2.client.id.{host}": settings.client_id,
            f"fs.azure.account.oauth2.client.secret.{host}": (
                settings.client_secret.get_secret_value()
            ),
        }
    found[f"fs.azure.account.oauth.provider.type.{host}"] = f"{_OAUTH}.MsiTokenProvider"
    if settings.tenant_id:
        found[f"fs.azure.account.oauth2.msi.tenant.{host}"] = settings.tenant_id
    if settings.client_id:  # a user-assigned identity
        found[f"fs.azure.account.oauth2.client.id.{host}"] = settings.client_id
    return found


def _wasb(connection: dict[str, str], path: AzurePath) -> dict[str, str]:
    """WASB: an account key, a container's SAS, or the emulator; no Entra ID tokens."""
    if path.account == _EMULATOR_ACCOUNT or connection.get("usedevelopmentstorage") == "true":
        return {"fs.azure.storage.emulator.account.name": _EMULATOR_ACCOUNT}
    if connection.get("accountkey"):
        return {f"fs.azure.account.key.{path.host}": connection["accountkey"]}
    if connection.get("sharedaccesssignature"):
        sas = connection["sharedaccesssignature"]
        return {f"fs.azure.sas.{path.container}.{path.host}": sas}
    raise AzureStorageUnusable(
        "wasb/wasbs paths take an account key or a SAS (AZURE_STORAGE_CONNECTION_STRING), "
        "not Entra ID tokens: use abfss:// for a service principal or managed identity",
        path=f"{path.scheme}://{path.container}@{path.host}",
    )


def delta_rs_options(settings: AzureStorageSettings, uri: str) -> dict[str, str]:
    """delta-rs' ``storage_options`` that open ``uri`` with ``settings``; {} for other URIs.

    delta-rs reads ``abfss://``, ``az://`` and ``wasbs://`` URIs itself; its option names are
    those of the Rust ``object_store`` crate's Azure builder.
    """
    path = AzurePath.parse(uri)
    if path is None:
        return {}
    connection = _connection(settings)
    options = {"account_name": connection.get("accountname") or path.account}
    if path.onelake:
        options["use_fabric_endpoint"] = "true"
    if path.account == _EMULATOR_ACCOUNT or connection.get("usedevelopmentstorage") == "true":
        options["use_emulator"] = "true"
    if connection.get("accountkey"):
        options["account_key"] = connection["accountkey"]
    elif connection.get("sharedaccesssignature"):
        options["sas_token"] = connection["sharedaccesssignature"]
    elif settings.client_secret is not None:
        options |= {
            "tenant_id": settings.tenant_id or "",
            "client_id": settings.client_id or "",
            "client_secret": settings.client_secret.get_secret_value(),
        }
    elif settings.client_id:  # a user-assigned managed identity; else the default one
        options["client_id"] = settings.client_id  # object_store: the identity to ask for
    return options


def delta_rs_uri(uri: str) -> str:
    """``uri`` as delta-rs opens it: ``wasb(s)://c@account.blob.../p`` -> ``az://c/p``.

    delta-rs' object store knows ``abfs(s)://`` and ``az://`` but not WASB's schemes; the
    account then comes from :func:`delta_rs_options`. Other URIs are returned as they are.
    """
    path = AzurePath.parse(uri)
    if path is None or not path.blob:
        return uri
    return f"az://{path.container}{urlsplit(uri).path}"


def _connection(settings: AzureStorageSettings) -> dict[str, str]:
    """The connection string's ``key=value`` pairs, keys lower-case; {} without one."""
    if settings.connection_string is None:
        return {}
    pairs = (p.split("=", 1) for p in settings.connection_string.get_secret_value().split(";"))
    return {key.strip().lower(): value.strip() for key, value in (p for p in pairs if len(p) == 2)}
