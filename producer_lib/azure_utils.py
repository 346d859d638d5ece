"""Secrets of a flow: Azure Key Vault in Azure, environment variables elsewhere.

Quickstart::

    from producer_lib import azure_utils

    token = azure_utils.read_secret("StarTek-Source")

Where a secret comes from:

- ``AZURE_KEY_VAULT_URL`` set (e.g. ``https://my-vault.vault.azure.net``): the vault's secret
  of that name, read with ``DefaultAzureCredential`` (managed identity in Azure; ``az login``
  or ``AZURE_CLIENT_ID``/``AZURE_TENANT_ID``/``AZURE_CLIENT_SECRET`` elsewhere). Needs the
  ``azure`` extra: ``pip install 'flow-platform[azure]'``.
- otherwise: the environment variable named by :func:`secret_env_var`: the name in upper
  case, every character other than ``A-Z``/``0-9`` replaced by ``_``, prefixed with
  ``SECRET_`` (``"StarTek-Source"`` -> ``SECRET_STARTEK_SOURCE``).

A secret's value is never logged nor part of an error message.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from typing import Any

from producer_lib.errors import ConfigError

__all__ = ["read_secret", "secret_env_var", "secret_source"]

log = logging.getLogger(__name__)

VAULT_URL_VARIABLE = "AZURE_KEY_VAULT_URL"
_NOT_ENV_SAFE = re.compile(r"[^A-Z0-9]")
_VAULT_NAME = re.compile(r"^[0-9A-Za-z-]{1,127}$")  # what Key Vault accepts as a secret name
_INSTALL_HINT = "pip install 'flow-platform[azure]'"


def secret_env_var(name: str) -> str:
    """The environment variable that holds secret ``name`` outside Azure.

    ``"StarTek-Source"`` -> ``SECRET_STARTEK_SOURCE``; ``"db.pass word"`` ->
    ``SECRET_DB_PASS_WORD``.
    """
    return "SECRET_" + _NOT_ENV_SAFE.sub("_", name.upper())


def secret_source(name: str) -> str:
    """Where :func:`read_secret` looks for ``name`` now, for messages (never the value)."""
    vault = _vault_url()
    if vault:
        return f"Azure Key Vault {vault}"
    return f"environment variable {secret_env_var(name)}"


def read_secret(name: str) -> str:
    """The value of secret ``name``: from Azure Key Vault or the environment (see the module).

    Raises:
        ConfigError: The name is empty, the secret is missing or empty, or the vault cannot
            be read (the message names the secret and where it was looked for).
    """
    if not name or not name.strip():
        raise ConfigError("a secret name must be non-empty")
    vault = _vault_url()
    value = _read_from_vault(vault, name) if vault else os.environ.get(secret_env_var(name))
    if not value:
        hint = "" if vault else f": set {secret_env_var(name)} or {VAULT_URL_VARIABLE}"
        raise ConfigError(
            f"secret not found or empty{hint}", secret=name, source=secret_source(name)
        )
    log.debug("secret read secret=%s source=%s", name, secret_source(name))
    return value


def _vault_url() -> str:
    return os.environ.get(VAULT_URL_VARIABLE, "").strip()


def _read_from_vault(vault_url: str, name: str) -> str | None:
    """The secret from the vault; None when the vault has no such secret.

    Not covered by the tests: they run without Azure. The code is the documented use of
    ``azure-keyvault-secrets``: ``SecretClient(url, DefaultAzureCredential()).get_secret``.
    """
    if not _VAULT_NAME.match(name):
        raise ConfigError(
            "a Key Vault secret name has only letters, digits and '-' (1-127 characters)",
            secret=name,
            source=f"Azure Key Vault {vault_url}",
        )
    client = _vault_client(vault_url)
    from azure.core.exceptions import AzureError, ResourceNotFoundError

    try:
        return str(client.get_secret(name).value or "")
    except ResourceNotFoundError:
        return None
    except AzureError as exc:
        failure = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    raise ConfigError(
        f"cannot read the secret from Azure Key Vault ({failure})",
        secret=name,
        source=f"Azure Key Vault {vault_url}",
    )


@functools.cache
def _vault_client(vault_url: str) -> Any:
    """One ``SecretClient`` per vault: ``DefaultAzureCredential`` is slow to build."""
    try:  # the optional ``azure`` extra: imported only when a vault is configured
        from azure.identity import DefaultAzureCredential
        from azure.keyvault.secrets import SecretClient
    except ImportError:
        raise ConfigError(
            f"{VAULT_URL_VARIABLE} is set but the Azure Key Vault client is not installed: "
            f"{_INSTALL_HINT}"
        ) from None
    return SecretClient(vault_url=vault_url, credential=DefaultAzureCredential())
