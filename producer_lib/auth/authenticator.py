"""The caller of a request, from its headers and query: a function key, a host key or a token.

Framework-neutral: it takes the request's headers and query parameters as mappings (a
multidict's repeated names are seen) and returns a :class:`Caller` or raises
:class:`~producer_lib.errors.Unauthorized` (answer 401) or
:class:`~producer_lib.errors.AuthUnavailable` (answer 503).

Where a credential may be:

- ``x-functions-key: <key>`` header, or ``code=<key>`` query parameter (as Azure Functions);
- ``Authorization: Bearer <Entra ID access token>``.

Every credential a request carries must be valid (a right key beside a wrong token is
refused), and each kind may be given once. A request with none is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from producer_lib.auth.entra import EntraTokens, subject
from producer_lib.auth.keys import KeyRing, load_key_ring
from producer_lib.auth.settings import AuthSettings, is_loopback
from producer_lib.errors import ConfigError, Unauthorized

__all__ = ["KEY_HEADER", "KEY_PARAMETER", "Authenticator", "Caller", "check_exposure"]

log = logging.getLogger(__name__)

KEY_HEADER = "x-functions-key"
KEY_PARAMETER = "code"
_AUTHORIZATION = "authorization"
_SETTINGS_HINT = (
    "FLOW_AUTH_FUNCTION_KEYS (or FLOW_AUTH_FUNCTION_KEYS_SECRET), FLOW_AUTH_HOST_KEYS (or "
    "FLOW_AUTH_HOST_KEYS_SECRET), or FLOW_AUTH_ENTRA_TENANT_ID with FLOW_AUTH_ENTRA_AUDIENCE"
)

Method = Literal["function_key", "host_key", "entra_id", "anonymous"]


@dataclass(frozen=True)
class Caller:
    """Who made a request, for logs and decisions; never the credential itself.

    Attributes:
        method: How it authenticated (``anonymous``: a server without authentication).
        subject: Which caller: the key's kind and function, or the token's object and client
            ids.
    """

    method: Method
    subject: str


ANONYMOUS = Caller("anonymous", "-")


class Authenticator:
    """Checks the credentials of requests to the routes of one function (see the module).

    Args:
        function_name: The function whose routes are guarded: its function keys and the
            host keys open them.
        keys: The accepted keys.
        entra: The token validator; None: tokens are not accepted.
        anonymous_metrics: Whether the server may answer ``/metrics`` without credentials.
    """

    def __init__(
        self,
        function_name: str,
        keys: KeyRing | None = None,
        entra: EntraTokens | None = None,
        anonymous_metrics: bool = False,
    ) -> None:
        self.function_name = function_name
        self.keys = keys or KeyRing()
        self.entra = entra
        self.anonymous_metrics = anonymous_metrics

    @classmethod
    def from_settings(
        cls, function_name: str, settings: AuthSettings | None = None
    ) -> Authenticator:
        """The authenticator ``settings`` (default: ``FLOW_AUTH_*`` from the env) describe.

        Raises:
            ConfigError: The settings are malformed or a key secret cannot be read (the
                message names the variable or secret, never a key).
        """
        settings = settings or AuthSettings()
        entra = EntraTokens(settings) if settings.entra_configured else None
        authenticator = cls(
            function_name, load_key_ring(settings), entra, settings.anonymous_metrics
        )
        if (settings.function_keys or settings.function_keys_secret) and not (
            authenticator.keys.function_keys.get(function_name)
        ):
            log.warning(
                "no function key for flow=%s in the function keys (names are matched exactly);"
                " its function keys open nothing here",
                function_name,
            )
        return authenticator

    @property
    def configured(self) -> bool:
        """True when some credential can open this function's routes."""
        return self.entra is not None or self.keys.opens(self.function_name)

    def describe(self) -> str:
        """What is accepted, for the startup log (no key, no secret)."""
        parts = [f"flow={self.function_name}", self.keys.describe(self.function_name)]
        parts.append(self.entra.describe() if self.entra else "entra=off")
        return " ".join(parts)

    def authenticate(self, headers: Mapping[str, str], query: Mapping[str, str]) -> Caller:
        """The caller of a request with these headers and query parameters.

        May block up to a few seconds while an Entra ID token's signing keys are fetched:
        async servers call it on a worker thread when the request has an ``Authorization``
        header.

        Raises:
            Unauthorized: No credential, a credential given twice, or one not valid here.
            AuthUnavailable: A token cannot be checked now (the tenant's keys are unreachable).
        """
        key_values = _values(headers, KEY_HEADER) + _values(query, KEY_PARAMETER)
        authorizations = _values(headers, _AUTHORIZATION)
        if len(authorizations) > 1:
            raise Unauthorized("Authorization header given twice")
        callers = [self._key_caller(key) for key in key_values]
        callers += [self._token_caller(value) for value in authorizations]
        if not callers:
            raise Unauthorized("no credential")
        return callers[0]

    def _key_caller(self, presented: str) -> Caller:
        kind = self.keys.match(self.function_name, presented)
        if kind is None:
            raise Unauthorized("unknown key")
        scope = self.function_name if kind == "function_key" else "*"
        return Caller(kind, f"{kind.replace('_', ' ')} of {scope}")

    def _token_caller(self, authorization: str) -> Caller:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("Authorization is not a bearer token")
        if self.entra is None:
            raise Unauthorized("bearer tokens are not accepted here")
        return Caller("entra_id", subject(self.entra.validate(token.strip())))


def _values(pairs: Mapping[str, str], name: str) -> list[str]:
    """Every value of ``name`` (case-insensitive), repeated names included (multidicts)."""
    return [value for key, value in pairs.items() if key.lower() == name]


def check_exposure(host: str, authenticator: Authenticator, insecure: bool = False) -> None:
    """Refuse to serve without authentication on an address other than loopback.

    Args:
        host: The address the server binds (``0.0.0.0``, ``::`` and names count as exposed).
        authenticator: What the server accepts.
        insecure: The ``--insecure`` flag: serve anyway (development only; logged).

    Raises:
        ConfigError: ``host`` is not loopback, nothing is configured and not ``insecure``.
    """
    if authenticator.configured:
        return
    if insecure or is_loopback(host):
        level = logging.WARNING if is_loopback(host) else logging.ERROR
        log.log(
            level,
            "INSECURE, development only: serving flow=%s on %s WITHOUT AUTHENTICATION: anyone "
            "who reaches this address can start loads and read run records; configure %s",
            authenticator.function_name,
            host,
            _SETTINGS_HINT,
        )
        return
    raise ConfigError(
        f"refusing to serve on {host} without authentication: set {_SETTINGS_HINT} "
        "(see docs/SERVING.md); serve on 127.0.0.1 for local use, or pass --insecure "
        "(development only)",
        flow=authenticator.function_name,
        host=host,
    )
