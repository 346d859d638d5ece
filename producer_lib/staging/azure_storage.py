"""Azure storage (OneLake, ADLS Gen2, Blob) for DuckDB: ``az://`` and ``abfss://`` paths.

A flow reads lakehouse tables and files on Azure in its SQL, as the Lib_Producer documentation
shows::

    await reader.load("PIM", "SELECT * FROM delta_scan('abfss://ws@onelake.dfs.fabric."
                             "microsoft.com/ZONE/Tables/StarTek/BQ_PIM')", "STARTEK")

:class:`~producer_lib.sources.DuckDBReader` sees the Azure path, loads DuckDB's ``azure``
extension offline (the ``duckdb-extension-azure`` package of the ``[lakehouse]`` extra) and
creates a DuckDB secret from :class:`AzureStorageSettings` (``AZURE_STORAGE_*``), once per
connection. Which credential:

- ``AZURE_STORAGE_CONNECTION_STRING``: a storage connection string (an account key or SAS);
- else ``AZURE_STORAGE_CLIENT_SECRET`` with ``AZURE_STORAGE_TENANT_ID`` and
  ``AZURE_STORAGE_CLIENT_ID``: a service principal;
- else the credential chain ``AZURE_STORAGE_CREDENTIAL_CHAIN`` (default
  ``managed_identity;workload_identity;env;cli``): an Azure Function's or container app's
  managed identity, or a developer's ``az login``. OneLake takes Entra ID tokens only, so one
  of the last two.

``AZURE_STORAGE_ACCOUNT_NAME`` names the account for the last two (``onelake`` for OneLake).
No secret value is logged or put in an error text.
"""

from __future__ import annotations

import re

import duckdb

from producer_lib.errors import SourceError
from producer_lib.settings.azure_storage import AzureStorageSettings
from producer_lib.sql_text import quote_literal
from producer_lib.staging.extensions import load_packaged_extension

__all__ = ["AZURE_PATH", "AzureStorageSettings", "azure_secret_sql", "use_azure_storage"]

AZURE_PATH = re.compile(r"'(?:abfss?|az|azure)://", re.IGNORECASE)  # a quoted Azure URL in SQL
SECRET_NAME = "flow_azure_storage"


def azure_secret_sql(settings: AzureStorageSettings) -> str:
    """The ``CREATE SECRET`` statement for ``settings`` (holds secrets: never log it).

    Raises:
        SourceError: A service principal without its tenant or client id.
    """
    values: dict[str, str] = {}
    provider = settings.provider
    if provider == "config":
        assert settings.connection_string is not None
        values["CONNECTION_STRING"] = settings.connection_string.get_secret_value()
    elif provider == "service_principal":
        missing = [
            name
            for name, value in (
                ("AZURE_STORAGE_TENANT_ID", settings.tenant_id),
                ("AZURE_STORAGE_CLIENT_ID", settings.client_id),
            )
            if not value
        ]
        if missing:
            raise SourceError(
                f"a service principal needs {' and '.join(missing)} beside "
                "AZURE_STORAGE_CLIENT_SECRET"
            )
        assert settings.client_secret is not None and settings.tenant_id and settings.client_id
        values["TENANT_ID"] = settings.tenant_id
        values["CLIENT_ID"] = settings.client_id
        values["CLIENT_SECRET"] = settings.client_secret.get_secret_value()
    else:
        values["CHAIN"] = settings.credential_chain
    if settings.account_name and provider != "config":
        values["ACCOUNT_NAME"] = settings.account_name
    options = "".join(f", {key} {quote_literal(value)}" for key, value in values.items())
    return f"CREATE OR REPLACE SECRET {SECRET_NAME} (TYPE azure, PROVIDER {provider}{options})"


def use_azure_storage(
    connection: duckdb.DuckDBPyConnection, settings: AzureStorageSettings | None = None
) -> str:
    """Load the ``azure`` extension and create the secret of ``settings`` in ``connection``.

    Returns:
        The provider used (``config``, ``service_principal`` or ``credential_chain``).

    Raises:
        SourceError: The extension is not installed, or DuckDB refused the secret (its
            message is given without the statement, which holds the secret).
        ConfigError: An ``AZURE_STORAGE_*`` variable is malformed.
    """
    settings = settings or AzureStorageSettings()
    load_packaged_extension(connection, "azure")
    try:
        connection.execute(azure_secret_sql(settings))
    except duckdb.Error as exc:
        text = str(exc)
        if any(secret and secret in text for secret in _secrets(settings)):
            text = "detail withheld: it contains a secret"
        raise SourceError(
            f"DuckDB refused the Azure storage secret ({text}); check the AZURE_STORAGE_* settings",
            provider=settings.provider,
        ) from None  # the statement in the cause holds the secret
    return settings.provider


def _secrets(settings: AzureStorageSettings) -> list[str]:
    return [
        secret.get_secret_value()
        for secret in (settings.connection_string, settings.client_secret)
        if secret is not None
    ]
