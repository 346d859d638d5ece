"""Azure storage paths (``az://``, ``abfss://``) in a flow's SQL: :class:`AzureStorageSettings`.

:mod:`producer_lib.staging.azure_storage` turns them into a DuckDB secret; its docstring says
which credential is taken when several are set.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import SecretStr
from pydantic_settings import SettingsConfigDict

from producer_lib.settings.base import EnvSettings

__all__ = ["AzureStorageSettings"]


class AzureStorageSettings(EnvSettings):
    """Credentials for Azure storage paths in a flow's SQL (``AZURE_STORAGE_*``; module doc).

    Attributes:
        connection_string: A storage connection string (secret).
        account_name: The storage account (``onelake`` for OneLake).
        tenant_id: Service principal: the Entra ID tenant.
        client_id: Service principal: the application (client) id.
        client_secret: Service principal: its secret (secret).
        credential_chain: DuckDB's credential chain when neither of the above is given.
    """

    model_config = SettingsConfigDict(env_prefix="AZURE_STORAGE_")
    _what: ClassVar[str] = "Azure storage settings"

    connection_string: SecretStr | None = None
    account_name: str | None = None
    tenant_id: str | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    credential_chain: str = "managed_identity;workload_identity;env;cli"

    @property
    def provider(self) -> str:
        """``config`` (connection string), ``service_principal`` or ``credential_chain``."""
        if self.connection_string is not None:
            return "config"
        if self.client_secret is not None:
            return "service_principal"
        return "credential_chain"
