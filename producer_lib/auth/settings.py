"""Who may call a flow's HTTP routes: function keys and Entra ID (env prefix ``FLOW_AUTH_``).

Two kinds of credentials, as an Azure Functions app accepts them:

- **Keys**, sent as the ``x-functions-key`` header or the ``code`` query parameter. *Function
  keys* open the routes of one function (``FLOW_AUTH_FUNCTION_KEYS``, a JSON object from
  function name to a key or a list of keys); *host keys* open every function
  (``FLOW_AUTH_HOST_KEYS``, keys separated by commas). Either may instead come from a secret
  (``FLOW_AUTH_FUNCTION_KEYS_SECRET`` / ``FLOW_AUTH_HOST_KEYS_SECRET``: the secret's name,
  read with :func:`producer_lib.azure_utils.read_secret`, so from Azure Key Vault when
  ``AZURE_KEY_VAULT_URL`` is set), holding the same text.
- **Microsoft Entra ID bearer tokens** (``Authorization: Bearer ...``) issued by tenant
  ``FLOW_AUTH_ENTRA_TENANT_ID`` for audience ``FLOW_AUTH_ENTRA_AUDIENCE``.

Nothing configured means no caller can authenticate; a server decides what that means
(``producer-lib serve`` then serves on loopback only, see :func:`check_exposure`).
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from typing import ClassVar

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from producer_lib.settings import EnvSettings

__all__ = ["AuthSettings", "is_loopback"]

_GUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
_AUTHORITY = "https://login.microsoftonline.com"


class AuthSettings(EnvSettings):
    """Credentials a flow's HTTP server accepts (env prefix ``FLOW_AUTH_``); see the module.

    Attributes:
        function_keys: JSON object ``{"<function>": "<key>" | ["<key>", ...]}`` (secret).
        function_keys_secret: Name of a secret holding that JSON instead.
        host_keys: Keys valid for every function, separated by commas (secret).
        host_keys_secret: Name of a secret holding those keys instead.
        entra_tenant_id: The Entra ID tenant (directory) id, a GUID.
        entra_audience: Accepted ``aud`` values, separated by commas: the API's application
            id URI (``api://...``, what v1 tokens carry) and/or its client id (v2 tokens).
        entra_issuers: Accepted ``iss`` values, separated by commas. Default: the tenant's v1
            (``https://sts.windows.net/<tenant>/``) and v2
            (``https://login.microsoftonline.com/<tenant>/v2.0``) issuers.
        entra_jwks_url: Where the tenant's signing keys are published. Default:
            ``https://login.microsoftonline.com/<tenant>/discovery/v2.0/keys``. Must be https
            (plain http only to a loopback address, for tests).
        entra_roles: App roles, separated by commas; when set, a token must carry one of them
            in its ``roles`` claim (without it, any application of the tenant that may get a
            token for the audience gets in).
        jwks_cache_s: How long fetched signing keys are used before they are fetched again.
        anonymous_metrics: Serve ``GET /metrics`` without credentials (the Prometheus
            convention; it carries counts and names, never data values).
    """

    model_config = SettingsConfigDict(env_prefix="FLOW_AUTH_")
    _what: ClassVar[str] = "authentication settings"

    function_keys: SecretStr | None = Field(default=None, repr=False)
    function_keys_secret: str | None = None
    host_keys: SecretStr | None = Field(default=None, repr=False)
    host_keys_secret: str | None = None
    entra_tenant_id: str | None = Field(default=None, pattern=_GUID)
    entra_audience: str | None = None
    entra_issuers: str | None = None
    entra_jwks_url: str | None = None
    entra_roles: str | None = None
    jwks_cache_s: float = Field(default=3600.0, gt=0)
    anonymous_metrics: bool = False

    @model_validator(mode="after")
    def _check(self) -> AuthSettings:
        # Messages name variables only: a model validator's message reaches users verbatim.
        for name in ("function_keys", "host_keys"):
            if getattr(self, name) is not None and getattr(self, f"{name}_secret"):
                raise ValueError(
                    f"FLOW_AUTH_{name.upper()} and FLOW_AUTH_{name.upper()}_SECRET are both "
                    "set: keep the keys in one place"
                )
        entra = {
            "FLOW_AUTH_ENTRA_AUDIENCE": self.entra_audience,
            "FLOW_AUTH_ENTRA_ISSUERS": self.entra_issuers,
            "FLOW_AUTH_ENTRA_JWKS_URL": self.entra_jwks_url,
            "FLOW_AUTH_ENTRA_ROLES": self.entra_roles,
        }
        if self.entra_tenant_id and not _items(self.entra_audience):
            raise ValueError("FLOW_AUTH_ENTRA_TENANT_ID needs FLOW_AUTH_ENTRA_AUDIENCE")
        orphans = [name for name, value in entra.items() if value and not self.entra_tenant_id]
        if orphans:
            raise ValueError(f"{', '.join(orphans)} needs FLOW_AUTH_ENTRA_TENANT_ID")
        if self.entra_jwks_url and not _safe_url(self.entra_jwks_url):
            raise ValueError(
                "FLOW_AUTH_ENTRA_JWKS_URL must be an https URL (http only to a loopback address)"
            )
        return self

    @property
    def entra_configured(self) -> bool:
        """True when Entra ID tokens are accepted."""
        return bool(self.entra_tenant_id)

    @property
    def audiences(self) -> tuple[str, ...]:
        """The accepted ``aud`` values."""
        return _items(self.entra_audience)

    @property
    def issuers(self) -> tuple[str, ...]:
        """The accepted ``iss`` values: the override, else the tenant's v1 and v2 issuers."""
        if self.entra_issuers:
            return _items(self.entra_issuers)
        tenant = (self.entra_tenant_id or "").lower()
        return (f"https://sts.windows.net/{tenant}/", f"{_AUTHORITY}/{tenant}/v2.0")

    @property
    def jwks_url(self) -> str:
        """Where the tenant's signing keys are fetched from."""
        tenant = (self.entra_tenant_id or "").lower()
        return self.entra_jwks_url or f"{_AUTHORITY}/{tenant}/discovery/v2.0/keys"

    @property
    def roles(self) -> tuple[str, ...]:
        """App roles of which a token must carry one (empty: no role required)."""
        return _items(self.entra_roles)


def _items(value: str | None) -> tuple[str, ...]:
    return tuple(item.strip() for item in (value or "").split(",") if item.strip())


def _safe_url(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "https":
        return bool(parts.hostname)
    return parts.scheme == "http" and is_loopback(parts.hostname or "")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) reaches this machine only."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:  # another name: it may resolve anywhere
        return False
